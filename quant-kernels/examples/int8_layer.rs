//! A large model's decode-step products in a layer's order (q, k, v, o, gate, up, down), each
//! with its own codes, scales and biases, as a model holds them: `LAYERS` layers of the 3.87 B
//! bench model's shapes (default 12, 0.6 GB at 4 bits), multiplied by the integer kernels (or
//! `EXACT=1`, the f32 ones) with every helper thread, alternating with a plain 2-thread read of
//! the same bytes (what the memory gives at that moment; the machine's rate drifts).
//!
//!   cargo run --release -p quant-kernels --example int8_layer
//!   LAYERS=12 DIMS=3072,768,8192 (hidden, k/v, MLP) ROUNDS=10 EXACT=1 ...
//!   TILES=1 ...   (the weights in tiles, as x86-64 machines load them)
//!   ROWS=2 ...    (rows of x a step: concurrent streams; default 1)
//!   MERGED=1 ...  (q, k and v one call and gate and up another, as the model calls them;
//!   the integer kernels only)

mod common;

use quant_kernels::{int8, Format, Operands, Params};
use std::time::Instant;

/// Rows of x each product multiplies (`ROWS`), read once: the products ask for it in the
/// timed loop.
fn rows() -> usize {
    static ROWS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *ROWS.get_or_init(|| var("ROWS", 1).max(1))
}

fn var(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One packed product's weights: codes, bf16 scales and biases (three arrays, three streams).
struct Packed {
    w: Vec<u8>,
    scales: Vec<u16>,
    biases: Vec<u16>,
    k: usize,
    n: usize,
}

impl Packed {
    fn new(k: usize, n: usize, seed: usize, format: Format) -> Packed {
        let len = n * format.row_bytes(k);
        let bf16 = |v: f32| half::bf16::from_f32(v).to_bits();
        let groups = n * k / format.group;
        Packed {
            w: (0..len)
                .map(|i| ((i * 2_654_435_761 + seed) >> 13) as u8)
                .collect(),
            scales: (0..groups)
                .map(|i| bf16(0.01 + (i % 7) as f32 * 1e-3))
                .collect(),
            biases: (0..groups)
                .map(|i| bf16(-0.01 + (i % 5) as f32 * 1e-3))
                .collect(),
            k,
            n,
        }
    }

    /// The same weights in tiles ([`int8::tiles`]).
    fn tiled(mut self, format: Format) -> Packed {
        let mut w = vec![0u8; self.w.len()];
        int8::tiles::tile_codes(format, (self.n, self.k), &self.w, &mut w);
        self.w = w;
        let groups = (self.n, self.k / format.group);
        for params in [&mut self.scales, &mut self.biases] {
            let mut tiled = params.clone();
            int8::tiles::tile_params(groups, params, &mut tiled);
            *params = tiled;
        }
        self
    }

    fn bytes(&self) -> usize {
        self.w.len() + 2 * (self.scales.len() + self.biases.len())
    }

    fn operands<'a>(&'a self, x: &'a [f32], format: Format) -> Operands<'a> {
        Operands {
            x: &x[..rows() * self.k],
            m: rows(),
            k: self.k,
            w: &self.w,
            scales: Params::Bf16(&self.scales),
            biases: Some(Params::Bf16(&self.biases)),
            n: self.n,
            format,
        }
    }

    fn multiply(&self, x: &[f32], out: &mut [f32], format: Format, exact: bool) {
        let ops = self.operands(x, format);
        match exact {
            true => quant_kernels::rows(&ops, out),
            false => int8::rows(&ops, out),
        }
    }
}

/// A layer's products as the model calls them: q, k and v one call, o alone, gate and up
/// one call, down alone (parts sharing x, [`int8::rows_many`]).
fn multiply_merged(layer: &[Packed], x: &[f32], out: &mut [f32], format: Format) {
    for parts in [&layer[0..3], &layer[3..4], &layer[4..6], &layer[6..7]] {
        let ops: Vec<Operands> = parts.iter().map(|p| p.operands(x, format)).collect();
        let mut rest = &mut out[..];
        let mut outs = Vec::with_capacity(parts.len());
        for p in parts {
            let (this, tail) = rest.split_at_mut(rows() * p.n);
            outs.push(this);
            rest = tail;
        }
        int8::rows_many(&ops, &mut outs);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let format = Format::new(var("BITS", 4) as u32, 64)?;
    let tiles = var("TILES", 0) == 1;
    let dims: Vec<usize> = std::env::var("DIMS")
        .unwrap_or("3072,768,8192".into())
        .split(',')
        .filter_map(|d| d.parse().ok())
        .collect();
    let [d, kv, mlp] = dims[..] else {
        return Err("DIMS is hidden,kv,mlp (three sizes)".into());
    };
    let shapes = [
        (d, d),
        (d, kv),
        (d, kv),
        (d, d),
        (d, mlp),
        (d, mlp),
        (mlp, d),
    ];
    let layers: Vec<Vec<Packed>> = (0..var("LAYERS", 12))
        .map(|l| {
            let each = shapes.iter().enumerate();
            each.map(|(i, &(k, n))| {
                let p = Packed::new(k, n, 7 * l + i, format);
                if tiles {
                    p.tiled(format)
                } else {
                    p
                }
            })
            .collect()
        })
        .collect();
    let exact = std::env::var("EXACT").is_ok_and(|v| v == "1");
    let bytes: usize = layers.iter().flatten().map(Packed::bytes).sum();
    let x: Vec<f32> = (0..rows() * d.max(mlp))
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let mut out = vec![0f32; rows() * (2 * mlp + d + 2 * kv)];
    let merged = var("MERGED", 0) == 1 && !exact;
    let kernels = if exact { "f32" } else { int8::isa().name() };
    let format = match tiles {
        true => format.with_layout(quant_kernels::Layout::Tiles),
        false => format,
    };
    for round in 0..var("ROUNDS", 10) {
        let t = Instant::now();
        std::hint::black_box(common::plain_read(
            &layers
                .iter()
                .flatten()
                .map(|p| &p.w[..])
                .collect::<Vec<_>>(),
            1,
        ));
        let codes: usize = layers.iter().flatten().map(|p| p.w.len()).sum();
        let plain = codes as f64 / t.elapsed().as_secs_f64() / 1e9;
        let t = Instant::now();
        for layer in &layers {
            match merged {
                true => multiply_merged(layer, &x, &mut out, format),
                false => layer
                    .iter()
                    .for_each(|p| p.multiply(&x, &mut out, format, exact)),
            }
        }
        let gb = bytes as f64 / t.elapsed().as_secs_f64() / 1e9;
        let calls = if merged { "merged" } else { "each alone" };
        println!("round {round} {kernels}, {calls}: {gb:.1} GB/s, plain read {plain:.1} GB/s");
    }
    Ok(())
}
