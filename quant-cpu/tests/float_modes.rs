//! MLX's float modes (mxfp4, mxfp8, nvfp4) inside real MLX: the kernels' decoding of every
//! code and every scale byte equals MLX's `dequantize`, and the products equal
//! `x @ dequantize(w, mode).T` (relative error ≤ 1e-5, as the affine formats) on weights MLX
//! quantized, in decode and prefill shapes, alone, several in one node, SwiGLU and gathered.

mod common;

use std::ffi::CString;

use common::{bits, empty, optional_int, quantize_mode as quantize, TestResult};
use mlx_rs::nn::silu;
use mlx_rs::ops::matmul;
use mlx_rs::transforms::eval;
use mlx_rs::{random, Array, Stream};
use quant_cpu::kernel::float::{e4m3, e8m0};
use quant_cpu::{
    gather_quantized_matmul, quantized_matmul, quantized_matmuls, swiglu_quantized_matmul, Format,
    Mode, QuantWeight,
};

fn float_formats() -> impl Iterator<Item = Format> {
    Mode::ALL.into_iter().filter_map(Mode::float_format)
}

/// MLX's `dequantize(w, scales, mode=..., dtype=float32)`.
fn dequantize(w: &Array, scales: &Array, f: Format) -> TestResult<Array> {
    let mode = CString::new(f.mode.name())?;
    let stream = Stream::thread_local_or_default();
    let f32 = mlx_sys::mlx_optional_dtype {
        value: mlx_sys::mlx_dtype__MLX_FLOAT32,
        has_value: true,
    };
    // SAFETY: live handles; mlx-c copies what it keeps.
    Ok(mlx_rs::raw::try_array_op(|res| unsafe {
        mlx_sys::mlx_dequantize(
            res,
            w.as_ptr(),
            scales.as_ptr(),
            empty(),
            optional_int(f.group as i32),
            optional_int(f.bits as i32),
            mode.as_ptr(),
            empty(),
            f32,
            stream.as_ptr(),
        )
    })?)
}

/// Rows of codes (one byte each, packed as MLX packs `bits`-bit codes) as w [n, k*bits/32].
fn pack(codes: &[u8], n: usize, bits: u32) -> Array {
    let bytes: Vec<u8> = match bits {
        4 => codes.chunks(2).map(|c| c[0] | (c[1] << 4)).collect(),
        _ => codes.to_vec(),
    };
    let words: Vec<u32> = bytes
        .chunks(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Array::from_slice(&words, &[n as i32, (words.len() / n) as i32])
}

fn f32s(a: &Array) -> TestResult<Vec<f32>> {
    eval([a])?;
    Ok(a.try_as_slice::<f32>()?.to_vec())
}

/// Every code's value and every scale byte's value, as MLX dequantizes them, against the
/// kernels' decoding (bit for bit, signs of zero and inf included), and each code times each
/// scale (MLX's one rounding of `value · scale`, overflow and NaN included).
#[test]
fn every_code_and_scale_decodes_as_mlx_does() -> TestResult {
    for f in float_formats() {
        let codes: Vec<u8> = (0..256u32).map(|c| (c % (1 << f.bits)) as u8).collect();
        let k = codes.len();
        // Row j: every code, scale byte j of each group.
        let n = 256;
        let all: Vec<u8> = (0..n).flat_map(|_| codes.iter().copied()).collect();
        let scale_bytes: Vec<u8> = (0..n * k / f.group)
            .map(|i| (i / (k / f.group)) as u8)
            .collect();
        let scales = Array::from_slice(&scale_bytes, &[n as i32, (k / f.group) as i32]);
        let theirs = f32s(&dequantize(&pack(&all, n, f.bits), &scales, f)?)?;
        for (i, theirs) in theirs.into_iter().enumerate() {
            let (j, c) = (i / k, codes[i % k]);
            let scale = match f.mode {
                Mode::Nvfp4 => e4m3(j as u8),
                _ => e8m0(j as u8),
            };
            let ours = f.mode.code_value(c as u32, f.bits) * scale;
            let same = ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan());
            assert!(
                same,
                "{f:?} code {c:#x} scale byte {j}: ours {ours:e}, MLX {theirs:e}"
            );
        }
        // A scale of one (E8M0 127, E4M3 0x38): the code values alone.
        let one: u8 = if f.mode == Mode::Nvfp4 { 0x38 } else { 127 };
        let scales = Array::from_slice(&vec![one; k / f.group], &[1, (k / f.group) as i32]);
        let theirs = f32s(&dequantize(&pack(&codes, 1, f.bits), &scales, f)?)?;
        for (c, theirs) in codes.iter().zip(theirs) {
            let ours = f.mode.code_value(*c as u32, f.bits);
            assert_eq!(ours.to_bits(), theirs.to_bits(), "{f:?} code {c:#x}");
        }
    }
    Ok(())
}

/// max |ours - theirs| / max |theirs|.
fn relative_error(ours: &Array, theirs: &Array) -> TestResult<f32> {
    let diff = ours.subtract(theirs)?.abs()?.max(None)?;
    let size = theirs.abs()?.max(None)?;
    eval([&diff, &size])?;
    Ok(diff.try_item_exact::<f32>()? / size.try_item_exact::<f32>()?.max(1e-30))
}

/// A random [n, k] weight quantized by MLX: (codes, scales).
fn weight(n: i32, k: i32, f: Format) -> TestResult<(Array, Array)> {
    quantize(&random::normal::<f32>(&[n, k], None, None, None)?, f)
}

fn theirs(x: &Array, w: &(Array, Array), f: Format) -> TestResult<Array> {
    Ok(matmul(x, dequantize(&w.0, &w.1, f)?.t())?)
}

fn alone(x: &Array, w: &(Array, Array), f: Format) -> TestResult<Array> {
    Ok(quantized_matmul(x, &w.0, &w.1, None, f)?)
}

fn packed(w: &(Array, Array)) -> QuantWeight<'_> {
    QuantWeight {
        w: &w.0,
        scales: &w.1,
        biases: None,
    }
}

#[test]
fn every_float_mode_equals_mlx_dequantized_product() -> TestResult {
    random::seed(17)?;
    for f in float_formats() {
        // K = 576: SmolLM2's width (18 groups of 32, 36 of 16); 33 rows take the panels.
        for (m, n, k) in [(1, 48, 256), (5, 40, 576), (33, 48, 128), (2, 7, 32)] {
            let x = random::normal::<f32>(&[m, k], None, None, None)?;
            let w = weight(n, k, f)?;
            let err = relative_error(&alone(&x, &w, f)?, &theirs(&x, &w, f)?)?;
            assert!(
                err <= 1e-5,
                "{f:?} m={m} n={n} k={k}: relative error {err:e}"
            );
        }
    }
    Ok(())
}

#[test]
fn float_products_in_one_node_have_the_bits_of_each_alone() -> TestResult {
    random::seed(19)?;
    for f in float_formats() {
        let (q, kv, gate, up) = (
            weight(64, 128, f)?,
            weight(32, 128, f)?,
            weight(96, 128, f)?,
            weight(96, 128, f)?,
        );
        for rows in [1, 3, 20] {
            let x = random::normal::<f32>(&[rows, 128], None, None, None)?;
            let outs = quantized_matmuls(&x, &[packed(&q), packed(&kv)], f)?;
            for (out, w) in outs.iter().zip([&q, &kv]) {
                assert_eq!(bits(out)?, bits(&alone(&x, w, f)?)?, "{f:?}, {rows} rows");
            }
            let ours = swiglu_quantized_matmul(&x, packed(&gate), packed(&up), f)?;
            let want = silu(alone(&x, &gate, f)?)?.multiply(alone(&x, &up, f)?)?;
            assert_eq!(bits(&ours)?, bits(&want)?, "{f:?} SwiGLU, {rows} rows");
        }
    }
    Ok(())
}

/// Each row of the gathered product has the bits of its expert's product alone (runs of one).
#[test]
fn gathered_float_rows_equal_their_experts_products() -> TestResult {
    random::seed(23)?;
    for f in float_formats() {
        let (w, s) = weight(3 * 24, 64, f)?;
        let (w3, s3) = (w.reshape(&[3, 24, -1])?, s.reshape(&[3, 24, -1])?);
        let x = random::normal::<f32>(&[4, 64], None, None, None)?;
        let experts = [2u32, 0, 1, 2];
        let indices = Array::from_slice(&experts, &[4]);
        let ours = gather_quantized_matmul(&x, &w3, &s3, None, &indices, f)?;
        for (r, e) in experts.iter().enumerate() {
            let e = &Array::from_int(*e as i32);
            let (we, se) = (w3.take_axis(e, 0)?, s3.take_axis(e, 0)?);
            let row = x
                .take_axis(Array::from_int(r as i32), 0)?
                .reshape(&[1, 64])?;
            let want = quantized_matmul(&row, &we, &se, None, f)?;
            let got = ours.take_axis(Array::from_int(r as i32), 0)?;
            assert_eq!(bits(&got)?, bits(&want)?, "{f:?} row {r}");
        }
    }
    Ok(())
}

fn error_of(r: Result<Array, mlx_rs::error::Exception>) -> String {
    format!("{:?}", r.err())
}

#[test]
fn float_mode_mismatches_are_errors_that_say_why() -> TestResult {
    let mx = Mode::Mxfp4.float_format().ok_or("mxfp4 has a format")?;
    let nv = Mode::Nvfp4.float_format().ok_or("nvfp4 has a format")?;
    let (w, s) = weight(16, 64, mx)?;
    let x = Array::zeros::<f32>(&[1, 64])?;
    let msg = error_of(quantized_matmul(&x, &w, &s, &s, mx));
    assert!(msg.contains("mxfp4 weights have no biases"), "{msg}");
    let msg = error_of(quantized_matmul(&x, &w, &s, None, Format::new(4, 32)?));
    assert!(msg.contains("affine weights need biases"), "{msg}");
    let f32_scales = s.as_dtype(mlx_rs::Dtype::Float32)?;
    let msg = error_of(quantized_matmul(&x, &w, &f32_scales, None, mx));
    assert!(msg.contains("mxfp4 scales must be uint8"), "{msg}");
    // nvfp4 with K = 48: three groups of 16, not a whole number of the kernels' steps.
    let (w, s) = weight(16, 48, nv)?;
    let msg = error_of(quantized_matmul(
        &Array::zeros::<f32>(&[1, 48])?,
        &w,
        &s,
        None,
        nv,
    ));
    assert!(
        msg.contains("multiple of the group size and of 32"),
        "{msg}"
    );
    let wrong = quant_cpu::Format::with_mode(Mode::Mxfp8, 8, 64);
    assert!(wrong.is_err_and(|e| e.to_string().contains("8 bits, group 32")));
    Ok(())
}
