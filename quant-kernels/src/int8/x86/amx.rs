//! The tiled weights' products on AMX tiles, for many rows of x. A block's totals for 16
//! rows of x and a tile's 16 weight rows are one [`TileUnit`] step: a `tdpbsud` a digit, the
//! x digits as A (rows `k` bytes apart, as they lie) and the block's codes as B, which is
//! the tiles' own layout with its lanes unpacked (8 bits: the weights as they lie; 4 bits and
//! E2M1: their nibbles split once a tile into a buffer). The float steps are the tiled
//! kernel's ([`fold_total`]), one output a lane, in its order: so the bits are every other
//! set's. `nvfp4` (two groups a block) stays on the tiled kernel.

use std::arch::x86_64::*;

use super::super::tiles::WIDTH;
use super::super::{group_shift, Activations, BLOCK, DIGIT_SHIFT};
use super::tiles::{fold_total, offsets, store, Wide16};
use super::{block_bytes, Walk, E2M1};
use crate::amx::{Amx, TileUnit, CODES, COLUMNS, ROWS};
use crate::Operands;

/// Whether tiled `ops` take the tiles: a whole A tile of rows of x or more, blocks of one
/// group each (not `nvfp4`), and a probe that found the tiles usable. From how many rows the
/// tiles pay is not measured: no machine here has AMX.
pub(super) fn takes(ops: &Operands) -> bool {
    ops.m >= ROWS && ops.format.group >= BLOCK && crate::amx::amx() == &Amx::Usable
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
    let mut split = vec![0u8; if KIND == 8 { 0 } else { blocks * CODES }];
    let mut configured = 0;
    for t in (cols.start / WIDTH)..(cols.end / WIDTH) {
        let tile = Tile {
            codes: operand_b::<KIND>(ops.w.as_ptr().add(t * tile_bytes), blocks, &mut split),
            scales: params.0.as_ptr().add(t * WIDTH * groups_k),
            shift: group_shift(ops.format),
        };
        for m0 in (0..ops.m).step_by(ROWS) {
            let rows = (ops.m - m0).min(ROWS);
            if rows != configured {
                unit.configure(rows);
                configured = rows;
            }
            let v = group::<KIND, P, U>(&tile, acts, (m0, rows), &offsets, unit);
            for (r, v) in v.into_iter().enumerate().take(rows) {
                store((ops, acts, out), params.1, (m0 + r, t), v);
            }
        }
    }
    if configured != 0 {
        unit.release();
    }
}

/// A tile's codes as B, block after block: the tile itself (8 bits), or its 4-byte words'
/// low nibbles as lanes 0..4 and high ones as lanes 4..8, split into `split` (4 bits; E2M1
/// codes as `2·v + 12`), as the tiled kernel's `lanes_of` reads them.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn operand_b<const KIND: u32>(
    codes: *const u8,
    blocks: usize,
    split: &mut [u8],
) -> *const u8 {
    if KIND == 8 {
        return codes;
    }
    let words = block_bytes(KIND) / 4;
    for b in 0..blocks {
        for w in 0..words {
            let v = _mm512_loadu_si512(codes.add((b * words + w) * 64) as *const __m512i);
            let [low, high] = super::avx512::nibble_split::<KIND>(v);
            let at = split.as_mut_ptr().add(b * CODES + w * 64);
            _mm512_storeu_si512(at as *mut __m512i, low);
            _mm512_storeu_si512(at.add(4 * 64) as *mut __m512i, high);
        }
    }
    split.as_ptr()
}

/// Rows `m0..m0 + rows` of x against a tile: each one's 16 outputs without the bias part
/// (the rest zeros). Block `b` folds into accumulator `b % 4`, as in the tiled kernel.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn group<const KIND: u32, P: Wide16, U: TileUnit>(
    tile: &Tile<P>,
    acts: &Activations,
    (m0, rows): (usize, usize),
    offsets: &[super::super::Totals],
    unit: &mut U,
) -> [__m512; ROWS] {
    let (k, blocks) = (acts.k, acts.k / BLOCK);
    let mut acc = [[_mm512_setzero_ps(); 4]; ROWS];
    let mut totals = [[0i32; ROWS * COLUMNS]; 2];
    let x = (acts.hi.as_ptr().add(m0 * k), acts.lo.as_ptr().add(m0 * k));
    for b in 0..blocks {
        let [hi, lo] = &mut totals;
        let digits = (x.0.add(b * BLOCK), x.1.add(b * BLOCK));
        let out = (hi.as_mut_ptr(), lo.as_mut_ptr());
        unit.block(digits, k, tile.codes.add(b * CODES), out);
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
