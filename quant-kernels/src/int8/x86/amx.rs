//! The tiled weights' products on AMX tiles, for 4 rows of x or more. A block's totals for
//! the rows and a tile's 16 weight rows come from [`TileUnit`] steps, `tdpbsud` on x's digits
//! as A (laid out as tiles, [`Activations::arrange_tiles`]) and the block's codes as B, which
//! is the tiles' own layout with its lanes unpacked (8 bits: the weights as they lie; 4 bits
//! and E2M1: their nibbles split, once a tile for many rows, a few blocks at a time for one
//! A tile of rows). Up to 8 rows, one step takes a block's two digits ([`Stack::Both`]) and a
//! call four blocks; beyond, a step a digit. The float steps are the tiled kernel's
//! ([`fold_total`]), one output a lane, in its order: so the bits are every other set's.
//! `nvfp4` (two groups a block) stays on the tiled kernel.

use std::arch::x86_64::*;

use super::super::tiles::WIDTH;
use super::super::{group_shift, Activations, Stack, BLOCK, DIGIT_SHIFT};
use super::tiles::{fold_total, offsets, store, Wide16};
use super::{block_bytes, Walk, E2M1};
use crate::amx::{Amx, Steps, TileUnit, CODES, COLUMNS, ROWS, STEPS};
use crate::Operands;

/// Whether tiled `ops` take the tiles: enough rows of x that they pay ([`MIN_ROWS`]), blocks
/// of one group each (not `nvfp4`), and a probe that found the tiles usable.
pub(super) fn takes(ops: &Operands) -> bool {
    let enough = ops.m >= MIN_ROWS;
    enough && ops.format.group >= BLOCK && crate::amx::amx() == &Amx::Usable
}

/// From how many rows of x the tiles beat the AVX-512 VNNI tiled kernel, in every format:
/// at 4 rows they take 0.75-0.86 of its time, at 3 rows 0.75-0.93 on their own but more in
/// a model's speculative steps. Measured on a 2-core Xeon with AMX
/// (docs/design/cpu-kernels.md).
const MIN_ROWS: usize = 4;

/// Columns `walk.2` (whole tiles) of the product on tiled weights, the tile steps on `unit`.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI; `unit` runs here; the weights are tiled for `KIND`, whose blocks hold
/// one group each; as `int8::columns`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn columns<const KIND: u32, U: TileUnit>(walk: Walk, unit: &mut U) {
    let ops = walk.0;
    crate::vector::by_stored!(ops, g => {
        // SAFETY: this function's features are the kernel's.
        unsafe { tiles::<KIND, _, U>(walk, (g.scales, g.biases), unit) }
    })
}

/// One tile of weights: its blocks' codes as B (`[block][CODES]`), its scales
/// (`[group][WIDTH]`), and the format's group shift.
struct Tile<P> {
    /// The tile's codes as stored, each block's `WIDTH · block_bytes` in a row.
    stored: *const u8,
    codes: *const u8,
    /// Whether `codes` is B already (8 bits, or 4-bit codes split for the whole tile).
    as_b: bool,
    scales: *const P,
    shift: u32,
    /// Blocks a step takes: x's span.
    span: usize,
}

/// Each tile of the columns against every row of x, [`ROWS`] at a time.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tiles<const KIND: u32, P: Wide16, U: TileUnit>(
    (ops, acts, cols, out): Walk,
    params: (&[P], &[P]),
    unit: &mut U,
) {
    debug_assert!(P::PER_STEP == 1 && cols.start % WIDTH == 0 && cols.end % WIDTH == 0);
    let (blocks, groups_k) = (ops.k / BLOCK, ops.k / ops.format.group);
    let depth = BLOCK * acts.span;
    let offsets = offsets::<KIND>(acts, ops.m * blocks);
    let tile_bytes = WIDTH * ops.format.row_bytes(ops.k);
    debug_assert!(acts.tiles_a.len() >= ops.m.div_ceil(ROWS) * ROWS * 2 * ops.k);
    // Many rows of x: each tile split once, for all of them; one A tile's: a block at a time.
    let whole = KIND != 8 && ops.m > ROWS;
    let mut split = vec![0u8; if whole { blocks * CODES } else { 0 }];
    let (mut configured, stack) = (None, Stack::of(ops.m));
    let mut scratch = Scratch {
        totals: [[0; ROWS * COLUMNS]; STEPS],
        acc: [[_mm512_setzero_ps(); 4]; ROWS],
        split: Split([0; 2 * STEPS * CODES]),
    };
    for t in (cols.start / WIDTH)..(cols.end / WIDTH) {
        let codes = ops.w.as_ptr().add(t * tile_bytes);
        let tile = Tile {
            stored: codes,
            codes: match whole {
                true => split_tile::<KIND>(codes, blocks, &mut split),
                false => codes,
            },
            as_b: KIND == 8 || whole,
            scales: params.0.as_ptr().add(t * WIDTH * groups_k),
            shift: group_shift(ops.format),
            span: acts.span,
        };
        for m0 in (0..ops.m).step_by(ROWS) {
            let rows = (ops.m - m0).min(ROWS);
            let a_rows = stack.a_rows(rows);
            if configured != Some(a_rows) {
                unit.configure(a_rows, depth);
                configured = Some(a_rows);
            }
            let a = acts.tiles_a.as_ptr().add(m0 * 2 * blocks * BLOCK);
            let rows = (m0, rows, stack);
            group::<KIND, P, U>(&tile, (acts, a), rows, &offsets, (unit, &mut scratch));
            for (r, a) in scratch.acc.iter().enumerate().take(rows.1) {
                let v = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
                store((ops, acts, out), params.1, (m0 + r, t), v);
            }
        }
    }
    if configured.is_some() {
        unit.release();
    }
}

/// Spans `range` of a tile as B, one after another: the blocks themselves where the tile is
/// B already, or their 4-byte words' low nibbles as lanes 0..4 and high ones as lanes 4..8,
/// split into `split` (4 bits; E2M1 codes as `2·v + 12`), as the tiled kernel's `lanes_of`
/// reads them. For one A tile of rows a few blocks at a time, just before their steps: a whole
/// tile's split B, written and read once, left the L1 cache at large `k` (2048 x 8192, 16
/// rows: 3.3 against 2.4 ms).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn operand_b<const KIND: u32, P>(
    tile: &Tile<P>,
    range: std::ops::Range<usize>,
    split: &mut Split,
) -> *const u8 {
    let span = tile.span;
    if tile.as_b {
        return tile.codes.add(range.start * span * CODES);
    }
    for (i, s) in range.enumerate() {
        for j in 0..span {
            let to = split.0.as_mut_ptr().add((i * span + j) * CODES);
            split_block::<KIND>(tile.codes, s * span + j, to);
        }
    }
    split.0.as_ptr()
}

/// Every block of a tile's 4-bit codes split into `split`, as [`operand_b`] splits one.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn split_tile<const KIND: u32>(
    codes: *const u8,
    blocks: usize,
    split: &mut [u8],
) -> *const u8 {
    for b in 0..blocks {
        split_block::<KIND>(codes, b, split.as_mut_ptr().add(b * CODES));
    }
    split.as_ptr()
}

/// Block `b`'s 4-bit codes split into the [`CODES`] bytes at `to`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn split_block<const KIND: u32>(codes: *const u8, b: usize, to: *mut u8) {
    let words = block_bytes(KIND) / 4;
    for w in 0..words {
        let v = _mm512_loadu_si512(codes.add((b * words + w) * 64) as *const __m512i);
        let [low, high] = super::avx512::nibble_split::<KIND>(v);
        _mm512_storeu_si512(to.add(w * 64) as *mut __m512i, low);
        _mm512_storeu_si512(to.add(4 * 64 + w * 64) as *mut __m512i, high);
    }
}

/// How many blocks ahead of its steps a group asks for the tile's codes, for spans of `span`
/// blocks. The stored codes of one tile run on into the next tile's, so the asks cross into
/// it (where each tile is split whole at its start, for the next tile's split). Spans of one
/// block: 8 blocks, two calls of steps with both digits in one A. Spans of two: one span,
/// so the asks cover the call's own spans but the first and the next call's first. Measured
/// one thread against a 2048 x 8192 matrix from memory (`ROWS=4` or `8 FORMATS=8,4
/// int8_speed`): with spans of two, 1 span ahead took 8 rows of 8-bit x 1,093-1,094 us, 2
/// spans 1,133-1,157, 8 spans 1,353-1,660, 16 spans 1,673-1,683; and spans of one block
/// (`mxfp4`) a span ahead 1.07-1.11x as long as 8.
fn ahead(span: usize) -> usize {
    match span {
        1 => 8,
        _ => span,
    }
}

/// Asks for blocks `from..from + count` of the tile's stored codes, into the L1 cache: the
/// tile loads do not set the hardware's prefetch going as vector loads do. Without it, 8 rows
/// of x against a 2048 x 8192 8-bit matrix from memory took 1.11-1.35x as long.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn ask_ahead<const KIND: u32, P>(tile: &Tile<P>, from: usize, count: usize) {
    let bytes = WIDTH * block_bytes(KIND);
    let at = tile.stored.wrapping_add(from * bytes);
    for line in (0..count * bytes).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(line) as *const i8);
    }
}

/// What a group works in: each step's C, the rows' accumulators, and B split from 4-bit
/// codes.
struct Scratch {
    /// Each step's C.
    totals: [[i32; ROWS * COLUMNS]; STEPS],
    /// Each row's four accumulators (block `b` into `b % 4`).
    acc: [[__m512; 4]; ROWS],
    split: Split,
}

/// A call's B, split from 4-bit codes: [`STEPS`] spans' blocks one after another (a block's
/// [`CODES`] each), a cache line's alignment, as a tile row is.
#[repr(align(64))]
struct Split([u8; 2 * STEPS * CODES]);

/// Rows `m0..m0 + rows` of x against a tile, into each row's accumulators: digits apart,
/// a span a call, a step a digit; both in one A, [`STEPS`] spans a call. Span `s` folds
/// into accumulator `s % 4`, as in the tiled kernel.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn group<const KIND: u32, P: Wide16, U: TileUnit>(
    tile: &Tile<P>,
    (acts, a): (&Activations, *const i8),
    (m0, rows, stack): (usize, usize, Stack),
    offsets: &[super::super::Totals],
    (unit, scratch): (&mut U, &mut Scratch),
) {
    let spans = acts.k / BLOCK / tile.span;
    let Scratch { totals, split, acc } = scratch;
    for a in acc.iter_mut().take(rows) {
        *a = [_mm512_setzero_ps(); 4];
    }
    let per_call = match stack {
        Stack::Both => STEPS,
        Stack::Apart => 1,
    };
    for s0 in (0..spans).step_by(per_call) {
        let count = per_call.min(spans - s0);
        let b = operand_b::<KIND, P>(tile, s0..s0 + count, split);
        ask_ahead::<KIND, P>(tile, s0 * tile.span + ahead(tile.span), count * tile.span);
        let depth = BLOCK * tile.span;
        unit.steps(&steps_of(stack, (a, rows, depth), (s0, count), b, totals));
        for j in 0..count {
            let (high, low) = match stack {
                Stack::Both => (&totals[j][..], &totals[j][rows * COLUMNS..]),
                Stack::Apart => (&totals[0][..], &totals[1][..]),
            };
            fold_span::<KIND, P>(tile, acts, (m0, rows, s0 + j), (high, low), offsets, acc);
        }
    }
}

/// The steps of spans `s0..s0 + count` (one where the digits lie apart) for `rows` rows of
/// x whose A starts at `a` (rows of `depth` digits), their B at `b`, into `totals`.
fn steps_of(
    stack: Stack,
    (a, rows, depth): (*const i8, usize, usize),
    (s0, count): (usize, usize),
    b: *const u8,
    totals: &mut [[i32; ROWS * COLUMNS]; STEPS],
) -> Steps {
    let (c, c_step) = (totals.as_mut_ptr().cast(), ROWS * COLUMNS * 4);
    match stack {
        Stack::Both => {
            let a_step = 2 * rows * depth;
            let a = a.wrapping_add(s0 * a_step);
            let b_step = depth / BLOCK * CODES;
            Steps {
                a,
                a_step,
                b,
                b_step,
                c,
                c_step,
                count,
            }
        }
        Stack::Apart => {
            let a = a.wrapping_add(s0 * 2 * ROWS * depth);
            let (a_step, b_step, count) = (ROWS * depth, 0, 2);
            Steps {
                a,
                a_step,
                b,
                b_step,
                c,
                c_step,
                count,
            }
        }
    }
}

/// Span `s`'s totals, `high` and `low` digits' (rows of [`COLUMNS`]), folded into each row's
/// accumulator `s % 4` with the tile's scales and the span's unit.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn fold_span<const KIND: u32, P: Wide16>(
    tile: &Tile<P>,
    acts: &Activations,
    (m0, rows, s): (usize, usize, usize),
    (high, low): (&[i32], &[i32]),
    offsets: &[super::super::Totals],
    acc: &mut [[__m512; 4]; ROWS],
) {
    let (blocks, b) = (acts.k / BLOCK, s * tile.span);
    let sc = P::load16(tile.scales.add((b >> tile.shift) * WIDTH));
    let sc = match P::FLOAT {
        true => _mm512_mul_ps(sc, _mm512_set1_ps(0.5)),
        false => sc,
    };
    for (r, acc) in acc.iter_mut().enumerate().take(rows) {
        let h = _mm512_loadu_si512(high.as_ptr().add(r * COLUMNS) as *const __m512i);
        let l = _mm512_loadu_si512(low.as_ptr().add(r * COLUMNS) as *const __m512i);
        let t = _mm512_add_epi32(_mm512_slli_epi32::<{ DIGIT_SHIFT }>(h), l);
        let m = m0 + r;
        // No closure here (`bool::then`): it would not inline into these features. E2M1
        // codes come in spans of one block.
        let offset = match KIND {
            E2M1 => Some(offsets[m * blocks + b]),
            _ => None,
        };
        let unit = acts.units[m * blocks + b];
        acc[s % 4] = fold_total(acc[s % 4], sc, (t, unit), (offset, None));
    }
}
