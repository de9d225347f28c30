//! A safetensors file's identity without its tensors: what tells two copies apart across
//! ranks, and what a pipeline weighs its layers by.

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};

/// A safetensors file's JSON header, as stored (its first 8 bytes give the length).
pub fn safetensors_header(file: &Path) -> Result<Vec<u8>> {
    let mut f = std::fs::File::open(file).map_err(Error::io(file))?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).map_err(Error::io(file))?;
    let header_len = u64::from_le_bytes(len).min(100 << 20) as usize;
    let mut header = vec![0u8; header_len];
    f.read_exact(&mut header).map_err(Error::io(file))?;
    Ok(header)
}

/// A safetensors file's name, size and header: what tells two copies apart without reading
/// their tensors.
pub fn file_identity(file: &Path) -> Result<Vec<u8>> {
    let size = std::fs::metadata(file).map_err(Error::io(file))?.len();
    let mut bytes = file
        .file_name()
        .unwrap_or_default()
        .as_encoded_bytes()
        .to_vec();
    bytes.extend(size.to_le_bytes());
    bytes.extend(safetensors_header(file)?);
    Ok(bytes)
}
