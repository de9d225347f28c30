//! The attention kernel over [`Lanes`], written once: each set's entry point (`x86.rs`, and the
//! portable one) inlines it with its own features. No closures here: they would not inline
//! into the sets' code.

use std::ops::Range;

use super::lanes::{exp, fold, Lanes, LANES};
use super::Side;

/// Query rows of a block; a unit is two blocks of one head ([`super::attend_causal`]).
pub(super) const BLOCK: usize = 32;
/// Keys a step of the scores takes (two vectors), and a run of the transposed keys holds.
pub(super) const KEYS: usize = 2 * LANES;
/// The most rows a set's inner loops take at once ([`Lanes::ROWS`]).
pub(super) const MAX_ROWS: usize = 4;
/// The most 16-lane vectors of a value row a pass takes ([`Lanes::COLS`]).
const MAX_COLS: usize = 4;

/// The output [heads, len, dv], written by many threads, each its own rows.
pub(super) struct Out(pub *mut f32);

// SAFETY: each unit writes only its own head's query rows, and the caller waits for all.
unsafe impl Sync for Out {}
unsafe impl Send for Out {}

/// One call's operands, as every unit reads them.
pub(super) struct Task<'a> {
    /// Queries [heads, len, d], already scaled.
    pub q: &'a [f32],
    /// Keys [kv_heads, tp / KEYS, d, KEYS]: runs of each dimension's keys side by side.
    pub kt: &'a [f32],
    pub tp: usize,
    pub d: usize,
    pub values: Side<'a>,
    pub heads: usize,
    pub len: usize,
    pub out: Out,
}

impl Task<'_> {
    /// Keys before the first query: query i sees keys `0..=offset + i`.
    pub fn offset(&self) -> usize {
        self.values.len - self.len
    }

    /// Units of each head: pairs of blocks from both ends.
    pub fn pairs(&self) -> usize {
        self.len.div_ceil(BLOCK).div_ceil(2)
    }
}

/// Query rows `rows` of head `h`, `s` scratch for [`Lanes::ROWS`] rows of `tp` scores.
///
/// # Safety
/// The set's features; the task's shapes checked ([`super::attend_causal_with`]), and no
/// other thread writes these rows.
#[inline(always)]
pub(super) unsafe fn block<V: Lanes>(task: &Task, h: usize, rows: Range<usize>, s: &mut [f32]) {
    debug_assert!(s.len() >= V::ROWS * task.tp && V::ROWS <= MAX_ROWS && V::COLS <= MAX_COLS);
    let mut i = rows.start;
    while i < rows.end {
        let n = V::ROWS.min(rows.end - i);
        group::<V>(task, h, (i, n), s.as_mut_ptr());
        i += n;
    }
}

/// `n` query rows from `i0`: their scores, softmax and values.
#[inline(always)]
unsafe fn group<V: Lanes>(task: &Task, h: usize, (i0, n): (usize, usize), s: *mut f32) {
    let (d, tp) = (task.d, task.tp);
    let g = h / (task.heads / task.values.heads);
    let seen = task.offset() + i0 + 1;
    let mut q = [task.q.as_ptr(); MAX_ROWS];
    for (r, row) in q.iter_mut().enumerate().take(V::ROWS) {
        // The last row again where the group is short (computed, never stored).
        *row = task.q.as_ptr().add((h * task.len + i0 + r.min(n - 1)) * d);
    }
    let width = (seen + n - 1).next_multiple_of(KEYS);
    scores::<V>(&q, task.kt.as_ptr().add(g * d * tp), (d, tp, width), s);
    for r in 0..n {
        softmax::<V>(s.add(r * tp), seen + r);
    }
    weigh_values::<V>(task, (h, g), (i0, n), s);
}

/// `s[r][j] = q_r · k_j` for keys `0..width` (whole runs, within `tp`).
#[inline(always)]
unsafe fn scores<V: Lanes>(
    q: &[*const f32; MAX_ROWS],
    kt: *const f32,
    (d, tp, width): (usize, usize, usize),
    s: *mut f32,
) {
    let mut j = 0;
    while j < width {
        let run = kt.add(j * d);
        let mut acc = [[V::splat(0.0); 2]; MAX_ROWS];
        for c in 0..d {
            let k0 = V::load(run.add(c * KEYS));
            let k1 = V::load(run.add(c * KEYS + LANES));
            for r in 0..V::ROWS {
                let x = V::splat(*q[r].add(c));
                acc[r][0] = x.fma(k0, acc[r][0]);
                acc[r][1] = x.fma(k1, acc[r][1]);
            }
        }
        for (r, pair) in acc.iter().enumerate().take(V::ROWS) {
            pair[0].store(s.add(r * tp + j));
            pair[1].store(s.add(r * tp + j + LANES));
        }
        j += KEYS;
    }
}

/// Row `s[0..n]` of scores into probabilities: `exp(s − max) · (1 / Σ)`, the sum in lanes.
#[inline(always)]
unsafe fn softmax<V: Lanes>(s: *mut f32, n: usize) {
    let full = n / LANES * LANES;
    let mut top = V::splat(f32::NEG_INFINITY);
    let mut j = 0;
    while j < full {
        top = top.max(V::load(s.add(j)));
        j += LANES;
    }
    if full < n {
        top = top.max(V::load_part(s.add(full), n - full, f32::NEG_INFINITY));
    }
    let m = V::splat(fold(top.lanes(), max));
    let mut sum = V::splat(0.0);
    j = 0;
    while j < full {
        let e = exp(V::load(s.add(j)).sub(m));
        e.store(s.add(j));
        sum = sum.add(e);
        j += LANES;
    }
    if full < n {
        let e = exp(V::load_part(s.add(full), n - full, 0.0).sub(m));
        e.store_part(s.add(full), n - full);
        sum = sum.add(V::load_part(s.add(full), n - full, 0.0));
    }
    let inv = V::splat(1.0 / fold(sum.lanes(), add));
    j = 0;
    while j < full {
        V::load(s.add(j)).mul(inv).store(s.add(j));
        j += LANES;
    }
    if full < n {
        let p = V::load_part(s.add(full), n - full, 0.0).mul(inv);
        p.store_part(s.add(full), n - full);
    }
}

fn max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

fn add(a: f32, b: f32) -> f32 {
    a + b
}

/// `out[h, i0 + r] = Σ_j p[r][j] · v_j` over the keys row r sees, in order of j.
#[inline(always)]
unsafe fn weigh_values<V: Lanes>(
    task: &Task,
    (h, g): (usize, usize),
    (i0, n): (usize, usize),
    p: *const f32,
) {
    let v = &task.values;
    let mut c0 = 0;
    while c0 < v.width {
        let w = (v.width - c0).min(V::COLS * LANES);
        let at = Pass {
            values: v.data.as_ptr().add(g * v.head_stride + c0),
            out: task.out.0.add((h * task.len + i0) * v.width + c0),
            w,
        };
        // Whole vectors (the usual head widths) without a test per vector.
        match w == V::COLS * LANES {
            true => pass::<V, true>(task, &at, (i0, n), p),
            false => pass::<V, false>(task, &at, (i0, n), p),
        }
        c0 += w;
    }
}

/// Where a pass over the keys reads its `w` columns of values and writes its outputs.
struct Pass {
    values: *const f32,
    out: *mut f32,
    w: usize,
}

/// One pass over the keys for `w` columns of the group's outputs (`FULL`: `w` fills
/// [`Lanes::COLS`] vectors).
#[inline(always)]
unsafe fn pass<V: Lanes, const FULL: bool>(
    task: &Task,
    at: &Pass,
    (i0, n): (usize, usize),
    p: *const f32,
) {
    let (stride, w) = (task.values.row_stride, at.w);
    let seen = task.offset() + i0 + 1;
    let mut acc = [[V::splat(0.0); MAX_COLS]; MAX_ROWS];
    // Every row sees keys 0..seen; row r also sees the r after them.
    for j in 0..seen {
        let vj = load_cols::<V, FULL>(at.values.add(j * stride), w);
        for (r, row) in acc.iter_mut().enumerate().take(V::ROWS) {
            weigh::<V, FULL>(row, V::splat(*p.add(r * task.tp + j)), &vj, w);
        }
    }
    for (r, row) in acc.iter_mut().enumerate().take(n).skip(1) {
        for j in seen..seen + r {
            let vj = load_cols::<V, FULL>(at.values.add(j * stride), w);
            weigh::<V, FULL>(row, V::splat(*p.add(r * task.tp + j)), &vj, w);
        }
    }
    let width = task.values.width;
    for (r, row) in acc.iter().enumerate().take(n) {
        store_cols::<V>(row, at.out.add(r * width), w);
    }
}

/// `acc[k] = fma(x, vj[k], acc[k])` for the vectors of `w` columns.
#[inline(always)]
unsafe fn weigh<V: Lanes, const FULL: bool>(
    acc: &mut [V; MAX_COLS],
    x: V,
    vj: &[V; MAX_COLS],
    w: usize,
) {
    for k in 0..V::COLS {
        if FULL || k * LANES < w {
            acc[k] = x.fma(vj[k], acc[k]);
        }
    }
}

/// The `w` values at `at` as vectors (past `w`, zeros, never read from memory).
#[inline(always)]
unsafe fn load_cols<V: Lanes, const FULL: bool>(at: *const f32, w: usize) -> [V; MAX_COLS] {
    let mut v = [V::splat(0.0); MAX_COLS];
    for (k, lane) in v.iter_mut().enumerate().take(V::COLS) {
        let from = k * LANES;
        if FULL || from + LANES <= w {
            *lane = V::load(at.add(from));
        } else if from < w {
            *lane = V::load_part(at.add(from), w - from, 0.0);
        }
    }
    v
}

#[inline(always)]
unsafe fn store_cols<V: Lanes>(row: &[V; MAX_COLS], at: *mut f32, w: usize) {
    for (k, lane) in row.iter().enumerate().take(V::COLS) {
        let from = k * LANES;
        if from + LANES <= w {
            lane.store(at.add(from));
        } else if from < w {
            lane.store_part(at.add(from), w - from);
        }
    }
}
