//! Strict checkpoint loading: every key is taken exactly once, with its shape checked;
//! a missing, unexpected or misshapen key is an error that names it.
//!
//! One file a job: the key store (`store`), the weight modes (`mode`) and the quantization
//! they read (`quant`), tensor cuts read as parts (`cut`), LoRA updates cut as their layers
//! are (`lora`), and the parts' reads noted for shipping (`reads`).

mod cut;
mod lora;
mod mode;
mod quant;
mod reads;
mod store;

pub use cut::{Cut, Shape};
pub use mode::{MatrixWeight, Numerics, Packed, WeightMode};
pub use quant::{QuantMode, QuantParams, QuantizedMatrix};
pub use reads::{PartAxes, PartReads};
pub use store::{safetensors_files, Weights};
