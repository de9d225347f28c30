//! Two variants of a change compared inside one process. On a shared machine the memory's rate
//! drifts by a fifth between runs, so an A/B of two binaries cannot resolve a few percent.
//! With `MLX_DISTRIBUTED_AB=1` the process switches between variant 0 and variant 1 every
//! [`SLICE_MS`] ms, and the pool sums each variant's time over the work it shares, per element
//! its caller names (a product's weight elements): the drift falls on both alike. A change
//! under test reads [`variant`] (`if skinny_gemm::ab::variant() == 1 { new } else { old }`);
//! nothing in the code keeps one.
//!
//! Every [`REPORT_ELEMENTS`] weight elements of variant 1 a line goes to stderr:
//! `ab: variant 0 <ns> ns/element, variant 1 <ns> ns/element, ratio <1 over 0>`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::Instant;

/// Milliseconds each variant runs before the other takes over: a few decode steps' products.
pub const SLICE_MS: u128 = 37;
/// Weight elements of variant 1 between two reports (about 2 s of a 3.87 B model's decode).
const REPORT_ELEMENTS: u64 = 4_000_000_000;

/// When the comparison started, if `MLX_DISTRIBUTED_AB=1`.
fn started() -> Option<Instant> {
    static START: OnceLock<Option<Instant>> = OnceLock::new();
    *START.get_or_init(|| match std::env::var("MLX_DISTRIBUTED_AB").as_deref() {
        Ok("1") => Some(Instant::now()),
        Ok("0") | Err(_) => None,
        Ok(other) => {
            eprintln!("ab: MLX_DISTRIBUTED_AB={other:?} is not 0 or 1; no comparison runs");
            None
        }
    })
}

/// The variant running now: 0 or 1 in turn with `MLX_DISTRIBUTED_AB=1`, else always 0.
pub fn variant() -> usize {
    started().map_or(0, |t| (t.elapsed().as_millis() / SLICE_MS % 2) as usize)
}

/// Nanoseconds and weight elements of each variant's shared products.
static TOTALS: [[AtomicU64; 2]; 2] = [
    [AtomicU64::new(0), AtomicU64::new(0)],
    [AtomicU64::new(0), AtomicU64::new(0)],
];

/// A shared product timed from its start: its variant and start, if the comparison is on.
pub(crate) struct Timed(Option<(usize, Instant)>);

impl Timed {
    pub(crate) fn start() -> Timed {
        Timed(started().map(|_| (variant(), Instant::now())))
    }

    /// Adds the product's time and `elements` to its variant's totals, reporting now and then.
    pub(crate) fn finish(self, elements: usize) {
        let Some((v, at)) = self.0 else {
            return;
        };
        let nanos = at.elapsed().as_nanos() as u64;
        TOTALS[v][0].fetch_add(nanos, Relaxed);
        let before = TOTALS[v][1].fetch_add(elements as u64, Relaxed);
        if v == 1 && before / REPORT_ELEMENTS != (before + elements as u64) / REPORT_ELEMENTS {
            eprintln!("{}", report());
        }
    }
}

/// The report line from the totals so far.
fn report() -> String {
    let rate = |v: usize| {
        let elements = TOTALS[v][1].load(Relaxed).max(1) as f64;
        TOTALS[v][0].load(Relaxed) as f64 / elements
    };
    let (a, b) = (rate(0), rate(1));
    format!(
        "ab: variant 0 {a:.5} ns/element, variant 1 {b:.5} ns/element, ratio {:.4}",
        b / a
    )
}

#[cfg(test)]
mod tests {
    use super::variant;

    #[test]
    fn without_the_variable_every_product_is_variant_0() {
        // The test process does not set MLX_DISTRIBUTED_AB.
        if std::env::var_os("MLX_DISTRIBUTED_AB").is_none() {
            assert_eq!(variant(), 0);
        }
    }
}
