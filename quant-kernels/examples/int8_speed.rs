//! The integer kernels against the f32 ones on one row of x (a decode step), per shape:
//! the fastest of many single calls each, alternating, so that a busy machine disturbs the
//! comparison less.
//!
//!   MLX_DISTRIBUTED_GEMM_THREADS=1 cargo run --release -p quant-kernels --example int8_speed
//!   SHAPES=576x1536,2048x8192 ...   (k x n; the default is SmolLM2-135M's and a 1.6 B model's)
//!   ROWS=128 ...   (rows of x: a prefill's, where the f32 side takes the dequantized panels)
//!   FORMATS=4,mxfp4 ...   (affine bits at group 64, or float modes; the default: all that
//!   the integer path takes)
//!
//! At 4 rows or more it also times the AMX kernel with its tile steps left out (they only
//! write zeros where the totals go). That call makes x ready in fresh buffers each time, so
//! it counts more than what the kernel does besides the tiles in a model's steady decode.

use quant_kernels::{int8, Format, FormatError, Mode, Operands, Params};
use std::time::Instant;

const DEFAULT: [(usize, usize); 5] = [
    (576, 1536),
    (1536, 576),
    (576, 576),
    (2048, 8192),
    (8192, 2048),
];

fn shapes() -> Vec<(usize, usize)> {
    let given = std::env::var("SHAPES").unwrap_or_default();
    let parsed: Option<Vec<(usize, usize)>> = given
        .split(',')
        .map(|s| {
            let (k, n) = s.split_once('x')?;
            Some((k.parse().ok()?, n.parse().ok()?))
        })
        .collect();
    parsed.unwrap_or(DEFAULT.to_vec())
}

/// The f32 product `matmul` picks (the panels beyond 16 rows) where the example links a BLAS
/// (x86-64 Linux); elsewhere the few-row kernels.
fn f32_product(ops: &Operands, out: &mut [f32]) {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    quant_kernels::matmul(ops, out);
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    quant_kernels::rows(ops, out);
}

/// The fastest of `reps` calls of the f32 kernel and of the integer one, in seconds.
fn time(ops: &Operands, reps: usize) -> (f64, f64) {
    let mut out = vec![0f32; ops.m * ops.n];
    let (mut f32_best, mut int8_best) = (f64::MAX, f64::MAX);
    for _ in 0..reps {
        let t = Instant::now();
        f32_product(ops, &mut out);
        f32_best = f32_best.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        int8::rows(ops, &mut out);
        int8_best = int8_best.min(t.elapsed().as_secs_f64());
    }
    (f32_best, int8_best)
}

/// The formats measured: `FORMATS=4,8,mxfp4` picks some (affine bits, or a float mode's
/// name); the default is every format the integer path takes.
fn formats() -> Result<Vec<Format>, FormatError> {
    let given = std::env::var("FORMATS").unwrap_or("2,3,4,5,6,8,mxfp4,nvfp4".into());
    let format = |name: &str| match (Mode::parse(name), name.parse::<u32>()) {
        (Some(mode), _) => mode.float_format().ok_or(FormatError {
            mode,
            bits: 0,
            group: 0,
        }),
        (None, Ok(bits)) => Format::new(bits, 64),
        (None, Err(_)) => Format::new(0, 64),
    };
    given.split(',').map(format).collect()
}

/// Scales (bf16 bits, or the float modes' bytes) of `groups` groups, and the affine biases.
struct Params16 {
    halves: Vec<u16>,
    bytes: Vec<u8>,
}

impl Params16 {
    fn new(groups: usize) -> Params16 {
        let scale = |i: usize| half::bf16::from_f32(0.01 + (i % 7) as f32 * 1e-3).to_bits();
        Params16 {
            halves: (0..groups).map(scale).collect(),
            bytes: (0..groups).map(|i| 0x30 + (i % 7) as u8).collect(),
        }
    }

    fn of(&self, mode: Mode) -> (Params<'_>, Option<Params<'_>>) {
        match mode {
            Mode::Mxfp4 | Mode::Mxfp8 => (Params::E8m0(&self.bytes), None),
            Mode::Nvfp4 => (Params::E4m3(&self.bytes), None),
            Mode::Affine => (Params::Bf16(&self.halves), Some(Params::Bf16(&self.halves))),
        }
    }
}

/// The integer kernel on the weights in tiles (where they can be), fastest of many calls.
fn tiled(ops: &Operands, params: &Params16) -> Option<f64> {
    use int8::tiles;
    if !tiles::takes(ops.format, ops.n) || !tiles::wanted() {
        return None;
    }
    let mut w = vec![0u8; ops.w.len()];
    tiles::tile_codes(ops.format, (ops.n, ops.k), ops.w, &mut w);
    let groups = ops.k / ops.format.group;
    let mut halves = params.halves.clone();
    tiles::tile_params((ops.n, groups), &params.halves, &mut halves);
    let mut bytes = params.bytes.clone();
    tiles::tile_params((ops.n, groups), &params.bytes, &mut bytes);
    let tiled = Params16 { halves, bytes };
    let (scales, biases) = tiled.of(ops.format.mode);
    let ops = Operands {
        w: &w,
        scales,
        biases,
        format: ops.format.with_layout(quant_kernels::Layout::Tiles),
        ..*ops
    };
    let reps = (400_000_000 / (ops.m * ops.n * ops.k)).max(10);
    let best = fastest(reps, |out| int8::rows(&ops, out), ops.m * ops.n);
    #[cfg(target_arch = "x86_64")]
    if ops.m >= 4 && ops.format.group >= 32 && int8::isa() == int8::Isa::Avx512Vnni {
        let rest = fastest(
            reps,
            |out| int8::rows_on_amx(&ops, out, &mut Idle),
            ops.m * ops.n,
        );
        println!(
            "  the AMX kernel without its tile steps: {:.1} us, {:.2}x the tiled kernel",
            rest * 1e6,
            best / rest
        );
    }
    Some(best)
}

/// The fastest of `reps` calls of `product`, in seconds.
fn fastest(reps: usize, product: impl Fn(&mut [f32]), len: usize) -> f64 {
    let mut out = vec![0f32; len];
    let mut best = f64::MAX;
    for _ in 0..reps {
        let t = Instant::now();
        product(&mut out);
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
}

/// A tile unit that only writes zeros where the totals go (as `tilestored` writes them).
#[cfg(target_arch = "x86_64")]
struct Idle;

#[cfg(target_arch = "x86_64")]
impl quant_kernels::amx::TileUnit for Idle {
    unsafe fn configure(&mut self, rows: usize, depth: usize) {
        assert!(rows <= quant_kernels::amx::ROWS && depth <= quant_kernels::amx::DEPTH);
    }

    unsafe fn steps(&mut self, s: &quant_kernels::amx::Steps) {
        let n = quant_kernels::amx::ROWS * quant_kernels::amx::COLUMNS;
        for i in 0..s.count {
            std::ptr::write_bytes(s.c.byte_add(i * s.c_step), 0, n);
        }
    }

    unsafe fn release(&mut self) {}
}

fn main() -> Result<(), FormatError> {
    let m: usize = std::env::var("ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for format in formats()? {
        for (k, n) in shapes() {
            let w: Vec<u8> = (0..n * format.row_bytes(k))
                .map(|i| ((i * 2_654_435_761) >> 13) as u8)
                .collect();
            let params = Params16::new(n * k / format.group);
            let (scales, biases) = params.of(format.mode);
            let x: Vec<f32> = (0..m * k)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                .collect();
            let ops = Operands {
                x: &x,
                m,
                k,
                w: &w,
                scales,
                biases,
                n,
                format,
            };
            let (f, i) = time(&ops, (400_000_000 / (m * n * k)).max(10));
            if let Some(t) = tiled(&ops, &params) {
                println!("  tiles: {:.1} us, {:.2}x the rows", t * 1e6, i / t);
            }
            let per_group = if biases.is_some() { 4 } else { 1 };
            let gb = (w.len() + scales.len() * per_group) as f64 / 1e9;
            let name = match format.mode {
                Mode::Affine => format!("{}-bit", format.bits),
                mode => mode.name().to_string(),
            };
            println!(
                "{name} k={k} n={n}: f32 {:.1} us ({:.1} GB/s), int8 [{}] {:.1} us ({:.1} GB/s): {:.2}x",
                f * 1e6,
                gb / f,
                int8::isa().name(),
                i * 1e6,
                gb / i,
                f / i
            );
        }
    }
    Ok(())
}
