//! Weights on transparent huge pages.
//!
//! A decode step reads every weight once, so on a model far beyond the caches each 4 KiB
//! page costs a TLB miss and a page walk. MLX's allocator gives a large block its own mapping
//! at any 4 KiB boundary, and kernels set THP to `madvise`, so its buffers stay on 4 KiB
//! pages. The integer kernel streamed 3072 x 8192 4-bit matrices 7-10% faster on 2 MiB pages
//! (`quant-kernels/examples/int8_stream.rs`, both kinds alternating in one run).
//! llama.cpp maps its GGUF, whose page cache the kernel keeps in large folios.
//!
//! MLX's CPU backend copies data it is handed into its own buffers, so a weight cannot be
//! placed at a 2 MiB boundary. Instead every 2 MiB span that holds any of a weight's bytes is
//! collapsed into a huge page in place (`MADV_COLLAPSE`, Linux 6.1), neighbours' bytes
//! included: a collapse moves pages, never their contents. A span not wholly mapped stays as
//! it is. Collapsing only the spans inside each buffer left a third of a 3.87 B 4-bit model's
//! bytes (its smaller matrices, scales and biases) on small pages; with every span a weight
//! touches, 95% are on huge pages, and `worker generate` decoded it 7% faster in alternating
//! runs (docs/benchmarks.md). Arrays beside the weights may share a span: their pages move
//! too, and their bytes stay as they were.

use mlx_rs::Array;

use crate::error::Result;

/// A huge page.
const HUGE: usize = 2 << 20;
/// Smaller arrays (norms, biases of a few rows) are not worth a call.
const MIN_BYTES: usize = 64 << 10;

/// Moves every 2 MiB span holding any of `a`'s bytes onto a huge page, where the kernel can
/// (evaluating `a` first, a no-op once loaded). Its values never change; a kernel without
/// THP, or memory too fragmented for a huge page, leaves the pages as they were (said once
/// in the log).
pub fn on_huge_pages(a: &Array) -> Result<()> {
    a.eval()?;
    if a.nbytes() < MIN_BYTES {
        return Ok(());
    }
    // SAFETY: `a` is evaluated, so its data pointer is its buffer's; only the address is used.
    let at = unsafe { mlx_sys::mlx_array_data_uint8(a.as_ptr()) } as usize;
    for span in spans(at, a.nbytes()) {
        collapse(span);
    }
    Ok(())
}

/// The start of every 2 MiB span that `len` bytes at `at` touch.
fn spans(at: usize, len: usize) -> impl Iterator<Item = usize> {
    let (first, end) = (at / HUGE * HUGE, (at + len).next_multiple_of(HUGE));
    (first..end).step_by(HUGE)
}

#[cfg(target_os = "linux")]
fn collapse(span: usize) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    // SAFETY: the call only changes how the span's pages are mapped, never their contents;
    // a span with unmapped parts is refused (ENOMEM) and left alone.
    if unsafe { libc::madvise(span as *mut libc::c_void, HUGE, libc::MADV_COLLAPSE) } == 0 {
        return;
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::ENOMEM) {
        WARNED.call_once(|| tracing::info!("weights stay on small pages: MADV_COLLAPSE: {e}"));
    }
}

#[cfg(not(target_os = "linux"))]
fn collapse(_: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spans_are_every_huge_page_touched() {
        let all = |at, len| spans(at, len).collect::<Vec<_>>();
        assert_eq!(all(HUGE - 24, 3 * HUGE), [0, HUGE, 2 * HUGE, 3 * HUGE]);
        assert_eq!(all(2 * HUGE, 2 * HUGE), [2 * HUGE, 3 * HUGE]);
        assert_eq!(all(HUGE + 1, 8), [HUGE]);
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

    #[test]
    fn the_neighbours_in_a_span_keep_their_values() -> Result<()> {
        // Buffers of 96 KiB, made one after another, mostly share their spans.
        let values =
            |seed: u32| -> Vec<f32> { (0..24 * 1024).map(|i| (i ^ seed) as f32 * 0.5).collect() };
        let arrays: Vec<Array> = (0..40)
            .map(|s| Array::from_slice(&values(s), &[24 * 1024]))
            .collect();
        for a in arrays.iter().step_by(3) {
            on_huge_pages(a)?;
        }
        for (s, a) in arrays.iter().enumerate() {
            assert_eq!(a.as_slice::<f32>(), &values(s as u32)[..], "array {s}");
        }
        Ok(())
    }
}
