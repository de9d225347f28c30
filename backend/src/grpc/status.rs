//! Our errors as gRPC statuses: the code says whose fault it is, the message names the cause.
//! Every message leaves through [`client_text`]: at most 1 KiB (`error::MESSAGE_LIMIT`), and a
//! panic's own text goes to the log, not to the client.

use tonic::Status;

use crate::error::{bounded, Error};

pub fn to_status(e: Error) -> Status {
    let msg = client_text(&e.to_string());
    match e {
        Error::InvalidRequest(_) | Error::Template(_) => Status::invalid_argument(msg),
        Error::NotLoaded => Status::failed_precondition(msg),
        Error::RankLost(_) | Error::ShuttingDown => Status::unavailable(msg),
        Error::Overloaded(_) => Status::resource_exhausted(msg),
        Error::Aborted(_) => Status::aborted(msg),
        _ => Status::internal(msg),
    }
}

/// The word the engine's panic guards put in a failure's text ("loading panicked: ...").
const PANICKED: &str = "panicked";

/// A message as a client may see it: a panic's text (which may quote any value, or run long)
/// cut at the colon after "panicked" and logged; then at most 1 KiB, cut at a character boundary.
pub fn client_text(message: &str) -> String {
    match message.find(PANICKED) {
        Some(at) => {
            tracing::error!(detail = %bounded(message), "a panic failed a request");
            // The head ends where the panic's own words begin: a colon, a quote, or tokio's
            // "with message" (a blocking task's panic).
            let end = message[at..]
                .find([':', '"'])
                .into_iter()
                .chain(message[at..].find(" with message"))
                .min()
                .map_or(at + PANICKED.len(), |cut| at + cut);
            let head = &message[..end];
            bounded(&format!(
                "{head} (the panic's message is in the backend's log)"
            ))
            .into_owned()
        }
        None => bounded(message).into_owned(),
    }
}

/// The same status with its message as [`client_text`] makes it: the last bound before a
/// status leaves, whichever code built it.
pub fn bounded_status(status: Status) -> Status {
    let text = client_text(status.message());
    if text == status.message() {
        return status;
    }
    Status::new(status.code(), text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_bounded_and_panics_kept_out() {
        let long = to_status(Error::InvalidRequest("x".repeat(20 << 20)));
        assert_eq!(long.code(), tonic::Code::InvalidArgument);
        assert!(long.message().len() <= crate::error::MESSAGE_LIMIT);
        let panic = to_status(Error::Internal(
            "the engine panicked in a generation step: index out of bounds: secret".into(),
        ));
        assert_eq!(
            panic.message(),
            "the engine panicked in a generation step (the panic's message is in the backend's log)"
        );
        let task =
            client_text("tokenizing the prompt failed: task 9 panicked with message \"a: b\"");
        assert!(
            task.starts_with("tokenizing the prompt failed: task 9 panicked ("),
            "{task}"
        );
        let capped = bounded_status(Status::not_found("y".repeat(5000)));
        assert_eq!(capped.code(), tonic::Code::NotFound);
        assert!(capped.message().len() <= crate::error::MESSAGE_LIMIT);
    }
}
