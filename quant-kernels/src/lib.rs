//! Kernels for `y = x · dequantize(w)ᵀ` with MLX's quantized formats (affine, and the float
//! modes of [`float`]), one per format and instruction set, chosen at run time (as llama.cpp's
//! ggml-cpu does), each tested against [`reference`].
//!
//! MLX packs each weight row as a little-endian bit stream of `bits`-bit codes q, and stores
//! one scale s and bias b per `group` codes: the weight is `s·q + b`. Every kernel computes an
//! output as `Σ_g s_g·(Σ_{i∈g} q_i·x_i) + Σ_g b_g·(Σ_{i∈g} x_i)`, in one fixed order:
//! - per lane of a step ([`layout`]) and group, `p = fma(q, x, p)` over the group's steps,
//!   then `acc = fma(s, p, acc)`; the 32 lane accumulators are summed pairwise
//!   (`scalar::reduce`);
//! - the group sums of x ([`group_sums`]) are made once per product, and the bias part is
//!   eight FMA chains over the groups, summed pairwise ([`bias_term`]), added last.
//!
//! The float modes (`mxfp4`, `mxfp8`, `nvfp4`) have no bias: q is the decoded E2M1 or E4M3
//! code and s the decoded scale, in the same order, and there is no bias part. An `nvfp4` group
//! (16 codes) is half a step: in the 4-bit lane order each vector holds codes of one group, so
//! the fold takes each vector's own scale ([`layout`]).
//!
//! So a row's result is bit-identical whatever other rows share the call, and whichever
//! kernel this machine runs. Folding s and b in per group (as llama.cpp does) costs one FMA
//! per code and lane plus one per group, where dequantizing each weight first
//! (`fma(s, q, b)`, then `fma(x, w, acc)`) costs two per code.

pub mod amx;
pub mod attention;
pub mod float;
pub mod int8;
pub mod layout;
mod panels;
pub use panels::sgemm_nt;
#[cfg(target_arch = "aarch64")]
mod neon;
mod scalar;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod vector;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use scalar::reference;

/// Bits per code that MLX (and mlx-lm) write.
pub const BITS: [u32; 6] = [2, 3, 4, 5, 6, 8];
/// Codes per scale and bias that MLX (and mlx-lm) write.
pub const GROUPS: [usize; 3] = [32, 64, 128];

pub use float::Mode;

/// A packed format: `bits` per code, one scale (and, affine, one bias) per `group` codes; the
/// numerics its products run with, and how the weight is laid out in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Format {
    pub bits: u32,
    pub group: usize,
    pub mode: Mode,
    pub numerics: Numerics,
    pub layout: Layout,
}

/// How a weight's codes, scales and biases lie in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// As the checkpoint stores them: row after row.
    #[default]
    Rows,
    /// Rearranged at load for the integer path's AVX-512 kernel ([`int8::tiles`]); only the
    /// integer path reads them.
    Tiles,
}

/// How a product treats x: in f32 (the exact path, whose oracle is mlx-lm on the f32 twin),
/// or quantized to int8 where the format has an integer kernel here ([`int8`]) and the call
/// has few rows (prefills stay on the f32 panels).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Numerics {
    #[default]
    Exact,
    Int8,
}

impl Numerics {
    /// The name `cpu_numerics` takes.
    pub fn name(self) -> &'static str {
        match self {
            Numerics::Exact => "exact",
            Numerics::Int8 => "int8",
        }
    }

    /// The numerics a name gives, if any.
    pub fn parse(name: &str) -> Option<Numerics> {
        [Numerics::Exact, Numerics::Int8]
            .into_iter()
            .find(|n| n.name() == name)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unsupported quantization: mode {mode} with {bits} bits and group size {group} (supported: {})", mode.supported())]
pub struct FormatError {
    pub mode: Mode,
    pub bits: u32,
    pub group: usize,
}

impl Format {
    /// An affine format (MLX's default mode).
    pub fn new(bits: u32, group: usize) -> Result<Format, FormatError> {
        Format::with_mode(Mode::Affine, bits, group)
    }

    /// A format of any mode, with MLX's rules for its bits and group size.
    pub fn with_mode(mode: Mode, bits: u32, group: usize) -> Result<Format, FormatError> {
        let fits = match mode.float_format() {
            None => BITS.contains(&bits) && GROUPS.contains(&group),
            Some(f) => f.bits == bits && f.group == group,
        };
        match fits {
            true => Ok(Format {
                bits,
                group,
                mode,
                numerics: Numerics::Exact,
                layout: Layout::Rows,
            }),
            false => Err(FormatError { mode, bits, group }),
        }
    }

    /// The format with `numerics`.
    pub fn with_numerics(self, numerics: Numerics) -> Format {
        Format { numerics, ..self }
    }

    /// The format with `layout`.
    pub fn with_layout(self, layout: Layout) -> Format {
        Format { layout, ..self }
    }

    /// Whether products run on the integer kernels: with int8 numerics wherever the format
    /// has a vector integer kernel, for any number of rows (a prefill too), so that a row's
    /// numerics never depend on how many rows share its product.
    pub fn runs_int8(&self) -> bool {
        self.numerics == Numerics::Int8 && int8::vectorized(*self)
    }

    /// Bytes of one packed row of `k` codes (`k` a multiple of the group size).
    pub fn row_bytes(&self, k: usize) -> usize {
        k * self.bits as usize / 8
    }
}

/// Scales or biases in the dtype the checkpoint stores them in. Widening bf16 or f16 to f32 is
/// exact, so they are widened per group as the kernels read them, and the numerics are those of
/// f32 scales at a half (bf16/f16) of the bytes. The float modes' scales are bytes: E8M0
/// (`mxfp4`, `mxfp8`) or E4M3 (`nvfp4`), decoded as MLX does ([`float`]).
#[derive(Clone, Copy, Debug)]
pub enum Params<'a> {
    F32(&'a [f32]),
    Bf16(&'a [u16]),
    F16(&'a [u16]),
    E8m0(&'a [u8]),
    E4m3(&'a [u8]),
}

impl<'a> Params<'a> {
    /// Value `i`, as f32.
    #[inline(always)]
    pub fn get(&self, i: usize) -> f32 {
        match self {
            Params::F32(v) => v[i],
            Params::Bf16(v) => Bf16(v[i]).widen(),
            Params::F16(v) => F16(v[i]).widen(),
            Params::E8m0(v) => float::E8m0(v[i]).widen(),
            Params::E4m3(v) => float::E4m3(v[i]).widen(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Params::F32(v) => v.len(),
            Params::Bf16(v) | Params::F16(v) => v.len(),
            Params::E8m0(v) | Params::E4m3(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Values `range`.
    fn slice(&self, range: std::ops::Range<usize>) -> Params<'a> {
        match *self {
            Params::F32(v) => Params::F32(&v[range]),
            Params::Bf16(v) => Params::Bf16(&v[range]),
            Params::F16(v) => Params::F16(&v[range]),
            Params::E8m0(v) => Params::E8m0(&v[range]),
            Params::E4m3(v) => Params::E4m3(&v[range]),
        }
    }

    /// Whether these are the scales `mode` stores (its byte format, or a float dtype when
    /// affine).
    pub fn fit(&self, mode: Mode) -> bool {
        match self {
            Params::E8m0(_) => matches!(mode, Mode::Mxfp4 | Mode::Mxfp8),
            Params::E4m3(_) => mode == Mode::Nvfp4,
            _ => mode == Mode::Affine,
        }
    }
}

/// The operands of one product: x [m, k], w [n rows of packed codes], scales and biases [n,
/// k/group] (biases for the affine mode only: the float modes have none).
#[derive(Clone, Copy)]
pub struct Operands<'a> {
    pub x: &'a [f32],
    pub m: usize,
    pub k: usize,
    pub w: &'a [u8],
    pub scales: Params<'a>,
    pub biases: Option<Params<'a>>,
    pub n: usize,
    pub format: Format,
}

impl Operands<'_> {
    /// Whether the scales and biases are what the format's mode stores: the kernels pick
    /// their code decoding from the scales' dtype.
    pub fn params_fit(&self) -> bool {
        let mode = self.format.mode;
        let biases = match (mode, self.biases) {
            (Mode::Affine, Some(b)) => b.fit(mode),
            (Mode::Affine, None) => false,
            (_, b) => b.is_none(),
        };
        biases && self.scales.fit(mode)
    }

    /// Packed codes of weight row `row`.
    fn w_row(&self, row: usize) -> &[u8] {
        let bytes = self.format.row_bytes(self.k);
        &self.w[row * bytes..(row + 1) * bytes]
    }

    /// Scales and biases of weight row `row`.
    fn groups(&self, row: usize) -> (Params<'_>, Option<Params<'_>>) {
        let per_row = self.k / self.format.group;
        let range = row * per_row..(row + 1) * per_row;
        let biases = self.biases.map(|b| b.slice(range.clone()));
        (self.scales.slice(range), biases)
    }
}

/// Each group's sum of x, `[row][group]`, into `dst`: per lane (x in lane order) the group's
/// steps added in order from zero, then the 32 lane sums reduced as the accumulators are
/// (`scalar::reduce`). They depend on x alone, so they are made once per product; every
/// kernel takes them from here. None without biases (the float modes).
pub(crate) fn group_sums(ops: &Operands, dst: &mut Vec<f32>) {
    if ops.biases.is_none() {
        dst.clear();
        return;
    }
    // Every sum is written below: only values the buffer grows by are zeroed first.
    dst.resize(ops.m * ops.k / ops.format.group, 0.0);
    group_sums_into(&ops.x[..ops.m * ops.k], ops.format.group, dst);
}

/// [`group_sums`] of all of `x` (in lane order) into `dst` (a sum per `group` values).
pub(crate) fn group_sums_into(x: &[f32], group: usize, dst: &mut [f32]) {
    use layout::{LANES, STEP};
    let steps = group / STEP;
    for (group, d) in x.chunks_exact(group).zip(dst) {
        let mut sum = [[0f32; LANES]; layout::VECTORS];
        for step in group.chunks_exact(STEP).take(steps) {
            for (v, x) in sum.iter_mut().zip(step.chunks_exact(LANES)) {
                v.iter_mut().zip(x).for_each(|(s, x)| *s += x);
            }
        }
        *d = scalar::reduce(sum);
    }
}

/// The bias part of one output, `Σ_g b_g · X_g` (X the row's [`group_sums`], b the column's
/// biases): eight FMA chains from zero, group g on chain g mod 8, then the chains summed
/// pairwise (`scalar::reduce`'s last steps). Eight chains are one vector's lanes wherever the
/// kernels run (one chain was a scalar FMA per group, about a tenth of a decode product).
#[inline(always)]
pub(crate) fn bias_term<P: Stored>(biases: &[P], sums: &[f32]) -> f32 {
    const CHAINS: usize = 8;
    let mut t = [0f32; CHAINS];
    let (b_whole, b_rest) = biases.as_chunks::<CHAINS>();
    let (x_whole, x_rest) = sums.as_chunks::<CHAINS>();
    for (b, x) in b_whole.iter().zip(x_whole) {
        for j in 0..CHAINS {
            t[j] = b[j].widen().mul_add(x[j], t[j]);
        }
    }
    for (j, (b, x)) in b_rest.iter().zip(x_rest).enumerate() {
        t[j] = b.widen().mul_add(*x, t[j]);
    }
    let quad = [t[0] + t[4], t[1] + t[5], t[2] + t[6], t[3] + t[7]];
    let pair = [quad[0] + quad[2], quad[1] + quad[3]];
    pair[0] + pair[1]
}

/// Asks for weight row `row`'s scales and biases (`groups` of each a row) ahead of the kernels.
/// A product reads them as two streams beside its codes, which the hardware prefetchers follow
/// too late once the kernels keep up with the memory: with the scales and biases of the rows
/// [`PARAMS_AHEAD`] ahead asked for, the AVX-512 VNNI integer kernels read a 3.87 B model's
/// layers 1.15-1.24x faster; the f32 kernels and the 256-bit integer ones, bound by their
/// arithmetic there, read as fast either way (`examples/int8_layer.rs`, alternating).
#[inline(always)]
pub(crate) fn prefetch_params<P>(params: [&[P]; 2], row: usize, groups: usize) {
    #[cfg(target_arch = "x86_64")]
    for p in params {
        let Some(row) = p.get(row * groups..(row + 1) * groups) else {
            continue;
        };
        let at = row.as_ptr() as *const i8;
        for off in (0..std::mem::size_of_val(row)).step_by(64) {
            // SAFETY: `at + off` lies in `row`; a prefetch reads nothing into the program (SSE
            // is part of x86-64).
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.add(off))
            };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (params, row, groups);
}

/// Bytes of weight codes ahead of the row being multiplied whose rows' scales and biases
/// [`prefetch_params`] asks for.
pub(crate) const PARAMS_AHEAD: usize = 32768;

/// The weight rows [`PARAMS_AHEAD`] spans (at least one) at `row_bytes` a row.
#[inline(always)]
pub(crate) fn rows_ahead(row_bytes: usize) -> usize {
    (PARAMS_AHEAD / row_bytes.max(1)).max(1)
}

/// A dtype scales and biases are stored in, widened to f32 where a kernel reads one: the
/// kernels are generic over it, so their loops have no branch on the dtype. The scales' dtype
/// also says the mode (as in MLX, where it follows from the mode): f32, bf16 and f16 are the
/// affine mode's, the bytes ([`float::E8m0`], [`float::E4m3`]) the float modes'.
pub(crate) trait Stored: Copy {
    /// Codes are E2M1 (4 bits) or E4M3 (8 bits) values and there are no biases.
    const FLOAT: bool = false;
    /// Scales per step of [`layout::STEP`] codes: 2 for `nvfp4`'s 16-code groups, whose
    /// scale each vector takes by its parity (`layout::lane_code`), else 1.
    const PER_STEP: usize = 1;
    fn widen(self) -> f32;
}

impl Stored for f32 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
}

/// A bfloat16, as its bits.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct Bf16(u16);

impl Stored for Bf16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}

/// An IEEE half, as its bits.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct F16(u16);

impl Stored for F16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        half::f16::from_bits(self.0).to_f32()
    }
}

/// The kernels this machine can run, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// AVX-512 F/DQ with AVX2 and FMA (x86-64): every format, the bits of AVX2.
    Avx512,
    /// AVX2 and FMA (x86-64).
    Avx2,
    /// NEON (every aarch64 CPU): every format, the portable bits.
    Neon,
    /// Portable code: the floor everywhere, and the formats no vector kernel covers yet.
    Scalar,
}

/// The best kernel set this CPU has (detected once). `MLX_DISTRIBUTED_QUANT_KERNELS`
/// caps it, to measure or test a lesser set on any machine: `portable`, or `avx2` (x86-64).
pub fn isa() -> Isa {
    static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
    *ISA.get_or_init(|| {
        let cap = std::env::var("MLX_DISTRIBUTED_QUANT_KERNELS").unwrap_or_default();
        best_isa(&cap)
    })
}

fn best_isa(cap: &str) -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        if cap != "portable" && cap != "avx2" && x86::avx512::available() {
            return Isa::Avx512;
        }
        if cap != "portable" && x86::available() {
            return Isa::Avx2;
        }
    }
    // NEON is part of every aarch64 CPU.
    #[cfg(target_arch = "aarch64")]
    if cap != "portable" {
        return Isa::Neon;
    }
    let _ = cap;
    Isa::Scalar
}

/// Whether `format` runs on a vector kernel here (the others take the portable one).
pub fn vectorized(format: Format) -> bool {
    match isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => x86::covers(format),
        // Every format `Format::new` accepts.
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => true,
        _ => {
            let _ = format; // no vector kernel on this architecture
            false
        }
    }
}

/// Above this many rows a product goes through dequantized panels and the BLAS (prefill);
/// up to it (decode steps, as skinny-gemm's 16), a row's result does not depend on the
/// other rows.
pub const PANEL_ROWS: usize = 16;

/// `out[m, n] = Σ_k x[m, k] · (s·q + b)[n, k]` with the best kernel for the format and shape.
pub fn matmul(ops: &Operands, out: &mut [f32]) {
    matmul_many(std::slice::from_ref(ops), &mut [out]);
}

/// Products of one x by several weights of one format (a layer's q, k and v; its gate and
/// up): `outs[i] = x · w_iᵀ`, each output with the bits [`matmul`] gives it alone. x is made
/// ready (put in lane order, quantized) once, and every part's columns are shared out over
/// the helper threads as one product: one wait for them instead of one per part.
pub fn matmul_many(parts: &[Operands], outs: &mut [&mut [f32]]) {
    let Some(first) = parts.first() else {
        return;
    };
    if first.format.runs_int8() || first.format.layout == Layout::Tiles {
        return int8::rows_many(parts, outs); // which checks the parts
    }
    check_parts(parts, outs);
    if first.m > PANEL_ROWS {
        for (ops, out) in parts.iter().zip(outs) {
            panels::matmul(ops, out);
        }
        return;
    }
    rows_many(parts, outs);
}

/// The parts of a [`matmul_many`]: one x, one format, fitting scales, room for each output.
pub(crate) fn check_parts(parts: &[Operands], outs: &[&mut [f32]]) {
    assert_eq!(parts.len(), outs.len(), "an output per part");
    for (ops, out) in parts.iter().zip(outs) {
        assert!(out.len() >= ops.m * ops.n, "the output holds m * n floats");
        assert!(
            ops.params_fit(),
            "the scales and biases are the format's mode's"
        );
        let first = &parts[0];
        assert!(
            std::ptr::eq(ops.x, first.x)
                && (ops.m, ops.k, ops.format) == (first.m, first.k, first.format),
            "the parts share x and the format"
        );
    }
}

/// Runs `part(i, cols)` over the columns of every part as one product shared out over the
/// helper threads: a chunk of the parts' columns end to end may span several parts.
pub(crate) fn share_parts(
    parts: &[Operands],
    part: &(dyn Fn(usize, std::ops::Range<usize>) + Sync),
) {
    share_parts_by(parts, 1, part)
}

/// [`share_parts`] in whole units of `unit` columns (every part's `n` a multiple of it).
pub(crate) fn share_parts_by(
    parts: &[Operands],
    unit: usize,
    part: &(dyn Fn(usize, std::ops::Range<usize>) + Sync),
) {
    let total: usize = parts.iter().map(|p| p.n / unit).sum();
    let k = parts.first().map_or(0, |p| p.k);
    skinny_gemm::share(total, total * unit * k, &|n0, n1| {
        let mut start = 0;
        for (i, p) in parts.iter().enumerate() {
            let units = p.n / unit;
            let (lo, hi) = (n0.max(start), n1.min(start + units));
            if lo < hi {
                part(i, (lo - start) * unit..(hi - start) * unit);
            }
            start += units;
        }
    });
}

thread_local! {
    /// The caller's x in lane order, kept between products (the caller is MLX's stream thread).
    static LANE_ORDER: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The few-row kernels (decode): weights unpacked in registers, each read once, the output
/// columns shared out over skinny-gemm's threads.
pub fn rows(ops: &Operands, out: &mut [f32]) {
    check_parts(std::slice::from_ref(ops), &[&mut *out]);
    rows_many(std::slice::from_ref(ops), &mut [out]);
}

/// [`rows`] of several parts sharing x ([`matmul_many`]).
fn rows_many(parts: &[Operands], outs: &mut [&mut [f32]]) {
    let Some(first) = parts.first() else {
        return;
    };
    let bits = first.format.bits;
    if layout::in_order(bits) {
        return share_columns(parts, outs);
    }
    LANE_ORDER.with_borrow_mut(|x| {
        layout::permute(first.x, first.m, first.k, bits, x);
        let parts: Vec<Operands> = parts.iter().map(|p| Operands { x: &x[..], ..*p }).collect();
        share_columns(&parts, outs)
    })
}

/// `rows_many` with x already in lane order.
fn share_columns(parts: &[Operands], outs: &mut [&mut [f32]]) {
    let outs: Vec<Out> = outs.iter_mut().map(|o| Out(o.as_mut_ptr())).collect();
    share_parts(parts, &|i, cols| {
        // SAFETY: `outs[i]` holds m * n floats of part i, and each chunk writes only its
        // columns.
        unsafe { columns(&parts[i], cols, outs[i]) }
    });
}

/// Output columns `cols` with the best kernel for the format; x in lane order.
///
/// # Safety
/// `out` points to m * n floats, and no other thread writes these columns meanwhile.
unsafe fn columns(ops: &Operands, cols: std::ops::Range<usize>, out: Out) {
    #[cfg(target_arch = "x86_64")]
    if vectorized(ops.format) {
        // SAFETY: `isa` checked that the CPU has what its kernels use.
        return match isa() {
            Isa::Avx512 => x86::avx512::matmul(ops, cols, out),
            _ => x86::matmul(ops, cols, out),
        };
    }
    #[cfg(target_arch = "aarch64")]
    if vectorized(ops.format) {
        return neon::matmul(ops, cols, out);
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

    /// Where `out[m, n]` of a product with `cols` columns is (the vector kernels' stores).
    ///
    /// # Safety
    /// In bounds.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) unsafe fn at(self, m: usize, n: usize, cols: usize) -> *mut f32 {
        self.0.add(m * cols + n)
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
