//! MLX's float quantization modes (MLX 0.32.2): what the codes and scales are, and their
//! decoding to f32 exactly as MLX's `dequantize` does (CPU `FromFP8`; Metal's `fp4_e2m1`,
//! `fp8_e4m3` and `fp8_e8m0`), checked against MLX itself in `quant-cpu/tests/float_modes.rs`.
//!
//! | mode    | codes          | group | scale per group   | bias |
//! |---------|----------------|-------|-------------------|------|
//! | `mxfp4` | 4-bit E2M1     | 32    | E8M0 (one byte)   | none |
//! | `mxfp8` | 8-bit E4M3     | 32    | E8M0              | none |
//! | `nvfp4` | 4-bit E2M1     | 16    | E4M3 (one byte)   | none |
//!
//! MLX accepts no other bits or group size for these modes. The weight is `value(q) · scale`.
//!
//! - **Packing** as the affine mode's: w `[N, K·bits/32]` uint32, each row a little-endian
//!   stream, code i of a 4-bit row in byte i/2, the low nibble first (`0x76543210` holds codes
//!   0..8 as 0, 1, .., 7); 8-bit codes one byte each, in order. Scales `[N, K/group]` uint8.
//! - **E2M1** (4 bits: sign, 2 exponent, 1 mantissa): `±{0, 0.5, 1, 1.5, 2, 3, 4, 6}`, bit 3
//!   the sign; code 8 is -0. No infinity, no NaN.
//! - **E4M3** (8 bits: sign, 4 exponent bias 7, 3 mantissa): MLX widens bits 0..7 shifted
//!   left 7 as an f16 and multiplies by 256, so exponent 0 is subnormal (`m · 2⁻⁹`) and every
//!   other byte is `2^(e-7) · (1 + m/8)`, including `0x7F`/`0xFF` (±480): MLX keeps no NaN
//!   (the OCP format's NaN), and saturates to ±448 when it quantizes. `0x80` is -0.
//! - **E8M0** (8 bits, exponent only): `2^(e-127)`, byte 0 as `2⁻¹²⁷` (an f32 subnormal) and
//!   byte 255 as +inf (not the OCP NaN): a weight of code 0 then dequantizes to NaN in MLX,
//!   while here the group's products with inf give ±inf or NaN. MLX writes neither byte for
//!   finite weights in normal range.
//! - **Global scale**: `nvfp4` may carry a per-tensor `global_scale` (mlx-lm's
//!   `SwitchLinear` with `global_scale`); the kernels take none.

use super::Stored;

/// The quantization modes MLX writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// `s·q + b`, integer codes, scales and biases in a float dtype.
    Affine,
    /// E2M1 codes, groups of 32, E8M0 scales.
    Mxfp4,
    /// E4M3 codes, groups of 32, E8M0 scales.
    Mxfp8,
    /// E2M1 codes, groups of 16, E4M3 scales.
    Nvfp4,
}

impl Mode {
    /// Every mode, affine first.
    pub const ALL: [Mode; 4] = [Mode::Affine, Mode::Mxfp4, Mode::Mxfp8, Mode::Nvfp4];

    /// The mode `name` (MLX's `mode` string), if MLX has it.
    pub fn parse(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// MLX's name of the mode.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Affine => "affine",
            Mode::Mxfp4 => "mxfp4",
            Mode::Mxfp8 => "mxfp8",
            Mode::Nvfp4 => "nvfp4",
        }
    }

    /// The one format of a float mode (MLX accepts no other bits or group size).
    pub fn float_format(self) -> Option<super::Format> {
        let (bits, group) = match self {
            Mode::Affine => return None,
            Mode::Mxfp4 => (4, 32),
            Mode::Mxfp8 => (8, 32),
            Mode::Nvfp4 => (4, 16),
        };
        Some(super::Format {
            bits,
            group,
            mode: self,
            numerics: super::Numerics::Exact,
            layout: super::Layout::Rows,
        })
    }

    /// The bits and group sizes the mode takes, for messages.
    pub(crate) fn supported(self) -> &'static str {
        match self {
            Mode::Affine => "bits 2, 3, 4, 5, 6, 8; groups 32, 64, 128",
            Mode::Mxfp4 => "4 bits, group 32",
            Mode::Mxfp8 => "8 bits, group 32",
            Mode::Nvfp4 => "4 bits, group 16",
        }
    }

    /// The value of `code` (an integer below 2^bits) in this mode, as MLX dequantizes it
    /// before the scale: the code itself when affine.
    pub fn code_value(self, code: u32, bits: u32) -> f32 {
        match (self, bits) {
            (Mode::Affine, _) => code as f32,
            (_, 4) => e2m1(code),
            _ => e4m3(code as u8),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The E2M1 values of codes 0..16.
pub const E2M1: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// The E2M1 value of the low 4 bits of `code`.
#[inline(always)]
pub fn e2m1(code: u32) -> f32 {
    E2M1[(code & 0xF) as usize]
}

/// The E4M3 value of `byte`, as MLX's `FromFP8`: bits 0..7 shifted left 7 read as an f16,
/// times 256, negated by bit 7 (from a table: `nvfp4` reads a scale per 16 codes).
#[inline(always)]
pub fn e4m3(byte: u8) -> f32 {
    E4M3[byte as usize]
}

/// Every byte's E4M3 value ([`e4m3`]).
static E4M3: [f32; 256] = {
    let mut t = [0f32; 256];
    let mut b = 0;
    while b < 256 {
        let magnitude = half::f16::from_bits(((b & 0x7F) as u16) << 7).to_f32_const() * 256.0;
        t[b] = if b & 0x80 == 0 { magnitude } else { -magnitude };
        b += 1;
    }
    t
};

/// The E8M0 value of `byte`: `2^(byte-127)`, byte 0 as 2⁻¹²⁷ and 255 as +inf (MLX's
/// `fp8_e8m0`).
#[inline(always)]
pub fn e8m0(byte: u8) -> f32 {
    match byte {
        0 => f32::from_bits(0x0040_0000),
        b => f32::from_bits((b as u32) << 23),
    }
}

/// An E8M0 scale byte (`mxfp4`, `mxfp8`).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct E8m0(pub(crate) u8);

impl Stored for E8m0 {
    const FLOAT: bool = true;
    #[inline(always)]
    fn widen(self) -> f32 {
        e8m0(self.0)
    }
}

/// An E4M3 scale byte (`nvfp4`, whose groups of 16 are half a step).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct E4m3(pub(crate) u8);

impl Stored for E4m3 {
    const FLOAT: bool = true;
    const PER_STEP: usize = 2;
    #[inline(always)]
    fn widen(self) -> f32 {
        e4m3(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// E4M3 by its definition (not MLX's f16 route): the same values for all 256 bytes.
    #[test]
    fn e4m3_is_the_format_by_definition() {
        for b in 0..=255u8 {
            let (e, m) = (((b >> 3) & 0xF) as i32, (b & 7) as f32);
            let v = match e {
                0 => m / 8.0 * 2f32.powi(-6),
                _ => (1.0 + m / 8.0) * 2f32.powi(e - 7),
            };
            let v = if b & 0x80 != 0 { -v } else { v };
            assert_eq!(e4m3(b).to_bits(), v.to_bits(), "byte {b:#x}");
        }
    }

    #[test]
    fn e8m0_is_a_power_of_two() {
        for b in 1..255u8 {
            assert_eq!(e8m0(b), 2f32.powi(b as i32 - 127), "byte {b}");
        }
        assert_eq!(e8m0(0), 2f32.powi(-127));
        assert_eq!(e8m0(255), f32::INFINITY);
    }

    #[test]
    fn every_float_mode_has_mlx_format() {
        for mode in Mode::ALL {
            assert_eq!(Mode::parse(mode.name()), Some(mode));
            if let Some(f) = mode.float_format() {
                assert!(super::super::Format::with_mode(mode, f.bits, f.group).is_ok());
                assert!(super::super::Format::with_mode(mode, f.bits, 64).is_err());
            }
        }
    }
}
