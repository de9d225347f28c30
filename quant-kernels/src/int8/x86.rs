//! x86-64 integer kernels: AVX2 (`vpmaddubsw` + `vpmaddwd`), AVX-VNNI (`vpdpbusd` on 256
//! bits) and AVX-512 VNNI (`vpdpbusd` on 512 bits, two blocks at once; a row's last 1..3
//! blocks on 256 bits with AVX512VL). Codes are unpacked in registers into unsigned
//! bytes in the lane order of [`crate::layout`], which is the order the activations' codes are
//! in: E2M1 codes as `2·v + 12` (0..=24), the offset taken back as `12 · lane_sum`.

use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::{block_bytes, by_kind, each_row, group_shift, kind, lane_scale, E2M1};
use super::{for_columns, rows_of};
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

mod panel;

/// Whether the AVX-512 VNNI kernels take `ops` a panel of weight rows at a time (many rows of
/// x, an affine format): then the row kernels' arrangement of x is not needed.
pub(super) fn by_panels(ops: &Operands) -> bool {
    ops.m >= panel::PANEL_FROM && panel::takes(ops.format)
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
        let vnni = avx2 && is_x86_feature_detected!("avxvnni");
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

/// Whether the CPU has AVX2 and FMA (the quantizer's and every set's floor).
pub(super) fn has_avx2() -> bool {
    available().contains(&Isa::Avx2)
}

/// [`super::quantize_portable`] on 32 values a block, bit for bit: the same maximum, the
/// same unit and multiplier, the same digits rounded to nearest even.
///
/// # Safety
/// AVX2; `out` holds `x.len()` digits of each kind and a unit a block.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn quantize(x: &[f32], out: Digits) {
    let sign = _mm256_set1_ps(-0.0);
    let codes = out
        .hi
        .chunks_exact_mut(BLOCK)
        .zip(out.lo.chunks_exact_mut(BLOCK));
    for ((x, (hi, lo)), unit) in x.chunks_exact(BLOCK).zip(codes).zip(out.units.iter_mut()) {
        let v: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(x.as_ptr().add(8 * i)));
        let a = v.map(|v| _mm256_andnot_ps(sign, v));
        let m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ss(m, _mm_shuffle_ps::<1>(m, m));
        let (u, id) = super::block_scale_of(_mm_cvtss_f32(m));
        *unit = u;
        let id = _mm256_set1_ps(id);
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
    match set {
        Isa::Avx512Vnni => by_kind!(kind, avx512::columns(walk)),
        Isa::AvxVnni => by_kind!(kind, vnni::columns(walk)),
        _ => by_kind!(kind, avx2::columns(walk)),
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

/// Block `b`'s combined scales, lane by lane as [`lane_scale`] gives them: one for the block,
/// or (`nvfp4`) its first group's in lanes 0, 1, 4, 5 and its second's in 2, 3, 6, 7.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn lane_scales<P: Stored>(scales: &[P], shift: u32, x: &Row, b: usize) -> __m256 {
    let first = _mm256_set1_ps(lane_scale(scales, shift, x, b, 0));
    match P::PER_STEP {
        2 => _mm256_blend_ps::<0b1100_1100>(
            first,
            _mm256_set1_ps(lane_scale(scales, shift, x, b, 2)),
        ),
        _ => first,
    }
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
        /// The set's features; `w` holds the packed codes of `x.scales.len()` blocks.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn row<const KIND: u32, P: Stored>(
            w: &[u8],
            x: Row,
            scales: &[P],
            shift: u32,
        ) -> f32 {
            let step = block_bytes(KIND);
            let blocks = x.scales.len();
            debug_assert!(w.len() >= blocks * step && x.hi.len() >= blocks * BLOCK);
            // Block `b` into accumulator `b % 4`, indices fixed so that they stay in registers.
            let block = |b: usize, acc: __m256| {
                let at = w.as_ptr().add(b * step);
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH) as *const i8);
                let q = block_codes::<KIND>(at);
                let xs = [x.hi, x.lo]
                    .map(|c| _mm256_loadu_si256(c.as_ptr().add(b * BLOCK) as *const __m256i));
                let sums = x.lane_sums.as_ptr().add(b * LANES) as *const __m256i;
                let p = $dot::<KIND>(q, xs, sums);
                let c = lane_scales(scales, shift, &x, b);
                _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(p), acc)
            };
            let mut acc = [_mm256_setzero_ps(); 4];
            for b in (0..blocks / 4 * 4).step_by(4) {
                acc = [
                    block(b, acc[0]),
                    block(b + 1, acc[1]),
                    block(b + 2, acc[2]),
                    block(b + 3, acc[3]),
                ];
            }
            tail(blocks, &mut acc, block);
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

mod vnni {
    use super::*;

    row256!("avx2,fma,avxvnni", dot);
    columns_with!("avx2,fma,avxvnni", row);

    /// A block's lanes in two `vpdpbusd` (unsigned codes times signed digits, 4 per i32
    /// lane), the high digit's shifted before the low one's are added.
    #[target_feature(enable = "avx2,fma,avxvnni")]
    #[inline]
    unsafe fn dot<const KIND: u32>(q: __m256i, x: [__m256i; 2], sums: *const __m256i) -> __m256i {
        let hi = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), q, x[0]);
        let p = _mm256_dpbusd_avx_epi32(_mm256_slli_epi32::<{ DIGIT_SHIFT as i32 }>(hi), q, x[1]);
        match KIND {
            E2M1 => _mm256_sub_epi32(p, e2m1_offset(sums)),
            _ => p,
        }
    }
}

/// The AVX-512 set's last 1..3 blocks of a row: AVX-VNNI's `dot` on the EVEX `vpdpbusd`
/// (AVX512VL).
mod vl {
    use super::*;

    /// As AVX-VNNI's `dot`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    pub(super) unsafe fn dot<const KIND: u32>(
        q: __m256i,
        x: [__m256i; 2],
        sums: *const __m256i,
    ) -> __m256i {
        let hi = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, x[0]);
        let p = _mm256_dpbusd_epi32(_mm256_slli_epi32::<{ DIGIT_SHIFT as i32 }>(hi), q, x[1]);
        match KIND {
            E2M1 => _mm256_sub_epi32(p, e2m1_offset(sums)),
            _ => p,
        }
    }
}

/// An affine scale dtype whose first few values load as f32 lanes of one register.
pub(super) trait Wide: Stored {
    /// Values `0..` of `at` where `mask` has a bit (at most 4), widened; the rest 0.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL; the masked values are readable.
    unsafe fn load(at: *const Self, mask: u8) -> __m128;

    /// The weight scales of the 16 lanes of a 4-bit step of 4 blocks from block `b` (lane `L`
    /// in block `b + L / 4`; `quad` says which of the loaded scales), halved for E2M1 codes.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL; the 4 blocks' scales are in `scales`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn quad_lanes(scales: &[Self], b: usize, shift: u32, quad: __m512i) -> __m512 {
        let (g, count) = (b >> shift, (4usize >> shift).max(1));
        debug_assert!(scales.len() >= g + count);
        let s = Self::load(scales.as_ptr().add(g), (1u8 << count) - 1);
        _mm512_permutexvar_ps(quad, _mm512_castps128_ps512(s))
    }
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
    unsafe fn quad_lanes(scales: &[E8m0], b: usize, _: u32, quad: __m512i) -> __m512 {
        debug_assert!(scales.len() >= b + 4);
        let s = _mm512_castps128_ps512(Self::load(scales.as_ptr().add(b), 0xF));
        _mm512_mul_ps(_mm512_permutexvar_ps(quad, s), _mm512_set1_ps(0.5))
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

    /// Two 16-code groups a block: lane `L` takes group `2 · (L / 4) + (L % 4) / 2` of the
    /// 8 (the lanes of [`super::lane_scale`]).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn quad_lanes(scales: &[E4m3], b: usize, _: u32, _: __m512i) -> __m512 {
        debug_assert!(scales.len() >= 2 * b + 8);
        let v: [f32; 8] = std::array::from_fn(|i| scales[2 * b + i].widen() * 0.5);
        let index = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        _mm512_permutexvar_ps(index, _mm512_castps256_ps512(_mm256_loadu_ps(v.as_ptr())))
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

/// The last `blocks % 4` blocks into accumulators 0, 1 and 2 (whole quads came before).
#[inline(always)]
fn tail(blocks: usize, acc: &mut [__m256; 4], block: impl Fn(usize, __m256) -> __m256) {
    let start = blocks / 4 * 4;
    if start < blocks {
        acc[0] = block(start, acc[0]);
    }
    if start + 1 < blocks {
        acc[1] = block(start + 1, acc[1]);
    }
    if start + 2 < blocks {
        acc[2] = block(start + 2, acc[2]);
    }
}

/// The four accumulators summed as [`super::reduce`] does.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn reduce(acc: [__m256; 4]) -> f32 {
    sum_lanes(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    ))
}

mod avx512 {
    use super::*;

    /// Which weight scale (of the up to 4 loaded) each of the 16 lanes takes, per group
    /// size (`shift`): `quad` the 4-bit layout (lane `L` in block `L / 4`), `pairs` the
    /// others' (blocks `L / 8` and `2 + L / 8`). Plain arrays, loaded where they are used: a
    /// register-typed local here was stored to the stack with an aligned move the frame was not
    /// aligned for (a segfault in release builds).
    struct Spread {
        quad: [i32; 16],
        pairs: [[i32; 16]; 2],
    }

    fn spread(shift: u32) -> Spread {
        let index = |block: &dyn Fn(i32) -> i32| std::array::from_fn(|l| block(l as i32) >> shift);
        Spread {
            quad: index(&|l| l / 4),
            pairs: [index(&|l| l / 8), index(&|l| 2 + l / 8)],
        }
    }

    /// A [`Spread`] index as a register.
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
        let spread = &spread(shift);
        crate::vector::by_stored!(ops, g => each_group::<KIND, _>(
            walk,
            (g.scales, g.biases),
            (shift, spread)
        ))
    }

    /// Rows of x a weight row is multiplied with at once: its codes are unpacked and its
    /// scales spread once for them. Four rows' accumulators and digits fit the registers.
    const GROUP: usize = 4;

    /// Weight rows taken by every group of x rows before the next ones: they stay in L1.
    const TILE: usize = 16;

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
        ctx: (u32, &Spread),
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
        for start in cols.clone().step_by(TILE) {
            let tile = (ops, start..(start + TILE).min(cols.end), out);
            for group in &groups {
                match group.2.len() {
                    4 => tile_rows::<KIND, P, 4>(tile.clone(), group, params, ctx),
                    3 => tile_rows::<KIND, P, 3>(tile.clone(), group, params, ctx),
                    2 => tile_rows::<KIND, P, 2>(tile.clone(), group, params, ctx),
                    _ => tile_rows::<KIND, P, 1>(tile.clone(), group, params, ctx),
                }
            }
        }
    }

    /// Weight rows `cols` against the first `R` rows of `group`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn tile_rows<const KIND: u32, P: Wide, const R: usize>(
        (ops, cols, out): (&Operands, std::ops::Range<usize>, Out),
        (first, xs, rows_sums): &Group,
        params: (&[P], &[P]),
        ctx: (u32, &Spread),
    ) {
        for_columns(ops, cols, params, |n, w, s, b| {
            // SAFETY: this function's features are the kernel's.
            let v = unsafe { rows::<KIND, P, R>(w, xs, s, ctx) };
            for (r, (v, &(_, sums))) in v.into_iter().zip(*rows_sums).enumerate() {
                let v = match b {
                    // SAFETY: this function's features are the kernel's.
                    Some(b) => v + unsafe { bias_term(b, sums) },
                    None => v,
                };
                // SAFETY: the caller was given an output of `m * n` values.
                unsafe { out.write(first + r, n, ops.n, v) };
            }
        })
    }

    /// The weight scales of 4 blocks from block `b`, widened, in lanes 0..4: as many as the 4
    /// blocks span (4, 2 or 1 groups), the other lanes 0 and taken by no lane of [`Spread`].
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn four_scales<P: Wide>(scales: &[P], b: usize, shift: u32) -> __m512 {
        let (g, count) = (b >> shift, (4usize >> shift).max(1));
        debug_assert!(scales.len() >= g + count);
        _mm512_castps128_ps512(P::load(scales.as_ptr().add(g), (1u8 << count) - 1))
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

    /// One weight row against the first `R` int8 rows of `xs`, without the bias part: 4 blocks
    /// at a time into two registers a row that hold its four accumulators, a last 1..3 blocks
    /// on 256 bits. Each row's float steps are the one-row kernel's, in its order; the codes
    /// are unpacked and the weight scales spread once for all `R`.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VNNI; `w` holds the packed codes of `x.scales.len()` blocks; each `x`
    /// was arranged ([`Activations::arrange_wide`]).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    #[allow(clippy::needless_range_loop)] // indices keep the accumulators in registers
    unsafe fn rows<const KIND: u32, P: Wide, const R: usize>(
        w: &[u8],
        xs: &[Row; GROUP],
        scales: &[P],
        (shift, spread): (u32, &Spread),
    ) -> [f32; R] {
        let step = block_bytes(KIND);
        let blocks = xs[0].scales.len();
        debug_assert!(w.len() >= blocks * step && xs[R - 1].hi.len() >= blocks * BLOCK);
        let quads = blocks / 4;
        let (quad, pairs) = (
            index(&spread.quad),
            spread.pairs.each_ref().map(|p| index(p)),
        );
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        for b in (0..quads * 4).step_by(4) {
            let at = w.as_ptr().add(b * step);
            prefetch_ahead(at, 4 * step);
            if KIND == 4 || KIND == E2M1 {
                let (s, q) = (
                    P::quad_lanes(scales, b, shift, quad),
                    nibble_codes::<KIND>(at),
                );
                for r in 0..R {
                    let d = _mm512_loadu_ps(xs[r].dup4.as_ptr().add(b * 4));
                    acc[r] = nibbles::<KIND>(q, &xs[r], b, _mm512_mul_ps(s, d), acc[r]);
                }
                continue;
            }
            let s = four_scales(scales, b, shift);
            for h in 0..2 {
                let q = pair_codes::<KIND>(at.add(2 * h * step));
                let spread = _mm512_permutexvar_ps(pairs[h], s);
                for r in 0..R {
                    let x = &xs[r];
                    let digits = [x.hi, x.lo].map(|c| {
                        _mm512_loadu_si512(c.as_ptr().add((b + 2 * h) * BLOCK) as *const __m512i)
                    });
                    let p = dot512(q, digits);
                    let d = _mm512_loadu_ps(x.dup8.as_ptr().add((b + 2 * h) * 8));
                    let c = _mm512_mul_ps(spread, d);
                    acc[r][h] = _mm512_fmadd_ps(c, _mm512_cvtepi32_ps(p), acc[r][h]);
                }
            }
        }
        std::array::from_fn(|r| finish::<KIND, P>(w, &xs[r], scales, shift, acc[r]))
    }

    /// A row's last 1..3 blocks on 256 bits, then its accumulators summed.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn finish<const KIND: u32, P: Wide>(
        w: &[u8],
        x: &Row,
        scales: &[P],
        shift: u32,
        acc: [__m512; 2],
    ) -> f32 {
        let step = block_bytes(KIND);
        let mut four = accumulators::<KIND>(acc);
        let block = |b: usize, acc: __m256| {
            let q = block_codes::<KIND>(w.as_ptr().add(b * step));
            let xs = [x.hi, x.lo]
                .map(|c| _mm256_loadu_si256(c.as_ptr().add(b * BLOCK) as *const __m256i));
            let sums = x.lane_sums.as_ptr().add(b * LANES) as *const __m256i;
            let p = super::vl::dot::<KIND>(q, xs, sums);
            let c = lane_scales(scales, shift, x, b);
            _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(p), acc)
        };
        tail(x.scales.len(), &mut four, block);
        reduce(four)
    }

    /// 4 blocks of 4-bit codes (affine, or E2M1 as `2·v + 12`) from `at`: a 64-byte load
    /// split into low nibbles (the blocks' first halves) and high ones (their second halves),
    /// as the activations were arranged.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn nibble_codes<const KIND: u32>(at: *const u8) -> [__m512i; 2] {
        let v = _mm512_loadu_si512(at as *const __m512i);
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

    /// 4 blocks' [`nibble_codes`] `q` (block `b`) against row `x` into its two accumulators,
    /// `c` their lanes' combined scales.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn nibbles<const KIND: u32>(
        q: [__m512i; 2],
        x: &Row,
        b: usize,
        c: __m512,
        acc: [__m512; 2],
    ) -> [__m512; 2] {
        let xs = [x.quads_hi, x.quads_lo].map(|c| c.as_ptr().add(b * BLOCK) as *const __m512i);
        std::array::from_fn(|h| {
            let mut p = dot512(q[h], xs.map(|x| _mm512_loadu_si512(x.add(h))));
            if KIND == E2M1 {
                p = _mm512_sub_epi32(p, quad_offset(x, b, h));
            }
            _mm512_fmadd_ps(c, _mm512_cvtepi32_ps(p), acc[h])
        })
    }

    /// `12 · lane_sum` of the lanes half `h` of a 4-block nibble step holds: i32 lane `L` is
    /// block `b + L / 4`'s int8 lane `4h + L % 4`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn quad_offset(x: &Row, b: usize, h: usize) -> __m512i {
        const INDEX: [[i32; 16]; 2] = [quad_lanes(0), quad_lanes(1)];
        let at = x.lane_sums.as_ptr().add(b * LANES);
        let (lo, hi) = (
            _mm512_loadu_si512(at as *const __m512i),
            _mm512_loadu_si512(at.add(16) as *const __m512i),
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

    /// Two blocks' lanes: the high digits' `vpdpbusd`, shifted, then the low digits' added.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn dot512(q: __m512i, x: [__m512i; 2]) -> __m512i {
        let hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, x[0]);
        _mm512_dpbusd_epi32(_mm512_slli_epi32::<{ DIGIT_SHIFT }>(hi), q, x[1])
    }

    /// The four 8-lane accumulators out of the two registers: at 4 bits, 128-bit lane `j` of
    /// the first holds accumulator `j`'s lanes 0..4 and of the second its lanes 4..8; else
    /// the halves hold accumulators 0, 1 and 2, 3.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn accumulators<const KIND: u32>(acc: [__m512; 2]) -> [__m256; 4] {
        let half = |v: __m512, i: usize| match i {
            0 => _mm512_castps512_ps256(v),
            _ => _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))),
        };
        if KIND != 4 && KIND != E2M1 {
            return [
                half(acc[0], 0),
                half(acc[0], 1),
                half(acc[1], 0),
                half(acc[1], 1),
            ];
        }
        let lane = |v: __m512, j: usize| match j {
            0 => _mm512_extractf32x4_ps::<0>(v),
            1 => _mm512_extractf32x4_ps::<1>(v),
            2 => _mm512_extractf32x4_ps::<2>(v),
            _ => _mm512_extractf32x4_ps::<3>(v),
        };
        std::array::from_fn(|j| _mm256_set_m128(lane(acc[1], j), lane(acc[0], j)))
    }
}
