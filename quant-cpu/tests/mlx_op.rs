//! The op inside real MLX: for every format mlx-lm writes, quantize random f32 weights with
//! MLX, then compare our product with MLX's `x @ dequantize(w).T` (relative error ≤ 1e-5),
//! through the lazy graph (`async_eval` too) and from a strided view of x.

use mlx_rs::ops::{dequantize, matmul, quantize};
use mlx_rs::transforms::{async_eval, eval};
use mlx_rs::{random, Array};
use quant_cpu::kernel::{BITS, GROUPS};
use quant_cpu::{quantized_matmul, Format};

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// max |ours - theirs| / max |theirs|.
fn relative_error(ours: &Array, theirs: &Array) -> TestResult<f32> {
    let diff = ours.subtract(theirs)?.abs()?.max(None)?;
    let size = theirs.abs()?.max(None)?;
    eval([&diff, &size])?;
    Ok(diff.try_item_exact::<f32>()? / size.try_item_exact::<f32>()?.max(1e-30))
}

fn operands(format: Format, m: i32, n: i32, k: i32) -> TestResult<(Array, Array, Array, Array)> {
    random::seed(format.bits as u64 * 1000 + format.group as u64)?;
    let x = random::normal::<f32>(&[m, k], None, None, None)?;
    let w = random::normal::<f32>(&[n, k], None, None, None)?;
    let (wq, scales, biases) = quantize(&w, format.group as i32, format.bits as i32)?;
    Ok((x, wq, scales, biases))
}

fn theirs(x: &Array, wq: &Array, s: &Array, b: &Array, f: Format) -> TestResult<Array> {
    let w = dequantize(wq, s, b, f.group as i32, f.bits as i32)?;
    Ok(matmul(x, w.t())?)
}

#[test]
fn every_format_equals_mlx_dequantized_product() -> TestResult {
    for bits in BITS {
        for group in GROUPS {
            let format = Format::new(bits, group)?;
            for m in [1, 5, 33] {
                let (x, wq, s, b) = operands(format, m, 48, 256)?;
                let ours = quantized_matmul(&x, &wq, &s, &b, format)?;
                let err = relative_error(&ours, &theirs(&x, &wq, &s, &b, format)?)?;
                assert!(err <= 1e-5, "{format:?} m={m}: relative error {err:e}");
            }
        }
    }
    Ok(())
}

#[test]
fn lazy_graph_batched_shapes_and_strided_inputs() -> TestResult {
    let format = Format::new(4, 64)?;
    let (x, wq, s, b) = operands(format, 6, 40, 128)?;
    // [2, 3, K] activations, and x as a transposed view of a [K, 6] array.
    let x3 = x.reshape(&[2, 3, 128])?;
    let strided = x.t().as_type::<f32>()?.t();
    let a = quantized_matmul(&x3, &wq, &s, &b, format)?;
    let c = quantized_matmul(&strided, &wq, &s, &b, format)?;
    async_eval([&a, &c])?;
    assert_eq!(a.shape(), &[2, 3, 40]);
    let want = theirs(&x, &wq, &s, &b, format)?;
    assert!(relative_error(&a.reshape(&[6, 40])?, &want)? <= 1e-5);
    assert!(relative_error(&c, &want)? <= 1e-5);
    Ok(())
}

#[test]
fn mismatched_operands_are_errors_that_say_why() -> TestResult {
    let format = Format::new(4, 64)?;
    let (x, wq, s, b) = operands(format, 2, 16, 128)?;
    let wrong_bits = quantized_matmul(&x, &wq, &s, &b, Format::new(8, 64)?);
    let msg = format!("{:?}", wrong_bits.err());
    assert!(msg.contains("does not hold 128 inputs of 8 bits"), "{msg}");
    let x16 = x.as_dtype(mlx_rs::Dtype::Float16)?;
    let msg = format!("{:?}", quantized_matmul(&x16, &wq, &s, &b, format).err());
    assert!(msg.contains("x must be float32"), "{msg}");
    Ok(())
}

/// Scales and biases as a checkpoint stores them (bf16, f16) give the bits of the same values
/// widened to f32; mixed dtypes are refused.
#[test]
fn bf16_and_f16_scales_as_stored_equal_their_f32_values() -> TestResult {
    use mlx_rs::Dtype;
    let format = Format::new(4, 32)?;
    let (x, wq, s, b) = operands(format, 3, 64, 256)?;
    for dtype in [Dtype::Bfloat16, Dtype::Float16] {
        let (s16, b16) = (s.as_dtype(dtype)?, b.as_dtype(dtype)?);
        let narrow = quantized_matmul(&x, &wq, &s16, &b16, format)?;
        let (s32, b32) = (s16.as_dtype(Dtype::Float32)?, b16.as_dtype(Dtype::Float32)?);
        let wide = quantized_matmul(&x, &wq, &s32, &b32, format)?;
        assert!(narrow.eq_values(&wide)?, "{dtype:?}");
    }
    let mixed = quantized_matmul(&x, &wq, &s.as_dtype(Dtype::Bfloat16)?, &b, format);
    let msg = format!("{:?}", mixed.err());
    assert!(
        msg.contains("scales and biases must share one dtype"),
        "{msg}"
    );
    Ok(())
}
