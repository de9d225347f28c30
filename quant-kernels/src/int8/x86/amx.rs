//! The tiled weights' products on AMX tiles, for many rows of x. A block's totals for 16
//! rows of x and a tile's 16 weight rows are one [`TileUnit`] step: a `tdpbsud` a digit, the
//! x digits as A (laid out as tiles, [`Activations::arrange_tiles`]) and the block's codes
//! as B, which is the tiles' own layout with its lanes unpacked (8 bits: the weights as they
//! lie; 4 bits and E2M1: their nibbles split, once a tile for many rows, a block at a time for
//! one A tile of rows). The float steps are the tiled kernel's ([`fold_total`]), one output a
//! lane, in its order: so the bits are every other set's. `nvfp4` (two groups a block) stays
//! on the tiled kernel.

use std::arch::x86_64::*;

use super::super::tiles::WIDTH;
use super::super::{group_shift, Activations, BLOCK, DIGIT_SHIFT};
use super::tiles::{fold_total, offsets, store, Wide16};
use super::{block_bytes, Walk, E2M1};
use crate::amx::{Amx, TileUnit, CODES, COLUMNS, ROWS};
use crate::Operands;

/// Whether tiled `ops` take the tiles: enough rows of x that they pay ([`min_rows`]), blocks
/// of one group each (not `nvfp4`), and a probe that found the tiles usable.
pub(super) fn takes(ops: &Operands) -> bool {
    let enough = ops.m >= min_rows(super::kind(ops.format));
    enough && ops.format.group >= BLOCK && crate::amx::amx() == &Amx::Usable
}

/// From how many rows of x the tiles beat the AVX-512 VNNI tiled kernel: 8 for 8-bit codes,
/// 12 for 4-bit and E2M1 ones, which B takes split (a block at a time at these rows), as that
/// kernel does. Measured on a 2-core Xeon with AMX (docs/design/cpu-kernels.md).
fn min_rows(kind: u32) -> usize {
    match kind {
        8 => 8,
        _ => 12,
    }
}

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
    codes: *const u8,
    /// Whether `codes` is B already (8 bits, or 4-bit codes split for the whole tile).
    as_b: bool,
    scales: *const P,
    shift: u32,
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
    let offsets = offsets::<KIND>(acts, ops.m * blocks);
    let tile_bytes = WIDTH * ops.format.row_bytes(ops.k);
    debug_assert!(acts.tiles_a.len() >= ops.m.div_ceil(ROWS) * ROWS * 2 * ops.k);
    // Many rows of x: each tile split once, for all of them; one A tile's: a block at a time.
    let whole = KIND != 8 && ops.m > ROWS;
    let mut split = vec![0u8; if whole { blocks * CODES } else { 0 }];
    let mut configured = 0;
    for t in (cols.start / WIDTH)..(cols.end / WIDTH) {
        let codes = ops.w.as_ptr().add(t * tile_bytes);
        let tile = Tile {
            codes: match whole {
                true => split_tile::<KIND>(codes, blocks, &mut split),
                false => codes,
            },
            as_b: KIND == 8 || whole,
            scales: params.0.as_ptr().add(t * WIDTH * groups_k),
            shift: group_shift(ops.format),
        };
        for m0 in (0..ops.m).step_by(ROWS) {
            let rows = (ops.m - m0).min(ROWS);
            if rows != configured {
                unit.configure(rows);
                configured = rows;
            }
            let a = acts.tiles_a.as_ptr().add(m0 * 2 * blocks * BLOCK);
            let v = group::<KIND, P, U>(&tile, (acts, a), (m0, rows), &offsets, unit);
            for (r, v) in v.into_iter().enumerate().take(rows) {
                store((ops, acts, out), params.1, (m0 + r, t), v);
            }
        }
    }
    if configured != 0 {
        unit.release();
    }
}

/// Block `b` of a tile as B: the block itself where the tile is B already, or its 4-byte
/// words' low nibbles as lanes 0..4 and high ones as lanes 4..8, split into `split` (4 bits;
/// E2M1 codes as `2·v + 12`), as the tiled kernel's `lanes_of` reads them. For one A tile of
/// rows a block at a time, just before its step: a whole tile's split B, written and read
/// once, left the L1 cache at large `k` (2048 x 8192, 16 rows: 3.3 against 2.4 ms).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn operand_b<const KIND: u32, P>(tile: &Tile<P>, b: usize, split: &mut Split) -> *const u8 {
    if tile.as_b {
        return tile.codes.add(b * CODES);
    }
    split_block::<KIND>(tile.codes, b, split.0.as_mut_ptr());
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

/// One block's B, split from 4-bit codes: a cache line's alignment, as a tile row is.
#[repr(align(64))]
struct Split([u8; CODES]);

/// Rows `m0..m0 + rows` of x against a tile: each one's 16 outputs without the bias part
/// (the rest zeros). Block `b` folds into accumulator `b % 4`, as in the tiled kernel.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn group<const KIND: u32, P: Wide16, U: TileUnit>(
    tile: &Tile<P>,
    (acts, a): (&Activations, *const i8),
    (m0, rows): (usize, usize),
    offsets: &[super::super::Totals],
    unit: &mut U,
) -> [__m512; ROWS] {
    let blocks = acts.k / BLOCK;
    let mut acc = [[_mm512_setzero_ps(); 4]; ROWS];
    let mut totals = [[0i32; ROWS * COLUMNS]; 2];
    let mut split = Split([0; CODES]);
    for b in 0..blocks {
        let codes = operand_b::<KIND, P>(tile, b, &mut split);
        let hi = a.add(b * 2 * ROWS * BLOCK);
        let [h, l] = &mut totals;
        let out = (h.as_mut_ptr(), l.as_mut_ptr());
        unit.block((hi, hi.add(ROWS * BLOCK)), BLOCK, codes, out);
        let s = P::load16(tile.scales.add((b >> tile.shift) * WIDTH));
        let s = match P::FLOAT {
            true => _mm512_mul_ps(s, _mm512_set1_ps(0.5)),
            false => s,
        };
        for (r, acc) in acc.iter_mut().enumerate().take(rows) {
            let h = _mm512_loadu_si512(totals[0].as_ptr().add(r * COLUMNS) as *const __m512i);
            let l = _mm512_loadu_si512(totals[1].as_ptr().add(r * COLUMNS) as *const __m512i);
            let t = _mm512_add_epi32(_mm512_slli_epi32::<{ DIGIT_SHIFT }>(h), l);
            let m = m0 + r;
            // No closure here (`bool::then`): it would not inline into these features.
            let offset = match KIND {
                E2M1 => Some(offsets[m * blocks + b]),
                _ => None,
            };
            let unit = acts.scales[m * blocks + b];
            acc[b % 4] = fold_total(acc[b % 4], s, (t, unit), (offset, None));
        }
    }
    let mut out = [_mm512_setzero_ps(); ROWS];
    for (out, a) in out.iter_mut().zip(&acc) {
        *out = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
    }
    out
}
