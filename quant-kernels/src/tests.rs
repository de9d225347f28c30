use super::*;

/// A pool of 3 threads whatever the machine (the default leaves a core to the engine's
/// thread, so on 2 cores nothing would be shared out): called first by every test here,
/// before any product starts the pool.
pub(crate) fn shared_pool() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::env::set_var("MLX_DISTRIBUTED_GEMM_THREADS", "3"));
}

/// SplitMix64, for seeded operands.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(crate) fn float(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

struct Case {
    x: Vec<f32>,
    w: Vec<u8>,
    scales: Vec<f32>,
    biases: Vec<f32>,
    /// The float modes' scales (E8M0 or E4M3 bytes).
    bytes: Vec<u8>,
    m: usize,
    k: usize,
    n: usize,
    format: Format,
}

impl Case {
    /// Random operands, K three groups (three steps for `nvfp4`'s 16-code groups); the
    /// weight's first bytes count up, so that every code value occurs.
    fn new(format: Format, m: usize, n: usize, seed: u64) -> Case {
        let mut rng = Rng(seed);
        let k = format.group.max(layout::STEP) * 3;
        let groups = n * k / format.group;
        let mut w: Vec<u8> = (0..n * format.row_bytes(k))
            .map(|_| rng.next() as u8)
            .collect();
        w.iter_mut()
            .take(256)
            .enumerate()
            .for_each(|(i, b)| *b = i as u8);
        Case {
            x: (0..m * k).map(|_| rng.float()).collect(),
            w,
            scales: (0..groups).map(|_| rng.float() * 0.1).collect(),
            biases: (0..groups).map(|_| rng.float() * 0.1).collect(),
            // E8M0 within 2^±20; E4M3 any byte (signs, subnormals, ±480 included).
            bytes: (0..groups)
                .map(|_| match format.mode {
                    Mode::Nvfp4 => rng.next() as u8,
                    _ => 107 + (rng.next() % 41) as u8,
                })
                .collect(),
            m,
            k,
            n,
            format,
        }
    }

    /// x in the kernels' lane order, as `rows` hands it to `columns`.
    fn lane_ordered_x(&self) -> Vec<f32> {
        let mut x = Vec::new();
        layout::permute(&self.x, self.m, self.k, self.format.bits, &mut x);
        x
    }

    fn ops(&self) -> Operands<'_> {
        let (scales, biases) = match self.format.mode {
            Mode::Affine => (Params::F32(&self.scales), Some(Params::F32(&self.biases))),
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

    /// |ours - exact| / Σ|x·w| per output: the error relative to the product's own size.
    fn worst_error(&self, ours: &[f32]) -> f64 {
        let exact = reference(&self.ops());
        let ops = self.ops();
        let (bits, mode) = (self.format.bits, self.format.mode);
        let mut worst = 0f64;
        for m in 0..self.m {
            for n in 0..self.n {
                let (s, b) = ops.groups(n);
                let scale: f64 = (0..self.k)
                    .map(|k| {
                        let g = k / self.format.group;
                        let q = mode.code_value(code(ops.w_row(n), k, bits), bits) as f64;
                        let b = b.map_or(0.0, |b| b.get(g) as f64);
                        (self.x[m * self.k + k] as f64 * (s.get(g) as f64 * q + b)).abs()
                    })
                    .sum();
                let err = (ours[m * self.n + n] as f64 - exact[m * self.n + n]).abs();
                worst = worst.max(err / scale.max(1e-30));
            }
        }
        worst
    }
}

/// Every affine format, then the float modes'.
fn formats() -> impl Iterator<Item = Format> {
    let affine = BITS.into_iter().flat_map(|bits| {
        GROUPS
            .into_iter()
            .map(move |group| Format::new(bits, group).expect("an affine format"))
    });
    affine.chain(Mode::ALL.into_iter().filter_map(Mode::float_format))
}

fn affine(bits: u32, group: usize) -> Format {
    Format::new(bits, group).expect("an affine format")
}

#[test]
fn every_format_matches_the_exact_product() {
    shared_pool();
    for format in formats() {
        // 33 rows take the panel path.
        for (m, seed) in [(1, 1), (4, 2), (7, 3), (33, 4)] {
            let case = Case::new(format, m, 13, seed);
            let mut out = vec![0f32; m * case.n];
            matmul(&case.ops(), &mut out);
            let err = case.worst_error(&out);
            assert!(err <= 1e-5, "{format:?} m={m}: relative error {err:e}");
        }
    }
}

#[test]
fn vector_kernels_equal_the_portable_one_bit_for_bit() {
    shared_pool();
    for format in formats().filter(|f| vectorized(*f)) {
        let case = Case::new(format, 6, 11, 7);
        let (mut fast, mut portable) = (vec![0f32; 66], vec![0f32; 66]);
        rows(&case.ops(), &mut fast);
        let x = case.lane_ordered_x();
        let ops = Operands {
            x: &x,
            ..case.ops()
        };
        // SAFETY: `portable` holds m * n floats, written by this thread alone.
        unsafe { scalar::matmul(&ops, 0..case.n, Out(portable.as_mut_ptr())) };
        assert_eq!(fast, portable, "{format:?}");
    }
}

type Kernel = unsafe fn(&Operands, std::ops::Range<usize>, Out);
type Dequantize = unsafe fn(&Operands, usize, &mut [f32]);

/// The vector kernel sets this CPU has: each one's product and dequantized row.
#[cfg(target_arch = "x86_64")]
fn vector_sets() -> Vec<(&'static str, Kernel, Dequantize)> {
    let mut sets: Vec<(&str, Kernel, Dequantize)> = Vec::new();
    if super::x86::available() {
        sets.push(("avx2", super::x86::matmul, super::x86::dequantize_row));
    }
    if super::x86::avx512::available() {
        sets.push((
            "avx512",
            super::x86::avx512::matmul,
            super::x86::dequantize_row,
        ));
    }
    sets
}

/// NEON is part of every aarch64 CPU.
#[cfg(target_arch = "aarch64")]
fn vector_sets() -> Vec<(&'static str, Kernel, Dequantize)> {
    vec![("neon", super::neon::matmul, super::neon::dequantize_row)]
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn vector_sets() -> Vec<(&'static str, Kernel, Dequantize)> {
    Vec::new()
}

/// Each vector kernel set this CPU has (AVX2, AVX-512; NEON), called directly, gives the
/// portable kernel's bits for 1 to 9 rows (every way the AVX-512 kernels group them).
#[test]
fn every_instruction_set_here_gives_the_portable_bits() {
    for (name, kernel, _) in vector_sets() {
        for format in formats() {
            for m in [1, 2, 3, 4, 5, 6, 7, 9] {
                let case = Case::new(format, m, 5, 21);
                let x = case.lane_ordered_x();
                let ops = Operands {
                    x: &x,
                    ..case.ops()
                };
                let (mut fast, mut portable) = (vec![0f32; m * 5], vec![0f32; m * 5]);
                // SAFETY: the CPU has the set (filtered above); each output holds m * n floats,
                // written by this thread alone.
                unsafe {
                    kernel(&ops, 0..case.n, Out(fast.as_mut_ptr()));
                    scalar::matmul(&ops, 0..case.n, Out(portable.as_mut_ptr()));
                }
                assert_eq!(fast, portable, "{name} {format:?} m={m}");
            }
        }
    }
}

/// Each vector set's dequantized rows (the panels of a prefill) have the portable bits.
#[test]
fn every_instruction_set_here_dequantizes_with_the_portable_bits() {
    for (name, _, dequantize) in vector_sets() {
        for format in formats() {
            let case = Case::new(format, 1, 4, 31);
            let ops = case.ops();
            for n in 0..case.n {
                let (mut fast, mut portable) = (vec![0f32; case.k], vec![0f32; case.k]);
                // SAFETY: the CPU has the set; each row holds k floats.
                unsafe { dequantize(&ops, n, &mut fast) };
                scalar::dequantize_row(&ops, n, &mut portable);
                assert_eq!(fast, portable, "{name} {format:?} row {n}");
            }
        }
    }
}

/// A row's result does not depend on the rows beside it in the call.
#[test]
fn a_row_alone_equals_the_row_in_a_batch() {
    shared_pool();
    for format in formats() {
        let batch = Case::new(format, 7, 9, 11);
        let mut all = vec![0f32; 7 * 9];
        matmul(&batch.ops(), &mut all);
        for m in 0..7 {
            let alone = Case {
                x: batch.x[m * batch.k..(m + 1) * batch.k].to_vec(),
                m: 1,
                w: batch.w.clone(),
                scales: batch.scales.clone(),
                biases: batch.biases.clone(),
                bytes: batch.bytes.clone(),
                ..Case::new(format, 1, 9, 11)
            };
            let mut one = vec![0f32; 9];
            matmul(&alone.ops(), &mut one);
            assert_eq!(one, all[m * 9..(m + 1) * 9], "{format:?} row {m}");
        }
    }
}

/// The bit stream agrees with MLX's own unpacking of 3, 5 and 6 bits (`extract_bits`).
#[test]
fn codes_follow_mlx_packing() {
    shared_pool();
    let b = [
        0b1011_0110u8,
        0b0101_1101,
        0b1110_0011,
        0b0001_1011,
        0b1010_0101,
    ];
    let three = [
        b[0] & 0x7,
        (b[0] & 0x38) >> 3,
        ((b[0] & 0xc0) >> 6) + ((b[1] & 0x1) << 2),
        (b[1] & 0xe) >> 1,
        (b[1] & 0x70) >> 4,
        ((b[1] & 0x80) >> 7) + ((b[2] & 0x3) << 1),
        (b[2] & 0x1c) >> 2,
        (b[2] & 0xe0) >> 5,
    ];
    let five = [
        b[0] & 0x1f,
        ((b[0] & 0xe0) >> 5) + ((b[1] & 0x3) << 3),
        (b[1] & 0x7c) >> 2,
        ((b[1] & 0x80) >> 7) + ((b[2] & 0xf) << 1),
        ((b[2] & 0xf0) >> 4) + ((b[3] & 0x1) << 4),
        (b[3] & 0x3e) >> 1,
        ((b[3] & 0xc0) >> 6) + ((b[4] & 0x7) << 2),
        (b[4] & 0xf8) >> 3,
    ];
    let six = [
        b[0] & 0x3f,
        ((b[0] >> 6) & 0x03) + ((b[1] & 0x0f) << 2),
        ((b[1] >> 4) & 0x0f) + ((b[2] & 0x03) << 4),
        (b[2] >> 2) & 0x3f,
    ];
    for (bits, want) in [(3, &three[..]), (5, &five[..]), (6, &six[..])] {
        for (i, w) in want.iter().enumerate() {
            assert_eq!(code(&b, i, bits), *w as u32, "{bits} bits, code {i}");
        }
    }
}

/// Products big enough to be shared over skinny-gemm's threads give the one-thread bits.
#[test]
fn shared_columns_equal_one_thread() {
    shared_pool();
    for format in [affine(4, 64), affine(2, 32), affine(3, 32)]
        .into_iter()
        .chain(Mode::ALL.into_iter().filter_map(Mode::float_format))
    {
        let case = Case::new(format, 3, 1000, 5);
        assert!(case.n * case.k >= 64 * 1024, "big enough to share");
        let (mut shared, mut alone) = (vec![0f32; 3000], vec![0f32; 3000]);
        rows(&case.ops(), &mut shared);
        let x = case.lane_ordered_x();
        let ops = Operands {
            x: &x,
            ..case.ops()
        };
        // SAFETY: `alone` holds m * n floats, written by this thread alone.
        unsafe { columns(&ops, 0..case.n, Out(alone.as_mut_ptr())) };
        assert_eq!(shared, alone, "{format:?}");
    }
}

/// Scales and biases kept in bf16 or f16 give the bits of the same values in f32: widening is
/// exact, so keeping them as stored changes only the bytes.
#[test]
fn bf16_and_f16_params_equal_their_f32_values() {
    shared_pool();
    let mut case = Case::new(affine(4, 32), 3, 700, 9);
    let bf16: Vec<u16> = case
        .scales
        .iter()
        .map(|v| (v.to_bits() >> 16) as u16)
        .collect();
    let bf16_b: Vec<u16> = case
        .biases
        .iter()
        .map(|v| (v.to_bits() >> 16) as u16)
        .collect();
    let f16: Vec<u16> = case
        .scales
        .iter()
        .map(|v| half::f16::from_f32(*v).to_bits())
        .collect();
    let f16_b: Vec<u16> = case
        .biases
        .iter()
        .map(|v| half::f16::from_f32(*v).to_bits())
        .collect();
    for (s, b) in [
        (Params::Bf16(&bf16), Params::Bf16(&bf16_b)),
        (Params::F16(&f16), Params::F16(&f16_b)),
        // Mixed dtypes take the widened path.
        (Params::Bf16(&bf16), Params::F16(&f16_b)),
    ] {
        case.scales = (0..s.len()).map(|i| s.get(i)).collect();
        case.biases = (0..b.len()).map(|i| b.get(i)).collect();
        for m in [1, 3] {
            let ops = Operands { m, ..case.ops() };
            let (mut wide, mut narrow) = (vec![0f32; m * case.n], vec![0f32; m * case.n]);
            matmul(&ops, &mut wide);
            matmul(
                &Operands {
                    scales: s,
                    biases: Some(b),
                    ..ops
                },
                &mut narrow,
            );
            assert_eq!(wide, narrow, "{s:?}");
        }
    }
}

/// A plain `cblas_sgemm` (row-major, `c = alpha·a·op(b) + beta·c`) for the panels where no BLAS
/// is linked: aarch64 under qemu-user, and macOS (`build.rs`).
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
mod blas {
    /// # Safety
    /// The CBLAS contract, row-major, `a` not transposed.
    #[no_mangle]
    #[allow(clippy::too_many_arguments)]
    pub unsafe extern "C" fn cblas_sgemm(
        _layout: i32,
        _trans_a: i32,
        trans_b: i32,
        m: i32,
        n: i32,
        k: i32,
        alpha: f32,
        a: *const f32,
        lda: i32,
        b: *const f32,
        ldb: i32,
        beta: f32,
        c: *mut f32,
        ldc: i32,
    ) {
        let (m, n, k) = (m as usize, n as usize, k as usize);
        let (lda, ldb, ldc) = (lda as usize, ldb as usize, ldc as usize);
        for i in 0..m {
            for j in 0..n {
                let b_at = |l: usize| match trans_b {
                    112 => *b.add(j * ldb + l),
                    _ => *b.add(l * ldb + j),
                };
                let dot: f32 = (0..k).map(|l| *a.add(i * lda + l) * b_at(l)).sum();
                let out = c.add(i * ldc + j);
                *out = alpha * dot + if beta == 0.0 { 0.0 } else { beta * *out };
            }
        }
    }
}

/// Parts of one x in one product (a layer's q, k and v) give each part's output of its own
/// product, bit for bit: in f32 and int8 numerics, at decode and prefill row counts, with part
/// sizes whose columns do not fall on whole chunks.
#[test]
fn parts_sharing_x_equal_their_products_alone() {
    shared_pool();
    for numerics in [Numerics::Exact, Numerics::Int8] {
        let nvfp4 = Mode::Nvfp4.float_format().expect("a float mode");
        for format in [affine(4, 64), affine(8, 32), affine(3, 64), nvfp4] {
            let format = format.with_numerics(numerics);
            for m in [1, 3, 20] {
                let cases = [37, 8, 130].map(|n| Case::new(format, m, n, 11 + n as u64));
                let x = cases[0].x.clone();
                let ops: Vec<Operands> = cases
                    .iter()
                    .map(|c| Operands { x: &x, ..c.ops() })
                    .collect();
                let alone: Vec<Vec<f32>> = ops
                    .iter()
                    .map(|o| {
                        let mut out = vec![0f32; m * o.n];
                        matmul(o, &mut out);
                        out
                    })
                    .collect();
                let mut together: Vec<Vec<f32>> = ops.iter().map(|o| vec![0f32; m * o.n]).collect();
                let mut outs: Vec<&mut [f32]> = together.iter_mut().map(|o| &mut o[..]).collect();
                matmul_many(&ops, &mut outs);
                assert_eq!(together, alone, "{format:?}, {m} rows");
            }
        }
    }
}
