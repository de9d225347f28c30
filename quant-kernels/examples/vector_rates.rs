//! The arithmetic ceiling of each numerics on this core: the inner step of a product, with
//! enough independent accumulators to hide latency and no memory traffic beyond L1, in
//! multiply-adds a nanosecond. What a prefill (or many rows) cannot beat, whatever the blocking:
//! - `f32`: one FMA per 16 products (the exact path's panels, OpenBLAS's kernels);
//! - `int8, two digits`: the integer path as it is, per 64 products two `vpdpbusd` (high and
//!   low digit), a shift, a conversion and an FMA (each lane's float step per block);
//! - `int8, one digit`: llama.cpp's Q8 activations (fails the quality gate), one `vpdpbusd`,
//!   a conversion and an FMA per 64;
//! - `int16, block sums`: x as one int16 `128·hi + lo` and a block's lanes summed in integer
//!   before its float step: 16 `vpdpwssd` (32 products each) per conversion and FMA.
//!
//! Every step reads its weight operand from a 16 KiB buffer (in L1), as a kernel does: with
//! operands fixed in registers, the compiler may hoist the products out of the loop (it
//! turns repeated `vpdpwssd` into one hoisted `vpmaddwd` and adds).
//!
//! Then each multiply-class instruction alone (`vpdpbusd`, `vpdpwssd`, FMA) on 12 independent
//! accumulators, in instructions a nanosecond. Where each alone runs one a cycle and their
//! mixes above run at the sum of their counts, they share one pipe.
//!
//! With `MACS` (multiply-adds a token; default SmolLM2-135M's 106.2 M without the head) it
//! prints each ceiling as prompt tokens a second on `CORES` cores (default 2).
//!
//!   cargo run --release -p quant-kernels --example vector_rates

#[cfg(target_arch = "x86_64")]
mod rates {
    use std::arch::x86_64::*;
    use std::hint::black_box;
    use std::time::Instant;

    const ROUNDS: usize = 20_000_000;
    /// Registers in the weight buffer (16 KiB).
    const BUFFER: usize = 256;

    /// A buffer of weight registers whose bytes are `byte`, read at round `r`.
    struct Weights(Vec<__m512i>);

    impl Weights {
        fn new(byte: i8) -> Weights {
            // SAFETY: SSE2 is baseline on x86-64; `set1` only fills a register.
            Weights(black_box(vec![unsafe { _mm512_set1_epi8(byte) }; BUFFER]))
        }

        #[target_feature(enable = "avx512f")]
        #[inline]
        unsafe fn at(&self, r: usize) -> __m512i {
            _mm512_loadu_si512(self.0.as_ptr().add(r % BUFFER))
        }
    }

    /// `per_round` steps a round of `step`, a nanosecond (the best of `passes` runs).
    fn best_rate(step: unsafe fn(usize) -> f32, per_round: usize, passes: usize) -> f64 {
        (0..passes)
            .map(|_| {
                let start = Instant::now();
                // SAFETY: `run` checked the features every step needs.
                black_box(unsafe { step(ROUNDS) });
                (per_round * ROUNDS) as f64 / start.elapsed().as_nanos() as f64
            })
            .fold(0.0, f64::max)
    }

    /// Steps a nanosecond of `step` on 8 independent accumulators (best of 5).
    fn rate(step: unsafe fn(usize) -> f32) -> f64 {
        best_rate(step, 8, 5)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma")]
    unsafe fn f32_fma(rounds: usize) -> f32 {
        let ws = Weights(black_box(vec![
            _mm512_castps_si512(_mm512_set1_ps(1.0001));
            BUFFER
        ]));
        let x = black_box(_mm512_set1_ps(0.5));
        let mut a: [__m512; 8] = std::array::from_fn(|i| _mm512_set1_ps(i as f32));
        for r in 0..rounds {
            let w = _mm512_castsi512_ps(ws.at(r));
            for a in a.iter_mut() {
                *a = _mm512_fmadd_ps(w, x, *a);
            }
        }
        a.iter().map(|a| _mm512_reduce_add_ps(*a)).sum()
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma")]
    unsafe fn two_digits(rounds: usize) -> f32 {
        let qs = Weights::new(7);
        let (hi, lo) = (
            black_box(_mm512_set1_epi8(-3)),
            black_box(_mm512_set1_epi8(5)),
        );
        let c = black_box(_mm512_set1_ps(1e-6));
        let mut a: [__m512; 8] = std::array::from_fn(|i| _mm512_set1_ps(i as f32));
        for r in 0..rounds {
            let q = qs.at(r);
            for a in a.iter_mut() {
                let h = _mm512_dpbusd_epi32(_mm512_castps_si512(*a), q, hi);
                let p = _mm512_dpbusd_epi32(_mm512_slli_epi32::<7>(h), q, lo);
                *a = _mm512_fmadd_ps(c, _mm512_cvtepi32_ps(p), *a);
            }
        }
        a.iter().map(|a| _mm512_reduce_add_ps(*a)).sum()
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma")]
    unsafe fn one_digit(rounds: usize) -> f32 {
        let (qs, x) = (Weights::new(7), black_box(_mm512_set1_epi8(-3)));
        let c = black_box(_mm512_set1_ps(1e-6));
        let mut a: [__m512; 8] = std::array::from_fn(|i| _mm512_set1_ps(i as f32));
        for r in 0..rounds {
            let q = qs.at(r);
            for a in a.iter_mut() {
                let p = _mm512_dpbusd_epi32(_mm512_castps_si512(*a), q, x);
                *a = _mm512_fmadd_ps(c, _mm512_cvtepi32_ps(p), *a);
            }
        }
        a.iter().map(|a| _mm512_reduce_add_ps(*a)).sum()
    }

    /// 16 `vpdpwssd` into one integer accumulator, then its float step: `rounds / 16` steps
    /// of 512 products, counted as `rounds` steps of 32.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma")]
    unsafe fn block_sums(rounds: usize) -> f32 {
        // A row of x per accumulator: with one x for all, the compiler computes the product
        // once (`vpmaddwd`) and adds it to each.
        let qs = Weights::new(7);
        let xs: [__m512i; 8] =
            std::array::from_fn(|i| black_box(_mm512_set1_epi16(i as i16 - 300)));
        let c = black_box(_mm512_set1_ps(1e-6));
        let mut a: [__m512; 8] = std::array::from_fn(|i| _mm512_set1_ps(i as f32));
        for r in 0..rounds / 16 {
            let mut p: [__m512i; 8] = a.map(|a| _mm512_castps_si512(a));
            for j in 0..16 {
                let q = qs.at(16 * r + j);
                p = std::array::from_fn(|i| dpwssd(p[i], q, xs[i]));
            }
            for (a, p) in a.iter_mut().zip(p) {
                *a = _mm512_fmadd_ps(c, _mm512_cvtepi32_ps(p), *a);
            }
        }
        a.iter().map(|a| _mm512_reduce_add_ps(*a)).sum()
    }

    /// Instruction `OP` (0 `vpdpbusd`, 1 `vpdpwssd`, 2 FMA) on 12 independent accumulators.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma")]
    unsafe fn alone<const OP: u8>(rounds: usize) -> f32 {
        let q = black_box(_mm512_set1_epi8(3));
        let f = _mm512_castsi512_ps(q);
        let mut a: [__m512i; 12] = std::array::from_fn(|i| _mm512_set1_epi32(i as i32));
        for _ in 0..rounds {
            for a in a.iter_mut() {
                *a = match OP {
                    0 => _mm512_dpbusd_epi32(*a, q, q),
                    1 => dpwssd(*a, q, q),
                    _ => _mm512_castps_si512(_mm512_fmadd_ps(_mm512_castsi512_ps(*a), f, f)),
                };
            }
        }
        a.iter().map(|a| _mm512_reduce_add_epi32(*a)).sum::<i32>() as f32
    }

    /// Instructions a nanosecond of [`alone`] (best of 3).
    fn per_ns(op: unsafe fn(usize) -> f32) -> f64 {
        best_rate(op, 12, 3)
    }

    /// `vpdpwssd` as written: the compiler turns the intrinsic into `vpmaddwd` and `vpaddd`
    /// for generic x86-64 (about half the rate here).
    #[target_feature(enable = "avx512f,avx512vnni")]
    #[inline]
    unsafe fn dpwssd(mut acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
        std::arch::asm!(
            "vpdpwssd {acc}, {a}, {b}",
            acc = inout(zmm_reg) acc,
            a = in(zmm_reg) a,
            b = in(zmm_reg) b,
            options(pure, nomem, nostack),
        );
        acc
    }

    pub fn run() {
        let has = std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512vnni")
            && std::arch::is_x86_feature_detected!("fma");
        if !has {
            println!("this CPU has no AVX-512 VNNI: no ceilings to measure");
            return;
        }
        let var = |name: &str, default: f64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let (macs, cores) = (var("MACS", 106.2e6), var("CORES", 2.0));
        let f32_rate = 16.0 * rate(f32_fma);
        let rows: [(&str, f64); 4] = [
            ("f32", f32_rate),
            ("int8, two digits", 64.0 * rate(two_digits)),
            ("int8, one digit", 64.0 * rate(one_digit)),
            ("int16, block sums", 32.0 * rate(block_sums)),
        ];
        println!("| numerics | multiply-adds a ns, one core | against f32 | prompt tok/s ceiling, {cores} cores |");
        println!("|---|---|---|---|");
        for (name, r) in rows {
            let tokens = r * 1e9 * cores / macs;
            println!("| {name} | {r:.1} | {:.2}x | {tokens:.0} |", r / f32_rate);
        }
        println!();
        println!("| instruction alone | a ns, one core |");
        println!("|---|---|");
        for (name, op) in [
            ("vpdpbusd", alone::<0> as unsafe fn(usize) -> f32),
            ("vpdpwssd", alone::<1>),
            ("vfmadd231ps", alone::<2>),
        ] {
            println!("| {name} | {:.2} |", per_ns(op));
        }
    }
}

fn main() {
    #[cfg(target_arch = "x86_64")]
    rates::run();
    #[cfg(not(target_arch = "x86_64"))]
    println!("vector_rates measures x86-64's AVX-512 VNNI only");
}
