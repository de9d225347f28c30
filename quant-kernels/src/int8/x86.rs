//! x86-64 integer kernels: AVX2 (`vpmaddubsw` + `vpmaddwd`) and AVX-VNNI (`vpdpbusd` on 256 bits;
//! its EVEX form where only AVX-512 VNNI is), their lanes summed into block totals by `vphaddd`,
//! and AVX-512 VNNI (`vpdpbusd` on 512 bits, four weight rows at a time whose lanes go through one
//! tree into their blocks' totals; a row's last 1..3 blocks in a partial step at 4 bits, else on
//! 256 bits with AVX512VL; many rows of x in panels). Codes are unpacked in registers into unsigned
//! bytes in the lane order of [`crate::layout`], which is the order the activations' codes are in:
//! E2M1 codes as `2·v + 12` (0..=24), the offset taken back as `12 · lane_sum`.

use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::rows_of;
use super::{block_bytes, by_kind, each_row, group_shift, kind, E2M1};
use super::{Activations, Digits, Isa, Row, BLOCK, DIGIT_SHIFT, E2M1_OFFSET, E2M1_TWICE, LANES};
use crate::float::{E4m3, E8m0};
use crate::x86::sum_lanes;
use crate::{Bf16, Operands, Out, Stored, F16};

/// How far ahead of the block being multiplied the 256-bit kernels ask for weight bytes: short
/// rows read side by side outrun the hardware prefetchers. 16-32 KiB read DRAM about 8% faster
/// than 8 KiB on weights far beyond the caches (`examples/int8_stream.rs`, alternating).
const PREFETCH: usize = 32768;

/// The AVX-512 row kernels' distances: weight bytes 16 KiB ahead into L1 and 64 KiB ahead into
/// L2. They outrun the 256-bit kernels, and on a family-25 EPYC one L1 prefetch left a thread
/// streaming 12 GB/s from DRAM: the pair reads a 3.87 B model's layers about 1.3x faster
/// (`examples/int8_layer.rs`, alternating: 23-27 against 18-19 GB/s on 2 threads).
const PREFETCH_L1: usize = 16384;
const PREFETCH_L2: usize = 65536;

/// How far ahead the AVX-512 tiled kernel asks for its codes into L2. Against 64 KiB, its
/// products in a 3.87 B model's decode ran 3% faster at 8 and 16 KiB and 2% at 32 KiB on a
/// family-25 EPYC (variants switched every 37 ms in one process, so the host's drift falls on
/// both). The 256-bit half tiles keep [`PREFETCH_L2`] there (16 KiB ran them 9-10% slower).
/// Both take [`SMALL_AHEAD`] on small tiles ([`tile_ahead`]).
const TILES_AHEAD: usize = 16384;

/// Tiles of at most this many bytes (rows of up to 1,024 8-bit codes or 2,048 4-bit ones)
/// have their codes asked for [`SMALL_AHEAD`] ahead.
pub(super) const SMALL_TILE: usize = 16384;

/// How far ahead the codes of small tiles are asked for. Against 16 KiB, SmolLM2-135M's
/// decode products took 0.94-0.97 as long on the AVX-512 tiles and 0.94-0.98 on the AVX2 half
/// tiles, and 4 KiB ran as 8 (family-25 EPYC, variants in one process:
/// docs/design/cpu-kernels.md).
const SMALL_AHEAD: usize = 8192;

/// How far ahead a tile of `tile_bytes` asks for its codes: [`SMALL_AHEAD`] on small tiles,
/// `large` on the others (the set's own distance).
fn tile_ahead(tile_bytes: usize, large: usize) -> usize {
    match tile_bytes <= SMALL_TILE {
        true => SMALL_AHEAD,
        false => large,
    }
}

/// Asks for a call's first `ahead` bytes of codes (`at` up to `end`) into L2 at once. The
/// tiled kernels ask for each line `ahead` of the one they read, so a chunk's first lines
/// would otherwise wait on the hardware prefetchers.
#[inline]
fn prefetch_start(at: *const u8, end: *const u8, ahead: usize) {
    let len = (end as usize).saturating_sub(at as usize).min(ahead);
    for line in (0..len).step_by(64) {
        // SAFETY: a prefetch reads nothing into the program (SSE is part of x86-64).
        unsafe { _mm_prefetch::<_MM_HINT_T1>(at.wrapping_add(line) as *const i8) };
    }
}

mod amx;
mod half_tiles;
mod panel;
mod tiles;

/// Whether the AVX-512 VNNI kernels take `ops` a panel of weight rows at a time (many rows of
/// x, an affine format): then the row kernels' arrangement of x is not needed.
pub(super) fn by_panels(ops: &Operands) -> bool {
    let rows = match ops.k <= panel::SHORT {
        true => panel::SHORT_PANEL_FROM,
        false => panel::PANEL_FROM,
    };
    ops.m >= rows && panel::takes(ops.format)
}

/// The sets this CPU has, best first.
pub(super) fn available() -> Vec<Isa> {
    static SETS: OnceLock<Vec<Isa>> = OnceLock::new();
    SETS.get_or_init(|| {
        let avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
        let avx512 = avx2
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni");
        // AVX-VNNI's kernels run on AVX-512 VNNI too, with the EVEX `vpdpbusd` ([`vex_vnni`]).
        let vnni = avx2 && (is_x86_feature_detected!("avxvnni") || avx512);
        [
            (avx512, Isa::Avx512Vnni),
            (vnni, Isa::AvxVnni),
            (avx2, Isa::Avx2),
        ]
        .into_iter()
        .filter_map(|(has, set)| has.then_some(set))
        .collect()
    })
    .clone()
}

/// Whether `set` reads tiled weights here: AVX-512 VNNI, and the 256-bit sets with F16C (the
/// half-tile kernel's scale loads).
pub(super) fn reads_tiles(set: Isa) -> bool {
    match set {
        Isa::Avx512Vnni => true,
        Isa::AvxVnni | Isa::Avx2 => is_x86_feature_detected!("f16c"),
        _ => false,
    }
}

/// Whether AVX-VNNI's kernels take its own (VEX) `vpdpbusd`. Where the CPU lacks it but has
/// AVX-512 VNNI, they take the EVEX one on 256 bits (AVX512VL): the same instruction, so the
/// kernels run, and are tested and timed, on AVX-512 VNNI machines too.
pub(super) fn vex_vnni() -> bool {
    is_x86_feature_detected!("avxvnni")
}

/// Whether tiled `ops` take AMX tiles (on AVX-512 VNNI).
pub(super) fn takes_amx(ops: &Operands) -> bool {
    amx::takes(ops)
}

/// Whether `set` reads `ops`' activations with their digits combined (AVX2 on tiles).
pub(super) fn reads_combined(set: Isa, ops: &Operands) -> bool {
    let tiled = ops.format.layout == crate::Layout::Tiles;
    set == Isa::Avx2 && tiled && half_tiles::reads_combined(kind(ops.format), ops.m)
}

/// Whether the CPU has AVX2 and FMA (the quantizer's and every set's floor).
pub(super) fn has_avx2() -> bool {
    available().contains(&Isa::Avx2)
}

/// [`super::quantize_portable`] on a span of 32 or 64 values, bit for bit: the same maximum, the
/// same unit and multiplier, the same digits rounded to nearest even.
///
/// # Safety
/// AVX2; `out` holds `x.len()` digits of each kind and a unit a block.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn quantize(x: &[f32], out: Digits) {
    let sign = _mm256_set1_ps(-0.0);
    let len = BLOCK * out.span;
    let codes = out
        .hi
        .chunks_exact_mut(len)
        .zip(out.lo.chunks_exact_mut(len));
    let units = out.units.chunks_exact_mut(out.span);
    for ((x, (hi, lo)), units) in x.chunks_exact(len).zip(codes).zip(units) {
        let mut m = _mm256_setzero_ps();
        for v in x.chunks_exact(8) {
            // `m` second: a NaN value leaves it, as `f32::max` ignores one.
            m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(v.as_ptr())), m);
        }
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ss(m, _mm_shuffle_ps::<1>(m, m));
        let (u, id) = super::unit_of(_mm_cvtss_f32(m));
        units.fill(u);
        let id = _mm256_set1_ps(id);
        let blocks = x.chunks_exact(BLOCK).zip(hi.chunks_exact_mut(BLOCK));
        for ((x, hi), lo) in blocks.zip(lo.chunks_exact_mut(BLOCK)) {
            let v: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(x.as_ptr().add(8 * i)));
            const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
            let t = v.map(|v| _mm256_mul_ps(v, id));
            let h = t.map(|t| _mm256_round_ps::<NEAREST>(t));
            let scale = _mm256_set1_ps(128.0);
            let l: [__m256; 4] = std::array::from_fn(|i| {
                _mm256_round_ps::<NEAREST>(_mm256_mul_ps(_mm256_sub_ps(t[i], h[i]), scale))
            });
            store_bytes(h.map(|h| _mm256_cvtps_epi32(h)), hi);
            store_bytes(l.map(|l| _mm256_cvtps_epi32(l)), lo);
        }
    }
}

/// 32 i32 values (in range) as bytes, in order.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn store_bytes(q: [__m256i; 4], dst: &mut [i8]) {
    // Packing works within 128-bit halves: the dwords end up in order 0 2 4 6 1 3 5 7.
    let words = [
        _mm256_packs_epi32(q[0], q[1]),
        _mm256_packs_epi32(q[2], q[3]),
    ];
    let bytes = _mm256_packs_epi16(words[0], words[1]);
    let bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(dst.as_mut_ptr() as *mut __m256i, bytes);
}

/// Columns `cols` of `out[m, n]` with `set`.
///
/// # Safety
/// The CPU has `set`; the integer path supports the format; as `int8::columns`.
pub(super) unsafe fn matmul(
    set: Isa,
    ops: &Operands,
    acts: &Activations,
    cols: std::ops::Range<usize>,
    out: Out,
) {
    let walk = (ops, acts, cols, out);
    let kind = kind(ops.format);
    if ops.format.layout == crate::Layout::Tiles {
        if set != Isa::Avx512Vnni {
            return match kind {
                E2M1 => half_tiles::columns::<E2M1>(set, walk),
                4 => half_tiles::columns::<4>(set, walk),
                _ => half_tiles::columns::<8>(set, walk),
            };
        }
        if amx::takes(ops) {
            return on_amx(walk, &mut crate::amx::Hardware::default());
        }
        return match kind {
            E2M1 => tiles::columns::<E2M1>(walk),
            4 => tiles::columns::<4>(walk),
            _ => tiles::columns::<8>(walk),
        };
    }
    match set {
        Isa::Avx512Vnni => by_kind!(kind, avx512::columns(walk)),
        Isa::AvxVnni if vex_vnni() => by_kind!(kind, vnni::columns(walk)),
        Isa::AvxVnni => by_kind!(kind, vl::columns(walk)),
        _ => by_kind!(kind, avx2::columns(walk)),
    }
}

/// Tiled columns on AMX tiles, the tile steps on `unit`.
///
/// # Safety
/// AVX-512 VNNI; `unit` runs here; the format's blocks hold one group each; as [`matmul`].
pub(super) unsafe fn on_amx(walk: Walk, unit: &mut impl crate::amx::TileUnit) {
    match kind(walk.0.format) {
        E2M1 => amx::columns::<E2M1, _>(walk, unit),
        4 => amx::columns::<4, _>(walk, unit),
        _ => amx::columns::<8, _>(walk, unit),
    }
}

type Walk<'a> = (
    &'a Operands<'a>,
    &'a Activations,
    std::ops::Range<usize>,
    Out,
);

/// One block's 32 codes as unsigned bytes, in lane order.
///
/// # Safety
/// AVX2; `w` points to the block's [`block_bytes`] packed bytes.
#[inline(always)]
unsafe fn block_codes<const KIND: u32>(w: *const u8) -> __m256i {
    match KIND {
        // Low nibbles (even codes) then high nibbles (odd codes).
        4 | E2M1 => {
            let v = _mm_loadu_si128(w as *const __m128i);
            let low = _mm_set1_epi8(0x0F);
            let hi = _mm_and_si128(_mm_srli_epi16::<4>(v), low);
            let q = _mm256_set_m128i(hi, _mm_and_si128(v, low));
            match KIND {
                E2M1 => _mm256_shuffle_epi8(e2m1_table(), q),
                _ => q,
            }
        }
        3 | 5 | 6 => stream_codes::<KIND>(w),
        // Quarter v of the register takes the v-th code of each of the 8 bytes.
        2 => {
            let v = _mm256_set1_epi64x((w as *const i64).read_unaligned());
            let v = _mm256_srlv_epi64(v, _mm256_set_epi64x(6, 4, 2, 0));
            _mm256_and_si256(v, _mm256_set1_epi8(3))
        }
        _ => _mm256_loadu_si256(w as *const __m256i),
    }
}

/// `2·v + 12` of each E2M1 code `v` (0..=24), in both 128-bit halves for `vpshufb`.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn e2m1_table() -> __m256i {
    let t: [i8; 16] = std::array::from_fn(|c| E2M1_TWICE[c] + E2M1_OFFSET as i8);
    _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr() as *const __m128i))
}

/// `12 · lane_sum`, what the E2M1 codes' offset added to a block's lanes.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn e2m1_offset(sums: *const __m256i) -> __m256i {
    let s = _mm256_loadu_si256(sums);
    _mm256_add_epi32(_mm256_slli_epi32::<3>(s), _mm256_slli_epi32::<2>(s))
}

/// Where the second 128-bit half of a 3-, 5- or 6-bit block is loaded from (the first from
/// byte 0): 16 bytes that end within the block and hold lanes 4..8's codes.
const fn stream_base(bits: u32) -> usize {
    (4 * bits as usize).saturating_sub(16)
}

/// `vpshufb` indices that gather into i32 lane `l` the 4 bytes from the one holding bit
/// `4·l·bits` (lane `l`'s codes 4l..4l+4, in order) of the half loaded for it; past the
/// half's 16 bytes, zeros (their bits are past the lane's codes).
const fn stream_index(bits: u32) -> [i8; 32] {
    let mut t = [0i8; 32];
    let mut i = 0;
    while i < 32 {
        let (l, j) = (i / 4, i % 4);
        let base = if l < 4 { 0 } else { stream_base(bits) };
        let at = l * 4 * bits as usize / 8 - base + j;
        t[i] = if at < 16 { at as i8 } else { -128 };
        i += 1;
    }
    t
}

/// Right shifts that bring lane `l`'s first code to bit 0 after [`stream_index`].
const fn stream_shift(bits: u32) -> [i32; 8] {
    let mut t = [0i32; 8];
    let mut l = 0;
    while l < 8 {
        t[l] = (l * 4 * bits as usize % 8) as i32;
        l += 1;
    }
    t
}

/// A block of 3-, 5- or 6-bit codes (MLX's little-endian stream) as bytes in order: each i32
/// lane gathers the bytes of its 4 codes, shifts them to bit 0, and spreads them one a byte.
///
/// # Safety
/// AVX2; `w` points to the block's `4 * BITS` packed bytes.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn stream_codes<const BITS: u32>(w: *const u8) -> __m256i {
    const I3: [i8; 32] = stream_index(3);
    const I5: [i8; 32] = stream_index(5);
    const I6: [i8; 32] = stream_index(6);
    const S3: [i32; 8] = stream_shift(3);
    const S5: [i32; 8] = stream_shift(5);
    const S6: [i32; 8] = stream_shift(6);
    let (index, shift) = match BITS {
        3 => (&I3, &S3),
        5 => (&I5, &S5),
        _ => (&I6, &S6),
    };
    let raw = match BITS {
        // 12 bytes: both halves hold them all.
        3 => {
            let v = _mm_loadl_epi64(w as *const __m128i);
            let v = _mm_insert_epi32::<2>(v, (w.add(8) as *const i32).read_unaligned());
            _mm256_broadcastsi128_si256(v)
        }
        _ => _mm256_loadu2_m128i(
            w.add(stream_base(BITS)) as *const __m128i,
            w as *const __m128i,
        ),
    };
    let v = _mm256_shuffle_epi8(raw, _mm256_loadu_si256(index.as_ptr() as *const __m256i));
    let v = _mm256_srlv_epi32(v, _mm256_loadu_si256(shift.as_ptr() as *const __m256i));
    let mask = (1i32 << BITS) - 1;
    let code = |j: i32| {
        let moved = _mm256_sll_epi32(v, _mm_cvtsi32_si128(j * (8 - BITS as i32)));
        _mm256_and_si256(moved, _mm256_set1_epi32(mask << (8 * j)))
    };
    let pair = |a: i32, b: i32| _mm256_or_si256(code(a), code(b));
    _mm256_or_si256(pair(0, 1), pair(2, 3))
}

/// [`super::block_scales4`] in registers. Always inlined (its loads are SSE, every x86-64
/// CPU's, so it needs no features): out of line, it keeps the AVX2 row kernels from folding
/// it into their loop.
#[inline(always)]
unsafe fn block_scales4<P: Stored>(
    scales: &[P],
    shift: u32,
    x: &Row,
    at: (usize, usize),
) -> [__m128; 2] {
    let [first, second] = super::block_scales4(scales, shift, x, at);
    [_mm_loadu_ps(first.as_ptr()), _mm_loadu_ps(second.as_ptr())]
}

/// 4 blocks' lanes `p` (from block `b`, a multiple of 4; a block past the row's end zero
/// lanes, and 0 scales `c`) folded into the four accumulators `acc` (lane `j` accumulator `j`)
/// as [`super::fold`] does: the lanes summed into their [`super::Totals`] with `vphaddd`,
/// spans of two blocks as [`super::span_totals4`] sums them.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn fold4(
    p: [__m256i; 4],
    c: [__m128; 2],
    (two_groups, span): (bool, usize),
    acc: __m128,
) -> __m128 {
    fold_totals(block_totals(p), c, (two_groups, span), acc)
}

/// 4 blocks' 8 lanes each, summed into their totals: first groups', second groups'.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn block_totals(p: [__m256i; 4]) -> [__m128i; 2] {
    let (low, high) = (pair_totals(p[0], p[1]), pair_totals(p[2], p[3]));
    [
        _mm_castps_si128(_mm_shuffle_ps::<0b10_00_10_00>(low, high)),
        _mm_castps_si128(_mm_shuffle_ps::<0b11_01_11_01>(low, high)),
    ]
}

/// Two blocks' totals: `vphaddd` gives `[a01, a23, b01, b23 | a45, a67, b45, b67]`, and its
/// halves added `[a first, a second, b first, b second]`.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn pair_totals(a: __m256i, b: __m256i) -> __m128 {
    let h = _mm256_hadd_epi32(a, b);
    let t = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
    _mm_castsi128_ps(t)
}

/// 4 blocks' totals (first groups', second groups') folded into the accumulators, lane by
/// lane as [`super::fold`] does ([`super::span_totals4`] for spans of two blocks).
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn fold_totals(
    t: [__m128i; 2],
    c: [__m128; 2],
    (two_groups, span): (bool, usize),
    acc: __m128,
) -> __m128 {
    match two_groups {
        true => {
            let acc = _mm_fmadd_ps(c[0], _mm_cvtepi32_ps(t[0]), acc);
            _mm_fmadd_ps(c[1], _mm_cvtepi32_ps(t[1]), acc)
        }
        false => {
            let t = _mm_add_epi32(t[0], t[1]);
            let t = match span {
                1 => t,
                _ => _mm_hadd_epi32(t, t),
            };
            _mm_fmadd_ps(c[0], _mm_cvtepi32_ps(t), acc)
        }
    }
}

/// The accumulators summed as [`super::reduce`] does.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn reduce(acc: __m128) -> f32 {
    let mut a = [0f32; 4];
    _mm_storeu_ps(a.as_mut_ptr(), acc);
    super::reduce(a)
}

/// Blocks `from..blocks` (at most 3) of a row with `lanes(b)` as the set's block kernel,
/// folded into `acc`.
#[inline(always)]
unsafe fn tail<P: Stored>(
    (from, blocks): (usize, usize),
    (scales, shift, x): (&[P], u32, &Row),
    lanes: impl Fn(usize) -> __m256i,
    acc: __m128,
) -> __m128 {
    if from == blocks {
        return acc;
    }
    let zero = _mm256_setzero_si256();
    let p = [
        lanes(from),
        if from + 1 < blocks {
            lanes(from + 1)
        } else {
            zero
        },
        if from + 2 < blocks {
            lanes(from + 2)
        } else {
            zero
        },
        zero,
    ];
    let c = block_scales4(scales, shift, x, (from, blocks));
    fold4(p, c, (P::PER_STEP == 2, x.span), acc)
}

/// The walk over a call's columns and rows with `row` as the set's kernel, generic over the
/// stored dtype of the scales.
macro_rules! columns_with {
    ($features:literal, $row:ident) => {
        #[target_feature(enable = $features)]
        pub(super) unsafe fn columns<const KIND: u32>(walk: super::Walk) {
            let ops = walk.0;
            let shift = super::group_shift(ops.format);
            crate::vector::by_stored!(ops, g => super::each_row(
                walk,
                (g.scales, g.biases),
                // SAFETY: this function's features are the kernel's.
                |w, x, s| unsafe { $row::<KIND, _>(w, x, s, shift) }
            ))
        }
    };
}

/// A 256-bit set's row kernel: `$dot(q, [hi, lo], lane_sums)` gives a block's 8 lanes.
macro_rules! row256 {
    ($features:literal, $dot:ident) => {
        /// One weight row against one int8 row of x, without the bias part.
        ///
        /// # Safety
        /// The set's features; `w` holds the packed codes of `x.blocks` blocks.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn row<const KIND: u32, P: Stored>(
            w: &[u8],
            x: Row,
            scales: &[P],
            shift: u32,
        ) -> f32 {
            let step = block_bytes(KIND);
            let blocks = x.blocks;
            debug_assert!(w.len() >= blocks * step && x.hi.len() >= blocks * BLOCK);
            let lanes = |b: usize| {
                let at = w.as_ptr().add(b * step);
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH) as *const i8);
                let q = block_codes::<KIND>(at);
                let xs = [x.hi, x.lo]
                    .map(|c| _mm256_loadu_si256(c.as_ptr().add(b * BLOCK) as *const __m256i));
                let sums = x.lane_sums.as_ptr().add(b * LANES) as *const __m256i;
                $dot::<KIND>(q, xs, sums)
            };
            let how = (P::PER_STEP == 2, x.span);
            let mut acc = _mm_setzero_ps();
            for b in (0..blocks / 4 * 4).step_by(4) {
                let p = [lanes(b), lanes(b + 1), lanes(b + 2), lanes(b + 3)];
                let c = block_scales4(scales, shift, &x, (b, blocks));
                acc = fold4(p, c, how, acc);
            }
            let acc = tail((blocks / 4 * 4, blocks), (scales, shift, &x), lanes, acc);
            reduce(acc)
        }
    };
}

mod avx2 {
    use super::*;

    row256!("avx2,fma", dot);
    columns_with!("avx2,fma", row);

    /// A block's lanes with `vpmaddubsw` (unsigned times signed bytes, pairs summed into i16)
    /// and `vpmaddwd` by ones (pairs of those into i32), per digit. At 8 bits a pair could
    /// pass i16, so the codes are shifted into the signed range (`q - 128`) and multiplied as
    /// magnitude times sign-moved x, and `128 · Σx` per lane added back (all exact).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn dot<const KIND: u32>(q: __m256i, x: [__m256i; 2], sums: *const __m256i) -> __m256i {
        let ones = _mm256_set1_epi16(1);
        match KIND {
            E2M1 => {
                let p = x.map(|x| _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), ones));
                _mm256_sub_epi32(digits(p), e2m1_offset(sums))
            }
            8 => {
                let c = _mm256_xor_si256(q, _mm256_set1_epi8(-128));
                let magnitude = _mm256_abs_epi8(c);
                let p = x.map(|x| {
                    let p = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(x, c));
                    _mm256_madd_epi16(p, ones)
                });
                let back = _mm256_slli_epi32::<7>(_mm256_loadu_si256(sums));
                _mm256_add_epi32(digits(p), back)
            }
            _ => digits(x.map(|x| _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), ones))),
        }
    }
}

/// A lane's `128 · hi + lo` from its digits' dot products.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn digits(p: [__m256i; 2]) -> __m256i {
    _mm256_add_epi32(_mm256_slli_epi32::<{ DIGIT_SHIFT as i32 }>(p[0]), p[1])
}

/// A 256-bit VNNI set's block step, `dot` for [`row256`], on the `vpdpbusd` form `$dpbusd`.
macro_rules! vnni_dot {
    ($features:literal, $dpbusd:ident) => {
        /// A block's lanes in two `vpdpbusd` (unsigned codes times signed digits, 4 per i32
        /// lane), the high digit's shifted before the low one's are added.
        #[target_feature(enable = $features)]
        #[inline]
        pub(super) unsafe fn dot<const KIND: u32>(
            q: __m256i,
            x: [__m256i; 2],
            sums: *const __m256i,
        ) -> __m256i {
            let hi = $dpbusd(_mm256_setzero_si256(), q, x[0]);
            let p = $dpbusd(_mm256_slli_epi32::<{ DIGIT_SHIFT as i32 }>(hi), q, x[1]);
            match KIND {
                E2M1 => _mm256_sub_epi32(p, e2m1_offset(sums)),
                _ => p,
            }
        }
    };
}

/// AVX-VNNI: the VEX `vpdpbusd`.
mod vnni {
    use super::*;

    row256!("avx2,fma,avxvnni", dot);
    columns_with!("avx2,fma,avxvnni", row);
    vnni_dot!("avx2,fma,avxvnni", _mm256_dpbusd_avx_epi32);
}

/// AVX-VNNI's kernel on the EVEX `vpdpbusd` (AVX512VL), where AVX-512 VNNI is and AVX-VNNI is
/// not; its `dot` is also the AVX-512 set's for a row's last 1..3 blocks.
mod vl {
    use super::*;

    row256!("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni", dot);
    columns_with!("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni", row);
    vnni_dot!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
        _mm256_dpbusd_epi32
    );
}

/// An affine scale dtype whose first few values load as f32 lanes of one register.
pub(super) trait Wide: Stored {
    /// Values `0..` of `at` where `mask` has a bit (at most 4), widened; the rest 0.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL; the masked values are readable.
    unsafe fn load(at: *const Self, mask: u8) -> __m128;

    /// The weight scales of blocks `b..b + 4` (lane `j` block `b + j`), halved for E2M1
    /// codes: their first groups', then (`nvfp4`) their second groups' (else the same again).
    /// Only the first `valid` blocks' scales are read (a row's last, partial step); the other
    /// lanes take 0 or a read scale.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL; the `valid` blocks' scales are in `scales`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn block_scales(scales: &[Self], (b, valid): (usize, usize), shift: u32) -> [__m128; 2] {
        let (g, count) = (b >> shift, ((b + valid - 1) >> shift) - (b >> shift) + 1);
        debug_assert!(scales.len() >= g + count);
        let s = Self::load(scales.as_ptr().add(g), (1u8 << count) - 1);
        let s = _mm_permutevar_ps(
            s,
            _mm_srl_epi32(_mm_setr_epi32(0, 1, 2, 3), shift_by(shift)),
        );
        [s, s]
    }
}

/// A shift count as `vpsrld` takes it.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn shift_by(shift: u32) -> __m128i {
    _mm_cvtsi32_si128(shift as i32)
}

impl Wide for E8m0 {
    /// `2^(byte - 127)`, byte 0 as 2^-127 ([`crate::float::e8m0`]).
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn load(at: *const E8m0, mask: u8) -> __m128 {
        let bytes = _mm_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask as u16, at as *const i8));
        let v = _mm_slli_epi32::<23>(bytes);
        let zero = _mm_cmpeq_epi32_mask(bytes, _mm_setzero_si128());
        _mm_castsi128_ps(_mm_mask_mov_epi32(
            v,
            zero & mask,
            _mm_set1_epi32(0x0040_0000),
        ))
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn block_scales(scales: &[E8m0], (b, valid): (usize, usize), _: u32) -> [__m128; 2] {
        debug_assert!(scales.len() >= b + valid);
        let s = Self::load(scales.as_ptr().add(b), (1u8 << valid) - 1);
        let s = _mm_mul_ps(s, _mm_set1_ps(0.5));
        [s, s]
    }
}

impl Wide for E4m3 {
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn load(at: *const E4m3, mask: u8) -> __m128 {
        let v: [f32; 4] = std::array::from_fn(|i| match mask >> i & 1 {
            1 => (*at.add(i)).widen(),
            _ => 0.0,
        });
        _mm_loadu_ps(v.as_ptr())
    }

    /// Two 16-code groups a block: block `b + j`'s are groups `2j` and `2j + 1` of the 8.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn block_scales(scales: &[E4m3], (b, valid): (usize, usize), _: u32) -> [__m128; 2] {
        debug_assert!(scales.len() >= 2 * (b + valid));
        let v = |half: usize| -> [f32; 4] {
            std::array::from_fn(|j| match j < valid {
                true => scales[2 * (b + j) + half].widen() * 0.5,
                false => 0.0,
            })
        };
        [v(0), v(1)].map(|v| _mm_loadu_ps(v.as_ptr()))
    }
}

impl Wide for f32 {
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn load(at: *const f32, mask: u8) -> __m128 {
        _mm_maskz_loadu_ps(mask, at)
    }
}

impl Wide for Bf16 {
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn load(at: *const Bf16, mask: u8) -> __m128 {
        let h = _mm_maskz_loadu_epi16(mask, at as *const i16);
        _mm_castsi128_ps(_mm_slli_epi32::<16>(_mm_cvtepu16_epi32(h)))
    }
}

impl Wide for F16 {
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,f16c")]
    #[inline]
    unsafe fn load(at: *const F16, mask: u8) -> __m128 {
        _mm_cvtph_ps(_mm_maskz_loadu_epi16(mask, at as *const i16))
    }
}

/// [`super::bias_term`] on one 256-bit register: its eight chains are the lanes (a last
/// partial step masked, which adds zeros to them), summed as it sums them: the same bits.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[inline]
unsafe fn bias_term<P: Wide>(biases: &[P], sums: &[f32]) -> f32 {
    let n = biases.len().min(sums.len());
    let mut t = _mm256_setzero_ps();
    for g in (0..n).step_by(8) {
        let mask = match n - g {
            8.. => 0xFF,
            left => (1u8 << left) - 1,
        };
        let at = biases.as_ptr().wrapping_add(g);
        let b = _mm256_set_m128(
            P::load(at.wrapping_add(4), mask >> 4),
            P::load(at, mask & 0xF),
        );
        let x = _mm256_maskz_loadu_ps(mask, sums.as_ptr().wrapping_add(g));
        t = _mm256_fmadd_ps(b, x, t);
    }
    sum_lanes(t)
}

mod avx512 {
    use super::*;

    /// An index table as a register.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn index(v: &[i32; 16]) -> __m512i {
        _mm512_loadu_si512(v.as_ptr() as *const __m512i)
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn columns<const KIND: u32>(walk: super::Walk) {
        let ops = walk.0;
        if super::by_panels(ops) {
            return super::panel::columns::<KIND>(walk);
        }
        let shift = super::group_shift(ops.format);
        crate::vector::by_stored!(ops, g => each_group::<KIND, _>(
            walk,
            (g.scales, g.biases),
            shift
        ))
    }

    /// Rows of x a weight row is multiplied with at once: its codes are unpacked and its
    /// scales spread once for them. Four rows' accumulators and digits fit the registers.
    const GROUP: usize = 4;

    /// Weight rows taken by every group of x rows before the next ones: they stay in L1.
    const BAND: usize = 16;

    /// Asks for the weight bytes [`PREFETCH_L1`] and [`PREFETCH_L2`] past `at`, a line of
    /// each for every 64 bytes a step of `bytes` reads.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn prefetch_ahead(at: *const u8, bytes: usize) {
        for line in (0..bytes).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH_L1 + line) as *const i8);
            _mm_prefetch::<_MM_HINT_T1>(at.wrapping_add(PREFETCH_L2 + line) as *const i8);
        }
    }

    /// A group of x rows: the first one's index, the rows (the last repeated to fill the
    /// array) and the rows with their groups' sums.
    type Group<'a> = (usize, [Row<'a>; GROUP], &'a [(Row<'a>, &'a [f32])]);

    /// Each weight row of `cols` against the rows of x, [`GROUP`] at a time.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn each_group<const KIND: u32, P: Wide>(
        (ops, acts, cols, out): super::Walk,
        params: (&[P], &[P]),
        shift: u32,
    ) {
        let x_rows = rows_of(ops, acts);
        let groups: Vec<Group> = x_rows
            .chunks(GROUP)
            .enumerate()
            .map(|(g, c)| {
                (
                    g * GROUP,
                    std::array::from_fn(|r| c[r.min(c.len() - 1)].0),
                    c,
                )
            })
            .collect();
        for start in cols.clone().step_by(BAND) {
            let band = (ops, start..(start + BAND).min(cols.end), out);
            for group in &groups {
                match group.2.len() {
                    4 => band_rows::<KIND, P, 4>(band.clone(), group, params, shift),
                    3 => band_rows::<KIND, P, 3>(band.clone(), group, params, shift),
                    2 => band_rows::<KIND, P, 2>(band.clone(), group, params, shift),
                    _ => band_rows::<KIND, P, 1>(band.clone(), group, params, shift),
                }
            }
        }
    }

    /// Weight rows `cols` against the first `R` rows of `group`, four weight rows at a time
    /// (the last four padded with copies, never written).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn band_rows<const KIND: u32, P: Wide, const R: usize>(
        (ops, cols, out): (&Operands, std::ops::Range<usize>, Out),
        (first, xs, rows_sums): &Group,
        (scales, biases): (&[P], &[P]),
        shift: u32,
    ) {
        let groups = ops.k / ops.format.group;
        let ahead = crate::rows_ahead(ops.format.row_bytes(ops.k));
        for n0 in cols.clone().step_by(WEIGHT_ROWS) {
            let ns: [usize; WEIGHT_ROWS] = std::array::from_fn(|i| (n0 + i).min(cols.end - 1));
            for n in n0..(n0 + WEIGHT_ROWS).min(cols.end) {
                crate::prefetch_params([scales, biases], n + ahead, groups);
            }
            let params = ns.map(|n| &scales[n * groups..(n + 1) * groups]);
            let ws = ns.map(|n| ops.w_row(n));
            let v = match xs[0].span {
                1 => weight_rows::<KIND, P, R, 1>(ws, xs, params, shift),
                _ => weight_rows::<KIND, P, R, 2>(ws, xs, params, shift),
            };
            for (i, &n) in ns.iter().enumerate().take(cols.end - n0) {
                for (r, &(_, sums)) in rows_sums.iter().enumerate().take(R) {
                    let v = match biases.get(n * groups..(n + 1) * groups) {
                        Some(b) => v[r][i] + bias_term(b, sums),
                        None => v[r][i],
                    };
                    // SAFETY: the caller was given an output of `m * n` values.
                    out.write(first + r, n, ops.n, v);
                }
            }
        }
    }

    /// Weight rows multiplied at once by the row kernels: a step's lanes of four weight rows
    /// go through one tree into their 16 blocks' totals.
    const WEIGHT_ROWS: usize = 4;

    /// Four weight rows (`ws`, their scales `params`) against the first `R` int8 rows of `xs`,
    /// without the bias part: steps of 4 blocks, each weight row's lanes of a step added in
    /// pairs, the four weight rows' through one tree into their blocks' totals, folded into a
    /// register a row of x whose lanes `4i..4i + 4` are weight row `i`'s four accumulators; a
    /// last 1..3 blocks in a partial step (4 bits) or on 256 bits. Codes are unpacked and
    /// scales read once for all `R`.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VNNI; each `w` holds the packed codes of `x.blocks` blocks; each
    /// `x` was arranged ([`Activations::arrange_wide`]).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    #[allow(clippy::needless_range_loop)] // indices keep the accumulators in registers
    unsafe fn weight_rows<const KIND: u32, P: Wide, const R: usize, const S: usize>(
        ws: [&[u8]; WEIGHT_ROWS],
        xs: &[Row; GROUP],
        params: [&[P]; WEIGHT_ROWS],
        shift: u32,
    ) -> [[f32; WEIGHT_ROWS]; R] {
        let blocks = xs[0].blocks;
        debug_assert!(ws.iter().all(|w| w.len() >= blocks * block_bytes(KIND)));
        debug_assert!(xs[R - 1].hi.len() >= blocks * BLOCK);
        let ctx = (ws.map(|w| w.as_ptr()), params, shift);
        let mut acc = [_mm512_setzero_ps(); R];
        for b in (0..blocks / 4 * 4).step_by(4) {
            acc = step::<KIND, P, R, S>(ctx, xs, (b, 4), acc);
        }
        if nibbles(KIND) && !blocks.is_multiple_of(4) {
            acc = step::<KIND, P, R, S>(ctx, xs, (blocks / 4 * 4, blocks % 4), acc);
        }
        let mut out = [[0f32; WEIGHT_ROWS]; R];
        for r in 0..R {
            if nibbles(KIND) {
                out[r] = reduce_four(acc[r]);
                continue;
            }
            for i in 0..WEIGHT_ROWS {
                let chains = weight_chains(acc[r], i);
                out[r][i] = finish::<KIND, P>(ws[i], &xs[r], params[i], shift, chains);
            }
        }
        out
    }

    /// Each weight row's four accumulators (lanes `4i..4i + 4`) summed as
    /// [`super::super::reduce`] does, the four rows side by side: `(a0 + a1) + (a2 + a3)`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn reduce_four(acc: __m512) -> [f32; WEIGHT_ROWS] {
        let pairs = _mm512_add_ps(acc, _mm512_permute_ps::<0b10_11_00_01>(acc));
        let sums = _mm512_add_ps(pairs, _mm512_permute_ps::<0b01_00_11_10>(pairs));
        let mut v = [0f32; 16];
        _mm512_storeu_ps(v.as_mut_ptr(), sums);
        [v[0], v[4], v[8], v[12]]
    }

    /// Whether codes of `kind` take 4-bit steps of 4 blocks ([`nibble_codes`]).
    const fn nibbles(kind: u32) -> bool {
        kind == 4 || kind == E2M1
    }

    /// The first `valid` of the 4 blocks from block `b` of four weight rows into each row of
    /// x's accumulators. A row's last, partial step (4 bits) reads only its blocks: the other
    /// lanes are zero codes, scales and (padded) digits, which add an exact 0 to accumulators
    /// that are never -0.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    #[allow(clippy::needless_range_loop)] // indices keep the values in registers
    unsafe fn step<const KIND: u32, P: Wide, const R: usize, const S: usize>(
        (ws, params, shift): ([*const u8; WEIGHT_ROWS], [&[P]; WEIGHT_ROWS], u32),
        xs: &[Row; GROUP],
        (b, valid): (usize, usize),
        mut acc: [__m512; R],
    ) -> [__m512; R] {
        let step = block_bytes(KIND);
        let mut q = [[_mm512_setzero_si512(); 2]; WEIGHT_ROWS];
        let mut s = [[_mm_setzero_ps(); 2]; WEIGHT_ROWS];
        for i in 0..WEIGHT_ROWS {
            let at = ws[i].add(b * step);
            prefetch_ahead(at, 4 * step);
            q[i] = match nibbles(KIND) {
                true => nibble_codes::<KIND>(at, valid),
                false => [pair_codes::<KIND>(at), pair_codes::<KIND>(at.add(2 * step))],
            };
            s[i] = P::block_scales(params[i], (b, valid), shift);
        }
        let spread = |h: usize| {
            let v = _mm512_castps128_ps512(s[0][h]);
            let v = _mm512_insertf32x4::<1>(v, s[1][h]);
            let v = _mm512_insertf32x4::<2>(v, s[2][h]);
            _mm512_insertf32x4::<3>(v, s[3][h])
        };
        let (first, second) = (spread(0), spread(1));
        for r in 0..R {
            let mut u = [_mm512_setzero_si512(); WEIGHT_ROWS];
            for i in 0..WEIGHT_ROWS {
                u[i] = match nibbles(KIND) {
                    true => nibble_pairs::<KIND>(q[i], &xs[r], (b, valid)),
                    false => quad_pairs(q[i], &xs[r], b),
                };
            }
            let t = sweep_totals(u);
            let (c, t) = match S {
                1 => (block_units(&xs[r], (b, valid)), t),
                _ => span_units(&xs[r], (b, valid), t),
            };
            acc[r] = fold_step::<P, S>((first, second), c, t, acc[r]);
        }
        acc
    }

    /// A step's totals `t` (first groups', second groups') with the weight scales `first`
    /// and `second` and the units `c` (its lanes kept) into a row's accumulators `acc`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn fold_step<P: Wide, const S: usize>(
        (first, second): (__m512, __m512),
        c: (__m512, u16),
        t: [__m512i; 2],
        acc: __m512,
    ) -> __m512 {
        match P::PER_STEP {
            2 => {
                let first = _mm512_maskz_mul_ps(c.1, first, c.0);
                let a = _mm512_fmadd_ps(first, _mm512_cvtepi32_ps(t[0]), acc);
                let second = _mm512_maskz_mul_ps(c.1, second, c.0);
                _mm512_fmadd_ps(second, _mm512_cvtepi32_ps(t[1]), a)
            }
            _ => {
                let total = _mm512_cvtepi32_ps(_mm512_add_epi32(t[0], t[1]));
                let first = match S {
                    1 => first,
                    // Lane j the scale of block b + 2 (j % 2), its span's first.
                    _ => _mm512_permute_ps::<0b10_00_10_00>(first),
                };
                _mm512_fmadd_ps(_mm512_maskz_mul_ps(c.1, first, c.0), total, acc)
            }
        }
    }

    /// The units of blocks `b..b + valid` of `x` (a span a block), lane `4i + j` block
    /// `b + j`'s, with the lanes whose products are kept (every lane: the others' totals are
    /// 0).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn block_units(x: &Row, (b, valid): (usize, usize)) -> (__m512, u16) {
        let units = x.units.as_ptr().add(b);
        let units = match valid {
            4 => _mm_loadu_ps(units),
            n => _mm_maskz_loadu_ps((1u8 << n) - 1, units),
        };
        (_mm512_broadcast_f32x4(units), 0xFFFF)
    }

    /// Spans of two blocks: the 4 blocks from `b` are spans `b / 2` and `b / 2 + 1`
    /// (`valid / 2` of them), which fold into accumulators `b / 2 % 4` and the next
    /// ([`super::super::block_scales4`]). Their units and the lanes kept (those two of each
    /// weight row's four), and the totals `t` as span totals, `[t0 + t1, t2 + t3]` twice.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn span_units(
        x: &Row,
        (b, valid): (usize, usize),
        t: [__m512i; 2],
    ) -> ((__m512, u16), [__m512i; 2]) {
        let u1 = if valid > 2 { x.units[b + 2] } else { 0.0 };
        let units = _mm512_broadcast_f32x4(_mm_setr_ps(x.units[b], u1, x.units[b], u1));
        let ours: u16 = if valid > 2 { 0b11 } else { 0b01 };
        let ours = if b / 4 % 2 == 0 { ours } else { ours << 2 };
        let mask = ours * 0x1111;
        let spans = t.map(|t| {
            let pairs = _mm512_add_epi32(t, _mm512_shuffle_epi32::<0b10_11_00_01>(t));
            _mm512_shuffle_epi32::<0b10_00_10_00>(pairs)
        });
        ((units, mask), spans)
    }

    /// Weight row `i`'s four accumulators: lanes `4i..4i + 4`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn weight_chains(acc: __m512, i: usize) -> __m128 {
        match i {
            0 => _mm512_extractf32x4_ps::<0>(acc),
            1 => _mm512_extractf32x4_ps::<1>(acc),
            2 => _mm512_extractf32x4_ps::<2>(acc),
            _ => _mm512_extractf32x4_ps::<3>(acc),
        }
    }

    /// Four registers' lanes added in pairs (block `j` in lanes `4j..4j + 4` of each) into
    /// their 16 blocks' totals, register by register: adjacent lanes added twice, two
    /// registers at a time, give the first totals and the second totals in that order.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn sweep_totals(u: [__m512i; 4]) -> [__m512i; 2] {
        const EVEN: [i32; 16] = [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30];
        const ODD: [i32; 16] = [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31];
        let (even, odd) = (index(&EVEN), index(&ODD));
        let front = _mm512_add_epi32(
            _mm512_permutex2var_epi32(u[0], even, u[1]),
            _mm512_permutex2var_epi32(u[0], odd, u[1]),
        );
        let back = _mm512_add_epi32(
            _mm512_permutex2var_epi32(u[2], even, u[3]),
            _mm512_permutex2var_epi32(u[2], odd, u[3]),
        );
        [
            _mm512_permutex2var_epi32(front, even, back),
            _mm512_permutex2var_epi32(front, odd, back),
        ]
    }

    /// Two blocks' codes (`w` at block `b`), `b` in the low half and `b + 1` in the high one.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn pair_codes<const BITS: u32>(w: *const u8) -> __m512i {
        match BITS {
            2 => {
                let v = _mm512_castsi128_si512(_mm_loadu_si128(w as *const __m128i));
                let v = _mm512_permutexvar_epi64(_mm512_set_epi64(1, 1, 1, 1, 0, 0, 0, 0), v);
                let v = _mm512_srlv_epi64(v, _mm512_set_epi64(6, 4, 2, 0, 6, 4, 2, 0));
                _mm512_and_si512(v, _mm512_set1_epi8(3))
            }
            // Each block's 256-bit unpacking, side by side.
            3 | 5 | 6 => {
                let first = _mm512_castsi256_si512(stream_codes::<BITS>(w));
                _mm512_inserti64x4::<1>(first, stream_codes::<BITS>(w.add(block_bytes(BITS))))
            }
            _ => _mm512_loadu_si512(w as *const __m512i),
        }
    }

    /// A row's last 1..3 blocks on 256 bits (but 4-bit rows, which took them in a partial
    /// step), then its accumulators summed.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn finish<const KIND: u32, P: Wide>(
        w: &[u8],
        x: &Row,
        scales: &[P],
        shift: u32,
        acc: __m128,
    ) -> f32 {
        let step = block_bytes(KIND);
        let lanes = |b: usize| {
            let q = block_codes::<KIND>(w.as_ptr().add(b * step));
            let xs = [x.hi, x.lo]
                .map(|c| _mm256_loadu_si256(c.as_ptr().add(b * BLOCK) as *const __m256i));
            let sums = x.lane_sums.as_ptr().add(b * LANES) as *const __m256i;
            super::vl::dot::<KIND>(q, xs, sums)
        };
        let blocks = x.blocks;
        let from = match nibbles(KIND) {
            true => blocks,
            false => blocks / 4 * 4,
        };
        reduce(tail((from, blocks), (scales, shift, x), lanes, acc))
    }

    /// 4 blocks from block `b` (two [`pair_codes`] `q`) against row `x`, their lanes added in
    /// pairs: lane `4j + i` is block `j`'s lanes `i` and `i + 4`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn quad_pairs(q: [__m512i; 2], x: &Row, b: usize) -> __m512i {
        let [p0, p1] = dots(q, (x.hi, x.lo), b);
        // Each block's lanes 4..8 (its high 128 bits) onto its lanes 0..4, then the low 128
        // bits of each block side by side.
        let p0 = _mm512_add_epi32(p0, _mm512_shuffle_i32x4::<0b10_11_00_01>(p0, p0));
        let p1 = _mm512_add_epi32(p1, _mm512_shuffle_i32x4::<0b10_11_00_01>(p1, p1));
        _mm512_shuffle_i32x4::<0b10_00_10_00>(p0, p1)
    }

    /// 4 blocks of 4-bit codes (affine, or E2M1 as `2·v + 12`) from `at`: a 64-byte load
    /// split into low nibbles (the blocks' first halves) and high ones (their second halves),
    /// as the activations were arranged. Only the first `valid` blocks are read; the others'
    /// codes are 0.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn nibble_codes<const KIND: u32>(at: *const u8, valid: usize) -> [__m512i; 2] {
        let v = match valid {
            4 => _mm512_loadu_si512(at as *const __m512i),
            n => _mm512_maskz_loadu_epi8((1u64 << (n * block_bytes(KIND))) - 1, at as *const i8),
        };
        nibble_split::<KIND>(v)
    }

    /// 64 bytes of 4 blocks' 4-bit codes split into low and high nibbles, as [`nibble_codes`].
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    pub(super) unsafe fn nibble_split<const KIND: u32>(v: __m512i) -> [__m512i; 2] {
        let low = _mm512_set1_epi8(0x0F);
        let q = [
            _mm512_and_si512(v, low),
            _mm512_and_si512(_mm512_srli_epi16::<4>(v), low),
        ];
        if KIND != E2M1 {
            return q;
        }
        let table = _mm512_broadcast_i32x4(_mm256_castsi256_si128(e2m1_table()));
        q.map(|q| _mm512_shuffle_epi8(table, q))
    }

    /// 4 blocks from block `b` ([`nibble_codes`] `q`) against row `x`, their lanes added in
    /// pairs as [`quad_pairs`] gives them: i32 lane `L` of half `h` is block `L / 4`'s int8
    /// lane `4h + L % 4`, so the halves added hold each block's lanes `i + (i + 4)`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn nibble_pairs<const KIND: u32>(
        q: [__m512i; 2],
        x: &Row,
        (b, valid): (usize, usize),
    ) -> __m512i {
        let [p0, p1] = dots(q, (x.quads_hi, x.quads_lo), b);
        let u = _mm512_add_epi32(p0, p1);
        match KIND {
            E2M1 => {
                let offset = quad_offset(x, (b, valid), 0);
                let offset = _mm512_add_epi32(offset, quad_offset(x, (b, valid), 1));
                _mm512_sub_epi32(u, offset)
            }
            _ => u,
        }
    }

    /// `12 · lane_sum` of the lanes half `h` of a 4-block nibble step holds: i32 lane `L` is
    /// block `b + L / 4`'s int8 lane `4h + L % 4` (0 past the first `valid` blocks).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn quad_offset(x: &Row, (b, valid): (usize, usize), h: usize) -> __m512i {
        const INDEX: [[i32; 16]; 2] = [quad_lanes(0), quad_lanes(1)];
        let at = x.lane_sums.as_ptr().add(b * LANES);
        let sums = valid * LANES;
        let mask = |from: usize| ((1u32 << sums.saturating_sub(from).min(16)) - 1) as u16;
        let (lo, hi) = (
            _mm512_maskz_loadu_epi32(mask(0), at),
            _mm512_maskz_loadu_epi32(mask(16), at.add(16)),
        );
        let s = _mm512_permutex2var_epi32(lo, index(&INDEX[h]), hi);
        _mm512_add_epi32(_mm512_slli_epi32::<3>(s), _mm512_slli_epi32::<2>(s))
    }

    /// Where in 4 blocks' lane sums (`[block][8]`) i32 lane `L` of half `h` finds its own.
    const fn quad_lanes(h: usize) -> [i32; 16] {
        let mut t = [0i32; 16];
        let mut l = 0;
        while l < 16 {
            t[l] = ((l / 4) * LANES + 4 * h + l % 4) as i32;
            l += 1;
        }
        t
    }

    /// A 4-block step's two code registers `q` against the next 128 digits of each kind from
    /// block `b` of `(hi, lo)`: [`dot512`] on each 64.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn dots(q: [__m512i; 2], (hi, lo): (&[i8], &[i8]), b: usize) -> [__m512i; 2] {
        let hi = hi.as_ptr().add(b * BLOCK) as *const __m512i;
        let lo = lo.as_ptr().add(b * BLOCK) as *const __m512i;
        [
            dot512(q[0], [_mm512_loadu_si512(hi), _mm512_loadu_si512(lo)]),
            dot512(
                q[1],
                [_mm512_loadu_si512(hi.add(1)), _mm512_loadu_si512(lo.add(1))],
            ),
        ]
    }

    /// Two blocks' lanes: the high digits' `vpdpbusd`, shifted, then the low digits' added.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn dot512(q: __m512i, x: [__m512i; 2]) -> __m512i {
        let hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, x[0]);
        _mm512_dpbusd_epi32(_mm512_slli_epi32::<{ DIGIT_SHIFT }>(hi), q, x[1])
    }
}
