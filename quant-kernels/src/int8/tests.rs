use super::*;
use crate::tests::{shared_pool, Rng};
use crate::{Format, Layout, Mode, Params, BITS, GROUPS};

/// Random operands: K three groups, seven blocks at groups of 16 and 32 (whole runs of 4
/// blocks and a tail of 1..3 for every group size), or `blocks` blocks; the scales and biases
/// in `dtype` ("f32", "bf16" or "f16"; "e8m0" or "e4m3" scale bytes and no biases for the
/// float modes); the weight's first bytes count up, so that every code value occurs.
struct Case {
    x: Vec<f32>,
    w: Vec<u8>,
    scales: Vec<u32>,
    biases: Vec<u32>,
    dtype: &'static str,
    m: usize,
    k: usize,
    n: usize,
    format: Format,
}

impl Case {
    fn new(format: Format, (m, n): (usize, usize), dtype: &'static str, seed: u64) -> Case {
        let blocks = match format.group {
            16 | 32 => 7,
            g => 3 * g / BLOCK,
        };
        Case::with_blocks(format, (m, n), dtype, seed, blocks)
    }

    fn with_blocks(
        format: Format,
        (m, n): (usize, usize),
        dtype: &'static str,
        seed: u64,
        blocks: usize,
    ) -> Case {
        let mut rng = Rng(seed);
        let k = blocks * BLOCK;
        let groups = n * k / format.group;
        let mut w: Vec<u8> = (0..n * format.row_bytes(k))
            .map(|_| rng.next() as u8)
            .collect();
        w.iter_mut()
            .take(256)
            .enumerate()
            .for_each(|(i, b)| *b = i as u8);
        let mut param = |scale: f32| -> u32 {
            let v = rng.float() * scale;
            match dtype {
                "bf16" => u32::from(half::bf16::from_f32(v).to_bits()),
                "f16" => u32::from(half::f16::from_f32(v).to_bits()),
                // 2^-7 ..= 2^3
                "e8m0" => 120 + (v.to_bits() % 11),
                // Either sign, 2^-6 .. 2^6
                "e4m3" => 0x08 + (v.to_bits() % 0x60) + (v.to_bits() >> 31 << 7),
                _ => v.to_bits(),
            }
        };
        let scales = (0..groups).map(|_| param(0.1)).collect();
        let biases = (0..groups).map(|_| param(0.1)).collect();
        // Some rows of x all zero (a zero scale), some with one large value.
        let mut x: Vec<f32> = (0..m * k).map(|_| rng.float()).collect();
        x.iter_mut().take(BLOCK).for_each(|v| *v = 0.0);
        if let Some(v) = x.get_mut(BLOCK + 3) {
            *v = 40.0;
        }
        Case {
            x,
            w,
            scales,
            biases,
            dtype,
            m,
            k,
            n,
            format,
        }
    }

    fn with_ops<R>(&self, f: impl FnOnce(&Operands) -> R) -> R {
        let halves = |v: &[u32]| v.iter().map(|&b| b as u16).collect::<Vec<u16>>();
        let floats = |v: &[u32]| v.iter().map(|&b| f32::from_bits(b)).collect::<Vec<f32>>();
        let bytes = self.scales.iter().map(|&b| b as u8).collect::<Vec<u8>>();
        let (sh, bh) = (halves(&self.scales), halves(&self.biases));
        let (sf, bf) = (floats(&self.scales), floats(&self.biases));
        let (scales, biases) = match self.dtype {
            "bf16" => (Params::Bf16(&sh), Some(Params::Bf16(&bh))),
            "f16" => (Params::F16(&sh), Some(Params::F16(&bh))),
            "e8m0" => (Params::E8m0(&bytes), None),
            "e4m3" => (Params::E4m3(&bytes), None),
            _ => (Params::F32(&sf), Some(Params::F32(&bf))),
        };
        f(&Operands {
            x: &self.x,
            m: self.m,
            k: self.k,
            w: &self.w,
            scales,
            biases,
            n: self.n,
            format: self.format,
        })
    }

    fn product(&self, set: Isa) -> Vec<f32> {
        let mut out = vec![0f32; self.m * self.n];
        self.with_ops(|ops| rows_with(set, ops, &mut out));
        out
    }

    /// The product on the AMX kernel, its tile steps on `unit`.
    #[cfg(target_arch = "x86_64")]
    fn product_on(&self, unit: &mut impl crate::amx::TileUnit) -> Vec<f32> {
        let mut out = vec![0f32; self.m * self.n];
        self.with_ops(|ops| rows_on_amx(ops, &mut out, unit));
        out
    }
}

fn affine(bits: u32, group: usize) -> Format {
    Format::new(bits, group).expect("an affine format")
}

fn dtypes() -> [&'static str; 3] {
    ["f32", "bf16", "f16"]
}

/// Every format the integer path takes, with each dtype its scales come in.
fn formats() -> Vec<(Format, &'static str)> {
    let mut all = Vec::new();
    for bits in BITS {
        for group in GROUPS {
            all.extend(dtypes().map(|d| (affine(bits, group), d)));
        }
    }
    for (mode, dtype) in [(Mode::Mxfp4, "e8m0"), (Mode::Nvfp4, "e4m3")] {
        all.push((mode.float_format().expect("a float mode"), dtype));
    }
    all
}

/// Block counts for a format's tests: its default (7 at groups of 16 and 32), and the other
/// tails past whole runs of 4 blocks: at groups of 16 and 32 1 and 2 blocks and a single
/// block; at groups of 64 (spans of 2 blocks) a single span, whole runs, and a span past a
/// run whose spans fold into accumulators 2 and 3.
fn block_counts(format: Format) -> Vec<usize> {
    match format.group {
        16 | 32 => vec![7, 9, 6, 1],
        64 => vec![6, 2, 4, 10],
        g => vec![3 * g / BLOCK],
    }
}

/// A block count past the AVX-512 panels' short rows (more than 1,024 values), with a
/// partial last step of 4 blocks where the group allows one.
fn long_blocks(format: Format) -> usize {
    let per_group = (format.group / BLOCK).max(1);
    35usize.div_ceil(per_group) * per_group
}

/// Every set this CPU lacks, said once per test run rather than passed over in silence.
fn say_missing_sets() {
    let have = Isa::available();
    let sets = match cfg!(target_arch = "aarch64") {
        true => vec![Isa::NeonI8mm, Isa::NeonDot, Isa::Neon],
        false => vec![Isa::Avx512Vnni, Isa::AvxVnni, Isa::Avx2],
    };
    for set in sets {
        if !have.contains(&set) {
            println!(
                "int8: this CPU has no {}: its kernel is not tested here",
                set.name()
            );
        }
    }
    #[cfg(target_arch = "x86_64")]
    if have.contains(&Isa::AvxVnni) && !super::x86::vex_vnni() {
        println!("int8: this CPU has no AVX-VNNI: its kernels are tested on the EVEX vpdpbusd");
    }
}

#[test]
fn the_portable_kernel_does_the_stated_arithmetic() {
    shared_pool();
    for (format, dtype) in formats() {
        for rows in [1, 3, 17] {
            let seed = u64::from(format.bits) + rows as u64;
            let case = Case::new(format, (rows, 7), dtype, seed);
            let ours = case.product(Isa::Scalar);
            case.with_ops(|ops| {
                let mut x = Vec::new();
                layout::permute(ops.x, ops.m, ops.k, format.bits, &mut x);
                let lane_ops = Operands { x: &x, ..*ops };
                let mut acts = Activations::default();
                acts.quantize(&lane_ops);
                let exact = reference(&lane_ops, &acts);
                for (i, (o, e)) in ours.iter().zip(&exact).enumerate() {
                    let err = (*o as f64 - e).abs() / e.abs().max(1.0);
                    assert!(err < 1e-5, "{format:?}, {dtype}, output {i}: {o} vs {e}");
                }
            });
        }
    }
}

#[test]
fn the_integer_product_is_within_the_rounding_of_x() {
    shared_pool();
    for (format, dtype) in formats()
        .into_iter()
        .filter(|f| f.1 == "f32" || f.1.starts_with('e'))
    {
        let case = Case::new(format, (3, 9), dtype, 11);
        let ours = case.product(Isa::Scalar);
        let exact = case.with_ops(crate::reference);
        // Each value of x is off by at most half its span's unit (max|x| / 127 / 256),
        // plus the rounding of x · 127 / max|x| (2^-24 of up to 127 units of 128): the
        // output by at most Σ |w| times that, plus f32 rounding.
        case.with_ops(|ops| {
            for i in 0..ops.m * ops.n {
                let (m, n) = (i / ops.n, i % ops.n);
                let x = &ops.x[m * ops.k..(m + 1) * ops.k];
                let bound: f64 = (0..ops.k)
                    .map(|k| {
                        let len = BLOCK * span_of(format);
                        let span = &x[k / len * len..(k / len + 1) * len];
                        let amax = span.iter().fold(0f32, |a, v| a.max(v.abs()));
                        let g = (n * ops.k + k) / format.group;
                        let q = crate::code(ops.w_row(n), k, format.bits);
                        let q = format.mode.code_value(q, format.bits) as f64;
                        let b = ops.biases.map_or(0.0, |b| b.get(g) as f64);
                        let w = ops.scales.get(g) as f64 * q + b;
                        w.abs() * amax as f64 * (1.0 / 256.0 + 128.0 / 16_777_216.0) / 127.0
                    })
                    .sum();
                let err = (ours[i] as f64 - exact[i]).abs();
                assert!(
                    err <= bound * 1.001 + 1e-5,
                    "{format:?}, output {i}: {err} > {bound}"
                );
            }
        });
    }
}

#[test]
fn every_set_equals_the_portable_kernel_bit_for_bit() {
    shared_pool();
    say_missing_sets();
    for set in Isa::available() {
        for (format, dtype) in formats() {
            assert!(supported(format), "the integer path takes {format:?}");
            // Short rows: AVX-512's row kernels take 1 and 3 rows (19 columns are four whole
            // sets of four weight rows and a partial one, and a whole tile and a partial one),
            // its panels 5, 8, 17 and 40 (a partial last group of rows). Long rows: its row
            // kernels take up to 8 rows, in whole and partial groups of 4.
            let short = block_counts(format)
                .into_iter()
                .flat_map(|blocks| [1, 3, 5, 8, 17, 40].map(|rows| (blocks, rows)));
            let long = [2, 4, 7].map(|rows| (long_blocks(format), rows));
            for (blocks, rows) in short.chain(long) {
                let seed = 3 + u64::from(format.bits) + blocks as u64;
                let case = Case::with_blocks(format, (rows, 19), dtype, seed, blocks);
                let (fast, portable) = (case.product(set), case.product(Isa::Scalar));
                assert_eq!(
                    fast, portable,
                    "{set:?}, {format:?}, {dtype}, {blocks} blocks, {rows} rows"
                );
            }
        }
    }
}

#[test]
fn a_rows_result_does_not_depend_on_its_batch() {
    shared_pool();
    let nvfp4 = Mode::Nvfp4.float_format().expect("a float mode");
    let cases = [
        (affine(4, 32), "bf16"),
        (affine(5, 64), "f16"),
        (nvfp4, "e4m3"),
    ];
    for set in Isa::available() {
        for (format, dtype) in cases {
            let batch = Case::new(format, (6, 13), dtype, 5);
            let together = batch.product(set);
            for m in 0..batch.m {
                let alone = Case {
                    x: batch.x[m * batch.k..(m + 1) * batch.k].to_vec(),
                    m: 1,
                    ..Case::new(format, (6, 13), dtype, 5)
                };
                let one = alone.product(set);
                assert_eq!(
                    one[..],
                    together[m * batch.n..(m + 1) * batch.n],
                    "{set:?} {format:?} row {m}"
                );
            }
        }
        // Enough rows (130 of 512) that x is made ready over the helper threads.
        let (format, blocks) = (affine(4, 64), 16);
        let batch = Case::with_blocks(format, (130, 16), "bf16", 7, blocks);
        let together = batch.product(set);
        for m in [0, 1, 63, 64, 129] {
            let alone = Case {
                x: batch.x[m * batch.k..(m + 1) * batch.k].to_vec(),
                m: 1,
                ..Case::with_blocks(format, (130, 16), "bf16", 7, blocks)
            };
            let one = alone.product(set);
            let want = &together[m * batch.n..(m + 1) * batch.n];
            assert_eq!(one[..], *want, "{set:?}: row {m} of 130");
        }
    }
}

#[test]
fn a_zero_row_gives_the_bias_part_alone() {
    shared_pool();
    let mut case = Case::new(affine(8, 32), (1, 4), "f32", 9);
    case.x.iter_mut().for_each(|v| *v = 0.0);
    for set in Isa::available() {
        assert!(case.product(set).iter().all(|v| *v == 0.0), "{set:?}");
    }
}

/// The 4-block-at-a-time folds ([`block_scales4`] against [`span_totals4`], lane `j`
/// accumulator `j`) give a fold a span's bits: spans of two blocks fold into two of the four
/// lanes, and the other two add an exact 0.
#[test]
fn four_blocks_at_a_time_fold_as_a_span_at_a_time() {
    let mut rng = Rng(5);
    for blocks in [2, 4, 6, 10, 12] {
        let units: Vec<f32> = (0..blocks / 2).flat_map(|_| [rng.float(); 2]).collect();
        let scales: Vec<f32> = (0..blocks / 2).map(|_| rng.float() - 0.5).collect();
        let totals: Vec<i32> = (0..blocks).map(|_| rng.next() as i32 >> 8).collect();
        let x = Row {
            hi: &[],
            lo: &[],
            units: &units,
            blocks,
            span: 2,
            lane_sums: &[],
            quads_hi: &[],
            quads_lo: &[],
            combined: &[],
        };
        let mut by_span = [0f32; ACCUMULATORS];
        for s in 0..blocks / 2 {
            let t = totals[2 * s] + totals[2 * s + 1];
            let c = block_scale(&scales, 1, &x, 2 * s, 0);
            by_span[s % 4] = c.mul_add(t as f32, by_span[s % 4]);
        }
        let mut lanes = [0f32; 4];
        for b in (0..blocks).step_by(4) {
            let t = std::array::from_fn(|j| totals.get(b + j).copied().unwrap_or(0));
            let t = span_totals4(t, 2);
            let [c, _] = block_scales4(&scales, 1, &x, (b, blocks));
            for j in 0..4 {
                lanes[j] = c[j].mul_add(t[j] as f32, lanes[j]);
            }
        }
        assert_eq!(
            reduce(lanes).to_bits(),
            reduce(by_span).to_bits(),
            "{blocks} blocks"
        );
    }
}

#[test]
fn the_vector_quantizer_equals_the_portable_one() {
    let mut rng = Rng(21);
    let mut x: Vec<f32> = (0..BLOCK * 40).map(|_| rng.float() * 3.0).collect();
    // A block of zeros, exact halves, a lone extreme, tiny values.
    x[..BLOCK].iter_mut().for_each(|v| *v = 0.0);
    x[BLOCK..2 * BLOCK]
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = i as f32 - 15.5);
    x[2 * BLOCK + 5] = -1e30;
    x[3 * BLOCK..4 * BLOCK].iter_mut().for_each(|v| *v *= 1e-38);
    for span in [1, 2] {
        let buffers = || {
            (
                vec![0i8; x.len()],
                vec![0i8; x.len()],
                vec![0f32; x.len() / BLOCK],
            )
        };
        let digits =
            |(hi, lo, units): &mut (Vec<i8>, Vec<i8>, Vec<f32>)| -> (Vec<i8>, Vec<i8>, Vec<f32>) {
                quantize_portable(
                    &x,
                    Digits {
                        hi,
                        lo,
                        units,
                        span,
                    },
                );
                (hi.clone(), lo.clone(), units.clone())
            };
        let portable = digits(&mut buffers());
        assert!(portable.1.iter().all(|lo| (-64..=64).contains(lo)));
        #[cfg(target_arch = "x86_64")]
        if x86::has_avx2() {
            let (mut hi, mut lo, mut units) = buffers();
            let out = Digits {
                hi: &mut hi,
                lo: &mut lo,
                units: &mut units,
                span,
            };
            // SAFETY: the CPU has AVX2; the buffers are sized for x.
            unsafe { x86::quantize(&x, out) };
            assert_eq!(portable, (hi, lo, units), "spans of {span} blocks");
            continue;
        }
        println!("int8: no vector quantizer on this CPU");
    }
}

impl Case {
    /// The case with its weight, scales and biases in tiles.
    fn tiled(&self) -> Case {
        let (n, k, format) = (self.n, self.k, self.format);
        let mut w = self.w.clone();
        tiles::tile_codes(format, (n, k), &self.w, &mut w);
        let groups = k / format.group;
        let mut scales = self.scales.clone();
        tiles::tile_params((n, groups), &self.scales, &mut scales);
        let mut biases = self.biases.clone();
        tiles::tile_params((n, groups), &self.biases, &mut biases);
        Case {
            x: self.x.clone(),
            w,
            scales,
            biases,
            format: format.with_layout(Layout::Tiles),
            ..*self
        }
    }
}

/// The formats stored in tiles, with each dtype their scales come in.
fn tiled_formats() -> Vec<(Format, &'static str)> {
    let cases = formats().into_iter();
    cases.filter(|(f, _)| tiles::takes(*f, 16)).collect()
}

/// The AMX kernel on the tile model everywhere with AVX-512 VNNI, and on the tiles where they
/// run, against the portable kernel: 1..40 rows (both digits in one A up to 8, partial A
/// tiles, and the last group of several), short and long rows, every tiled format whose
/// blocks hold one group.
#[test]
#[cfg(target_arch = "x86_64")]
fn the_amx_kernel_equals_the_portable_kernel_bit_for_bit() {
    use crate::amx::{amx, Amx, Hardware, Model};
    if !Isa::available().contains(&Isa::Avx512Vnni) {
        println!("int8: this CPU has no avx512-vnni: the AMX kernel is not tested here");
        return;
    }
    let tiles_run = amx() == &Amx::Usable;
    if !tiles_run {
        println!(
            "int8: {}: the AMX kernel runs on the tile model only",
            amx()
        );
    }
    let cases = tiled_formats()
        .into_iter()
        .filter(|(f, _)| f.group >= BLOCK);
    for (format, dtype) in cases {
        // Remainders of four blocks (a call of the steps with both digits) 0 to 3.
        let mut counts = block_counts(format);
        counts.truncate(2);
        counts.push(long_blocks(format));
        for blocks in counts {
            for rows in [1, 3, 4, 8, 12, 16, 17, 40] {
                let seed = 11 + u64::from(format.bits) + blocks as u64;
                let case = Case::with_blocks(format, (rows, 48), dtype, seed, blocks);
                let portable = case.product(Isa::Scalar);
                let tiled = case.tiled();
                let what = format!("{format:?}, {dtype}, {blocks} blocks, {rows} rows");
                assert_eq!(tiled.product_on(&mut Model::default()), portable, "{what}");
                if tiles_run {
                    assert_eq!(
                        tiled.product_on(&mut Hardware::default()),
                        portable,
                        "{what}, AMX"
                    );
                    assert_eq!(tiled.product(Isa::Avx512Vnni), portable, "{what}, chosen");
                }
            }
        }
    }
}

#[test]
fn tiles_hold_the_same_bytes() {
    for (format, _) in tiled_formats() {
        let case = Case::with_blocks(format, (1, 32), "f32", 4, block_counts(format)[0]);
        let tiled = case.tiled();
        assert_ne!(tiled.w, case.w, "{format:?}");
        let mut back = vec![0u8; case.w.len()];
        tiles::untile_codes(format, (case.n, case.k), &tiled.w, &mut back);
        assert_eq!(back, case.w, "{format:?}");
        let mut params = vec![0u32; case.scales.len()];
        tiles::untile_params((case.n, case.k / format.group), &tiled.scales, &mut params);
        assert_eq!(params, case.scales, "{format:?}");
    }
    assert!(
        !tiles::takes(affine(4, 64), 24),
        "24 rows are not whole tiles"
    );
    assert!(!tiles::takes(affine(3, 64), 32), "3-bit words split lanes");
}

#[test]
fn the_tiled_kernel_equals_the_portable_kernel_bit_for_bit() {
    shared_pool();
    let sets: Vec<Isa> = Isa::available()
        .into_iter()
        .filter(|s| tiles::read_by(*s))
        .collect();
    if sets.is_empty() {
        println!("int8: no set here reads tiles: the tiled kernels are not tested here");
    }
    for set in sets {
        the_tiled_kernel_of(set);
    }
}

/// The tiled kernel of `set` against the portable one.
fn the_tiled_kernel_of(set: Isa) {
    the_extremes_of(set);
    for (format, dtype) in tiled_formats() {
        let short = block_counts(format)
            .into_iter()
            .map(|b| (b, [1, 2, 3, 4, 5, 9]));
        let long = std::iter::once((long_blocks(format), [1, 2, 3, 4, 7, 8]));
        for (blocks, rows) in short.chain(long) {
            for rows in rows {
                let seed = 7 + u64::from(format.bits) + blocks as u64;
                // 80 columns, five tiles: one row takes tiles 0 and 2, then 1 and 3, side by
                // side, and tile 4 alone; on long rows the helper threads split them.
                let case = Case::with_blocks(format, (rows, 80), dtype, seed, blocks);
                let portable = case.product(Isa::Scalar);
                let tiled = case.tiled().product(set);
                assert_eq!(
                    tiled, portable,
                    "{set:?}, {format:?}, {dtype}, {blocks} blocks, {rows} rows"
                );
            }
        }
    }
}

/// Every code at its largest (its smallest: E2M1's -6, which enters as 0, and 8-bit's 0) and
/// rows of x whose digits are all at an end of their ranges, so that a kernel's partial sums
/// take their largest values: AVX2's i16 sums overflow if they run over too many lanes.
fn the_extremes_of(set: Isa) {
    // 126.5 / 127 of the block's largest value: high digit 126, low digit 64. Seven rows, so
    // that AVX2's blocks of 6 rows and a single row both meet them.
    let ends = [1.0, -1.0, 126.5 / 127.0, -126.5 / 127.0];
    let rows: [f32; 7] = std::array::from_fn(|m| ends[m % ends.len()]);
    for (format, dtype) in tiled_formats() {
        for (large, byte) in [(true, 0xFFu8), (false, 0x00), (true, 0x77), (false, 0x88)] {
            let mut case = Case::with_blocks(format, (rows.len(), 16), dtype, 1, 4);
            case.w.iter_mut().for_each(|b| *b = byte);
            for (m, &v) in rows.iter().enumerate() {
                let row = &mut case.x[m * case.k..(m + 1) * case.k];
                row.iter_mut().for_each(|x| *x = v);
                // Each block's largest value, which sets its unit.
                row.iter_mut().step_by(BLOCK).for_each(|x| *x = v.signum());
            }
            let (portable, tiled) = (case.product(Isa::Scalar), case.tiled().product(set));
            assert_eq!(
                tiled, portable,
                "{set:?}, {format:?}, {dtype}, {byte:#x} ({large})"
            );
        }
    }
}
