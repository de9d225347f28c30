//! Kernels for `y = x · dequantize(w)ᵀ` with MLX's affine formats, one per format and
//! instruction set, chosen at run time (as llama.cpp's ggml-cpu does), each tested against
//! [`reference`].
//!
//! MLX packs each weight row as a little-endian bit stream of `bits`-bit codes q, and stores
//! one scale s and bias b per `group` codes: the weight is `s·q + b`. Every kernel computes,
//! for each output, `w = fma(s, q, b)` then `acc = fma(x, w, acc)` over the row in the same
//! lane order, so a row's result is bit-identical whatever other rows share the call.

mod panels;
mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use scalar::reference;

/// Bits per code that MLX (and mlx-lm) write.
pub const BITS: [u32; 6] = [2, 3, 4, 5, 6, 8];
/// Codes per scale and bias that MLX (and mlx-lm) write.
pub const GROUPS: [usize; 3] = [32, 64, 128];

/// A packed affine format: `bits` per code, one f32 scale and bias per `group` codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Format {
    pub bits: u32,
    pub group: usize,
}

#[derive(Debug, thiserror::Error)]
#[error("unsupported quantization: {bits} bits with group size {group} (supported: bits 2, 3, 4, 5, 6, 8; groups 32, 64, 128)")]
pub struct FormatError {
    pub bits: u32,
    pub group: usize,
}

impl Format {
    pub fn new(bits: u32, group: usize) -> Result<Format, FormatError> {
        match BITS.contains(&bits) && GROUPS.contains(&group) {
            true => Ok(Format { bits, group }),
            false => Err(FormatError { bits, group }),
        }
    }

    /// Bytes of one packed row of `k` codes (`k` a multiple of the group size).
    pub fn row_bytes(&self, k: usize) -> usize {
        k * self.bits as usize / 8
    }
}

/// The operands of one product: x [m, k], w [n rows of packed codes], scales and biases [n, k/group].
pub struct Operands<'a> {
    pub x: &'a [f32],
    pub m: usize,
    pub k: usize,
    pub w: &'a [u8],
    pub scales: &'a [f32],
    pub biases: &'a [f32],
    pub n: usize,
    pub format: Format,
}

impl Operands<'_> {
    /// Packed codes of weight row `row`.
    fn w_row(&self, row: usize) -> &[u8] {
        let bytes = self.format.row_bytes(self.k);
        &self.w[row * bytes..(row + 1) * bytes]
    }

    /// Scales and biases of weight row `row`.
    fn groups(&self, row: usize) -> (&[f32], &[f32]) {
        let per_row = self.k / self.format.group;
        let range = row * per_row..(row + 1) * per_row;
        (&self.scales[range.clone()], &self.biases[range])
    }
}

/// The kernels this machine can run, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// AVX2 and FMA (x86-64).
    Avx2,
    /// Portable code: the floor everywhere, and the formats no vector kernel covers yet.
    Scalar,
}

/// The best kernel set this CPU has (detected once).
pub fn isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        return Isa::Avx2;
    }
    Isa::Scalar
}

/// Whether `format` runs on a vector kernel here (the others take the portable one).
pub fn vectorized(format: Format) -> bool {
    match isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86::covers(format),
        _ => false,
    }
}

/// Above this many rows a product goes through dequantized panels and the BLAS (prefill);
/// up to it (decode steps, as skinny-gemm's 16), a row's result does not depend on the
/// other rows.
pub const PANEL_ROWS: usize = 16;

/// `out[m, n] = Σ_k x[m, k] · (s·q + b)[n, k]` with the best kernel for the format and shape.
pub fn matmul(ops: &Operands, out: &mut [f32]) {
    assert!(out.len() >= ops.m * ops.n, "the output holds m * n floats");
    if ops.m > PANEL_ROWS {
        return panels::matmul(ops, out);
    }
    rows(ops, out);
}

/// The few-row kernels (decode): weights unpacked in registers, each read once, the output
/// columns shared out over skinny-gemm's threads.
pub fn rows(ops: &Operands, out: &mut [f32]) {
    let out = Out(out.as_mut_ptr());
    skinny_gemm::share(ops.n, ops.n * ops.k, &|n0, n1| {
        // SAFETY: `out` holds m * n floats and each chunk writes only its columns n0..n1.
        unsafe { columns(ops, n0..n1, out) }
    });
}

/// Output columns `cols` with the best kernel for the format.
///
/// # Safety
/// `out` points to m * n floats, and no other thread writes these columns meanwhile.
unsafe fn columns(ops: &Operands, cols: std::ops::Range<usize>, out: Out) {
    #[cfg(target_arch = "x86_64")]
    if vectorized(ops.format) {
        // SAFETY: `vectorized` checked that the CPU has AVX2 and FMA.
        return x86::matmul(ops, cols, out);
    }
    scalar::matmul(ops, cols, out);
}

/// The output of a product, written by column chunks from several threads.
#[derive(Clone, Copy)]
pub(crate) struct Out(*mut f32);

// SAFETY: threads write disjoint columns, and the caller waits for all of them.
unsafe impl Sync for Out {}
unsafe impl Send for Out {}

impl Out {
    /// Writes `out[m, n]` of a product with `cols` columns.
    ///
    /// # Safety
    /// In bounds, and no other thread writes this element.
    #[inline(always)]
    pub(crate) unsafe fn write(self, m: usize, n: usize, cols: usize, v: f32) {
        *self.0.add(m * cols + n) = v;
    }
}

/// Code `i` of a packed row: bits `i*bits ..` of the little-endian stream.
#[inline(always)]
pub(crate) fn code(row: &[u8], i: usize, bits: u32) -> u32 {
    let bit = i * bits as usize;
    let (byte, shift) = (bit / 8, bit % 8);
    let mut v = row[byte] as u32;
    if shift + bits as usize > 8 {
        v |= (row[byte + 1] as u32) << 8;
    }
    (v >> shift) & ((1 << bits) - 1)
}

#[cfg(test)]
mod tests;
