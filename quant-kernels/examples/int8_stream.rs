//! Decode-step products on weights far beyond the caches, as a large model's decode reads
//! them: `COPIES` matrices (default 48 of 3072 x 8192 at 4 bits, 0.6 GB) multiplied in turn
//! by the integer kernels with every helper thread, once on small pages and once on huge ones
//! (Linux), alternating with a plain 2-thread read of the same bytes (what the memory gives at
//! that moment; the machine's rate drifts).
//!
//!   cargo run --release -p quant-kernels --example int8_stream
//!   SHAPE=3072x8192 COPIES=48 BITS=4 TILES=1 ...
//!
//! `TILES=1` reads the codes as tiles (the layout the x86-64 kernels load them into;
//! the bytes are random, so only the speed means anything). `PARAMS=own` gives each copy
//! its own scales and biases, read from memory as a model's are. The plain read is timed as
//! 1, 2, 4 and 8 streams a thread.

mod common;

use quant_kernels::{int8, Format, FormatError, Layout, Operands, Params};
use std::time::Instant;

fn var(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The whole 2 MiB spans of `v` moved onto huge pages, as the backend does with weights.
#[cfg(target_os = "linux")]
fn collapse(v: &[u8]) {
    const HUGE: usize = 2 << 20;
    let at = (v.as_ptr() as usize).next_multiple_of(HUGE);
    let len = (v.as_ptr() as usize + v.len()).saturating_sub(at) / HUGE * HUGE;
    // SAFETY: the range lies inside `v`; the calls change how its pages are mapped only.
    let done = unsafe {
        libc::madvise(at as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        libc::madvise(at as *mut libc::c_void, len, libc::MADV_COLLAPSE)
    };
    if done != 0 {
        eprintln!("MADV_COLLAPSE: {}", std::io::Error::last_os_error());
    }
}

#[cfg(not(target_os = "linux"))]
fn collapse(_: &[u8]) {}

fn main() -> Result<(), FormatError> {
    let shape = std::env::var("SHAPE").unwrap_or("3072x8192".into());
    let (k, n) = shape
        .split_once('x')
        .and_then(|(k, n)| Some((k.parse().ok()?, n.parse().ok()?)))
        .unwrap_or((3072, 8192));
    let (copies, bits) = (var("COPIES", 48), var("BITS", 4) as u32);
    let format = match var("TILES", 0) {
        0 => Format::new(bits, 64)?,
        _ => Format::new(bits, 64)?.with_layout(Layout::Tiles),
    };
    let make = |huge: bool| -> Vec<Vec<u8>> {
        (0..copies)
            .map(|c| {
                let len = n * format.row_bytes(k);
                let mut v: Vec<u8> = Vec::with_capacity(len);
                v.extend((0..len).map(|i| ((i * 2_654_435_761 + c) >> 13) as u8));
                if huge {
                    collapse(&v);
                }
                v
            })
            .collect()
    };
    let sets = [make(false), make(true)];
    let scale = |i: usize| half::bf16::from_f32(0.01 + (i % 7) as f32 * 1e-3).to_bits();
    // One set of scales and biases for all copies, in the caches, unless `PARAMS=own`.
    let own = std::env::var("PARAMS").is_ok_and(|v| v == "own");
    let params: Vec<(Vec<u16>, Vec<u16>)> = (0..if own { copies } else { 1 })
        .map(|c| {
            let v: Vec<u16> = (0..n * k / 64).map(|i| scale(i + c)).collect();
            (v.clone(), v)
        })
        .collect();
    let x: Vec<f32> = (0..k)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let mut out = vec![0f32; n];
    let bytes = (copies * (sets[0][0].len() + params[0].0.len() * 4)) as f64;
    for round in 0..6 {
        for streams in [1, 2, 4, 8] {
            let t = Instant::now();
            std::hint::black_box(common::plain_read(
                &sets[0].iter().map(|m| &m[..]).collect::<Vec<_>>(),
                streams,
            ));
            let gb = (copies * sets[0][0].len()) as f64 / t.elapsed().as_secs_f64() / 1e9;
            println!("round {round} plain read, {streams} streams: {gb:.1} GB/s");
        }
        for (pages, w) in ["small", "huge"].iter().zip(&sets) {
            let t = Instant::now();
            for (c, w) in w.iter().enumerate() {
                let (s, b) = &params[c % params.len()];
                let ops = Operands {
                    x: &x,
                    m: 1,
                    k,
                    w,
                    scales: Params::Bf16(s),
                    biases: Some(Params::Bf16(b)),
                    n,
                    format,
                };
                int8::rows(&ops, &mut out);
            }
            let gb = bytes / t.elapsed().as_secs_f64() / 1e9;
            let set = int8::isa().name();
            println!(
                "round {round} {bits}-bit {k}x{n} x{copies} {set}, {pages} pages: {gb:.1} GB/s"
            );
        }
    }
    Ok(())
}
