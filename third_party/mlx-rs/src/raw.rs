//! mlx-distributed patch: wraps mlx-c calls that mlx-rs does not cover (the distributed
//! API) with mlx-rs's own error handling, so their MLX errors come back as `Exception`s.

use crate::error::{exception_from_status, Exception, INIT_ERR_HANDLER};
use crate::utils::guard::Guarded;
use crate::Array;

/// Runs an mlx-c call that writes an array into its first argument.
#[track_caller]
pub fn try_array_op(f: impl FnOnce(*mut mlx_sys::mlx_array) -> i32) -> Result<Array, Exception> {
    Array::try_from_op(f)
}

/// Runs an mlx-c call that writes a vector of arrays into its first argument (a node with
/// several outputs).
#[track_caller]
pub fn try_vector_array_op(
    f: impl FnOnce(*mut mlx_sys::mlx_vector_array) -> i32,
) -> Result<Vec<Array>, Exception> {
    Vec::<Array>::try_from_op(f)
}

/// Runs an mlx-c call that returns only a status; `operation` names it in the error.
#[track_caller]
pub fn try_status_op(operation: &str, f: impl FnOnce() -> i32) -> Result<(), Exception> {
    INIT_ERR_HANDLER.call_once(crate::error::setup_mlx_error_handler);
    match f() {
        0 => Ok(()),
        status => Err(exception_from_status(status, operation)),
    }
}

/// `inputs`, passed through so that evaluating them first evaluates `dependencies`
/// (MLX's `depends`); orders side effects such as a send before a receive.
#[track_caller]
pub fn depends(inputs: &[Array], dependencies: &[Array]) -> Result<Vec<Array>, Exception> {
    use crate::utils::VectorArray;
    let inputs = VectorArray::try_from_iter(inputs.iter())?;
    let dependencies = VectorArray::try_from_iter(dependencies.iter())?;
    Vec::<Array>::try_from_op(|res| unsafe {
        mlx_sys::mlx_depends(res, inputs.as_ptr(), dependencies.as_ptr())
    })
}
