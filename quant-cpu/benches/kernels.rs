//! The kernels alone, with SmolLM2-135M's shapes: weight bytes read per second for a 1-, 2-, 4-
//! and 8-row product (decode), and for a 128-row one (prefill) GFLOP/s beside `cblas_sgemm` on
//! the same weight dequantized to f32 (what the f32 mode runs). First, MLX's float modes beside
//! affine 4- and 8-bit on one decode shape.
//!
//! `cargo bench -p quant-cpu --bench kernels` (a benchmark, never run by CI).

use std::time::{Duration, Instant};

use quant_cpu::kernel::{self, Format, Mode, Operands, Params};

/// Weight shapes (n, k) of one SmolLM2-135M layer, and its tied head.
const SHAPES: [(&str, usize, usize); 3] = [
    ("mlp up (1536x576)", 1536, 576),
    ("mlp down (576x1536)", 576, 1536),
    ("head (49152x576)", 49152, 576),
];

/// Seeded operands of one product.
struct Case {
    x: Vec<f32>,
    w: Vec<u8>,
    groups: Vec<f32>,
    /// A float mode's scale bytes (E8M0 about 1, E4M3 about 0.1).
    bytes: Vec<u8>,
    m: usize,
    n: usize,
    k: usize,
    format: Format,
}

impl Case {
    fn new(format: Format, m: usize, n: usize, k: usize) -> Case {
        Case {
            x: (0..m * k).map(|i| (i % 17) as f32 / 17.0 - 0.5).collect(),
            w: (0..n * format.row_bytes(k))
                .map(|i| (i * 131 % 251) as u8)
                .collect(),
            groups: (0..n * k / format.group)
                .map(|i| (i % 7) as f32 * 0.01)
                .collect(),
            bytes: (0..n * k / format.group)
                .map(|i| {
                    (i % 7) as u8
                        + if format.mode == Mode::Nvfp4 {
                            0x30
                        } else {
                            124
                        }
                })
                .collect(),
            m,
            n,
            k,
            format,
        }
    }

    fn ops(&self) -> Operands<'_> {
        let (scales, biases) = match self.format.mode {
            Mode::Affine => (Params::F32(&self.groups), Some(Params::F32(&self.groups))),
            Mode::Nvfp4 => (Params::E4m3(&self.bytes), None),
            _ => (Params::E8m0(&self.bytes), None),
        };
        Operands {
            x: &self.x,
            m: self.m,
            k: self.k,
            w: &self.w,
            scales,
            biases,
            n: self.n,
            format: self.format,
        }
    }

    /// Bytes a product reads of the weight as stored: codes, and bf16 scales and biases
    /// (affine) or one scale byte per group.
    fn stored_bytes(&self) -> usize {
        let groups = self.n * self.k / self.format.group;
        self.w.len()
            + match self.format.mode {
                Mode::Affine => 2 * 2 * groups,
                _ => groups,
            }
    }
}

/// Best of a few timed rounds of `f` run for about 0.3 s each: seconds per call.
fn time(mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..3 {
        let (start, mut calls) = (Instant::now(), 0u32);
        while start.elapsed() < Duration::from_millis(300) {
            f();
            calls += 1;
        }
        best = best.min(start.elapsed().as_secs_f64() / calls as f64);
    }
    best
}

/// A 128-row product through the panels against OpenBLAS on the dequantized weight.
fn prefill(format: Format, name: &str, n: usize, k: usize) {
    let m = 128;
    let case = Case::new(format, m, n, k);
    let mut out = vec![0f32; m * n];
    let packed = time(|| kernel::matmul(&case.ops(), &mut out));
    let dense: Vec<f32> = (0..n * k).map(|i| (i % 13) as f32 * 0.01).collect();
    // SAFETY: x [m, k], dense [n, k], out [m, n], all row-major.
    let f32_mode = time(|| unsafe { kernel::sgemm_nt(&case.x, m, k, &dense, n, &mut out, n) });
    let flops = 2.0 * (m * n * k) as f64;
    println!(
        "{}-bit g{} {name:<22} m={m}: packed {:>7.1} GFLOP/s, f32 sgemm {:>7.1} GFLOP/s ({:.2}x)",
        format.bits,
        format.group,
        flops / packed / 1e9,
        flops / f32_mode / 1e9,
        f32_mode / packed
    );
}

/// A few-row product through the decode kernels.
fn decode(format: Format, name: &str, n: usize, k: usize, m: usize) {
    let case = Case::new(format, m, n, k);
    let mut out = vec![0f32; m * n];
    let secs = time(|| kernel::rows(&case.ops(), &mut out));
    let bytes = case.stored_bytes() as f64;
    println!(
        "{:<6} {}-bit g{:<3} {name:<22} m={m}: {:>8.1} µs  {:>6.2} GB/s of weights  {:>6.2} G weights/s",
        format.mode.name(),
        format.bits,
        format.group,
        secs * 1e6,
        bytes / secs / 1e9,
        (n * k) as f64 / secs / 1e9
    );
}

/// An affine format the benchmark runs (all valid).
fn affine(bits: u32, group: usize) -> Format {
    Format::new(bits, group).expect("an affine format")
}

fn main() {
    println!("isa {:?}", kernel::isa());
    let (name, n, k) = SHAPES[0];
    let floats = Mode::ALL.into_iter().filter_map(Mode::float_format);
    for format in [affine(4, 64), affine(8, 64), affine(4, 32), affine(8, 32)]
        .into_iter()
        .chain(floats)
    {
        decode(format, name, n, k, 1);
    }
    for (name, n, k) in SHAPES {
        prefill(affine(4, 64), name, n, k);
    }
    for bits in [4, 8, 2, 3, 6] {
        for (name, n, k) in SHAPES {
            for m in [1, 2, 4, 8] {
                decode(affine(bits, 64), name, n, k, m);
            }
        }
    }
}
