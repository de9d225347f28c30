//! Packed weights on transparent huge pages.
//!
//! A decode step reads every weight once, so on a model far beyond the caches each 4 KiB
//! page costs a TLB miss and a page walk. MLX's allocator gives a large block its own mapping
//! at any 4 KiB boundary, and kernels set THP to `madvise`, so its buffers stay on 4 KiB
//! pages. The integer kernel streamed 3072 x 8192 4-bit matrices 7-10% faster on 2 MiB pages
//! (`quant-kernels/examples/int8_stream.rs`, both kinds alternating in one run), and the
//! 3.87 B model of docs/benchmarks.md decoded 2.5-8% faster (3 rounds, alternating).
//! llama.cpp maps its GGUF, whose page cache the kernel keeps in large folios.
//!
//! MLX's CPU backend copies data it is handed into its own buffers, so a weight cannot be
//! placed at a 2 MiB boundary; instead the whole 2 MiB spans inside its buffer are collapsed
//! into huge pages in place (`MADV_COLLAPSE`, Linux 6.1). The first and last partial spans
//! stay on small pages: a 12.6 MB matrix keeps about 84% of its bytes on huge pages.

use mlx_rs::{Array, Dtype};

use crate::error::Result;

/// A huge page.
const HUGE: usize = 2 << 20;
/// Smaller buffers hold one whole span at most, or none.
const MIN_BYTES: usize = 2 * HUGE;

/// When `a` is packed codes (`uint32`), moves the whole 2 MiB spans of its buffer onto huge
/// pages, where the kernel can (evaluating `a` first, a no-op once loaded). Its values never
/// change; a kernel without THP, or memory too fragmented for a huge page, leaves the pages
/// as they were (said once in the log).
pub fn on_huge_pages(a: &Array) -> Result<()> {
    a.eval()?;
    if a.dtype() != Dtype::Uint32 || a.nbytes() < MIN_BYTES {
        return Ok(());
    }
    let data = a.as_slice::<u32>();
    let (start, end) = spans(data.as_ptr() as usize, std::mem::size_of_val(data));
    if end > start {
        collapse(start, end - start);
    }
    Ok(())
}

/// The whole 2 MiB spans of `len` bytes at `at`: `(first, end)`, empty when there is none.
fn spans(at: usize, len: usize) -> (usize, usize) {
    (at.next_multiple_of(HUGE), (at + len) / HUGE * HUGE)
}

#[cfg(target_os = "linux")]
fn collapse(at: usize, len: usize) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    let at = at as *mut libc::c_void;
    // SAFETY: the range lies inside a live buffer of MLX's; both calls only change how its
    // pages are mapped, never their contents.
    let done = unsafe {
        libc::madvise(at, len, libc::MADV_HUGEPAGE);
        libc::madvise(at, len, libc::MADV_COLLAPSE)
    };
    if done != 0 {
        let e = std::io::Error::last_os_error();
        WARNED.call_once(|| tracing::info!("weights stay on small pages: MADV_COLLAPSE: {e}"));
    }
}

#[cfg(not(target_os = "linux"))]
fn collapse(_: usize, _: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spans_are_the_whole_huge_pages_inside() {
        assert_eq!(spans(HUGE - 24, 3 * HUGE), (HUGE, 3 * HUGE));
        assert_eq!(spans(2 * HUGE, 2 * HUGE), (2 * HUGE, 4 * HUGE));
        let (start, end) = spans(HUGE + 1, HUGE);
        assert!(end <= start, "no whole span");
    }

    #[test]
    fn a_weight_keeps_its_values() -> Result<()> {
        let rows = (3 * HUGE + 123) / 7;
        let values: Vec<u32> = (0..rows as u32 * 7)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let a = Array::from_slice(&values, &[rows as i32, 7]);
        on_huge_pages(&a)?;
        assert_eq!(a.as_slice::<u32>(), &values[..]);
        let small = Array::from_slice(&[1u32, 2, 3], &[3]);
        on_huge_pages(&small)?;
        assert_eq!(small.as_slice::<u32>(), &[1, 2, 3]);
        Ok(())
    }
}
