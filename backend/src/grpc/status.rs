//! Our errors as gRPC statuses: the code says whose fault it is, the message names the cause.

use tonic::Status;

use crate::error::Error;

pub fn to_status(e: Error) -> Status {
    let msg = e.to_string();
    match e {
        Error::InvalidRequest(_) | Error::Template(_) => Status::invalid_argument(msg),
        Error::NotLoaded => Status::failed_precondition(msg),
        Error::RankLost(_) | Error::ShuttingDown => Status::unavailable(msg),
        Error::Overloaded(_) => Status::resource_exhausted(msg),
        Error::Aborted(_) => Status::aborted(msg),
        _ => Status::internal(msg),
    }
}
