//! Causal attention of one sequence's queries (a prefill) for `cpu_numerics:int8`: each query
//! attends over only the keys it sees, and (head, query block) units are shared over
//! skinny-gemm's threads. The exact mode keeps MLX's attention (the BLAS over every query's
//! scores with every key, then the mask), which does twice the work on one thread.
//!
//! One query row at position p (its head's keys `k`, values `v`) takes one fixed order:
//! - `s_j` = an FMA chain over the head's dimensions `c` (`s = fma(q_c, k_jc, s)` from 0), j ≤ p;
//! - `m = max s_j`; `e_j = exp(s_j − m)` (MLX's polynomial); their sum in 16 lanes (lane
//!   `j mod 16`), folded in halves;
//! - `o_c` = an FMA chain over j of `(e_j · (1 / sum)) · v_jc` from 0.
//!
//! So a row's bits depend only on its query and the keys and values it sees: not on the
//! prompt's length or chunks, the threads, or the vector set ([`lanes`]).

mod kernel;
pub(crate) mod lanes;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;

use kernel::{Task, BLOCK, KEYS};
use lanes::Portable;

/// One side of a sequence's cache (keys or values): `heads` heads of `len` rows of `width`
/// values, row `r` of head `h` at `data[h * head_stride + r * row_stride..][..width]`.
#[derive(Clone, Copy)]
pub struct Side<'a> {
    pub data: &'a [f32],
    pub heads: usize,
    pub len: usize,
    pub width: usize,
    pub head_stride: usize,
    pub row_stride: usize,
}

impl Side<'_> {
    fn fits(&self) -> bool {
        let last = (self.heads.max(1) - 1) * self.head_stride
            + (self.len.max(1) - 1) * self.row_stride
            + self.width;
        self.heads > 0 && self.len > 0 && self.width > 0 && self.data.len() >= last
    }
}

/// The vector sets the kernel runs on, best first here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Set {
    Avx512,
    Avx2,
    Portable,
}

impl Set {
    /// The set [`attend_causal`] takes: the f32 kernels' ([`crate::isa`]), so that
    /// `MLX_DISTRIBUTED_QUANT_KERNELS` caps it too.
    pub fn here() -> Set {
        match crate::isa() {
            crate::Isa::Avx512 => Set::Avx512,
            crate::Isa::Avx2 => Set::Avx2,
            crate::Isa::Neon | crate::Isa::Scalar => Set::Portable,
        }
    }

    /// Whether this CPU has a vector set for the kernel: the portable lanes are a reference,
    /// far slower than MLX's attention through the BLAS.
    pub fn vectorized() -> bool {
        Set::here() != Set::Portable
    }

    /// Every set this CPU runs.
    pub fn available() -> Vec<Set> {
        [Set::Avx512, Set::Avx2, Set::Portable]
            .into_iter()
            .filter(|&s| s.runs_here())
            .collect()
    }

    fn runs_here(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Set::Avx512 => crate::x86::avx512::available(),
            #[cfg(target_arch = "x86_64")]
            Set::Avx2 => crate::x86::available(),
            Set::Portable => true,
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// `out[h, i] = softmax(q[h, i] · k[g]ᵀ over keys 0..=i + T − L) · v[g]`, g = h's kv head, for
/// `q` [heads, len, d] already scaled, keys [kv_heads, T, d] and values [kv_heads, T, dv]
/// (T ≥ len); `out` [heads, len, dv].
pub fn attend_causal(q: &[f32], heads: usize, keys: Side, values: Side, out: &mut [f32]) {
    attend_causal_with(Set::here(), q, heads, keys, values, out)
}

/// [`attend_causal`] on the set `set` (which this CPU must run).
pub fn attend_causal_with(
    set: Set,
    q: &[f32],
    heads: usize,
    keys: Side,
    values: Side,
    out: &mut [f32],
) {
    assert!(keys.fits() && values.fits(), "the sides hold their rows");
    assert!(
        keys.heads == values.heads && keys.len == values.len && heads.is_multiple_of(keys.heads),
        "keys and values of one kv head count and length, dividing the query heads"
    );
    let (d, dv) = (keys.width, values.width);
    let len = q.len() / (heads * d);
    assert!(
        len > 0 && len <= keys.len && q.len() == heads * len * d && out.len() >= heads * len * dv,
        "queries [heads, len <= T, d] and room for [heads, len, dv] out"
    );
    assert!(set.runs_here(), "the CPU runs {set:?}");
    let tp = keys.len.next_multiple_of(KEYS);
    let mut kt = vec![0.0f32; keys.heads * d * tp];
    transpose_keys(&keys, tp, &mut kt);
    let task = Task {
        q,
        kt: &kt,
        tp,
        d,
        values,
        heads,
        len,
        out: kernel::Out(out.as_mut_ptr()),
    };
    share_units(&task, &|unit| run_unit(set, &task, unit));
}

/// Keys [kv_heads, T, d] as [kv_heads, tp / KEYS, d, KEYS]: a run of [`KEYS`] keys' values of
/// each dimension side by side (so that a run's scores read one contiguous span), zero past T.
fn transpose_keys(keys: &Side, tp: usize, kt: &mut [f32]) {
    let d = keys.width;
    for (g, head) in kt.chunks_exact_mut(d * tp).enumerate() {
        for j in 0..keys.len {
            let row = &keys.data[g * keys.head_stride + j * keys.row_stride..][..d];
            let run = &mut head[j / KEYS * d * KEYS..][..d * KEYS];
            for (c, &k) in row.iter().enumerate() {
                run[c * KEYS + j % KEYS] = k;
            }
        }
    }
}

/// Runs `unit(u)` for every unit, shared over the helper threads when the work is big enough.
/// A unit is a head's pair of query blocks from both ends (so every unit costs about as much
/// as any other); the skinny-gemm pool splits in whole runs of 4, so unit u is columns
/// `4u..4u + 4`.
fn share_units(task: &Task, unit: &(dyn Fn(usize) + Sync)) {
    let units = task.heads * task.pairs();
    let seen = task.offset() + task.len / 2 + 1;
    let macs = task.heads * task.len * seen * (task.d + task.values.width);
    skinny_gemm::share(4 * units, macs, &|n0, n1| {
        for u in n0 / 4..n1 / 4 {
            unit(u);
        }
    });
}

fn run_unit(set: Set, task: &Task, unit: usize) {
    let (h, pair) = (unit / task.pairs(), unit % task.pairs());
    let blocks = task.len.div_ceil(BLOCK);
    let last = blocks - 1 - pair;
    for b in [pair, last] {
        let rows = b * BLOCK..((b + 1) * BLOCK).min(task.len);
        run_block(set, task, h, rows);
        if last == pair {
            break;
        }
    }
}

thread_local! {
    /// A thread's scores of one group of query rows, kept between calls.
    static SCORES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn run_block(set: Set, task: &Task, h: usize, rows: std::ops::Range<usize>) {
    SCORES.with_borrow_mut(|s| {
        s.resize(kernel::MAX_ROWS * task.tp, 0.0);
        match set {
            // SAFETY: `attend_causal_with` checked that the CPU runs the set, and the shapes.
            #[cfg(target_arch = "x86_64")]
            Set::Avx512 => unsafe { x86::block_avx512(task, h, rows, s) },
            #[cfg(target_arch = "x86_64")]
            Set::Avx2 => unsafe { x86::block_avx2(task, h, rows, s) },
            // SAFETY: as above; the portable lanes need nothing.
            _ => unsafe { kernel::block::<Portable>(task, h, rows, s) },
        }
    })
}
