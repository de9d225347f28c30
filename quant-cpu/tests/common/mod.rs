//! What the integration tests of MLX nodes share.

use mlx_rs::transforms::eval;
use mlx_rs::Array;

pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// The bits of an array's values as f32, row-major.
pub fn bits(a: &Array) -> TestResult<Vec<u32>> {
    let a = a.as_type::<f32>()?;
    eval([&a])?;
    Ok(a.try_as_slice::<f32>()?
        .iter()
        .map(|v| v.to_bits())
        .collect())
}
