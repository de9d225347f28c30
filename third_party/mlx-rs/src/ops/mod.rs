//! Operations

mod arithmetic;
mod conversion;
mod convolution;
mod cumulative;
mod factory;
mod io;
mod logical;
mod other;
mod quantization;
mod reduction;
mod shapes;
mod sort;

pub mod indexing;
pub mod windows;

pub use arithmetic::*;
pub use conversion::*;
pub use convolution::*;
pub use cumulative::*;
pub use factory::*;
pub use logical::*;
pub use other::*;
pub use quantization::*;
pub use reduction::*;
pub use shapes::*;
pub use sort::*;
