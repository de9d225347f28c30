//! The integer path: `y = x · dequantize(w)ᵀ` with each row of x quantized to int8, and the
//! weight's codes multiplied with it in integer dot products (as llama.cpp's ggml-cpu does),
//! where the f32 kernels of the crate root spend an FMA per code and lane.
//!
//! - **Activations** ([`Activations::quantize`]): x in the format's lane order
//!   ([`layout::permute`]), cut into blocks of [`BLOCK`] values (a step: a block never
//!   straddles a weight group), and blocks into spans ([`span_of`]: two blocks where a weight
//!   group holds two or more, else one; a span never straddles a group either). Per span,
//!   with `t = x · 127 / max|x|`, each value is two int8 digits: `hi = round_ties_even(t)` in
//!   -127..=127 and `lo = round_ties_even((t - hi) · 128)` in -64..=64, so
//!   `x ≈ u · (128 · hi + lo)` with the span's unit `u = max|x| / 127 / 128`.
//!   One digit alone (llama.cpp's Q8 activations) is off by up to half a step, which moved
//!   SmolLM2's next-token distributions by a mean KLD of 0.037 nats; the second digit makes the
//!   rounding 128 times finer for a second dot product on the same unpacked weight codes.
//!   The affine bias part keeps f32: each group's exact sum of x ([`group_sums`]) times its
//!   bias, as the f32 kernels add it.
//! - **Products:** per block, lane `l` (of [`LANES`]) is the integer
//!   `128 · Σ q·hi + Σ q·lo` over the block's positions `4l..4l+4`: two 256-bit `vpdpbusd` (or
//!   `maddubs` + `madd`, or NEON `sdot`) and a shift. A block's lanes are then summed in
//!   integers, into its [`Totals`]: lanes {0, 1, 4, 5} and {2, 3, 6, 7} (an `nvfp4` block's two
//!   groups), which the other formats add into one total; a span's blocks' totals are added
//!   too. Integer sums are exact in any order, so every instruction set gets the same totals.
//! - **Combination in f32**, in one fixed order ([`fold`]): per span `c = s_w · u` (the weight
//!   group's scale times the span's unit), then `acc[s % 4] = fma(c, total, acc[s % 4])`:
//!   four accumulators, one multiply-add a span (the total converted to f32 rounds to
//!   nearest, as every set converts); at the end `(acc0 + acc1) + (acc2 + acc3)` ([`reduce`]),
//!   the bias part ([`bias_term`]) added last. A float step a span rather than a lane is what
//!   lets the many-row kernels keep the integer units busy, and a span of 64 values lets an
//!   AMX step take 64 values: a tile's full depth.
//!
//! So a row's result is bit-identical whatever other rows share the call and whichever of this
//! module's kernels the machine runs: the quantization is one portable function, the integer
//! sums are exact, and the float steps are the same ops in the same order everywhere.
//!
//! The sets: AVX-512 VNNI, AVX-VNNI and AVX2 (x86-64), `sdot` and plain NEON (aarch64), and
//! the portable kernel.
//!
//! Formats ([`supported`]): the affine ones at every bit width, and `mxfp4` and `nvfp4`. Twice
//! an E2M1 value is an integer in -12..=12, so their lanes are exact integer sums of `2·v` times
//! the digits, and the block's combined scale is halved (`0.5 · s_w · u`, exact). An `nvfp4`
//! group is half a block: in the 4-bit lane order lanes {0, 1, 4, 5} hold the codes of the
//! block's first group and {2, 3, 6, 7} its second's, so each of the block's two totals takes
//! its own group's scale ([`block_scale`]), the first group's multiply-add before the second's.
//! `mxfp8`'s E4M3 codes are no small integers: it has no integer path. Every
//! set takes every [`supported`] format. [`vectorized`] is what a caller asks before taking
//! this path: without a vector set the portable kernel would run (exact, slow).

use std::ops::Range;

use super::layout::{self, STEP};
use super::{bias_term, Format, Layout, Mode, Operands, Out, Stored};

#[cfg(target_arch = "aarch64")]
mod neon;
mod scalar;
pub mod tiles;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use scalar::reference;

/// Values of x per int8 scale: a step of the lane order.
pub const BLOCK: usize = STEP;
/// Integer lanes per block, each the sum of 4 adjacent products.
pub const LANES: usize = 8;
/// Accumulators: block `b` folds into `b % ACCUMULATORS`.
pub const ACCUMULATORS: usize = 4;
/// Positions each lane sums.
const PER_LANE: usize = BLOCK / LANES;
/// The high digit's weight in a value's `128 · hi + lo`, as a shift.
pub const DIGIT_SHIFT: u32 = 7;

/// A lane's integer from its digits' dot products: `128 · hi + lo`.
#[inline(always)]
pub(crate) fn digits(hi: i32, lo: i32) -> i32 {
    (hi << DIGIT_SHIFT) + lo
}

/// Rows of x as two int8 digits, in the format's lane order.
#[derive(Default, Debug, Clone)]
pub struct Activations {
    /// `[m][k]` high digits, each block's in lane order.
    pub hi: Vec<i8>,
    /// `[m][k]` low digits, as `hi`.
    pub lo: Vec<i8>,
    /// `[m][k / BLOCK]` each block's unit (`max|x| / 127 / 128`): its span's, the same for
    /// every block of a span, so that a kernel indexes it by block without a division.
    pub units: Vec<f32>,
    /// Blocks one unit spans ([`span_of`]).
    pub span: usize,
    /// `[m][k / BLOCK][LANES]` sums of each lane's values `128 · hi + lo`: what the
    /// unsigned-times-signed kernels add back when they shift 8-bit weight codes into the
    /// signed range.
    pub lane_sums: Vec<i32>,
    /// `[m][k / group]` exact f32 sums of x per weight group (the bias part's).
    pub sums: Vec<f32>,
    pub k: usize,
    /// For the AVX-512 kernels ([`Activations::arrange_wide`]): 4-bit digits with each 4
    /// blocks' first halves before their second ones (rows [`quad_stride`] apart, a last
    /// partial quad padded with zeros).
    pub quads_hi: Vec<i8>,
    pub quads_lo: Vec<i8>,
    /// For the AVX2 kernel on 8-bit and E2M1 tiles ([`Activations::combine_digits`]): `[m][k]`
    /// each value's digits as one i16, `128 · hi + lo`, in `hi`'s order.
    pub combined: Vec<i16>,
    /// For the AMX kernel ([`Activations::arrange_tiles`]): the digits as A tiles.
    pub tiles_a: Vec<i8>,
}

/// One row's part of [`Activations`] (the quads are the AVX-512 kernels').
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct Row<'a> {
    pub hi: &'a [i8],
    pub lo: &'a [i8],
    /// Each block's unit (its span's).
    pub units: &'a [f32],
    /// Blocks in the row.
    pub blocks: usize,
    /// Blocks a unit spans.
    pub span: usize,
    pub lane_sums: &'a [i32],
    pub quads_hi: &'a [i8],
    pub quads_lo: &'a [i8],
    pub combined: &'a [i16],
}

impl Activations {
    /// Quantizes the rows of `ops.x` (already in the format's lane order) into `self`.
    pub fn quantize(&mut self, ops: &Operands) {
        let into = self.sized(ops);
        // SAFETY: the buffers were just sized for every row, and this thread writes them alone.
        unsafe { quantize_rows(&ops.x[..ops.m * ops.k], (0..ops.m, bias_groups(ops)), &into) };
    }

    /// Sizes the buffers for the rows of `ops.x` and gives where to write them.
    fn sized(&mut self, ops: &Operands) -> Into {
        let (m, k) = (ops.m, ops.k);
        let blocks = m * k / BLOCK;
        self.k = k;
        self.span = span_of(ops.format);
        self.hi.resize(m * k, 0);
        self.lo.resize(m * k, 0);
        self.units.resize(blocks, 0.0);
        self.lane_sums.resize(blocks * LANES, 0);
        self.sums
            .resize(bias_groups(ops).map_or(0, |group| m * k / group), 0.0);
        Into {
            x: std::ptr::null_mut(),
            hi: self.hi.as_mut_ptr(),
            lo: self.lo.as_mut_ptr(),
            units: self.units.as_mut_ptr(),
            lane_sums: self.lane_sums.as_mut_ptr(),
            sums: self.sums.as_mut_ptr(),
            k,
            span: self.span,
        }
    }

    /// What the AVX-512 row kernels read besides the codes: (4 bits) the digits of every 4
    /// whole blocks as `[first halves][second halves]`, the order in which 64 packed bytes come
    /// apart into low and high nibbles.
    pub fn arrange_wide(&mut self, bits: u32) {
        self.quads_hi.clear();
        self.quads_lo.clear();
        if bits != 4 {
            return;
        }
        arrange_quads(&self.hi, self.k, &mut self.quads_hi);
        arrange_quads(&self.lo, self.k, &mut self.quads_lo);
    }

    /// What the AVX2 kernel on 8-bit tiles (and E2M1 ones, from 6 rows) reads: each value's
    /// two digits as one i16, for `vpmaddwd` against the codes widened to i16 (the totals
    /// `vpdpbusd` gives, exactly).
    pub fn combine_digits(&mut self) {
        let (hi, lo) = (&self.hi, &self.lo);
        self.combined.clear();
        self.combined.extend(
            hi.iter()
                .zip(lo)
                .map(|(&h, &l)| ((h as i16) << DIGIT_SHIFT) + l as i16),
        );
    }

    /// What the AMX kernel reads as A, laid out as [`Stack`] says: each step's A in a row
    /// (loaded from x's rows, `k` bytes apart, a tile's rows fell into two of the L1 cache's
    /// sets). A last partial group's missing rows are left as they were, since its steps load
    /// only its rows. Made once a product, for every thread.
    pub fn arrange_tiles(&mut self, m: usize) {
        const ROWS: usize = crate::amx::ROWS;
        let (k, len) = (self.k, BLOCK * self.span);
        let size = m.div_ceil(ROWS) * ROWS * 2 * k;
        if self.tiles_a.len() < size {
            self.tiles_a.resize(size, 0);
        }
        let stack = Stack::of(m);
        let rows = self.hi.chunks_exact(k).zip(self.lo.chunks_exact(k));
        for (r, (hi, lo)) in rows.take(m).enumerate() {
            let spans = hi.chunks_exact(len).zip(lo.chunks_exact(len));
            for (s, (h, l)) in spans.enumerate() {
                let [high, low] = stack.at((m, k / len, len), r, s);
                self.tiles_a[high..high + len].copy_from_slice(h);
                self.tiles_a[low..low + len].copy_from_slice(l);
            }
        }
    }

    /// Row `m`.
    pub(crate) fn row(&self, m: usize) -> Row<'_> {
        let (blocks, span) = (self.k / BLOCK, self.span);
        let stride = quad_stride(self.k);
        let quads = m * stride..(m + 1) * stride;
        Row {
            hi: &self.hi[m * self.k..(m + 1) * self.k],
            lo: &self.lo[m * self.k..(m + 1) * self.k],
            units: &self.units[m * blocks..(m + 1) * blocks],
            blocks,
            span,
            lane_sums: &self.lane_sums[m * blocks * LANES..(m + 1) * blocks * LANES],
            quads_hi: self.quads_hi.get(quads.clone()).unwrap_or_default(),
            quads_lo: self.quads_lo.get(quads).unwrap_or_default(),
            combined: (self.combined)
                .get(m * self.k..(m + 1) * self.k)
                .unwrap_or_default(),
        }
    }
}

/// How the AMX kernel's A holds x's digits, for a product of `m` rows: both digits of a
/// span in one A (up to 8 rows: rows `0..m` the high digits, `m..2m` the low ones), or each
/// digit in an A of its own (more rows, 16 at a time). Both in one halves the steps, and a
/// step costs about the same from 2 rows of A to 16.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stack {
    Both,
    Apart,
}

impl Stack {
    /// The stack of a product of `m` rows of x.
    pub(crate) fn of(m: usize) -> Stack {
        match 2 * m <= crate::amx::ROWS {
            true => Stack::Both,
            false => Stack::Apart,
        }
    }

    /// Rows of A for `rows` rows of x.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn a_rows(self, rows: usize) -> usize {
        match self {
            Stack::Both => 2 * rows,
            Stack::Apart => rows,
        }
    }

    /// Where span `s`'s digits of row `r` (of `m`, rows of `spans` spans of `len` values)
    /// lie in A: the byte offsets of its high and low digits.
    pub(crate) fn at(
        self,
        (m, spans, len): (usize, usize, usize),
        r: usize,
        s: usize,
    ) -> [usize; 2] {
        const ROWS: usize = crate::amx::ROWS;
        match self {
            Stack::Both => {
                let high = (s * 2 * m + r) * len;
                [high, high + m * len]
            }
            Stack::Apart => {
                let high = ((r / ROWS * spans + s) * 2 * ROWS + r % ROWS) * len;
                [high, high + ROWS * len]
            }
        }
    }
}

/// A span's unit `max|x| / 127 / 128` and the multiplier `127 / max|x|` its digits are made
/// with (both 0 for a span whose values are all below 1e-30, which would overflow the
/// multiplier and add nothing an f32 output can hold): the one place both are computed, for
/// every set.
#[inline(always)]
pub(crate) fn unit_of(amax: f32) -> (f32, f32) {
    match amax > 1e-30 {
        true => (amax / 127.0 / 128.0, 127.0 / amax),
        false => (0.0, 0.0),
    }
}

/// Where rows of x go as they are made ready: x in lane order (null where it already is)
/// and the [`Activations`]' buffers, each sized for every row, each row at its own offset.
struct Into {
    x: *mut f32,
    hi: *mut i8,
    lo: *mut i8,
    units: *mut f32,
    lane_sums: *mut i32,
    /// Sized for no row where the weight has no biases.
    sums: *mut f32,
    k: usize,
    span: usize,
}

// SAFETY: threads write disjoint rows (`prepare`), and the caller waits for all of them.
unsafe impl Sync for Into {}

/// A mutable view of rows `rows` of a buffer of `per_row` values a row.
///
/// # Safety
/// The buffer holds the rows, and no other thread touches these ones meanwhile.
unsafe fn rows_of_buffer<'a, T>(at: *mut T, rows: &Range<usize>, per_row: usize) -> &'a mut [T] {
    std::slice::from_raw_parts_mut(at.add(rows.start * per_row), rows.len() * per_row)
}

/// The group size the bias part sums x over, where the weight has biases.
fn bias_groups(ops: &Operands) -> Option<usize> {
    ops.biases.map(|_| ops.format.group)
}

/// Rows `rows` of x (`x`, already in lane order) into their digits, units, lane sums and
/// (with `bias_groups`) their sums per group.
///
/// # Safety
/// As [`rows_of_buffer`] for every buffer of `into`.
unsafe fn quantize_rows(x: &[f32], (rows, groups): (Range<usize>, Option<usize>), into: &Into) {
    let (k, blocks) = (into.k, into.k / BLOCK);
    let out = Digits {
        hi: rows_of_buffer(into.hi, &rows, k),
        lo: rows_of_buffer(into.lo, &rows, k),
        units: rows_of_buffer(into.units, &rows, blocks),
        span: into.span,
    };
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        // SAFETY: the CPU has AVX2; the buffers hold what `x` quantizes into.
        x86::quantize(x, out);
    } else {
        quantize_portable(x, out);
    }
    #[cfg(not(target_arch = "x86_64"))]
    quantize_portable(x, out);
    let (hi, lo) = (
        rows_of_buffer(into.hi, &rows, k),
        rows_of_buffer(into.lo, &rows, k),
    );
    let lane_sums = rows_of_buffer(into.lane_sums, &rows, blocks * LANES);
    let lanes = hi.chunks_exact(PER_LANE).zip(lo.chunks_exact(PER_LANE));
    for (sum, (hi, lo)) in lane_sums.iter_mut().zip(lanes) {
        let total = |c: &[i8]| c.iter().map(|&c| i32::from(c)).sum::<i32>();
        *sum = digits(total(hi), total(lo));
    }
    if let Some(group) = groups {
        let sums = rows_of_buffer(into.sums, &rows, k / group);
        crate::group_sums_into(x, group, sums);
    }
}

/// The rows of `ops.x` (natural order) put in lane order into `x` and quantized into `acts`,
/// rows shared over the helper threads (each row's values are computed as they would be
/// alone).
fn prepare(ops: &Operands, x: &mut Vec<f32>, acts: &mut Activations) {
    let (m, k) = (ops.m, ops.k);
    // Grown only: every value below m * k is written below, so no call zeroes it.
    if x.len() < m * k {
        x.resize(m * k, 0.0);
    }
    let mut into = acts.sized(ops);
    into.x = x.as_mut_ptr();
    let into = &into;
    let bits = ops.format.bits;
    // Rows as runs of 4 columns (the pool's unit).
    skinny_gemm::share(4 * m, m * k, &|c0, c1| {
        let rows = c0 / 4..c1 / 4;
        // SAFETY: the buffers are sized for every row, and each chunk has its own rows.
        unsafe {
            let lanes = rows_of_buffer(into.x, &rows, k);
            layout::permute_into(&ops.x[rows.start * k..rows.end * k], k, bits, lanes);
            quantize_rows(lanes, (rows, bias_groups(ops)), into);
        }
    });
}

/// Values a row of arranged quads holds: `k` rounded up to whole quads of 4 blocks.
pub(crate) const fn quad_stride(k: usize) -> usize {
    k.div_ceil(4 * BLOCK) * 4 * BLOCK
}

/// Rows of codes (`k` per row) with each 4 blocks as `[first halves][second halves]`, a last
/// partial quad padded with zero blocks (so the kernels take it in one step).
fn arrange_quads(codes: &[i8], k: usize, dst: &mut Vec<i8>) {
    const HALF: usize = BLOCK / 2;
    let pad = [0i8; HALF];
    for row in codes.chunks_exact(k) {
        for quad in row.chunks(4 * BLOCK) {
            for half in [0, HALF] {
                let blocks = quad.chunks_exact(BLOCK);
                let padding = 4 - blocks.len();
                blocks.for_each(|b| dst.extend_from_slice(&b[half..half + HALF]));
                (0..padding).for_each(|_| dst.extend_from_slice(&pad));
            }
        }
    }
}

/// Where a quantizer writes: a digit of each value, and each block's unit, its span of
/// `span` blocks'.
pub(crate) struct Digits<'a> {
    pub hi: &'a mut [i8],
    pub lo: &'a mut [i8],
    pub units: &'a mut [f32],
    pub span: usize,
}

/// A value's digits from `t = x · 127 / max|x|`: `hi = round(t)`, `lo = round((t - hi) · 128)`
/// (`t - hi` is exact, |t - hi| <= 1/2), both rounded to nearest even.
#[inline(always)]
pub(crate) fn digits_of(t: f32) -> (i8, i8) {
    let hi = t.round_ties_even();
    (hi as i8, ((t - hi) * 128.0).round_ties_even() as i8)
}

/// Each span of `x` to its unit and digits ([`digits_of`]): the reference the vector
/// quantizers equal.
pub(crate) fn quantize_portable(x: &[f32], out: Digits) {
    let len = BLOCK * out.span;
    let codes = out
        .hi
        .chunks_exact_mut(len)
        .zip(out.lo.chunks_exact_mut(len));
    let units = out.units.chunks_exact_mut(out.span);
    for ((x, (hi, lo)), units) in x.chunks_exact(len).zip(codes).zip(units) {
        let (u, id) = unit_of(x.iter().fold(0f32, |a, x| a.max(x.abs())));
        units.fill(u);
        for (i, x) in x.iter().enumerate() {
            (hi[i], lo[i]) = digits_of(x * id);
        }
    }
}

/// The integer kernels this machine can run, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// AVX-512 VNNI (with F, BW, VL): two blocks per `vpdpbusd`.
    Avx512Vnni,
    /// AVX-VNNI: the VEX `vpdpbusd`, a block per instruction.
    AvxVnni,
    /// AVX2: `vpmaddubsw` + `vpmaddwd` (on rows, 8-bit codes shifted into the signed range;
    /// on tiles, 8-bit codes and blocks of E2M1 ones widened to i16 against each value's digits
    /// as one i16).
    Avx2,
    /// aarch64's 8-bit matrix extension: `smmla`, 2 weight rows by 2 rows of x a block
    /// (one row of x takes `sdot`).
    NeonI8mm,
    /// aarch64's dot-product extension: `sdot`, 16 products into 4 lanes.
    NeonDot,
    /// Plain NEON: `smull` and pairwise adds.
    Neon,
    /// Portable code: the reference, and the floor everywhere.
    Scalar,
}

impl Isa {
    /// Every set this CPU has, best first (the portable one last).
    pub fn available() -> Vec<Isa> {
        let mut sets = Vec::new();
        #[cfg(target_arch = "x86_64")]
        sets.extend(x86::available());
        #[cfg(target_arch = "aarch64")]
        sets.extend(neon::available());
        sets.push(Isa::Scalar);
        sets
    }

    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512Vnni => "avx512-vnni",
            Isa::AvxVnni => "avx-vnni",
            Isa::Avx2 => "avx2",
            Isa::NeonI8mm => "neon-i8mm",
            Isa::NeonDot => "neon-dot",
            Isa::Neon => "neon",
            Isa::Scalar => "portable",
        }
    }
}

/// The best integer kernel set here (detected once). `MLX_DISTRIBUTED_INT8_KERNELS` caps it,
/// to measure or test a lesser set on any machine: a name of [`Isa::name`].
pub fn isa() -> Isa {
    static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
    *ISA.get_or_init(|| {
        let cap = std::env::var("MLX_DISTRIBUTED_INT8_KERNELS").unwrap_or_default();
        let sets = Isa::available();
        let from = sets.iter().position(|s| s.name() == cap).unwrap_or(0);
        sets[from]
    })
}

/// Whether `format` has vector integer kernels here (the others are better off on the f32
/// kernels).
pub fn vectorized(format: Format) -> bool {
    isa() != Isa::Scalar && supported(format)
}

/// Whether the integer path takes `format` at all: affine, `mxfp4` or `nvfp4` (E2M1 codes).
pub fn supported(format: Format) -> bool {
    format.mode == Mode::Affine || fp4(format)
}

/// Whether the codes are E2M1 (`mxfp4`, `nvfp4`).
pub(crate) fn fp4(format: Format) -> bool {
    matches!(format.mode, Mode::Mxfp4 | Mode::Nvfp4)
}

/// The kernels' name for a format's codes: the bit width (affine), or [`E2M1`].
pub(crate) fn kind(format: Format) -> u32 {
    match fp4(format) {
        true => E2M1,
        false => format.bits,
    }
}

/// The [`kind`] of E2M1 codes (`mxfp4`, `nvfp4`: 4 bits each).
pub(crate) const E2M1: u32 = 1;

/// Packed bytes of one block of codes of `kind`.
pub(crate) const fn block_bytes(kind: u32) -> usize {
    match kind {
        E2M1 => BLOCK / 2,
        bits => BLOCK * bits as usize / 8,
    }
}

/// `f::<KIND>(args)` for every [`kind`].
macro_rules! by_kind {
    ($kind:expr, $m:ident::$f:ident($($arg:expr),*)) => {
        match $kind {
            E2M1 => $m::$f::<E2M1>($($arg),*),
            2 => $m::$f::<2>($($arg),*),
            3 => $m::$f::<3>($($arg),*),
            4 => $m::$f::<4>($($arg),*),
            5 => $m::$f::<5>($($arg),*),
            6 => $m::$f::<6>($($arg),*),
            _ => $m::$f::<8>($($arg),*),
        }
    };
}
pub(crate) use by_kind;

/// Twice the E2M1 value of each code: the integers the E2M1 kernels multiply.
pub(crate) const E2M1_TWICE: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// What [`E2M1_TWICE`] is shifted by to be unsigned (0..=24) for the unsigned-times-signed
/// instructions, and taken back as `12 · lane_sum`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const E2M1_OFFSET: i32 = 12;

thread_local! {
    /// The caller's x in lane order and its int8 rows, kept between products.
    static WORK: std::cell::RefCell<(Vec<f32>, Activations)> =
        std::cell::RefCell::new((Vec::new(), Activations::default()));
}

/// `out[m, n] = Σ_k x[m, k] · (s·q + b)[n, k]` through int8 activations, with the best integer
/// kernel here; x in natural order.
pub fn rows(ops: &Operands, out: &mut [f32]) {
    rows_with(isa(), ops, out)
}

/// [`rows`] with the kernel set `set` (which this CPU must have: [`Isa::available`]).
pub fn rows_with(set: Isa, ops: &Operands, out: &mut [f32]) {
    rows_many_with(set, std::slice::from_ref(ops), &mut [out])
}

/// [`rows`] of several parts sharing x ([`crate::matmul_many`]): x quantized once.
pub fn rows_many(parts: &[Operands], outs: &mut [&mut [f32]]) {
    rows_many_with(isa(), parts, outs)
}

/// [`rows_many`] with the kernel set `set`.
pub fn rows_many_with(set: Isa, parts: &[Operands], outs: &mut [&mut [f32]]) {
    let Some(first) = parts.first() else {
        return;
    };
    crate::check_parts(parts, outs);
    assert!(
        supported(first.format),
        "the integer path is affine, mxfp4 or nvfp4"
    );
    assert!(Isa::available().contains(&set), "{set:?} runs on this CPU");
    assert!(
        first.format.layout == Layout::Rows || tiles::read_by(set),
        "{set:?} does not read tiles"
    );
    WORK.with_borrow_mut(|(x, acts)| {
        prepare(first, x, acts);
        let x = &x[..first.m * first.k];
        let parts: Vec<Operands> = parts.iter().map(|p| Operands { x, ..*p }).collect();
        let tiled = first.format.layout == Layout::Tiles;
        if set == Isa::Avx512Vnni && !avx512_panels(first) && !tiled {
            acts.arrange_wide(first.format.bits);
        }
        match reads_combined(set, first) {
            true => acts.combine_digits(),
            // No stale row is left for a kernel to read.
            false => acts.combined.clear(),
        }
        if set == Isa::Avx512Vnni && tiled && on_amx(first) {
            acts.arrange_tiles(first.m);
        }
        let outs: Vec<Out> = outs.iter_mut().map(|o| Out(o.as_mut_ptr())).collect();
        let unit = if tiled { tiles::WIDTH } else { 1 };
        crate::share_parts_by(&parts, unit, &|i, cols| {
            // SAFETY: `outs[i]` holds m * n floats of part i and each chunk writes only its
            // columns; `set` runs here.
            unsafe { columns(set, &parts[i], acts, cols, outs[i]) }
        });
    })
}

/// [`rows`] of tiled weights on the AMX kernel, its tile steps on `unit`, on this thread: how
/// the tests run it on [`crate::amx::Model`] where no tiles run, and how the kernel's own
/// work besides the steps is timed (`examples/int8_speed.rs`).
///
/// # Panics
/// Where the CPU lacks AVX-512 VNNI, or `ops` are not tiled with one group a block.
#[cfg(target_arch = "x86_64")]
pub fn rows_on_amx(ops: &Operands, out: &mut [f32], unit: &mut impl crate::amx::TileUnit) {
    assert!(Isa::available().contains(&Isa::Avx512Vnni));
    assert!(ops.format.layout == Layout::Tiles && ops.format.group >= BLOCK);
    assert_eq!(out.len(), ops.m * ops.n);
    let (mut x, mut acts) = (Vec::new(), Activations::default());
    prepare(ops, &mut x, &mut acts);
    acts.arrange_tiles(ops.m);
    let ops = Operands {
        x: &x[..ops.m * ops.k],
        ..*ops
    };
    let walk = (&ops, &acts, 0..ops.n, Out(out.as_mut_ptr()));
    // SAFETY: checked above; `out` holds m * n values, written by this thread alone.
    unsafe { x86::on_amx(walk, unit) }
}

/// Whether tiled `ops` take AMX tiles (x86-64 only).
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn on_amx(ops: &Operands) -> bool {
    #[cfg(target_arch = "x86_64")]
    return x86::takes_amx(ops);
    #[cfg(not(target_arch = "x86_64"))]
    return false;
}

/// Whether `set` reads `ops`' digits combined (x86-64 only).
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn reads_combined(set: Isa, ops: &Operands) -> bool {
    #[cfg(target_arch = "x86_64")]
    return x86::reads_combined(set, ops);
    #[cfg(not(target_arch = "x86_64"))]
    return false;
}

/// Whether the AVX-512 VNNI set takes `ops` by panels (x86-64 only).
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn avx512_panels(ops: &Operands) -> bool {
    #[cfg(target_arch = "x86_64")]
    return x86::by_panels(ops);
    #[cfg(not(target_arch = "x86_64"))]
    return false;
}

/// Output columns `cols` with the kernel set `set`.
///
/// # Safety
/// The CPU has `set`; `out` points to m * n floats, and no other thread writes these columns.
unsafe fn columns(
    set: Isa,
    ops: &Operands,
    acts: &Activations,
    cols: std::ops::Range<usize>,
    out: Out,
) {
    match set {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni | Isa::AvxVnni | Isa::Avx2 => x86::matmul(set, ops, acts, cols, out),
        #[cfg(target_arch = "aarch64")]
        Isa::NeonI8mm | Isa::NeonDot | Isa::Neon => neon::matmul(set, ops, acts, cols, out),
        _ => scalar::matmul(ops, acts, cols, out),
    }
}

/// Each weight row of `cols` against each row of x: `row(w, x, scales)` (a set's kernel, the
/// part without biases), then the bias part (none for the float modes: `biases` is empty).
#[inline(always)]
pub(crate) fn each_row<P: Stored>(
    (ops, acts, cols, out): (&Operands, &Activations, std::ops::Range<usize>, Out),
    (scales, biases): (&[P], &[P]),
    row: impl Fn(&[u8], Row, &[P]) -> f32,
) {
    let rows = rows_of(ops, acts);
    for_columns(ops, cols, (scales, biases), |n, w, s, b| {
        for (m, &(x, sums)) in rows.iter().enumerate() {
            // One call of `row`, so that it inlines here.
            let v = row(w, x, s);
            let v = match b {
                Some(b) => v + bias_term(b, sums),
                None => v,
            };
            // SAFETY: the caller was given an output of `m * n` values.
            unsafe { out.write(m, n, ops.n, v) };
        }
    })
}

/// Each row of x with its groups' sums of x (the bias part's; empty for the float modes).
pub(crate) fn rows_of<'a>(ops: &Operands, acts: &'a Activations) -> Vec<(Row<'a>, &'a [f32])> {
    let groups = ops.k / ops.format.group;
    (0..ops.m)
        .map(|m| {
            let sums = acts.sums.get(m * groups..(m + 1) * groups);
            (acts.row(m), sums.unwrap_or_default())
        })
        .collect()
}

/// `visit(n, w, scales, biases)` for each weight row `n` of `cols`, with its scales and
/// biases (`None` for the float modes), the params of the rows ahead asked for.
#[inline(always)]
pub(crate) fn for_columns<'a, P: Stored>(
    ops: &'a Operands,
    cols: std::ops::Range<usize>,
    (scales, biases): (&'a [P], &'a [P]),
    mut visit: impl FnMut(usize, &'a [u8], &'a [P], Option<&'a [P]>),
) {
    let groups = ops.k / ops.format.group;
    let ahead = crate::rows_ahead(ops.format.row_bytes(ops.k));
    for n in cols {
        crate::prefetch_params([scales, biases], n + ahead, groups);
        let s = &scales[n * groups..(n + 1) * groups];
        visit(n, ops.w_row(n), s, biases.get(n * groups..(n + 1) * groups));
    }
}

/// A block's lanes summed in integers: lanes {0, 1, 4, 5} and lanes {2, 3, 6, 7} (an `nvfp4`
/// block's first and second group; one group, added, in every other format).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    pub first: i32,
    pub second: i32,
}

impl std::ops::Add for Totals {
    type Output = Totals;

    #[inline(always)]
    fn add(self, o: Totals) -> Totals {
        Totals {
            first: self.first + o.first,
            second: self.second + o.second,
        }
    }
}

impl Totals {
    /// A block's 8 lanes, summed.
    #[inline(always)]
    pub(crate) fn of(lanes: [i32; LANES]) -> Totals {
        Totals {
            first: lanes[0] + lanes[1] + lanes[4] + lanes[5],
            second: lanes[2] + lanes[3] + lanes[6] + lanes[7],
        }
    }
}

/// The combined scale of block `b`'s group `half` (0, or 1 for `nvfp4`'s second 16 codes):
/// its weight group's scale (halved for E2M1 codes, which enter as twice their value) times
/// the unit of the block's span (the same for every block of a span: a span lies in one group).
#[inline(always)]
pub(crate) fn block_scale<P: Stored>(
    scales: &[P],
    group_shift: u32,
    x: &Row,
    b: usize,
    half: usize,
) -> f32 {
    let s = match P::PER_STEP {
        2 => scales[2 * b + half].widen(),
        _ => scales[b >> group_shift].widen(),
    };
    let s = if P::FLOAT { s * 0.5 } else { s };
    s * x.units[b]
}

/// The combined scales of blocks `b..b + 4` of a row of `blocks` (`b` a multiple of 4), as
/// the 4-block-at-a-time vector kernels fold them into their four accumulators, lane `j`
/// accumulator `j`: their first groups', then (`nvfp4`) their second groups' (else the same
/// again). Blocks a span each: lane `j` block `b + j` ([`block_scale`]). Spans of two blocks:
/// the 4 blocks are spans `b / 2` and `b / 2 + 1`, which fold into accumulators `b / 2 % 4`
/// and the next; those two lanes hold their scales and the other two 0, so that with the
/// span totals in every lane ([`span_totals4`]) the other accumulators add an exact 0. A block
/// past the row's end gets 0, which with its zero lanes adds an exact 0.
#[inline(always)]
pub(crate) fn block_scales4<P: Stored>(
    scales: &[P],
    shift: u32,
    x: &Row,
    (b, blocks): (usize, usize),
) -> [[f32; 4]; 2] {
    let first = scales4(scales, shift, x, (b, blocks), 0);
    match P::PER_STEP {
        2 => [first, scales4(scales, shift, x, (b, blocks), 1)],
        _ => [first, first],
    }
}

/// [`block_scales4`]'s lanes of groups `half`. A function always inlined, not a closure: a
/// closure called twice stays out of line, and the AVX2 row kernels then take 1.6x as long.
#[inline(always)]
fn scales4<P: Stored>(
    scales: &[P],
    shift: u32,
    x: &Row,
    (b, blocks): (usize, usize),
    half: usize,
) -> [f32; 4] {
    if x.span == 1 {
        return std::array::from_fn(|j| match b + j < blocks {
            true => block_scale(scales, shift, x, b + j, half),
            false => 0.0,
        });
    }
    // Spans of two blocks: lanes 0 and 1, or 2 and 3, each lane at a fixed place (a lane
    // chosen at run time would go through memory, and its vector load stall on the stores).
    let span = |at: usize| match at < blocks {
        true => block_scale(scales, shift, x, at, half),
        false => 0.0,
    };
    let (first, second) = (span(b), span(b + 2));
    match b / 4 % 2 {
        0 => [first, second, 0.0, 0.0],
        _ => [0.0, 0.0, first, second],
    }
}

/// 4 blocks' totals `t` (lane `j` block `j`) as the lanes [`block_scales4`] folds: themselves
/// for spans of a block, else `[t0 + t1, t2 + t3, t0 + t1, t2 + t3]`. (The x86 kernels pair
/// them in registers with `vphaddd` and shuffles.)
#[inline(always)]
#[cfg_attr(not(any(test, target_arch = "aarch64")), allow(dead_code))]
pub(crate) fn span_totals4(t: [i32; 4], span: usize) -> [i32; 4] {
    match span {
        1 => t,
        _ => {
            let (s0, s1) = (t[0] + t[1], t[2] + t[3]);
            [s0, s1, s0, s1]
        }
    }
}

/// Blocks a unit of x spans, for products with `format`: 2 (64 values) where a weight group
/// holds two blocks or more, so that one multiply-add folds a span's totals and the AMX
/// tiles take 64 values a step; else 1 (groups of 16 and 32).
pub fn span_of(format: Format) -> usize {
    match format.group >= 2 * BLOCK {
        true => 2,
        false => 1,
    }
}

/// A span's multiply-adds into its accumulator `acc[s % 4]` (span `s`): one on its blocks'
/// summed totals, or (`two_groups`: `nvfp4`, a block a span) the first group's then the
/// second's, `c` their combined scales.
#[inline(always)]
pub(crate) fn fold(acc: f32, t: Totals, c: (f32, f32), two_groups: bool) -> f32 {
    match two_groups {
        true => {
            c.1.mul_add(t.second as f32, c.0.mul_add(t.first as f32, acc))
        }
        false => c.0.mul_add((t.first + t.second) as f32, acc),
    }
}

/// `log2(group / BLOCK)`: block `b` is in group `b >> shift` (0 for `nvfp4`'s half blocks,
/// which [`block_scale`] takes apart).
pub(crate) fn group_shift(format: Format) -> u32 {
    (format.group / BLOCK).max(1).trailing_zeros()
}

/// The four accumulators summed: the order every set ends with.
pub(crate) fn reduce(acc: [f32; ACCUMULATORS]) -> f32 {
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

#[cfg(test)]
mod tests;
