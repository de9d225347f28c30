//! How a KV cache stores its positions: LocalAI's `CacheTypeKey`/`CacheTypeValue` (llama.cpp's
//! `cache_type_k`/`cache_type_v` names) mapped onto a float dtype or MLX's affine quantization,
//! the way mlx-lm's `kv_bits`/`kv_group_size` quantize its cache.

use mlx_rs::Dtype;
use serde::{Deserialize, Serialize};

/// How one side of the cache (keys or values) is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum KvEncoding {
    /// In the dtype the model computes in.
    #[default]
    AsComputed,
    /// Cast to this float dtype when written, back when read.
    Float(KvFloat),
    /// MLX's affine quantization (`mx.quantize`: codes, and a scale and bias per group), read
    /// through `quantized_matmul` as mlx-lm's `QuantizedKVCache` is.
    Affine { bits: i32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvFloat {
    F32,
    F16,
    Bf16,
}

impl KvFloat {
    pub fn dtype(self) -> Dtype {
        match self {
            KvFloat::F32 => Dtype::Float32,
            KvFloat::F16 => Dtype::Float16,
            KvFloat::Bf16 => Dtype::Bfloat16,
        }
    }

    fn size(self) -> usize {
        match self {
            KvFloat::F32 => 4,
            KvFloat::F16 | KvFloat::Bf16 => 2,
        }
    }
}

/// The names LocalAI passes (llama.cpp's cache types), for errors.
pub const CACHE_TYPES: &str = "f32, f16, bf16, q8_0, q5_0, q5_1, q4_0, q4_1";

impl KvEncoding {
    /// A llama.cpp cache type name. MLX's affine format has a scale and a bias per group (like
    /// q4_1/q5_1), so `q4_0` and `q4_1` name the same 4-bit format, `q5_0` and `q5_1` the 5-bit.
    pub fn parse(name: &str) -> Result<KvEncoding, String> {
        Ok(match name.trim().to_ascii_lowercase().as_str() {
            "" => KvEncoding::AsComputed,
            "f32" | "float32" => KvEncoding::Float(KvFloat::F32),
            "f16" | "float16" => KvEncoding::Float(KvFloat::F16),
            "bf16" | "bfloat16" => KvEncoding::Float(KvFloat::Bf16),
            "q8_0" => KvEncoding::Affine { bits: 8 },
            "q5_0" | "q5_1" => KvEncoding::Affine { bits: 5 },
            "q4_0" | "q4_1" => KvEncoding::Affine { bits: 4 },
            other => {
                return Err(format!(
                    "cache type {} is not one of {CACHE_TYPES}",
                    crate::error::quote(&format!("{other:?}"))
                ))
            }
        })
    }

    /// mlx-lm's `kv_bits`.
    pub fn affine(bits: i64) -> Result<KvEncoding, String> {
        match bits {
            2..=6 | 8 => Ok(KvEncoding::Affine { bits: bits as i32 }),
            _ => Err(format!("kv_bits {bits} is not one of 2, 3, 4, 5, 6, 8")),
        }
    }

    fn is_affine(self) -> bool {
        matches!(self, KvEncoding::Affine { .. })
    }

    /// Bytes one element takes, where the model computes in elements of `item_size` bytes.
    fn bytes_per_element(self, item_size: usize, group_size: i32) -> f64 {
        match self {
            KvEncoding::AsComputed => item_size as f64,
            KvEncoding::Float(f) => f.size() as f64,
            // The scale and bias per group are kept in the computed dtype.
            KvEncoding::Affine { bits } => {
                bits as f64 / 8.0 + 2.0 * item_size as f64 / group_size as f64
            }
        }
    }
}

/// A cache's format: each side's encoding, the quantization group, and from which position
/// quantizing starts. Rank 0 decides it at LoadModel and sends it in the load plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvFormat {
    pub keys: KvEncoding,
    pub values: KvEncoding,
    /// Elements per scale and bias (mlx-lm's `kv_group_size`, default 64).
    pub group_size: i32,
    /// Positions a sequence caches in full precision before its cache is quantized (mlx-lm's
    /// `quantized_kv_start`); 0 quantizes from the first forward pass, as a `QuantizedKVCache`
    /// made up front does, so a prefix cache hit reads exactly what a fresh run would.
    pub quantized_start: u32,
}

impl Default for KvFormat {
    fn default() -> KvFormat {
        KvFormat {
            keys: KvEncoding::AsComputed,
            values: KvEncoding::AsComputed,
            group_size: 64,
            quantized_start: 0,
        }
    }
}

impl KvFormat {
    /// Whether either side is quantized (read through `quantized_matmul`).
    pub fn quantizes(&self) -> bool {
        self.keys.is_affine() || self.values.is_affine()
    }

    /// Stored as computed: what the fused CPU decode nodes write in place.
    pub fn is_plain(&self) -> bool {
        self.keys == KvEncoding::AsComputed && self.values == KvEncoding::AsComputed
    }

    /// Bytes a position takes whose keys and values are `elements` (together, half each) of
    /// `item_size` bytes as computed.
    pub fn bytes_per_position(&self, elements: usize, item_size: usize) -> usize {
        let side = |e: KvEncoding| e.bytes_per_element(item_size, self.group_size);
        let half = elements as f64 / 2.0;
        (half * side(self.keys) + half * side(self.values)).ceil() as usize
    }

    /// A layer whose key heads are `key_width` wide and value heads `value_width`: each
    /// quantized side's width must be a whole number of groups.
    pub fn check_widths(&self, key_width: i32, value_width: i32) -> Result<(), String> {
        for (side, enc, width) in [
            ("key", self.keys, key_width),
            ("value", self.values, value_width),
        ] {
            if enc.is_affine() && width % self.group_size != 0 {
                return Err(format!(
                    "a quantized KV cache needs the {side} head width ({width}) to be a \
                     multiple of kv_group_size ({})",
                    self.group_size
                ));
            }
        }
        Ok(())
    }

    /// The group sizes MLX quantizes with.
    pub fn group_size_of(n: i64) -> Result<i32, String> {
        match n {
            32 | 64 | 128 => Ok(n as i32),
            _ => Err(format!("kv_group_size {n} is not one of 32, 64, 128")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_names_map_onto_mlx_formats() {
        assert_eq!(
            KvEncoding::parse("q8_0"),
            Ok(KvEncoding::Affine { bits: 8 })
        );
        assert_eq!(
            KvEncoding::parse("Q4_1"),
            Ok(KvEncoding::Affine { bits: 4 })
        );
        assert_eq!(
            KvEncoding::parse("f16"),
            Ok(KvEncoding::Float(KvFloat::F16))
        );
        assert_eq!(KvEncoding::parse(""), Ok(KvEncoding::AsComputed));
        let err = KvEncoding::parse("iq4_nl").unwrap_err();
        assert!(err.contains("iq4_nl") && err.contains("q8_0"), "{err}");
        assert!(KvEncoding::affine(7).is_err());
    }

    #[test]
    fn bytes_per_position_follow_the_encoding() {
        let f32_plain = KvFormat::default();
        assert_eq!(f32_plain.bytes_per_position(128, 4), 512);
        let q8 = KvFormat {
            keys: KvEncoding::Affine { bits: 8 },
            values: KvEncoding::Affine { bits: 8 },
            ..KvFormat::default()
        };
        // 1 byte a code, plus an f32 scale and bias per 64 elements.
        assert_eq!(q8.bytes_per_position(128, 4), 128 + 2 * 2 * 4);
        let f16_keys = KvFormat {
            keys: KvEncoding::Float(KvFloat::F16),
            ..KvFormat::default()
        };
        assert_eq!(f16_keys.bytes_per_position(128, 4), 64 * 2 + 64 * 4);
        assert!(q8.check_widths(64, 64).is_ok());
        assert!(q8
            .check_widths(48, 64)
            .unwrap_err()
            .contains("key head width (48)"));
    }
}
