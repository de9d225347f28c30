//! The AVX-512 VNNI kernel on weights stored in tiles ([`crate::int8::tiles`]): 16 weight
//! rows a tile, each block's 4-byte words of the 16 rows side by side, so that one 64-byte
//! load is one int8 lane of 16 rows (8 bits) or two (4 bits: low and high nibbles), the
//! panels' layout without unpacking. Each row of x takes its digits broadcast from memory
//! into the `vpdpbusd`s, its block totals come out 16 weight rows a register, and the float
//! steps are the panels' (and so the module's), one output a lane: no reduction across lanes
//! at all, however few rows of x there are.

use std::arch::x86_64::*;

use super::super::tiles::WIDTH;
use super::super::{group_shift, Row, Totals, BLOCK, DIGIT_SHIFT, E2M1_OFFSET, LANES};
use super::{block_bytes, Walk, E2M1, TILES_AHEAD};
use crate::float::{E4m3, E8m0};
use crate::{Bf16, Operands, Out, Stored, F16};

/// Rows of x multiplied with a tile at once (the last group padded with copies of its last
/// row, never written): their accumulators fill the registers.
const ROWS: usize = 4;

/// Streams of tiles one row of x (a decode step) takes side by side, block by block: the
/// call's tiles cut into this many parts, one tile of each in turn. The hardware prefetchers
/// keep a distance per stream, and parts far apart reach separate DRAM pages. On the AMX
/// Xeon, against one tile at a time, a 3.87 B model's decode products took 0.88-0.91 as
/// long with two adjacent tiles, and then 0.990 with the two parts; four parts took 1.006
/// and SmolLM2-135M's 1.079 (docs/design/cpu-kernels.md).
const SIDE: usize = 2;

/// A scale dtype whose 16 values (a tile's rows' in one group) load as one register.
pub(super) trait Wide16: Stored {
    /// The 16 values at `at`, widened.
    ///
    /// # Safety
    /// AVX-512 F/BW; 16 values are readable at `at`.
    unsafe fn load16(at: *const Self) -> __m512;
}

impl Wide16 for f32 {
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw")]
    #[inline]
    unsafe fn load16(at: *const f32) -> __m512 {
        _mm512_loadu_ps(at)
    }
}

impl Wide16 for Bf16 {
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw")]
    #[inline]
    unsafe fn load16(at: *const Bf16) -> __m512 {
        let h = _mm256_loadu_si256(at as *const __m256i);
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    }
}

impl Wide16 for F16 {
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw")]
    #[inline]
    unsafe fn load16(at: *const F16) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(at as *const __m256i))
    }
}

impl Wide16 for E8m0 {
    /// `2^(byte - 127)`, byte 0 as 2^-127 ([`crate::float::e8m0`]).
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw")]
    #[inline]
    unsafe fn load16(at: *const E8m0) -> __m512 {
        let bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(at as *const __m128i));
        let zero = _mm512_cmpeq_epi32_mask(bytes, _mm512_setzero_si512());
        let v = _mm512_slli_epi32::<23>(bytes);
        _mm512_castsi512_ps(_mm512_mask_mov_epi32(
            v,
            zero,
            _mm512_set1_epi32(0x0040_0000),
        ))
    }
}

impl Wide16 for E4m3 {
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw")]
    #[inline]
    unsafe fn load16(at: *const E4m3) -> __m512 {
        let v: [f32; WIDTH] = std::array::from_fn(|i| (*at.add(i)).widen());
        _mm512_loadu_ps(v.as_ptr())
    }
}

/// Columns `walk.2` (whole tiles) of the product on tiled weights.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI; the weights are tiled for `KIND` ([`crate::int8::tiles::takes`]);
/// as `int8::columns`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn columns<const KIND: u32>(walk: Walk) {
    let ops = walk.0;
    crate::vector::by_stored!(ops, g => {
        // SAFETY: this function's features are the kernel's.
        unsafe {
            match walk.1.span {
                1 => tiles::<KIND, _, 1>(walk, (g.scales, g.biases)),
                _ => tiles::<KIND, _, 2>(walk, (g.scales, g.biases)),
            }
        }
    })
}

/// Each tile of the columns against every row of x, [`ROWS`] at a time, in spans of `S`
/// blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tiles<const KIND: u32, P: Wide16, const S: usize>(
    (ops, acts, cols, out): Walk,
    params: (&[P], &[P]),
) {
    debug_assert!(cols.start % WIDTH == 0 && cols.end % WIDTH == 0);
    let blocks = ops.k / BLOCK;
    let groups_k = ops.k / ops.format.group;
    let offsets = offsets::<KIND>(acts, ops.m * blocks);
    let ms: Vec<[usize; ROWS]> = (0..ops.m)
        .step_by(ROWS)
        .map(|m0| std::array::from_fn(|i| (m0 + i).min(ops.m - 1)))
        .collect();
    let groups = groups_of(acts, &ms, (&offsets, blocks));
    let tile_bytes = WIDTH * ops.format.row_bytes(ops.k);
    let end = ops.w.as_ptr().wrapping_add(cols.end / WIDTH * tile_bytes);
    let (t0, t_end) = (cols.start / WIDTH, cols.end / WIDTH);
    // One row of x takes the tiles as [`SIDE`] streams, each a part of `part` tiles.
    let part = match ops.m {
        1 => (t_end - t0) / SIDE,
        _ => 0,
    };
    ask_for_streams(ops.w.as_ptr(), (t0, part, tile_bytes), end);
    let ahead = super::tile_ahead(tile_bytes, TILES_AHEAD);
    let spread = tile_bytes > super::SMALL_TILE;
    // Tile `t`, as it starts: it asks for the parameters of the next tile of its stream,
    // which ends at `stream_end`.
    let start = |t: usize, stream_end: usize| Tile {
        codes: ops.w.as_ptr().add(t * tile_bytes),
        scales: params.0.as_ptr().add(t * WIDTH * groups_k),
        shift: group_shift(ops.format),
        end,
        ahead,
        next: match t + 1 < stream_end {
            true => NextParams::of(
                params,
                t + 1,
                (groups_k, if spread { blocks / S } else { 1 }),
            ),
            false => NextParams::NONE,
        },
    };
    for i in 0..part {
        let at: [usize; SIDE] = std::array::from_fn(|j| t0 + j * part + i);
        let tiles = at.map(|t| start(t, t + part - i));
        let (xs, x_offsets) = &groups[0];
        let v = side_by_side::<KIND, P, S>(&tiles, xs, x_offsets);
        for (t, v) in at.into_iter().zip(v) {
            store((ops, acts, out), params.1, (0, t), v);
        }
    }
    for t in t0 + SIDE * part..t_end {
        every_group::<KIND, P, S>(
            (ops, acts, out),
            params.1,
            (&start(t, t_end), t),
            (&ms, &groups),
        );
    }
}

/// Each group of rows of x (`ms` their indices) with its rows and their E2M1 offsets (of
/// `blocks` a row), once for every tile.
fn groups_of<'a>(
    acts: &'a super::Activations,
    ms: &[[usize; ROWS]],
    (offsets, blocks): (&'a [Totals], usize),
) -> Vec<Group<'a>> {
    let group = |rows: &[usize; ROWS]| {
        let offsets = rows.map(|m| offsets.get(m * blocks..).unwrap_or_default());
        (rows.map(|m| acts.row(m)), offsets)
    };
    ms.iter().map(group).collect()
}

/// Asks for the first bytes of each stream of tiles ([`super::prefetch_start`]): the
/// [`SIDE`] parts of `part` tiles from tile `t0`, or the one stream when `part` is 0.
fn ask_for_streams(w: *const u8, (t0, part, tile_bytes): (usize, usize, usize), end: *const u8) {
    let streams = if part > 0 { SIDE } else { 1 };
    for j in 0..streams {
        let at = w.wrapping_add((t0 + j * part) * tile_bytes);
        super::prefetch_start(at, end, TILES_AHEAD);
    }
}

/// A group of rows of x: their rows and their E2M1 offsets.
type Group<'a> = ([Row<'a>; ROWS], [&'a [Totals]; ROWS]);

/// Every group of rows of x (`ms` their row indices) against tile `t`, the outputs stored.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn every_group<const KIND: u32, P: Wide16, const S: usize>(
    (ops, acts, out): (&Operands, &super::Activations, Out),
    biases: &[P],
    (tile, t): (&Tile<P>, usize),
    (ms, groups): (&[[usize; ROWS]], &[Group]),
) {
    for (g, (rows, x)) in ms.iter().zip(groups).enumerate() {
        // On the stack, where the compiler keeps them apart from the output's stores.
        let (xs, x_offsets) = *x;
        let (xs, x_offsets) = (&xs, &x_offsets);
        let v = match ops.m - g * ROWS {
            1 => widen::<1>(group::<KIND, P, 1, S>(tile, xs, x_offsets)),
            2 => widen::<2>(group::<KIND, P, 2, S>(tile, xs, x_offsets)),
            3 => widen::<3>(group::<KIND, P, 3, S>(tile, xs, x_offsets)),
            _ => group::<KIND, P, ROWS, S>(tile, xs, x_offsets),
        };
        for (&m, v) in rows.iter().zip(v).take(ops.m - g * ROWS) {
            store((ops, acts, out), biases, (m, t), v);
        }
    }
}

/// Asks for tile `t + 1`'s scales and biases ([`crate::prefetch_params`], a tile's as one
/// row). A tile reads its scales a group at a time and its biases all at its end, two streams
/// beside the codes: without this the tile's store, which waits on the bias loads, took about
/// a tenth of a large model's decode (`perf`; 6.8-7.5% with it).
#[inline(always)]
pub(super) fn next_params<P>(params: (&[P], &[P]), t: usize, groups_k: usize) {
    crate::prefetch_params([params.0, params.1], t + 1, WIDTH * groups_k);
}

/// Tile `t + 1`'s scales and biases, asked for into L1 a few lines a block through tile `t`
/// on tiles larger than [`super::SMALL_TILE`] (smaller ones ask for all at its first block).
/// A tile reads its scales a group at a time and its biases all at its end,
/// two streams beside the codes. Asked for all at once, a 3.87 B model's 48 lines a tile
/// held the line fill buffers that the codes' prefetches wait for: spread, its decode's
/// products took 0.98 as long on the AMX Xeon; on SmolLM2's small tiles spreading gained
/// nothing, and took `mxfp4` 1.01 as long (docs/design/cpu-kernels.md).
#[derive(Clone, Copy)]
struct NextParams {
    scales: *const u8,
    /// Null where the format has no biases.
    biases: *const u8,
    /// Lines of each, and how many a block asks for.
    lines: usize,
    per_block: usize,
}

impl NextParams {
    const NONE: NextParams = NextParams {
        scales: std::ptr::null(),
        biases: std::ptr::null(),
        lines: 0,
        per_block: 0,
    };

    /// Tile `t`'s parameters, asked for over `blocks` blocks, for `groups_k` groups a row.
    fn of<P>(params: (&[P], &[P]), t: usize, (groups_k, blocks): (usize, usize)) -> NextParams {
        let len = WIDTH * groups_k;
        let at = |p: &[P]| match p.get(t * len..(t + 1) * len) {
            Some(tile) => tile.as_ptr() as *const u8,
            None => std::ptr::null(),
        };
        let lines = (len * std::mem::size_of::<P>()).div_ceil(64);
        NextParams {
            scales: at(params.0),
            biases: at(params.1),
            lines,
            per_block: lines.div_ceil(blocks.max(1)),
        }
    }

    /// Asks for the lines block `b` takes.
    #[inline(always)]
    fn ask(&self, b: usize) {
        let first = b * self.per_block;
        for line in first..(first + self.per_block).min(self.lines) {
            for p in [self.scales, self.biases] {
                if !p.is_null() {
                    // SAFETY: a prefetch reads nothing into the program (SSE is part of x86-64).
                    unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64 * line) as *const i8) };
                }
            }
        }
    }
}

/// Row `m`'s 16 outputs `v` of tile `t`, the bias part added (the tile's `biases`, if any).
///
/// # Safety
/// As [`columns`]; row `m` and tile `t` are the caller's to write.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) unsafe fn store<P: Wide16>(
    (ops, acts, out): (&Operands, &super::Activations, Out),
    biases: &[P],
    (m, t): (usize, usize),
    v: __m512,
) {
    let groups_k = ops.k / ops.format.group;
    let v = match biases.is_empty() {
        true => v,
        false => {
            let sums = &acts.sums[m * groups_k..(m + 1) * groups_k];
            let biases = biases.as_ptr().add(t * WIDTH * groups_k);
            _mm512_add_ps(v, bias_part(biases, sums))
        }
    };
    _mm512_storeu_ps(out.at(m, t * WIDTH, ops.n), v);
}

/// E2M1: `[m][block]` what the codes' offset adds to each total, `12 · lane_sum`.
pub(super) fn offsets<const KIND: u32>(acts: &super::Activations, blocks: usize) -> Vec<Totals> {
    match KIND {
        E2M1 => lane_totals_times(acts, blocks, E2M1_OFFSET),
        _ => Vec::new(),
    }
}

/// `[m][block]` the block's lane sums totalled ([`Totals::of`]), times `by`.
pub(super) fn lane_totals_times(acts: &super::Activations, blocks: usize, by: i32) -> Vec<Totals> {
    let sums = acts.lane_sums[..blocks * LANES].chunks_exact(LANES);
    sums.map(|s| {
        let t = Totals::of(std::array::from_fn(|l| s[l]));
        Totals {
            first: by * t.first,
            second: by * t.second,
        }
    })
    .collect()
}

/// `R` rows' outputs in an array of [`ROWS`] (the rest zeros, never written).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn widen<const R: usize>(v: [__m512; R]) -> [__m512; ROWS] {
    let mut out = [_mm512_setzero_ps(); ROWS];
    out[..R].copy_from_slice(&v);
    out
}

/// One tile: its codes, its scales (`[group][WIDTH]`), the format's group shift, and where
/// the call's codes end.
struct Tile<P> {
    codes: *const u8,
    scales: *const P,
    shift: u32,
    end: *const u8,
    /// How far ahead its codes are asked for ([`super::tile_ahead`]).
    ahead: usize,
    /// The scales and biases of the tile this one's stream reads next, asked for through it.
    next: NextParams,
}

/// [`ROWS`] rows of x against a tile: each one's 16 outputs without the bias part, the
/// spans of `S` blocks in fours so that each accumulator is a register (the calls spelled
/// out: a loop over them leaves the accumulators in memory).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn group<const KIND: u32, P: Wide16, const R: usize, const S: usize>(
    tile: &Tile<P>,
    xs: &[Row; ROWS],
    offsets: &[&[Totals]; ROWS],
) -> [__m512; R] {
    let spans = xs[0].blocks / S;
    let [mut a0, mut a1, mut a2, mut a3] = [[_mm512_setzero_ps(); R]; 4];
    let whole = spans / 4 * 4;
    let x = (xs, offsets);
    for s in (0..whole).step_by(4) {
        span::<KIND, P, R, S>(tile, x, s, &mut a0);
        span::<KIND, P, R, S>(tile, x, s + 1, &mut a1);
        span::<KIND, P, R, S>(tile, x, s + 2, &mut a2);
        span::<KIND, P, R, S>(tile, x, s + 3, &mut a3);
    }
    if whole < spans {
        span::<KIND, P, R, S>(tile, x, whole, &mut a0);
    }
    if whole + 1 < spans {
        span::<KIND, P, R, S>(tile, x, whole + 1, &mut a1);
    }
    if whole + 2 < spans {
        span::<KIND, P, R, S>(tile, x, whole + 2, &mut a2);
    }
    let mut out = [_mm512_setzero_ps(); R];
    for r in 0..R {
        out[r] = _mm512_add_ps(_mm512_add_ps(a0[r], a1[r]), _mm512_add_ps(a2[r], a3[r]));
    }
    out
}

/// One row of x against [`SIDE`] tiles side by side, span by span: each tile's output as
/// [`group`] gives it, in its order.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn side_by_side<const KIND: u32, P: Wide16, const S: usize>(
    tiles: &[Tile<P>; SIDE],
    xs: &[Row; ROWS],
    offsets: &[&[Totals]; ROWS],
) -> [__m512; SIDE] {
    let spans = xs[0].blocks / S;
    let mut acc = [[[_mm512_setzero_ps(); 1]; 4]; SIDE];
    let whole = spans / 4 * 4;
    let x = (xs, offsets);
    for s in (0..whole).step_by(4) {
        for j in 0..4 {
            for (tile, acc) in tiles.iter().zip(acc.iter_mut()) {
                span::<KIND, P, 1, S>(tile, x, s + j, &mut acc[j]);
            }
        }
    }
    // The last 1..3 spans, spelled out: indexed by `s % 4` the accumulators would leave the
    // registers.
    for (tile, acc) in tiles.iter().zip(acc.iter_mut()) {
        let [a0, a1, a2, _] = acc;
        if whole < spans {
            span::<KIND, P, 1, S>(tile, x, whole, a0);
        }
        if whole + 1 < spans {
            span::<KIND, P, 1, S>(tile, x, whole + 1, a1);
        }
        if whole + 2 < spans {
            span::<KIND, P, 1, S>(tile, x, whole + 2, a2);
        }
    }
    let mut out = [_mm512_setzero_ps(); SIDE];
    for (out, [a0, a1, a2, a3]) in out.iter_mut().zip(acc) {
        *out = _mm512_add_ps(_mm512_add_ps(a0[0], a1[0]), _mm512_add_ps(a2[0], a3[0]));
    }
    out
}

/// The int8 lanes of a block's 4-byte words: word `w` holds lane `w` (8 bits), or lanes `w`
/// (low nibbles) and `w + 4` (high ones). An `nvfp4` block's first group is lanes 0, 1, 4, 5:
/// words 0 and 1.
const fn words(kind: u32) -> usize {
    block_bytes(kind) / 4
}

/// Span `s` (blocks `S·s..S·s + S`) of each row into its accumulator (`s % 4`): one
/// multiply-add on its blocks' totals summed, or (`nvfp4`, a block a span) its first group's
/// then its second's.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
#[allow(clippy::needless_range_loop)] // a closure here would not inline
unsafe fn span<const KIND: u32, P: Wide16, const R: usize, const S: usize>(
    tile: &Tile<P>,
    (xs, offsets): (&[Row; ROWS], &[&[Totals]; ROWS]),
    s: usize,
    acc: &mut [__m512; R],
) {
    let (b, bytes) = (S * s, S * WIDTH * block_bytes(KIND));
    let codes = tile.codes.add(b * WIDTH * block_bytes(KIND));
    // The lines `tile.ahead` ahead into L2, as many as this span reads, while they are
    // this call's: past its end they would be wasted, or not even mapped.
    let ahead = codes.wrapping_add(tile.ahead);
    if ahead.wrapping_add(bytes) <= tile.end {
        for line in 0..bytes / 64 {
            _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(64 * line) as *const i8);
        }
    }
    tile.next.ask(s);
    let mut digits = [(std::ptr::null(), std::ptr::null()); R];
    for r in 0..R {
        digits[r] = (
            xs[r].hi.as_ptr().add(b * BLOCK),
            xs[r].lo.as_ptr().add(b * BLOCK),
        );
    }
    match P::PER_STEP {
        2 => {
            let t = totals::<KIND, R>(codes, digits, (1, 0..2));
            fold::<KIND, P, R>(tile, xs, (t, offsets, Some(0)), (b, 2 * b), acc);
            let t = totals::<KIND, R>(codes, digits, (1, 2..4));
            fold::<KIND, P, R>(tile, xs, (t, offsets, Some(1)), (b, 2 * b + 1), acc);
        }
        _ => {
            let t = totals::<KIND, R>(codes, digits, (S, 0..words(KIND)));
            fold::<KIND, P, R>(tile, xs, (t, offsets, None), (b, b >> tile.shift), acc);
        }
    }
}

/// Each row's total `t` of the span from block `b` (`half` the `nvfp4` group it is, `None`
/// both) with weight group `group`'s scales and the span's unit into the accumulator.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
#[allow(clippy::needless_range_loop)] // indices keep the accumulators in registers
unsafe fn fold<const KIND: u32, P: Wide16, const R: usize>(
    tile: &Tile<P>,
    xs: &[Row; ROWS],
    (t, offsets, half): ([__m512i; R], &[&[Totals]; ROWS], Option<usize>),
    (b, group): (usize, usize),
    acc: &mut [__m512; R],
) {
    let s = P::load16(tile.scales.add(group * WIDTH));
    let s = match P::FLOAT {
        true => _mm512_mul_ps(s, _mm512_set1_ps(0.5)),
        false => s,
    };
    for r in 0..R {
        // No closure here (`bool::then`): it would not inline into these features.
        let offset = match KIND {
            E2M1 => Some(offsets[r][b]),
            _ => None,
        };
        acc[r] = fold_total(acc[r], s, (t[r], xs[r].units[b]), (offset, half));
    }
}

/// A row's block total `t` (less its E2M1 codes' `offset`, of group `half` or both) times the
/// combined scales `s · unit` (16 weight rows side by side) into `acc`: the module's float
/// step, one output a lane (the tiles' and the panels').
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) unsafe fn fold_total(
    acc: __m512,
    s: __m512,
    (t, unit): (__m512i, f32),
    (offset, half): (Option<Totals>, Option<usize>),
) -> __m512 {
    let t = match offset {
        None => t,
        Some(o) => {
            let o = match half {
                None => o.first + o.second,
                Some(0) => o.first,
                Some(_) => o.second,
            };
            _mm512_sub_epi32(t, _mm512_set1_epi32(o))
        }
    };
    let c = _mm512_mul_ps(s, _mm512_set1_ps(unit));
    _mm512_fmadd_ps(c, _mm512_cvtepi32_ps(t), acc)
}

/// A 64-byte word of the tile as the codes of its lanes: itself (8 bits), or its low nibbles
/// and its high ones (4 bits; E2M1 codes as `2·v + 12`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn lanes_of<const KIND: u32>(at: *const u8) -> [__m512i; 2] {
    let v = _mm512_loadu_si512(at as *const __m512i);
    match KIND {
        8 => [v, v],
        _ => super::avx512::nibble_split::<KIND>(v),
    }
}

/// Words `range` of each of `blocks` blocks of the tile from a span's first block (the
/// blocks' words one after another) against each row's digits, summed: `vpdpbusd` chains per
/// row and digit (more than one a row when there are few rows, so that enough run side by
/// side), the high digits' total shifted before the low ones' is added. A loop over the
/// blocks around a loop over a block's words, which unrolls whole: one loop over a span's
/// words unrolls only in part, and its chains leave the registers (8 bits: 1.55x as long).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
#[allow(clippy::needless_range_loop)] // indices keep the accumulators in registers
unsafe fn totals<const KIND: u32, const R: usize>(
    codes: *const u8,
    digits: [(*const i8, *const i8); R],
    (blocks, range): (usize, std::ops::Range<usize>),
) -> [__m512i; R] {
    let chains = (4 / R).max(1);
    let mut hi = [[_mm512_setzero_si512(); 4]; R];
    let mut lo = [[_mm512_setzero_si512(); 4]; R];
    // 8 bits: one lane a word; 4 bits: lanes w and w + 4.
    let lanes = match KIND {
        8 => 1,
        _ => 2,
    };
    for j in 0..blocks {
        let codes = codes.add(j * WIDTH * block_bytes(KIND));
        for w in range.clone() {
            let q = lanes_of::<KIND>(codes.add(w * 4 * WIDTH));
            let c = w % chains;
            for (h, &q) in q.iter().enumerate().take(lanes) {
                let at = j * BLOCK + 4 * (w + 4 * h);
                for r in 0..R {
                    let d = (digits[r].0.add(at) as *const i32).read_unaligned();
                    let e = (digits[r].1.add(at) as *const i32).read_unaligned();
                    hi[r][c] = _mm512_dpbusd_epi32(hi[r][c], q, _mm512_set1_epi32(d));
                    lo[r][c] = _mm512_dpbusd_epi32(lo[r][c], q, _mm512_set1_epi32(e));
                }
            }
        }
    }
    let mut out = [_mm512_setzero_si512(); R];
    for r in 0..R {
        let (h, l) = (chain_sum(hi[r], chains), chain_sum(lo[r], chains));
        out[r] = _mm512_add_epi32(_mm512_slli_epi32::<{ DIGIT_SHIFT }>(h), l);
    }
    out
}

/// The first `chains` of `v` added (integers: any order gives the same sum).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn chain_sum(v: [__m512i; 4], chains: usize) -> __m512i {
    match chains {
        4 => _mm512_add_epi32(_mm512_add_epi32(v[0], v[1]), _mm512_add_epi32(v[2], v[3])),
        2 => _mm512_add_epi32(v[0], v[1]),
        _ => v[0],
    }
}

/// `bias_term` one output a lane: 8 chains over the groups, `fma(b_g, Σx_g, t[g % 8])`,
/// the biases `[group][WIDTH]` (a tile's, or a panel's widened ones).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) unsafe fn bias_part<P: Wide16>(biases: *const P, sums: &[f32]) -> __m512 {
    let mut t = [_mm512_setzero_ps(); 8];
    let step = |g: usize, t: __m512| {
        let b = P::load16(biases.add(g * WIDTH));
        _mm512_fmadd_ps(b, _mm512_set1_ps(sums[g]), t)
    };
    let whole = sums.len() / 8 * 8;
    for g0 in (0..whole).step_by(8) {
        for (j, t) in t.iter_mut().enumerate() {
            *t = step(g0 + j, *t);
        }
    }
    for (j, g) in (whole..sums.len()).enumerate() {
        t[j] = step(g, t[j]);
    }
    super::panel::tree(t)
}
