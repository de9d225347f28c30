//! Rank 0's side of a share: which byte ranges of which files a worker needs, each hashed.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{hex, CHUNK};
use crate::distributed::protocol::{ShipItem, Shipment, ShippedFile};
use crate::error::{Error, Result};
use crate::models::common::keys;
use crate::safetensors::safetensors_header;
use crate::weights::safetensors_files;

/// Files other than the weights are shipped whole up to this size (config, tokenizer,
/// index); a larger one (another format's weights) is left out, and logged.
const MAX_WHOLE_FILE: u64 = 64 << 20;

/// The share of the model in `dir` that holds `layers` (a pipeline worker's part: its
/// layers' tensors and any tensor outside layers and ends), every safetensors header, and
/// the folder's small files; served at `address`.
pub fn share(
    dir: &Path,
    layers: Range<usize>,
    fingerprint: String,
    address: String,
) -> Result<Shipment> {
    let mut s = Shipment {
        address,
        fingerprint,
        files: Vec::new(),
        items: Vec::new(),
    };
    let weights = safetensors_files(dir)?;
    for path in whole_files(dir, &weights)? {
        let size = std::fs::metadata(&path).map_err(Error::io(&path))?.len();
        let name = name_in(dir, &path)?;
        let file = add_file(&mut s, name.clone(), size);
        s.items.push(item(&path, name, file, 0..size)?);
    }
    for path in &weights {
        add_weights(&mut s, dir, path, &layers)?;
    }
    Ok(s)
}

/// A safetensors file: its header, and the tensors of the share.
fn add_weights(s: &mut Shipment, dir: &Path, path: &Path, layers: &Range<usize>) -> Result<()> {
    let size = std::fs::metadata(path).map_err(Error::io(path))?.len();
    let name = name_in(dir, path)?;
    let file = add_file(s, name.clone(), size);
    let header = safetensors_header(path)?;
    let data_start = 8 + header.len() as u64;
    s.items
        .push(item(path, format!("{name} header"), file, 0..data_start)?);
    let entries: Value = serde_json::from_slice(&header)
        .map_err(|e| Error::Weights(format!("{}: bad safetensors header: {e}", path.display())))?;
    let Some(entries) = entries.as_object() else {
        return Ok(());
    };
    for (key, entry) in entries {
        let held = match keys::layer_of(key) {
            Some(i) => layers.contains(&i),
            None => key != "__metadata__" && !keys::is_end(key),
        };
        let offsets = entry["data_offsets"].as_array();
        let range = offsets.and_then(|o| Some(o.first()?.as_u64()?..o.get(1)?.as_u64()?));
        match (held, range) {
            (false, _) => {}
            (true, Some(r)) if r.start <= r.end => s.items.push(item(
                path,
                key.clone(),
                file,
                data_start + r.start..data_start + r.end,
            )?),
            (true, _) => {
                return Err(Error::Weights(format!(
                    "{}: tensor `{key}` has no valid data_offsets",
                    path.display()
                )))
            }
        }
    }
    Ok(())
}

fn add_file(s: &mut Shipment, name: String, size: u64) -> usize {
    s.files.push(ShippedFile { name, size });
    s.files.len() - 1
}

/// The folder's regular, visible files other than the weights, up to `MAX_WHOLE_FILE`.
fn whole_files(dir: &Path, weights: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(Error::io(dir))? {
        let path = entry.map_err(Error::io(dir))?.path();
        let hidden = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if hidden || !path.is_file() || weights.contains(&path) {
            continue;
        }
        let size = std::fs::metadata(&path).map_err(Error::io(&path))?.len();
        if size > MAX_WHOLE_FILE {
            tracing::warn!(file = %path.display(), size, "not shipped: too large for a side file");
            continue;
        }
        files.push(path);
    }
    files.sort();
    Ok(files)
}

/// `path` relative to the model folder, as the worker lays it out.
fn name_in(dir: &Path, path: &Path) -> Result<String> {
    path.strip_prefix(dir)
        .ok()
        .and_then(|p| p.to_str())
        .map(str::to_owned)
        .ok_or_else(|| {
            Error::Weights(format!(
                "{} is not a file of the model folder",
                path.display()
            ))
        })
}

/// A range of a file as it was when hashed: its path, size, modification time and range.
type HashKey = (PathBuf, u64, SystemTime, u64, u64);

/// The hashes this process computed: a reload of an unchanged model hashes nothing again
/// (hashing reads every byte of every worker's share).
static HASHES: Mutex<BTreeMap<HashKey, String>> = Mutex::new(BTreeMap::new());

/// One range of `path`, hashed (or its hash remembered).
fn item(path: &Path, name: String, file: usize, range: Range<u64>) -> Result<ShipItem> {
    let meta = std::fs::metadata(path).map_err(Error::io(path))?;
    let modified = meta.modified().map_err(Error::io(path))?;
    let key = (
        path.to_owned(),
        meta.len(),
        modified,
        range.start,
        range.end,
    );
    let mut hashes = HASHES.lock().unwrap_or_else(|e| e.into_inner());
    let sha256 = match hashes.get(&key) {
        Some(known) => known.clone(),
        None => {
            let hash = hash_range(path, &range).map_err(Error::io(path))?;
            hashes.insert(key, hash.clone());
            hash
        }
    };
    Ok(ShipItem {
        name,
        file,
        offset: range.start,
        len: range.end - range.start,
        sha256,
    })
}

fn hash_range(path: &Path, range: &Range<u64>) -> std::io::Result<String> {
    let mut f = File::open(path)?;
    f.seek(SeekFrom::Start(range.start))?;
    let mut left = range.end - range.start;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    while left > 0 {
        let n = (left as usize).min(CHUNK);
        f.read_exact(&mut buf[..n])?;
        hasher.update(&buf[..n]);
        left -= n as u64;
    }
    Ok(hex(&hasher.finalize()))
}
