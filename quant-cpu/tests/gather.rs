//! The gathered product (mixture-of-experts layers) inside real MLX: row r of x times expert
//! `indices[r]` of stacked quantized weights, against MLX's `x @ dequantize(w[e]).T`
//! (relative error ≤ 1e-5) for every format, and bit for bit against `quantized_matmul` on
//! the selected expert alone, through both the few-row and the panel kernels.

mod common;

use common::{bits, TestResult};
use mlx_rs::ops::indexing::TryIndexOp;
use mlx_rs::ops::{broadcast_to, dequantize, matmul, quantize};
use mlx_rs::transforms::{async_eval, eval};
use mlx_rs::{random, Array, Dtype};
use quant_cpu::kernel::{BITS, GROUPS, PANEL_ROWS};
use quant_cpu::{gather_quantized_matmul, quantized_matmul, Format};

/// Activations x [R, K] and `E` experts quantized from random f32 weights [E, N, K].
struct Experts {
    x: Array,
    w: Array,
    scales: Array,
    biases: Array,
    format: Format,
}

impl Experts {
    fn new(format: Format, experts: i32, n: i32, k: i32, rows: i32) -> TestResult<Experts> {
        random::seed(format.bits as u64 * 1000 + format.group as u64 + rows as u64)?;
        let x = random::normal::<f32>(&[rows, k], None, None, None)?;
        let w = random::normal::<f32>(&[experts, n, k], None, None, None)?;
        let (w, scales, biases) = quantize(&w, format.group as i32, format.bits as i32)?;
        Ok(Experts {
            x,
            w,
            scales,
            biases,
            format,
        })
    }

    fn ours(&self, indices: &Array) -> TestResult<Array> {
        let ex = self;
        Ok(gather_quantized_matmul(
            &ex.x, &ex.w, &ex.scales, &ex.biases, indices, ex.format,
        )?)
    }

    /// MLX's own product: x[r] @ dequantize(w[indices[r]]).T for every row (indices in range).
    fn theirs(&self, indices: &Array) -> TestResult<Array> {
        let f = self.format;
        let (s, b) = (
            self.scales.as_dtype(Dtype::Float32)?,
            self.biases.as_dtype(Dtype::Float32)?,
        );
        let w = dequantize(&self.w, &s, &b, f.group as i32, f.bits as i32)?;
        let picked = w.take_axis(indices, 0)?.swap_axes(1, 2)?;
        Ok(matmul(self.x.expand_dims(1)?, &picked)?.squeeze_axes(&[1])?)
    }

    /// The same operands with scales and biases as `dtype`.
    fn with_params(&self, dtype: Dtype) -> TestResult<Experts> {
        Ok(Experts {
            x: self.x.clone(),
            w: self.w.clone(),
            scales: self.scales.as_dtype(dtype)?,
            biases: self.biases.as_dtype(dtype)?,
            format: self.format,
        })
    }

    /// `quantized_matmul` of rows `rows` of x on expert `e` alone.
    fn alone(&self, rows: std::ops::Range<usize>, e: u32) -> TestResult<Array> {
        let k = self.x.dim(1) as usize;
        let x = self.x.try_as_slice::<f32>()?;
        let x = Array::from_slice(
            &x[rows.start * k..rows.end * k],
            &[rows.len() as i32, k as i32],
        );
        let e = e as i32;
        let (w, s, b) = (
            self.w.try_index(e)?,
            self.scales.try_index(e)?,
            self.biases.try_index(e)?,
        );
        Ok(quantized_matmul(&x, &w, &s, &b, self.format)?)
    }
}

/// max |ours - theirs| / max |theirs|.
fn relative_error(ours: &Array, theirs: &Array) -> TestResult<f32> {
    let diff = ours.subtract(theirs)?.abs()?.max(None)?;
    let size = theirs.abs()?.max(None)?;
    eval([&diff, &size])?;
    Ok(diff.try_item_exact::<f32>()? / size.try_item_exact::<f32>()?.max(1e-30))
}

/// One expert in 0..experts per row: in equal sorted runs, or scattered (a small LCG).
fn expert_list(rows: usize, experts: u32, sorted: bool) -> Vec<u32> {
    let mut state = 0x9e37_79b9_u64 + rows as u64;
    (0..rows)
        .map(|r| match sorted {
            true => (r * experts as usize / rows) as u32,
            false => {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                ((state >> 33) % experts as u64) as u32
            }
        })
        .collect()
}

/// The runs of consecutive rows with the same expert.
fn runs(indices: &[u32]) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for (r, e) in indices.iter().enumerate() {
        match out.last_mut() {
            Some(run) if indices[run.start] == *e => run.end = r + 1,
            _ => out.push(r..r + 1),
        }
    }
    out
}

fn u32_array(v: &[u32]) -> Array {
    Array::from_slice(v, &[v.len() as i32])
}

#[test]
fn every_format_equals_mlx_dequantized_product() -> TestResult {
    for bits in BITS {
        for group in GROUPS {
            let format = Format::new(bits, group)?;
            // Scattered rows take the few-row kernels, sorted runs of 21 or 22 the panels.
            for (rows, sorted) in [(5, false), (64, true)] {
                let ex = Experts::new(format, 3, 48, 256, rows)?;
                let idx = u32_array(&expert_list(rows as usize, 3, sorted));
                let err = relative_error(&ex.ours(&idx)?, &ex.theirs(&idx)?)?;
                assert!(
                    err <= 1e-5,
                    "{format:?} rows={rows}: relative error {err:e}"
                );
            }
        }
    }
    Ok(())
}

/// Each run of rows is one product on its expert, so a row has the bits `quantized_matmul`
/// gives it on the same rows; in runs of up to `PANEL_ROWS` (the few-row kernels, whose rows
/// are independent) those are the bits of the row alone.
#[test]
fn a_row_has_the_bits_of_its_expert_alone() -> TestResult {
    // 4 bits permute x into lane order, 6 bits do not.
    for format in [Format::new(4, 64)?, Format::new(6, 32)?] {
        for rows in [1, 2, 5, 64, 200] {
            for sorted in [false, true] {
                let ex = Experts::new(format, 3, 40, 128, rows as i32)?;
                let list = expert_list(rows, 3, sorted);
                let ours = bits(&ex.ours(&u32_array(&list))?)?;
                let n = 40;
                for run in runs(&list) {
                    let e = list[run.start];
                    let whole = bits(&ex.alone(run.clone(), e)?)?;
                    let case = format!("{format:?} rows={rows} sorted={sorted} run {run:?}");
                    assert_eq!(ours[run.start * n..run.end * n], whole[..], "{case}");
                    if run.len() > PANEL_ROWS {
                        continue;
                    }
                    for r in run.clone() {
                        let one = bits(&ex.alone(r..r + 1, e)?)?;
                        assert_eq!(ours[r * n..(r + 1) * n], one[..], "{case} row {r}");
                    }
                }
            }
        }
    }
    Ok(())
}

/// Strided x (read through a gather on the stream thread), x broadcast over a token's experts
/// (as SwitchGLU passes it), int32 and lazy indices, all through `async_eval`.
#[test]
fn strided_x_int32_and_lazy_indices_in_the_lazy_graph() -> TestResult {
    let format = Format::new(4, 64)?;
    let ex = Experts::new(format, 3, 40, 128, 6)?;
    let list = [2u32, 0, 0, 1, 2, 2];
    let idx = u32_array(&list);
    let contiguous = ex.ours(&idx)?;
    let int32 = ex.ours(&Array::from_slice(&[2i32, 0, 0, 1, 2, 2], &[6]))?;
    let lazy = ex.ours(&Array::from_slice(&[2i32, 0, 0, 1, 2, 2], &[6]).as_type::<u32>()?)?;
    let strided_x = ex.x.t().as_type::<f32>()?.t();
    let strided = gather_quantized_matmul(&strided_x, &ex.w, &ex.scales, &ex.biases, &idx, format)?;
    let token = broadcast_to(ex.x.try_index(0..1)?, &[3, 128])?;
    let every = u32_array(&[0, 1, 2]);
    let broadcast = gather_quantized_matmul(&token, &ex.w, &ex.scales, &ex.biases, &every, format)?;
    async_eval([&contiguous, &int32, &lazy, &strided, &broadcast])?;
    assert_eq!(contiguous.shape(), &[6, 40]);
    let want = bits(&contiguous)?;
    for (what, got) in [("int32", &int32), ("lazy", &lazy), ("strided", &strided)] {
        assert_eq!(bits(got)?, want, "{what}");
    }
    assert!(relative_error(&contiguous, &ex.theirs(&idx)?)? <= 1e-5);
    for e in 0..3u32 {
        let row = bits(&broadcast.try_index(e as i32)?)?;
        assert_eq!(row, bits(&ex.alone(0..1, e)?)?, "broadcast x, expert {e}");
    }
    Ok(())
}

/// bf16 and f16 scales and biases, as a checkpoint stores them, give the bits of the same
/// values widened to f32, on both kernel paths.
#[test]
fn bf16_and_f16_scales_as_stored_equal_their_f32_values() -> TestResult {
    let format = Format::new(4, 32)?;
    let base = Experts::new(format, 2, 64, 256, 40)?;
    let idx = u32_array(&expert_list(40, 2, true)); // two runs of 20: panels
    let few = u32_array(&expert_list(40, 2, false)); // short runs: few-row kernels
    for dtype in [Dtype::Bfloat16, Dtype::Float16] {
        let narrow = base.with_params(dtype)?;
        let wide = narrow.with_params(Dtype::Float32)?;
        for i in [&idx, &few] {
            assert_eq!(bits(&narrow.ours(i)?)?, bits(&wide.ours(i)?)?, "{dtype:?}");
            let err = relative_error(&narrow.ours(i)?, &narrow.theirs(i)?)?;
            assert!(err <= 1e-5, "{dtype:?}: relative error {err:e}");
        }
    }
    Ok(())
}

/// An index past the last expert (or a negative int32) never addresses w: its row is zero
/// (an expert another rank holds), and the rows around it are what they would be without it.
#[test]
fn an_index_out_of_range_gives_a_zero_row() -> TestResult {
    let format = Format::new(8, 64)?;
    let ex = Experts::new(format, 3, 24, 128, 6)?;
    let valid = [0u32, 0, 1, 1, 2, 2];
    let cases = [
        ("uint32", u32_array(&[0, 3, 1, 1, u32::MAX, 2])),
        (
            "int32",
            Array::from_slice(&[0i32, -2, 1, 1, i32::MIN, 2], &[6]),
        ),
    ];
    for (what, idx) in cases {
        let ours = ex.ours(&idx)?;
        let got = bits(&ours)?;
        for (r, e) in valid.iter().enumerate() {
            let row = &got[r * 24..(r + 1) * 24];
            match r {
                1 | 4 => assert!(row.iter().all(|v| *v == 0), "{what} row {r}"),
                _ => assert_eq!(row, bits(&ex.alone(r..r + 1, *e)?)?, "{what} row {r}"),
            }
        }
    }
    Ok(())
}

#[test]
fn mismatched_operands_are_errors_that_say_why() -> TestResult {
    let format = Format::new(4, 64)?;
    let ex = Experts::new(format, 3, 16, 128, 4)?;
    let idx = u32_array(&[0, 1, 2, 0]);
    let message = |r: Result<Array, mlx_rs::error::Exception>| format!("{:?}", r.err());
    let (x, w, s, b) = (&ex.x, &ex.w, &ex.scales, &ex.biases);

    let short = message(gather_quantized_matmul(
        x,
        w,
        s,
        b,
        &u32_array(&[0, 1, 2]),
        format,
    ));
    assert!(short.contains("indices (3) must be [R] = [4]"), "{short}");
    let w2 = ex.w.try_index(0)?;
    let flat = message(gather_quantized_matmul(x, &w2, s, b, &idx, format));
    assert!(flat.contains("w must be a 3-D uint32 array"), "{flat}");
    let s2 = ex.scales.try_index(0..2)?;
    let few = message(gather_quantized_matmul(x, w, &s2, b, &idx, format));
    assert!(
        few.contains("must both be [E, N, K/group] = (3,16,2)"),
        "{few}"
    );
    let floats = idx.as_type::<f32>()?;
    let float = message(gather_quantized_matmul(x, w, s, b, &floats, format));
    assert!(float.contains("indices must be uint32 or int32"), "{float}");
    let x3 = ex.x.reshape(&[2, 2, 128])?;
    let batched = message(gather_quantized_matmul(&x3, w, s, b, &idx, format));
    assert!(batched.contains("x must be 2-D [R, K]"), "{batched}");
    let wrong_bits = message(gather_quantized_matmul(
        x,
        w,
        s,
        b,
        &idx,
        Format::new(8, 64)?,
    ));
    assert!(
        wrong_bits.contains("does not hold 128 inputs of 8 bits"),
        "{wrong_bits}"
    );
    Ok(())
}
