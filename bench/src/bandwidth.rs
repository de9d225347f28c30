//! The machine's memory read bandwidth, and decode measured against the limit it sets.

use std::hint::black_box;
use std::io::Read;
use std::path::Path;
use std::time::Instant;

use serde_json::Value;

/// The buffer streamed: far larger than any L3 cache, so every pass reads DRAM.
pub const BUFFER_BYTES: usize = 1 << 30;
/// Passes over the buffer, the fastest counting: one pass takes tens of milliseconds, and on a
/// shared or virtual machine single passes vary by a quarter.
pub const PASSES: usize = 10;

/// Sequential streams each thread reads side by side, in turn: one, and several (a decode
/// reads a layer's matrices and their scales as several streams, and on some hosts several
/// streams read a quarter faster than one: 34 against 30 GB/s on the AMX Xeon).
pub const STREAMS: [usize; 4] = [1, 2, 4, 8];

/// Read bandwidth in GB/s (10^9 bytes): `threads` threads each stream-read their share of a
/// 1 GiB buffer, summing it, as each of [`STREAMS`]; the best of [`PASSES`] passes of each
/// counts.
pub fn read_gb_per_s(threads: usize) -> f64 {
    // Filled with non-zero values so every page is touched (a zeroed allocation could map the
    // shared zero page and never reach DRAM).
    let data: Vec<u64> = (0..BUFFER_BYTES / 8).map(|i| i as u64 | 1).collect();
    let chunk = data.len().div_ceil(threads.max(1));
    let mut best = f64::INFINITY;
    for streams in (0..PASSES).flat_map(|_| STREAMS) {
        let start = Instant::now();
        let sum = std::thread::scope(|s| {
            let handles: Vec<_> = data
                .chunks(chunk)
                .map(|part| s.spawn(move || sum_streams(black_box(part), streams)))
                .collect();
            handles
                .into_iter()
                .fold(0u64, |acc, h| acc.wrapping_add(h.join().unwrap_or(0)))
        });
        black_box(sum);
        best = best.min(start.elapsed().as_secs_f64());
    }
    BUFFER_BYTES as f64 / best / 1e9
}

/// Words summed a turn from each stream: 512 bytes, whole cache lines.
const TURN: usize = 64;

/// The wrapping sum of `words` read as `streams` equal sequential parts, a [`TURN`] from each
/// in turn (the words past whole turns of every part are summed at the end).
fn sum_streams(words: &[u64], streams: usize) -> u64 {
    let len = words.len() / streams / TURN * TURN;
    let mut acc = 0u64;
    for at in (0..len).step_by(TURN) {
        for s in 0..streams {
            acc = acc.wrapping_add(sum_words(&words[s * len + at..s * len + at + TURN]));
        }
    }
    acc.wrapping_add(sum_words(&words[streams * len..]))
}

/// A wrapping sum, which the compiler vectorises: the loop is bound by memory, not arithmetic.
fn sum_words(words: &[u64]) -> u64 {
    words.iter().fold(0u64, |acc, &w| acc.wrapping_add(w))
}

/// The decode rate that reading `bytes_per_token` per token at `gb_per_s` allows.
pub fn limit_tok_per_s(bytes_per_token: u64, gb_per_s: f64) -> f64 {
    gb_per_s * 1e9 / bytes_per_token.max(1) as f64
}

/// 4 bytes per parameter of the checkpoint in `dir`: what its f32 twin holds. A quantized
/// matrix (`U32` codes with `.scales` beside them) holds 32 / bits parameters per code word;
/// its scales and biases hold none. `None` when a file cannot be read.
pub fn f32_bytes(dir: &Path) -> Option<u64> {
    let config: Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).ok()?).ok()?;
    let bits = config["quantization"]["bits"]
        .as_u64()
        .filter(|b| (1..=32).contains(b))
        .unwrap_or(32);
    let mut params = 0u64;
    for file in backend::weights::safetensors_files(dir).ok()? {
        let header = safetensors_header(&file)?;
        let tensors = header.as_object()?;
        for (name, tensor) in tensors {
            let Some(shape) = tensor["shape"].as_array() else {
                continue; // __metadata__
            };
            let numel: u64 = shape.iter().filter_map(Value::as_u64).product();
            let scales = name
                .strip_suffix(".weight")
                .map(|base| format!("{base}.scales"));
            if tensor["dtype"] == "U32" && scales.is_some_and(|s| tensors.contains_key(&s)) {
                params += numel * 32 / bits;
            } else if !(name.ends_with(".scales") || name.ends_with(".biases")) {
                params += numel;
            }
        }
    }
    Some(params * 4)
}

/// The JSON header of a safetensors file (names, dtypes, shapes, offsets).
fn safetensors_header(file: &Path) -> Option<Value> {
    let mut f = std::fs::File::open(file).ok()?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).ok()?;
    let mut header = vec![0u8; u64::from_le_bytes(len).min(100 << 20) as usize];
    f.read_exact(&mut header).ok()?;
    serde_json::from_slice(&header).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_bytes_counts_parameters() {
        let dir = std::env::temp_dir().join(format!("mlxd-f32-bytes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.json"), r#"{"quantization": {"bits": 4}}"#).unwrap();
        let header = serde_json::json!({
            "__metadata__": {"format": "mlx"},
            "l.weight": {"dtype": "U32", "shape": [8, 2], "data_offsets": [0, 64]},
            "l.scales": {"dtype": "BF16", "shape": [8, 1], "data_offsets": [64, 80]},
            "l.biases": {"dtype": "BF16", "shape": [8, 1], "data_offsets": [80, 96]},
            "norm.weight": {"dtype": "BF16", "shape": [16], "data_offsets": [96, 128]},
        })
        .to_string();
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend(header.as_bytes());
        file.extend([0u8; 128]);
        std::fs::write(dir.join("model.safetensors"), file).unwrap();
        // 8 x 16 quantized parameters and 16 norm weights, 4 bytes each.
        assert_eq!(f32_bytes(&dir), Some((8 * 16 + 16) * 4));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sum_wraps() {
        assert_eq!(sum_words(&[u64::MAX, 2]), 1);
    }

    #[test]
    fn every_word_is_summed_once_in_any_streams() {
        let words: Vec<u64> = (1..=1000).collect();
        for streams in [1, 3, 8] {
            assert_eq!(sum_streams(&words, streams), 500_500, "{streams} streams");
        }
    }

    #[test]
    fn limit_is_bandwidth_over_bytes() {
        assert_eq!(limit_tok_per_s(500_000_000, 10.0), 20.0);
    }
}
