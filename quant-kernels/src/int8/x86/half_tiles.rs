//! The 256-bit sets' kernel on weights stored in tiles ([`crate::int8::tiles`]): AVX2
//! (`vpmaddubsw` + `vpmaddwd`) and AVX-VNNI (`vpdpbusd`, VEX or EVEX). A 64-byte line of a tile is one lane of
//! its 16 weight rows; a 256-bit register takes half of it, so the kernel walks a tile as two
//! halves of 8 rows: a row of x meets both in one pass, a span of each in turn, and a block of
//! rows meets them half by half ([`BLOCKED_ROWS`]). As in the AVX-512 kernel, each row of x takes
//! its digits broadcast from memory, its totals come out 8 weight rows a register, and the float
//! steps are the module's, one output a lane: the same bits as every other set, with no sum across
//! lanes and each weight code unpacked once for the rows of x that meet it at once
//! ([`BLOCKED_ROWS`] or one).
//!
//! AVX2 has no 4-byte dot product: for 4-bit and E2M1 codes `vpmaddubsw` gives pairs in i16,
//! which are summed in i16 over as many lanes as cannot overflow ([`run`]) before `vpmaddwd`
//! widens them. 8-bit codes, and E2M1 ones met by blocks of rows, are widened to i16 instead
//! and meet each value's two digits as one i16, `128 · hi + lo`, in `vpmaddwd`: one multiply
//! for both digits, the same integer totals ([`widened`]).

use std::arch::x86_64::*;

use super::super::tiles::WIDTH;
use super::super::{group_shift, Row, Totals, BLOCK, DIGIT_SHIFT};
use super::{block_bytes, e2m1_table, Isa, Walk, E2M1, PREFETCH_L2};
use crate::float::{E4m3, E8m0};
use crate::{Bf16, Operands, Out, Stored, F16};

/// Rows of x that meet a half tile at once on AVX2 where its codes are 8-bit or E2M1: their
/// unpacking (widening, or a table lookup) is then shared by 6 rows, whose float accumulators
/// leave the registers at no cost that shows. Against one row at a time, 128 rows took
/// 0.65-0.75 as long at 8 bits and 0.86-0.98 in E2M1 on a family-25 EPYC capped to AVX2
/// (`ROWS=128 int8_speed`, alternating; docs/design/cpu-kernels.md); 5 rows did as well at 8
/// bits and worse in E2M1, 8 worse at 8 bits. 4-bit affine codes take one row at a time: each
/// row's i16 sums take 3 registers, and 2 to 6 rows took 1.1-1.7x as long; widened against
/// the combined digits, 6 rows at once took 0.96-1.04 as long as one at a time.
const BLOCKED_ROWS: usize = 6;

/// The half tile's rows of x in blocks of [`BLOCKED_ROWS`] on AVX2 (8-bit or E2M1 codes);
/// returns how many rows it took (the rest take one at a time). A function of its
/// own so that the one-row code, a decode step's, is built as it is without it: inlined, the
/// blocks moved one row's times by 3-8% either way (`ROWS=1 int8_speed`).
///
/// # Safety
/// As [`tiles`]; the CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline(never)]
unsafe fn avx2_blocks<const KIND: u32, P: Wide8, const SPAN: usize>(
    half: &Half<P>,
    x: Xs<P>,
) -> usize {
    let blocked = x.0 .0.m / BLOCKED_ROWS * BLOCKED_ROWS;
    for m in (0..blocked).step_by(BLOCKED_ROWS) {
        rows::<KIND, P, Avx2, BLOCKED_ROWS, SPAN>(half, x, m);
    }
    blocked
}

/// Whether AVX2 takes rows of x in blocks ([`BLOCKED_ROWS`]) on codes of `kind`.
const fn blocked(kind: u32) -> bool {
    matches!(kind, 8 | E2M1)
}

/// Whether AVX2 widens codes of `kind` to i16 against `rows` rows' digits combined: 8-bit codes
/// always, E2M1 in blocks of rows. Blocks of E2M1 took 0.77-0.87 as long that way as with
/// `vpmaddubsw` on each digit (`mxfp4`; `nvfp4` 0.73-0.78; 128 rows, family-25 EPYC capped to
/// AVX2, `ROWS=128 int8_speed`, alternating); one row took 1.10 as long (`ROWS=1`).
const fn widened(kind: u32, rows: usize) -> bool {
    kind == 8 || (rows > 1 && blocked(kind))
}

/// Whether AVX2's tiled kernel reads the combined digits of `m` rows of x on codes of `kind`.
pub(super) fn reads_combined(kind: u32, m: usize) -> bool {
    kind == 8 || (m >= BLOCKED_ROWS && blocked(kind))
}

/// What a half tile's rows of x need: the product, its activations and output, the biases,
/// and the rows' offsets.
type Xs<'a, 'b, P> = (
    (&'b Operands<'a>, &'b super::Activations, Out),
    (&'b [P], &'b [Totals]),
);

/// Weight rows of a half tile: the i32 lanes of a 256-bit register.
const HALF: usize = WIDTH / 2;

/// Columns `walk.2` (whole tiles) of the product on tiled weights, with `set` (AVX2 or
/// AVX-VNNI).
///
/// # Safety
/// The CPU has `set` and F16C; the weights are tiled for `KIND`; as `int8::columns`.
pub(super) unsafe fn columns<const KIND: u32>(set: Isa, walk: Walk) {
    match walk.1.span {
        1 => columns_of::<KIND, 1>(set, walk),
        _ => columns_of::<KIND, 2>(set, walk),
    }
}

/// [`columns`] on x's spans of `SPAN` blocks: a kernel of its own for each span, so that
/// spans of one block run with no pairing of blocks.
unsafe fn columns_of<const KIND: u32, const SPAN: usize>(set: Isa, walk: Walk) {
    match set {
        Isa::AvxVnni if super::vex_vnni() => with_vnni::<KIND, SPAN>(walk),
        Isa::AvxVnni => with_vnni_evex::<KIND, SPAN>(walk),
        _ => with_avx2::<KIND, SPAN>(walk),
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn with_avx2<const KIND: u32, const SPAN: usize>(walk: Walk) {
    let ops = walk.0;
    crate::vector::by_stored!(ops, g => tiles::<KIND, _, Avx2, SPAN>(walk, (g.scales, g.biases)))
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn with_vnni<const KIND: u32, const SPAN: usize>(walk: Walk) {
    let ops = walk.0;
    crate::vector::by_stored!(ops, g => {
        tiles::<KIND, _, AvxVnni<false>, SPAN>(walk, (g.scales, g.biases))
    })
}

/// AVX-VNNI's kernel where only AVX-512 VNNI is: the EVEX `vpdpbusd` on 256 bits.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn with_vnni_evex<const KIND: u32, const SPAN: usize>(walk: Walk) {
    let ops = walk.0;
    crate::vector::by_stored!(ops, g => {
        tiles::<KIND, _, AvxVnni<true>, SPAN>(walk, (g.scales, g.biases))
    })
}

/// A set's integer step: the words `words` of a block's half lines (`codes`; 8-bit: of a
/// span's, [`span_totals`]) against `R` rows' digits, each row's totals
/// `128 · Σ q·hi + Σ q·lo` for 8 weight rows.
trait Dot {
    /// The half tile's first rows of x (their units spanning `SPAN` blocks), as many as the
    /// set takes at once ([`avx2_blocks`]); returns how many.
    ///
    /// # Safety
    /// As [`tiles`].
    unsafe fn blocks<const KIND: u32, P: Wide8, const SPAN: usize>(
        half: &Half<P>,
        x: Xs<P>,
    ) -> usize;
    /// # Safety
    /// The set's features (the caller's, once inlined); the words and digits are readable.
    unsafe fn totals<const KIND: u32, const R: usize>(
        codes: *const u8,
        digits: [Digits; R],
        words: std::ops::Range<usize>,
    ) -> [__m256i; R];
}

/// A row's digits of one block: high, low, and (where AVX2 widens the codes: [`widened`]) both
/// as one i16.
#[derive(Clone, Copy)]
struct Digits {
    hi: *const i8,
    lo: *const i8,
    combined: *const i16,
}

struct Avx2;
/// AVX-VNNI, on its own `vpdpbusd` or (`EVEX`) AVX-512 VNNI's on 256 bits.
struct AvxVnni<const EVEX: bool>;

/// Lanes whose `vpmaddubsw` pairs may be summed in i16: a pair is at most `2 · 15 · 127`
/// (4-bit codes) or `2 · 24 · 127` (E2M1 as `2·v + 12`), and a sum must stay within 32767.
const fn run(kind: u32) -> usize {
    match kind {
        E2M1 => 4,
        _ => 8,
    }
}

/// Lanes a 4-byte word holds: one (8 bits) or two (4 bits: `w` and `w + 4`).
const fn lanes(kind: u32) -> usize {
    match kind {
        8 => 1,
        _ => 2,
    }
}

impl Dot for Avx2 {
    #[inline(always)]
    unsafe fn blocks<const KIND: u32, P: Wide8, const SPAN: usize>(
        half: &Half<P>,
        x: Xs<P>,
    ) -> usize {
        // No call where there is no block, as in a decode step: it cost small products 5%.
        match x.0 .0.m >= BLOCKED_ROWS && blocked(KIND) {
            true => avx2_blocks::<KIND, P, SPAN>(half, x),
            false => 0,
        }
    }
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // indices keep the sums in registers
    unsafe fn totals<const KIND: u32, const R: usize>(
        codes: *const u8,
        digits: [Digits; R],
        words: std::ops::Range<usize>,
    ) -> [__m256i; R] {
        if widened(KIND, R) {
            return wide_totals::<KIND, R>(codes, digits, words);
        }
        let mut sums = [[_mm256_setzero_si256(); 2]; R];
        let mut total = [_mm256_setzero_si256(); R];
        let mut in_run = 0;
        for w in words {
            let q = lanes_of::<KIND>(codes.add(w * 4 * WIDTH));
            for (h, &q) in q.iter().enumerate() {
                let l = w + 4 * h;
                for r in 0..R {
                    for (d, at) in [digits[r].hi, digits[r].lo].into_iter().enumerate() {
                        let p = _mm256_maddubs_epi16(q, broadcast(at, l));
                        sums[r][d] = _mm256_add_epi16(sums[r][d], p);
                    }
                }
                in_run += 1;
                if in_run == run(KIND) {
                    widen_sums(&mut sums, &mut total);
                    in_run = 0;
                }
            }
        }
        if in_run > 0 {
            widen_sums(&mut sums, &mut total);
        }
        total
    }
}

/// 8-bit and E2M1 codes on AVX2: each half line's lanes of bytes (the codes, or E2M1's
/// looked up) widened to i16 (rows 0, 1, 4, 5 by `unpacklo`, rows 2, 3, 6, 7 by `unpackhi`),
/// `vpmaddwd` against the lane's 4 values as `128 · hi + lo` (at most `255 · 16383` a product,
/// `2^28` a span of two blocks: no overflow), then one `vphaddd` puts each row's two pair sums
/// into its own lane, in row order.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // indices keep the sums in registers
unsafe fn wide_totals<const KIND: u32, const R: usize>(
    codes: *const u8,
    digits: [Digits; R],
    words: std::ops::Range<usize>,
) -> [__m256i; R] {
    let zero = _mm256_setzero_si256();
    let mut sums = [[zero; 2]; R];
    for w in words {
        let q = lanes_of::<KIND>(codes.add(w * 4 * WIDTH));
        for (h, &q) in q.iter().enumerate().take(lanes(KIND)) {
            let halves = [_mm256_unpacklo_epi8(q, zero), _mm256_unpackhi_epi8(q, zero)];
            for r in 0..R {
                let at = digits[r].combined.add(4 * (w + 4 * h)) as *const i64;
                let x = _mm256_set1_epi64x(at.read_unaligned());
                for (s, &q) in sums[r].iter_mut().zip(&halves) {
                    *s = _mm256_add_epi32(*s, _mm256_madd_epi16(q, x));
                }
            }
        }
    }
    std::array::from_fn(|r| _mm256_hadd_epi32(sums[r][0], sums[r][1]))
}

/// Each row's i16 pair sums into its i32 total, the high digit's times 128; the sums zeroed.
#[inline(always)]
unsafe fn widen_sums<const R: usize>(sums: &mut [[__m256i; 2]; R], total: &mut [__m256i; R]) {
    let high = _mm256_set1_epi16(1 << DIGIT_SHIFT);
    let ones = _mm256_set1_epi16(1);
    for (s, t) in sums.iter_mut().zip(total) {
        let v = _mm256_add_epi32(_mm256_madd_epi16(s[0], high), _mm256_madd_epi16(s[1], ones));
        *t = _mm256_add_epi32(*t, v);
        *s = [_mm256_setzero_si256(); 2];
    }
}

impl<const EVEX: bool> Dot for AvxVnni<EVEX> {
    /// None: on the EVEX form, blocks of 2, 4 and 6 rows gained too little to take
    /// (docs/design/cpu-kernels.md).
    #[inline(always)]
    unsafe fn blocks<const KIND: u32, P: Wide8, const SPAN: usize>(_: &Half<P>, _: Xs<P>) -> usize {
        0
    }
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // indices keep the accumulators in registers
    unsafe fn totals<const KIND: u32, const R: usize>(
        codes: *const u8,
        digits: [Digits; R],
        words: std::ops::Range<usize>,
    ) -> [__m256i; R] {
        // Two chains a row and digit for one row, so that two `vpdpbusd`s run side by side.
        let chains = (2 / R).max(1);
        let mut acc = [[[_mm256_setzero_si256(); 2]; 2]; R];
        for w in words {
            let q = lanes_of::<KIND>(codes.add(w * 4 * WIDTH));
            for (h, &q) in q.iter().enumerate().take(lanes(KIND)) {
                let (l, c) = (w + 4 * h, (w + 4 * h) % chains);
                for r in 0..R {
                    for (d, at) in [digits[r].hi, digits[r].lo].into_iter().enumerate() {
                        acc[r][d][c] = dpbusd::<EVEX>(acc[r][d][c], q, broadcast(at, l));
                    }
                }
            }
        }
        let mut out = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let [hi, lo] = acc[r].map(|[a, b]| _mm256_add_epi32(a, b));
            out[r] = _mm256_add_epi32(_mm256_slli_epi32::<{ DIGIT_SHIFT as i32 }>(hi), lo);
        }
        out
    }
}

/// `vpdpbusd` on 256 bits: AVX-VNNI's (VEX), or (`EVEX`) AVX512VL's.
#[inline(always)]
unsafe fn dpbusd<const EVEX: bool>(acc: __m256i, q: __m256i, x: __m256i) -> __m256i {
    match EVEX {
        true => _mm256_dpbusd_epi32(acc, q, x),
        false => _mm256_dpbusd_avx_epi32(acc, q, x),
    }
}

/// Lane `l`'s 4 digits at `at`, in every i32 lane.
#[inline(always)]
unsafe fn broadcast(at: *const i8, l: usize) -> __m256i {
    _mm256_set1_epi32((at.add(4 * l) as *const i32).read_unaligned())
}

/// A half line (8 rows' 4-byte words) as the codes of its lanes: itself (8 bits), or its low
/// nibbles and its high ones (4 bits; E2M1 codes as `2·v + 12`).
#[inline(always)]
unsafe fn lanes_of<const KIND: u32>(at: *const u8) -> [__m256i; 2] {
    let v = _mm256_loadu_si256(at as *const __m256i);
    if KIND == 8 {
        return [v, v];
    }
    let low = _mm256_set1_epi8(0x0F);
    let q = [
        _mm256_and_si256(v, low),
        _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
    ];
    match KIND {
        E2M1 => q.map(|q| _mm256_shuffle_epi8(e2m1_table(), q)),
        _ => q,
    }
}

/// A scale dtype whose 8 values (a half tile's rows' in one group) load as one register.
trait Wide8: Stored {
    /// The 8 values at `at`, widened.
    ///
    /// # Safety
    /// AVX2 and F16C (the caller's, once inlined); 8 values are readable at `at`.
    unsafe fn load8(at: *const Self) -> __m256;
}

impl Wide8 for f32 {
    #[inline(always)]
    unsafe fn load8(at: *const f32) -> __m256 {
        _mm256_loadu_ps(at)
    }
}

impl Wide8 for Bf16 {
    #[inline(always)]
    unsafe fn load8(at: *const Bf16) -> __m256 {
        let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(at as *const __m128i));
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h))
    }
}

impl Wide8 for F16 {
    #[inline(always)]
    unsafe fn load8(at: *const F16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(at as *const __m128i))
    }
}

impl Wide8 for E8m0 {
    /// `2^(byte - 127)`, byte 0 as 2^-127 ([`crate::float::e8m0`]).
    #[inline(always)]
    unsafe fn load8(at: *const E8m0) -> __m256 {
        let bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(at as *const __m128i));
        let zero = _mm256_cmpeq_epi32(bytes, _mm256_setzero_si256());
        let v = _mm256_slli_epi32::<23>(bytes);
        let tiny = _mm256_set1_epi32(0x0040_0000);
        _mm256_castsi256_ps(_mm256_blendv_epi8(v, tiny, zero))
    }
}

impl Wide8 for E4m3 {
    #[inline(always)]
    unsafe fn load8(at: *const E4m3) -> __m256 {
        let v: [f32; HALF] = std::array::from_fn(|i| (*at.add(i)).widen());
        _mm256_loadu_ps(v.as_ptr())
    }
}

/// One half tile: its codes and scales (`[group][WIDTH]`, from the half's first row), the
/// format's group shift, where the call's codes end, which half (0 or 1) it is, its first
/// output column, and how far ahead its codes are asked for ([`ahead_of`]).
struct Half<P> {
    codes: *const u8,
    scales: *const P,
    shift: u32,
    end: *const u8,
    half: usize,
    column: usize,
    ahead: usize,
}

/// How far ahead a tile of `tile_bytes` asks for its codes (into L1 and L2, `prefetcht0`):
/// [`PREFETCH_L2`] on large tiles, where the 3.87 B model's products took 1.00-1.02 as long at
/// 32 KiB and 1.10-1.17 at 16 KiB (AVX2 on a family-25 EPYC, variants in one process:
/// docs/design/cpu-kernels.md).
fn ahead_of(tile_bytes: usize) -> usize {
    super::tile_ahead(tile_bytes, PREFETCH_L2)
}

/// Each tile of the columns against each row of x: blocks of rows half by half, then single
/// rows through both halves.
#[inline(always)]
unsafe fn tiles<const KIND: u32, P: Wide8, S: Dot, const SPAN: usize>(
    walk: Walk,
    params: (&[P], &[P]),
) {
    let (ops, acts, cols, out) = walk;
    debug_assert!(cols.start % WIDTH == 0 && cols.end % WIDTH == 0);
    let blocks = ops.k / BLOCK;
    let groups_k = ops.k / ops.format.group;
    let offsets = super::tiles::offsets::<KIND>(acts, ops.m * blocks);
    let tile_bytes = WIDTH * ops.format.row_bytes(ops.k);
    let end = ops.w.as_ptr().wrapping_add(cols.end / WIDTH * tile_bytes);
    super::prefetch_start(
        ops.w.as_ptr().wrapping_add(cols.start / WIDTH * tile_bytes),
        end,
        PREFETCH_L2,
    );
    let ahead = ahead_of(tile_bytes);
    for t in (cols.start / WIDTH)..(cols.end / WIDTH) {
        if t + 1 < cols.end / WIDTH {
            super::tiles::next_params(params, t, groups_k);
        }
        let halves: [Half<P>; 2] = std::array::from_fn(|h| Half {
            codes: ops.w.as_ptr().add(t * tile_bytes + h * 4 * HALF),
            scales: params.0.as_ptr().add(t * WIDTH * groups_k + h * HALF),
            shift: group_shift(ops.format),
            end,
            half: h,
            column: t * WIDTH + h * HALF,
            ahead,
        });
        let x = ((ops, acts, out), (params.1, &offsets[..]));
        let blocked = halves
            .each_ref()
            .map(|half| S::blocks::<KIND, P, SPAN>(half, x));
        for m in blocked[0]..ops.m {
            single_row::<KIND, P, S, SPAN>(&halves, x, m);
        }
    }
}

/// Row `m` of x against a tile's two halves: in one pass, which reads each line of the tile
/// once, or (`nvfp4`) half by half. Against half by half, in one process capped to AVX2
/// (`MLX_DISTRIBUTED_AB=1`, docs/design/cpu-kernels.md), one pass took SmolLM2-135M's decode
/// products 0.98 as long at 8 bits, 1.0 at 4 and 0.95 in `mxfp4`, and the 3.87 B model's 0.93
/// at 8 bits and 0.95 at 4; `nvfp4`, whose blocks are two groups, took 1.11-1.14x as long on
/// one thread (`ROWS=1 int8_speed`).
#[inline(always)]
unsafe fn single_row<const KIND: u32, P: Wide8, S: Dot, const SPAN: usize>(
    halves: &[Half<P>; 2],
    x: Xs<P>,
    m: usize,
) {
    if P::PER_STEP == 2 {
        // A loop, not a closure: a closure need not be inlined, and out of line it has no
        // AVX2, so every intrinsic in it became a call (60x as long).
        for half in halves {
            rows::<KIND, P, S, 1, SPAN>(half, x, m);
        }
        return;
    }
    let ((ops, acts, out), (biases, offsets)) = x;
    let (row, row_offsets) = rows_at::<1>(ops, acts, offsets, m);
    let v = pair::<KIND, P, S, SPAN>(halves, (&row, &row_offsets));
    for (half, v) in halves.iter().zip(v) {
        store((ops, acts, out), biases, (m, half.column), v);
    }
}

/// Rows `m..m + R` of x against `half`, their outputs stored (`biases` and `offsets` as
/// [`store`]'s and [`fold`]'s).
#[inline(always)]
unsafe fn rows<const KIND: u32, P: Wide8, S: Dot, const R: usize, const SPAN: usize>(
    half: &Half<P>,
    ((ops, acts, out), (biases, offsets)): Xs<P>,
    m: usize,
) {
    let (x, x_offsets) = rows_at::<R>(ops, acts, offsets, m);
    let v = group::<KIND, P, S, R, SPAN>(half, (&x, &x_offsets));
    let n = half.column;
    for (r, v) in v.into_iter().enumerate() {
        store((ops, acts, out), biases, (m + r, n), v);
    }
}

/// Rows `m..m + R` of x and their totals' offsets (from `offsets`, `[m][block]`; empty if none).
#[inline(always)]
fn rows_at<'a, const R: usize>(
    ops: &Operands,
    acts: &'a super::Activations,
    offsets: &'a [Totals],
    m: usize,
) -> ([Row<'a>; R], [&'a [Totals]; R]) {
    let blocks = ops.k / BLOCK;
    let x = std::array::from_fn(|r| acts.row(m + r));
    let x_offsets = std::array::from_fn(|r| offsets.get((m + r) * blocks..).unwrap_or_default());
    (x, x_offsets)
}

/// Row `m`'s 8 outputs `v` from column `n`, the bias part added (`biases`, if any).
#[inline(always)]
unsafe fn store<P: Wide8>(
    (ops, acts, out): (&Operands, &super::Activations, Out),
    biases: &[P],
    (m, n): (usize, usize),
    v: __m256,
) {
    let groups_k = ops.k / ops.format.group;
    let v = match biases.is_empty() {
        true => v,
        false => {
            let sums = &acts.sums[m * groups_k..(m + 1) * groups_k];
            let (tile, row) = (n / WIDTH, n % WIDTH);
            let biases = biases.as_ptr().add(tile * WIDTH * groups_k + row);
            _mm256_add_ps(v, bias_part(biases, sums))
        }
    };
    _mm256_storeu_ps(out.at(m, n, ops.n), v);
}

type Rows<'a, 'b, const R: usize> = (&'b [Row<'a>; R], &'b [&'a [Totals]; R]);

/// `R` rows of x against a half tile: each one's 8 outputs without the bias part, the
/// spans (of `SPAN` blocks) in fours so that each accumulator is its own chain.
#[inline(always)]
unsafe fn group<const KIND: u32, P: Wide8, S: Dot, const R: usize, const SPAN: usize>(
    half: &Half<P>,
    x: Rows<R>,
) -> [__m256; R] {
    let spans = x.0[0].blocks / SPAN;
    let [mut a0, mut a1, mut a2, mut a3] = [[_mm256_setzero_ps(); R]; 4];
    let whole = spans / 4 * 4;
    for s in (0..whole).step_by(4) {
        span::<KIND, P, S, R, SPAN>(half, x, s, &mut a0);
        span::<KIND, P, S, R, SPAN>(half, x, s + 1, &mut a1);
        span::<KIND, P, S, R, SPAN>(half, x, s + 2, &mut a2);
        span::<KIND, P, S, R, SPAN>(half, x, s + 3, &mut a3);
    }
    for (s, acc) in (whole..spans).zip([&mut a0, &mut a1, &mut a2]) {
        span::<KIND, P, S, R, SPAN>(half, x, s, acc);
    }
    let mut out = [_mm256_setzero_ps(); R];
    for (r, o) in out.iter_mut().enumerate() {
        *o = _mm256_add_ps(_mm256_add_ps(a0[r], a1[r]), _mm256_add_ps(a2[r], a3[r]));
    }
    out
}

/// Row `x` against a tile's two halves in one pass, a span of each in turn, so that the row
/// reads each line of the tile once: each half's 8 outputs without the bias part, the spans in
/// fours as in [`group`]. (Written apart from [`group`]: as one generic function, the blocks
/// of 6 rows took 1.2-1.4x as long.)
#[inline(always)]
unsafe fn pair<const KIND: u32, P: Wide8, S: Dot, const SPAN: usize>(
    halves: &[Half<P>; 2],
    x: Rows<1>,
) -> [__m256; 2] {
    let spans = x.0[0].blocks / SPAN;
    let mut acc = [[[_mm256_setzero_ps(); 1]; 2]; 4];
    let whole = spans / 4 * 4;
    for s in (0..whole).step_by(4) {
        for (c, acc) in acc.iter_mut().enumerate() {
            for (half, acc) in halves.iter().zip(acc) {
                span::<KIND, P, S, 1, SPAN>(half, x, s + c, acc);
            }
        }
    }
    for (s, acc) in (whole..spans).zip(&mut acc) {
        for (half, acc) in halves.iter().zip(acc) {
            span::<KIND, P, S, 1, SPAN>(half, x, s, acc);
        }
    }
    let [a0, a1, a2, a3] = acc;
    std::array::from_fn(|h| {
        let (x, y) = (
            _mm256_add_ps(a0[h][0], a1[h][0]),
            _mm256_add_ps(a2[h][0], a3[h][0]),
        );
        _mm256_add_ps(x, y)
    })
}

/// Span `s` of each row into `acc`: one multiply-add on its total (its blocks' totals
/// summed), or (`nvfp4`, a block a span) its first group's then its second's.
#[inline(always)]
unsafe fn span<const KIND: u32, P: Wide8, S: Dot, const R: usize, const SPAN: usize>(
    half: &Half<P>,
    (xs, offsets): Rows<R>,
    s: usize,
    acc: &mut [__m256; R],
) {
    let b = s * SPAN;
    let step = WIDTH * block_bytes(KIND);
    let codes = half.codes.add(b * step);
    prefetch(half, codes, SPAN * step);
    match P::PER_STEP {
        2 => {
            debug_assert_eq!(SPAN, 1, "a span lies in one weight group");
            let digits = digits_at(xs, b);
            let t = S::totals::<KIND, R>(codes, digits, 0..2);
            fold::<KIND, P, R>(half, (xs, offsets), (t, Some(0)), (b, 2 * b), acc);
            let t = S::totals::<KIND, R>(codes, digits, 2..4);
            fold::<KIND, P, R>(half, (xs, offsets), (t, Some(1)), (b, 2 * b + 1), acc);
        }
        _ => {
            let t = span_totals::<KIND, S, R, SPAN>(codes, xs, b);
            let group = b >> half.shift;
            fold::<KIND, P, R>(half, (xs, offsets), (t, None), (b, group), acc);
        }
    }
}

/// Each row's total of the span from block `b` (its codes at `codes`). A span's blocks are
/// adjacent in the tile and in x, and an 8-bit word is a lane, so 8-bit words run on through
/// the span: one call, which on AVX2 took 0.81-0.88 as long as a call a block (`ROWS=1
/// int8_speed`, AVX-512 Xeon). A 4-bit word holds lanes `w` and `w + 4` of its block: a call
/// a block, the totals added (one call, its lanes mapped, took 1.2x as long on AVX2).
#[inline(always)]
unsafe fn span_totals<const KIND: u32, S: Dot, const R: usize, const SPAN: usize>(
    codes: *const u8,
    xs: &[Row; R],
    b: usize,
) -> [__m256i; R] {
    let words = block_bytes(KIND) / 4;
    if KIND == 8 {
        return S::totals::<KIND, R>(codes, digits_at(xs, b), 0..SPAN * words);
    }
    let mut t = S::totals::<KIND, R>(codes, digits_at(xs, b), 0..words);
    for i in 1..SPAN {
        let at = codes.add(i * WIDTH * block_bytes(KIND));
        let next = S::totals::<KIND, R>(at, digits_at(xs, b + i), 0..words);
        for (t, next) in t.iter_mut().zip(next) {
            *t = _mm256_add_epi32(*t, next);
        }
    }
    t
}

/// The `bytes` of codes at `codes`, `half.ahead` ahead, into L1 and L2 (`prefetcht0`: against
/// `prefetcht1`, decode products took 0.92-0.99 as long) while they are this call's: each half
/// asks for half the lines, so that a block of rows keeps the memory busy through both halves.
#[inline(always)]
unsafe fn prefetch<P>(half: &Half<P>, codes: *const u8, bytes: usize) {
    let ahead = codes.wrapping_add(half.ahead);
    if ahead.wrapping_add(bytes) <= half.end {
        let lines = bytes / 64 / 2;
        for line in half.half * lines..(half.half + 1) * lines {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64 * line) as *const i8);
        }
    }
}

/// Each row's digits of block `b`.
#[inline(always)]
unsafe fn digits_at<const R: usize>(xs: &[Row; R], b: usize) -> [Digits; R] {
    std::array::from_fn(|r| Digits {
        hi: xs[r].hi.as_ptr().add(b * BLOCK),
        lo: xs[r].lo.as_ptr().add(b * BLOCK),
        // Empty (dangling, never read) unless AVX2 widens the codes ([`reads_combined`]).
        combined: xs[r].combined.as_ptr().wrapping_add(b * BLOCK),
    })
}

/// Each row's total `t` of the span at block `b` (`half` the `nvfp4` group it is, `None`
/// both) with weight group `group`'s scales and the span's unit (its first block's) into
/// `acc`: the module's float step, one output a lane. Offsets are a block's: E2M1 spans are
/// a block.
#[inline(always)]
unsafe fn fold<const KIND: u32, P: Wide8, const R: usize>(
    tile: &Half<P>,
    (xs, offsets): Rows<R>,
    (t, half): ([__m256i; R], Option<usize>),
    (b, group): (usize, usize),
    acc: &mut [__m256; R],
) {
    let s_w = P::load8(tile.scales.add(group * WIDTH));
    let s_w = match P::FLOAT {
        true => _mm256_mul_ps(s_w, _mm256_set1_ps(0.5)),
        false => s_w,
    };
    for (r, acc) in acc.iter_mut().enumerate() {
        let t = match offsets[r].get(b) {
            None => t[r],
            Some(o) => {
                let o = match half {
                    None => o.first + o.second,
                    Some(0) => o.first,
                    Some(_) => o.second,
                };
                _mm256_sub_epi32(t[r], _mm256_set1_epi32(o))
            }
        };
        let c = _mm256_mul_ps(s_w, _mm256_set1_ps(xs[r].units[b]));
        *acc = _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(t), *acc);
    }
}

/// `bias_term` one output a lane: 8 chains over the groups, `fma(b_g, Σx_g, t[g % 8])`, then
/// the AVX-512 kernels' tree; the biases `[group][WIDTH]` from the half's first row.
#[inline(always)]
unsafe fn bias_part<P: Wide8>(biases: *const P, sums: &[f32]) -> __m256 {
    let mut t = [_mm256_setzero_ps(); 8];
    for (g, &sum) in sums.iter().enumerate() {
        let b = P::load8(biases.add(g * WIDTH));
        t[g % 8] = _mm256_fmadd_ps(b, _mm256_set1_ps(sum), t[g % 8]);
    }
    let even = _mm256_add_ps(_mm256_add_ps(t[0], t[4]), _mm256_add_ps(t[2], t[6]));
    let odd = _mm256_add_ps(_mm256_add_ps(t[1], t[5]), _mm256_add_ps(t[3], t[7]));
    _mm256_add_ps(even, odd)
}
