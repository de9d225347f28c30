//! Several products of one x as one node: each output has the bits of its own
//! `quantized_matmul`, and the SwiGLU node the bits of mlx-lm's `silu(gate) * up` over two of
//! them on MLX's CPU, in decode (few rows) and prefill (panel) shapes.

mod common;

use common::{bits, TestResult};
use mlx_rs::nn::silu;
use mlx_rs::ops::quantize;
use mlx_rs::{random, Array};
use quant_cpu::{
    quantized_matmul, quantized_matmuls, swiglu_quantized_matmul, Format, PackedWeight,
};

/// A random [n, k] weight quantized to `format`: (w, scales, biases).
fn weight(n: i32, k: i32, format: Format) -> TestResult<(Array, Array, Array)> {
    let w = random::normal::<f32>(&[n, k], None, None, None)?;
    Ok(quantize(&w, format.group as i32, format.bits as i32)?)
}

fn packed(w: &(Array, Array, Array)) -> PackedWeight<'_> {
    PackedWeight {
        w: &w.0,
        scales: &w.1,
        biases: &w.2,
    }
}

fn alone(x: &Array, w: &(Array, Array, Array), format: Format) -> TestResult<Array> {
    Ok(quantized_matmul(x, &w.0, &w.1, &w.2, format)?)
}

#[test]
fn every_output_has_the_bits_of_its_own_product() -> TestResult {
    random::seed(3)?;
    for (bits_, group) in [(4, 64), (8, 32), (3, 128), (6, 64)] {
        let format = Format::new(bits_, group)?;
        let (q, k, v) = (
            weight(96, 256, format)?,
            weight(32, 256, format)?,
            weight(32, 256, format)?,
        );
        for rows in [1, 3, 20] {
            let x = random::normal::<f32>(&[1, rows, 256], None, None, None)?;
            let outs = quantized_matmuls(&x, &[packed(&q), packed(&k), packed(&v)], format)?;
            assert_eq!(outs.len(), 3);
            for (out, w) in outs.iter().zip([&q, &k, &v]) {
                assert_eq!(out.shape(), &[1, rows, w.0.shape()[0]]);
                assert_eq!(
                    bits(out)?,
                    bits(&alone(&x, w, format)?)?,
                    "{format:?}, {rows} rows"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn swiglu_has_the_bits_of_silu_gate_times_up() -> TestResult {
    random::seed(5)?;
    for (bits_, group) in [(4, 64), (8, 64), (2, 32)] {
        let format = Format::new(bits_, group)?;
        let (gate, up) = (weight(160, 128, format)?, weight(160, 128, format)?);
        for rows in [1, 2, 17] {
            let x = random::normal::<f32>(&[rows, 128], None, Some(2.0), None)?;
            let ours = swiglu_quantized_matmul(&x, packed(&gate), packed(&up), format)?;
            let theirs = silu(alone(&x, &gate, format)?)?.multiply(alone(&x, &up, format)?)?;
            assert_eq!(bits(&ours)?, bits(&theirs)?, "{format:?}, {rows} rows");
        }
    }
    Ok(())
}

#[test]
fn mismatched_weights_are_errors_that_say_why() -> TestResult {
    let format = Format::new(4, 64)?;
    let (a, b) = (weight(64, 128, format)?, weight(32, 128, format)?);
    let x = Array::zeros::<f32>(&[1, 128])?;
    let e = swiglu_quantized_matmul(&x, packed(&a), packed(&b), format)
        .err()
        .ok_or("gate and up of different sizes accepted")?;
    assert!(e.to_string().contains("same output size"), "{e}");
    let e = quantized_matmuls::<PackedWeight>(&x, &[], format)
        .err()
        .ok_or("no weights accepted")?;
    assert!(e.to_string().contains("weights"), "{e}");
    let short = Array::zeros::<f32>(&[1, 64])?;
    let e = quantized_matmuls(&short, &[packed(&a)], format)
        .err()
        .ok_or("K mismatch accepted")?;
    assert!(e.to_string().contains("mlxd_quantized_matmuls"), "{e}");
    Ok(())
}
