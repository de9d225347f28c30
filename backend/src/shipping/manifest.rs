//! Rank 0's side of a share: which byte ranges of which files a worker reads, each hashed.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{hex, CHUNK};
use crate::distributed::protocol::{ShipItem, Shipment, ShippedFile, Strided};
use crate::error::{Error, Result};
use crate::models::Layout;
use crate::safetensors::{safetensors_header, tensor_index, Runs, Stored};
use crate::weights::{safetensors_files, PartAxes};

/// Files other than the weights are shipped whole up to this size (config, tokenizer,
/// index); a larger one (another format's weights) is left out, and logged.
const MAX_WHOLE_FILE: u64 = 64 << 20;

/// Which bytes of the model's tensors a worker reads.
pub enum Portion<'a> {
    /// Pipeline: the tensors of these layers (and any outside layers and ends), whole, found
    /// where the family's `layout` keeps them.
    Layers {
        layers: Range<usize>,
        layout: Layout,
    },
    /// Tensor or expert mode: every tensor, and of those rank 0's load read as parts
    /// ([`PartReads`](crate::weights::PartReads): key to axis and part count), part `rank`.
    Parts { rank: usize, reads: &'a PartAxes },
}

/// A worker's share of the model in `dir`: the tensor bytes `portion` names, every
/// safetensors header, and the folder's small files; served at `address`.
pub fn share(
    dir: &Path,
    portion: &Portion,
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
        s.items.push(item(&path, name, file, whole(0..size))?);
    }
    for path in &weights {
        add_weights(&mut s, dir, path, portion)?;
    }
    Ok(s)
}

/// A safetensors file: its header, and the tensor bytes of the share.
fn add_weights(s: &mut Shipment, dir: &Path, path: &Path, portion: &Portion) -> Result<()> {
    let size = std::fs::metadata(path).map_err(Error::io(path))?.len();
    let name = name_in(dir, path)?;
    let file = add_file(s, name.clone(), size);
    let header = safetensors_header(path)?;
    let data_start = 8 + header.len() as u64;
    s.items.push(item(
        path,
        format!("{name} header"),
        file,
        whole(0..data_start),
    )?);
    let entries: Value = serde_json::from_slice(&header)
        .map_err(|e| Error::Weights(format!("{}: bad safetensors header: {e}", path.display())))?;
    let Some(entries) = entries.as_object() else {
        return Ok(());
    };
    let stored = match portion {
        Portion::Parts { .. } => tensor_index(path)?,
        Portion::Layers { .. } => HashMap::new(),
    };
    for (key, entry) in entries.iter().filter(|(k, _)| *k != "__metadata__") {
        let offsets = entry["data_offsets"].as_array();
        let range = offsets.and_then(|o| Some(o.first()?.as_u64()?..o.get(1)?.as_u64()?));
        let Some(r) = range.filter(|r| r.start <= r.end) else {
            return Err(Error::Weights(format!(
                "{}: tensor `{key}` has no valid data_offsets",
                path.display()
            )));
        };
        let bytes = data_start + r.start..data_start + r.end;
        if let Some(runs) = read_by(portion, key, bytes, stored.get(key)) {
            s.items.push(item(path, key.clone(), file, runs)?);
        }
    }
    Ok(())
}

/// The bytes of tensor `key` (at `bytes`, where it lies as `stored`) that a worker with
/// `portion` reads: none, all, or its part as rank 0's load cut it.
fn read_by(
    portion: &Portion,
    key: &str,
    bytes: Range<u64>,
    stored: Option<&Stored>,
) -> Option<Runs> {
    match portion {
        Portion::Layers { layers, layout } => {
            let held = match layout.layer_of(key) {
                Some(i) => layers.contains(&i),
                None => !layout.is_end(key),
            };
            held.then(|| whole(bytes))
        }
        Portion::Parts { rank, reads } => match (reads.get(key), stored) {
            (Some(&(axis, size)), Some(stored)) => Some(stored.part_runs(axis, *rank, size)),
            _ => Some(whole(bytes)),
        },
    }
}

/// A range as one run.
fn whole(range: Range<u64>) -> Runs {
    let len = range.end - range.start;
    Runs {
        start: range.start,
        run: len,
        stride: len,
        count: 1,
    }
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

/// Runs of a file as they were when hashed: its path, size, modification time, and the
/// runs' start, length, stride and count.
type HashKey = (PathBuf, u64, SystemTime, [u64; 4]);

/// The hashes this process computed: a reload of an unchanged model hashes nothing again
/// (hashing reads every byte of every worker's share).
static HASHES: Mutex<BTreeMap<HashKey, String>> = Mutex::new(BTreeMap::new());

/// Runs of `path` as one item, hashed (or its hash remembered).
fn item(path: &Path, name: String, file: usize, runs: Runs) -> Result<ShipItem> {
    let meta = std::fs::metadata(path).map_err(Error::io(path))?;
    let modified = meta.modified().map_err(Error::io(path))?;
    let mut item = ShipItem {
        name,
        file,
        offset: runs.start,
        len: runs.run * runs.count,
        sha256: String::new(),
        strided: (runs.count > 1 && runs.stride != runs.run).then_some(Strided {
            run: runs.run,
            stride: runs.stride,
        }),
    };
    let at = [runs.start, runs.run, runs.stride, runs.count];
    let key = (path.to_owned(), meta.len(), modified, at);
    let mut hashes = HASHES.lock().unwrap_or_else(|e| e.into_inner());
    item.sha256 = match hashes.get(&key) {
        Some(known) => known.clone(),
        None => {
            let hash = hash_pieces(path, &item).map_err(Error::io(path))?;
            hashes.insert(key, hash.clone());
            hash
        }
    };
    Ok(item)
}

fn hash_pieces(path: &Path, item: &ShipItem) -> std::io::Result<String> {
    let mut f = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    for (offset, len) in item.pieces() {
        f.seek(SeekFrom::Start(offset))?;
        let mut left = len;
        while left > 0 {
            let n = (left as usize).min(CHUNK);
            f.read_exact(&mut buf[..n])?;
            hasher.update(&buf[..n]);
            left -= n as u64;
        }
    }
    Ok(hex(&hasher.finalize()))
}
