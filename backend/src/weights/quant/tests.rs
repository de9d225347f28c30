//! Every quantization mode taken in each weight mode, and each bad checkpoint or config named.

use std::collections::HashMap;

use mlx_rs::ops::{dequantize_mode, quantize_mode};
use mlx_rs::{random, Array, Dtype};
use serde_json::{json, Value};

use crate::error::Result;
use crate::models::common::SwitchLinear;
use crate::weights::{Cut, MatrixWeight, Shape, WeightMode, Weights};

const FLOAT_MODES: [(&str, i32, i32); 3] = [("mxfp4", 32, 4), ("mxfp8", 32, 8), ("nvfp4", 16, 4)];

/// `l.weight`, `l.scales` (and affine's `l.biases`) of a random `[rows, 64]` (or stacked
/// `[2, rows, 64]`) matrix quantized in `mode`.
fn quantized(mode: &str, group: i32, bits: i32, dims: &[i32]) -> Result<HashMap<String, Array>> {
    let w = random::normal::<f32>(dims, None, None, None)?;
    let (codes, scales, biases) = quantize_mode(&w, group, bits, mode)?;
    let mut arrays = HashMap::from([("l.weight".into(), codes), ("l.scales".into(), scales)]);
    arrays.extend(biases.map(|b| ("l.biases".to_string(), b)));
    Ok(arrays)
}

fn config(mode: &str, group: i32, bits: i32) -> Value {
    json!({"quantization": {"mode": mode, "group_size": group, "bits": bits}})
}

fn take(arrays: HashMap<String, Array>, config: &Value, mode: WeightMode) -> Result<MatrixWeight> {
    let mut w = Weights::from_arrays(arrays, config, mode)?;
    w.matrix("l", Shape::matrix(8, 64), Cut::Whole)
}

/// The error's text, which must name every one of `words`.
fn refused(result: Result<impl Sized>, words: &[&str]) {
    match result {
        Ok(_) => panic!("accepted; expected an error naming {words:?}"),
        Err(e) => {
            let text = e.to_string();
            for word in words {
                assert!(text.contains(word), "{text:?} does not name {word:?}");
            }
        }
    }
}

fn max_diff(x: &Array, y: &Array) -> Result<f32> {
    Ok(x.subtract(y)?.abs()?.max(None)?.item_exact::<f32>())
}

#[test]
fn float_modes_compute_as_stored_and_dequantize_exactly() -> Result<()> {
    random::seed(3)?;
    let x = random::normal::<f32>(&[3, 64], None, None, None)?;
    for (mode, group, bits) in FLOAT_MODES {
        let arrays = quantized(mode, group, bits, &[8, 64])?;
        let (codes, scales) = (&arrays["l.weight"], &arrays["l.scales"]);
        let want =
            dequantize_mode(codes, scales, None, group, bits, mode)?.as_dtype(Dtype::Float32)?;
        let cfg = config(mode, group, bits);
        let MatrixWeight::Quantized(stored) = take(arrays.clone(), &cfg, WeightMode::AsStored)?
        else {
            panic!("{mode}: as stored is not quantized");
        };
        assert!(stored.biases.is_none(), "{mode}");
        let diff = max_diff(&stored.matmul(&x, true)?, &x.matmul(want.t())?)?;
        assert!(diff < 1e-4, "{mode}: as stored differs by {diff}");
        let MatrixWeight::Dense(dense) = take(arrays.clone(), &cfg, WeightMode::DequantizeF32)?
        else {
            panic!("{mode}: dequantized is not dense");
        };
        assert_eq!(dense.dtype(), Dtype::Float32);
        assert_eq!(max_diff(&dense, &want)?, 0.0, "{mode}");
        let mut w = Weights::from_arrays(arrays, &cfg, WeightMode::PackedF32)?;
        let packed = w.matrix("l", Shape::matrix(8, 64), Cut::Whole)?;
        let MatrixWeight::Packed(packed) = packed else {
            panic!("{mode}: the packed mode keeps it packed for quant-cpu's kernels");
        };
        assert!(packed.biases.is_none(), "{mode}");
        assert_eq!(max_diff(&packed.dequantize_f32()?, &want)?, 0.0, "{mode}");
        let diff = max_diff(&packed.matmul(&x)?, &x.matmul(want.t())?)?;
        assert!(diff < 1e-4, "{mode}: packed differs by {diff}");
        assert!(
            w.portable_layers().is_empty(),
            "{mode}: a vector kernel covers it"
        );
    }
    Ok(())
}

#[test]
fn float_mode_experts_gather_as_stored() -> Result<()> {
    random::seed(4)?;
    let x = random::normal::<f32>(&[4, 64], None, None, None)?;
    let ids = Array::from_slice(&[1u32, 0, 0, 1], &[4]);
    for (mode, group, bits) in FLOAT_MODES {
        let arrays = quantized(mode, group, bits, &[2, 8, 64])?;
        let dense = dequantize_mode(
            &arrays["l.weight"],
            &arrays["l.scales"],
            None,
            group,
            bits,
            mode,
        )?;
        let mut w = Weights::from_arrays(arrays, &config(mode, group, bits), WeightMode::AsStored)?;
        let experts = SwitchLinear::load(&mut w, "l", 2, (64, 8), Cut::Whole)?;
        let want = mlx_rs::ops::gather_mm(
            x.expand_dims(-2)?,
            dense.as_dtype(Dtype::Float32)?.swap_axes(-1, -2)?,
            None,
            &ids,
            false,
        )?
        .squeeze_axes(&[-2])?;
        let diff = max_diff(&experts.forward(&x, &ids, false)?, &want)?;
        assert!(diff < 1e-4, "{mode}: gathered differs by {diff}");
    }
    Ok(())
}

#[test]
fn modes_and_their_group_sizes_are_checked() {
    let bad = |q: Value| super::QuantConfig::from_config(&q).map(|_| ());
    refused(
        bad(json!({"quantization": {"mode": "int3"}})),
        &["int3", "every quantized layer"],
    );
    refused(
        bad(json!({"quantization": {"mode": "mxfp4", "group_size": 64, "bits": 4}})),
        &["mxfp4", "group size 32", "64"],
    );
    refused(
        bad(json!({"quantization": {"mode": "nvfp4", "group_size": 16, "bits": 8}})),
        &["nvfp4", "8 bits"],
    );
    let layer = "model.layers.0.mlp.up_proj";
    refused(
        bad(json!({"quantization": {"mode": "mxfp8", layer: {"mode": "mxfp8", "group_size": 16}}})),
        &[layer, "mxfp8", "16"],
    );
    refused(
        bad(
            json!({"quantization": {"mode": "nvfp4", layer: {"mode": "nvfp4", "global_scale": true}}}),
        ),
        &[layer, "global scale"],
    );
    refused(
        bad(json!({"quantization_config": {"quant_method": "fp8"}})),
        &["quant_method", "fp8"],
    );
    // mlx-lm's defaults: a float mode alone gets its own group size and bits.
    for mode in ["mxfp4", "mxfp8", "nvfp4"] {
        assert!(
            bad(json!({"quantization": {"mode": mode}})).is_ok(),
            "{mode}"
        );
    }
    assert!(bad(json!({"quantization_config": {"quant_method": "mxfp4"}})).is_ok());
}

#[test]
fn bad_float_mode_tensors_are_named() -> Result<()> {
    random::seed(5)?;
    let cfg = config("mxfp4", 32, 4);
    // Affine's float scales (and its biases) under an mxfp4 config.
    let mut affine = quantized("affine", 32, 4, &[8, 64])?;
    let affine_biases = affine.remove("l.biases");
    refused(
        take(affine, &cfg, WeightMode::AsStored),
        &["`l.scales`", "Float32", "mxfp4"],
    );
    let mut with_biases = quantized("mxfp4", 32, 4, &[8, 64])?;
    with_biases.extend(affine_biases.map(|b| ("l.biases".to_string(), b)));
    refused(
        take(with_biases, &cfg, WeightMode::AsStored),
        &["`l.biases`", "mxfp4", "no biases"],
    );
    let mut global = quantized("nvfp4", 16, 4, &[8, 64])?;
    global.insert("l.global_scale".into(), Array::from_f32(1.0));
    refused(
        take(global, &config("nvfp4", 16, 4), WeightMode::PackedF32),
        &["`l.global_scale`", "nvfp4"],
    );
    // uint8 scales under affine: a float-mode checkpoint that config.json calls affine.
    let mut codes_only = quantized("mxfp4", 32, 4, &[8, 64])?;
    codes_only.insert("l.biases".into(), Array::zeros::<f32>(&[8, 2])?);
    refused(
        take(
            codes_only,
            &config("affine", 32, 4),
            WeightMode::DequantizeF32,
        ),
        &["`l.scales`", "Uint8", "affine"],
    );
    Ok(())
}

#[test]
fn the_patched_ops_refuse_a_bad_mode_without_a_panic() -> Result<()> {
    let w = random::normal::<f32>(&[8, 64], None, None, None)?;
    assert!(quantize_mode(&w, 32, 4, "nope").is_err());
    assert!(quantize_mode(&w, 32, 4, "mx\0fp4").is_err());
    let (_, _, biases) = quantize_mode(&w, 32, 4, "affine")?;
    assert!(biases.is_some(), "affine keeps its biases");
    Ok(())
}

#[test]
fn int8_weights_in_tiles_give_back_their_rows_and_values() -> Result<()> {
    use quant_cpu::kernel::int8::tiles;
    if !tiles::wanted() {
        println!("int8: this CPU's kernels read no tiles: the tiled load is not tested here");
        return Ok(());
    }
    random::seed(5)?;
    let x = random::normal::<f32>(&[3, 64], None, None, None)?;
    let ids = Array::from_slice(&[0u32, 17, 31, 5, 16], &[5]);
    for (mode, group, bits) in [("affine", 64, 4), ("affine", 32, 8), ("mxfp4", 32, 4)] {
        let arrays = quantized(mode, group, bits, &[32, 64])?;
        let biases = arrays.get("l.biases");
        let (codes, scales) = (&arrays["l.weight"], &arrays["l.scales"]);
        let want =
            dequantize_mode(codes, scales, biases, group, bits, mode)?.as_dtype(Dtype::Float32)?;
        let mut w = Weights::from_arrays(
            arrays.clone(),
            &config(mode, group, bits),
            WeightMode::PackedInt8,
        )?;
        let MatrixWeight::Packed(packed) = w.matrix("l", Shape::matrix(32, 64), Cut::Whole)? else {
            panic!("{mode}: int8 keeps it packed");
        };
        assert_eq!(
            packed.format.layout,
            quant_cpu::Layout::Tiles,
            "{mode} {bits}"
        );
        assert_ne!(
            max_diff(
                &packed.weight.as_dtype(Dtype::Float32)?,
                &codes.as_dtype(Dtype::Float32)?
            )?,
            0.0
        );
        assert_eq!(
            max_diff(&packed.dequantize_f32()?, &want)?,
            0.0,
            "{mode} {bits}"
        );
        assert_eq!(
            max_diff(&packed.rows(&ids)?, &want.take_axis(&ids, 0)?)?,
            0.0,
            "{mode} {bits}"
        );
        let diff = max_diff(&packed.matmul(&x)?, &x.matmul(want.t())?)?;
        assert!(
            diff < 0.05,
            "{mode} {bits}: the tiled product differs by {diff}"
        );
    }
    Ok(())
}
