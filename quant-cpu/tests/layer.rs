//! The one-node decode layer against the same step built node by node, as the backend built it
//! before (norms, packed products, reshapes, ropes, cache writes, decode attention, SwiGLU,
//! residual adds): bit for bit, output and caches, over several steps, for a batch of rows at
//! different positions, with q/k/v biases, q/k norms and a frequency table, and with a cache
//! another holder shares (which must not change). A step of several positions per row (a
//! speculative step's input and proposals) has the bits of as many one-position steps.
//! MLX's float modes as affine. Operands it does not take are errors that say why.

mod common;

use common::{bits, TestResult};
use mlx_rs::ops::indexing::{IndexOp, TryIndexMutOp};
use mlx_rs::ops::quantize;
use mlx_rs::transforms::eval;
use mlx_rs::{random, Array};
use quant_cpu::fast::{decode_attention, rms_norm, rope, RopeSpec};
use quant_cpu::layer::{decode_layer, LayerNode, LayerShape, LayerWeights, RowCache};
use quant_cpu::{
    kernel::Numerics, quantized_matmul, quantized_matmuls, swiglu_quantized_matmul, Format, Mode,
    QuantWeight,
};

fn normal(shape: &[i32], scale: f32) -> TestResult<Array> {
    Ok(random::normal::<f32>(shape, None, Some(scale), None)?)
}

/// A packed weight's arrays: codes, scales and (affine) biases.
struct Packed(Array, Array, Option<Array>);

impl Packed {
    fn random(n: i32, k: i32, format: Format) -> TestResult<Packed> {
        let w = normal(&[n, k], 0.08)?;
        if format.mode != Mode::Affine {
            let (q, s) = common::quantize_mode(&w, format)?;
            return Ok(Packed(q, s, None));
        }
        let (q, s, b) = quantize(&w, format.group as i32, format.bits as i32)?;
        Ok(Packed(q, s, Some(b)))
    }

    fn view(&self) -> QuantWeight<'_> {
        QuantWeight {
            w: &self.0,
            scales: &self.1,
            biases: self.2.as_ref(),
        }
    }
}

/// A layer's random weights.
struct Layer {
    norms: [Array; 2],
    q: Packed,
    k: Packed,
    v: Packed,
    o: Packed,
    gate: Packed,
    up: Packed,
    down: Packed,
    qkv_bias: Option<[Array; 3]>,
    qk_norm: Option<[Array; 2]>,
}

/// The layer's sizes: hidden, heads, kv heads, head dim, MLP width.
#[derive(Clone, Copy, Debug)]
struct Dims {
    hidden: i32,
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
    inter: i32,
}

impl Dims {
    fn new(hidden: i32, heads: i32, kv_heads: i32, head_dim: i32, inter: i32) -> Dims {
        Dims {
            hidden,
            heads,
            kv_heads,
            head_dim,
            inter,
        }
    }
}

impl Layer {
    fn random(d: Dims, format: Format, extras: bool) -> TestResult<Layer> {
        let (nq, nkv) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
        let norm = |n| -> TestResult<Array> { Ok(normal(&[n], 0.2)?.add(Array::from_f32(1.0))?) };
        Ok(Layer {
            norms: [norm(d.hidden)?, norm(d.hidden)?],
            q: Packed::random(nq, d.hidden, format)?,
            k: Packed::random(nkv, d.hidden, format)?,
            v: Packed::random(nkv, d.hidden, format)?,
            o: Packed::random(d.hidden, nq, format)?,
            gate: Packed::random(d.inter, d.hidden, format)?,
            up: Packed::random(d.inter, d.hidden, format)?,
            down: Packed::random(d.hidden, d.inter, format)?,
            qkv_bias: match extras {
                true => Some([
                    normal(&[nq], 0.5)?,
                    normal(&[nkv], 0.5)?,
                    normal(&[nkv], 0.5)?,
                ]),
                false => None,
            },
            qk_norm: match extras {
                true => Some([norm(d.head_dim)?, norm(d.head_dim)?]),
                false => None,
            },
        })
    }

    fn weights(&self) -> LayerWeights<'_> {
        LayerWeights {
            attention_norm: &self.norms[0],
            q: self.q.view(),
            k: self.k.view(),
            v: self.v.view(),
            o: self.o.view(),
            mlp_norm: &self.norms[1],
            gate: self.gate.view(),
            up: self.up.view(),
            down: self.down.view(),
            qkv_bias: self.qkv_bias.as_ref().map(|[a, b, c]| [a, b, c]),
            qk_norm: self.qk_norm.as_ref().map(|[a, b]| [a, b]),
        }
    }
}

/// One row's cache: buffers and how many positions they hold.
#[derive(Clone)]
struct Cache {
    keys: Array,
    values: Array,
    len: i32,
}

/// The step built node by node, as the backend's attention and MLP blocks build it.
fn by_nodes(l: &Layer, shape: &LayerShape, x: &Array, caches: &mut [Cache]) -> TestResult<Array> {
    let b = x.shape()[0];
    let f = shape.format;
    let xn = rms_norm(x, &l.norms[0], shape.eps)?;
    let w = l.weights();
    let mut qkv = quantized_matmuls(&xn, &[w.q, w.k, w.v], f)?;
    if let Some(bias) = &l.qkv_bias {
        for (y, b) in qkv.iter_mut().zip(bias) {
            *y = y.add(b)?;
        }
    }
    let heads = |y: &Array, n: i32, norm: Option<&Array>| -> TestResult<Array> {
        let y = y.reshape(&[b, 1, n, -1])?;
        let y = match norm {
            Some(w) => rms_norm(&y, w, shape.eps)?,
            None => y,
        };
        Ok(y.transpose_axes(&[0, 2, 1, 3])?)
    };
    let norms = l.qk_norm.as_ref();
    let q = heads(&qkv[0], shape.heads, norms.map(|n| &n[0]))?;
    let k = heads(&qkv[1], shape.kv_heads, norms.map(|n| &n[1]))?;
    let v = heads(&qkv[2], shape.kv_heads, None)?;
    let offsets: Vec<i32> = caches.iter().map(|c| c.len).collect();
    let offsets = Array::from_slice(&offsets, &[b]);
    let (q, k) = (
        rope(&q, &offsets, &shape.rope)?,
        rope(&k, &offsets, &shape.rope)?,
    );
    let (ks, vs) = (k.split_equal(b, 0)?, v.split_equal(b, 0)?);
    let mut rows = Vec::new();
    for (r, c) in caches.iter_mut().enumerate() {
        let (at, end) = (c.len, c.len + 1);
        c.keys.try_index_mut((.., .., at..end, ..), &ks[r])?;
        c.values.try_index_mut((.., .., at..end, ..), &vs[r])?;
        c.len = end;
        rows.push((
            c.keys.index((.., .., ..end, ..)),
            c.values.index((.., .., ..end, ..)),
        ));
    }
    let rows: Vec<(&Array, &Array)> = rows.iter().map(|(k, v)| (k, v)).collect();
    let att = decode_attention(&q, &rows, shape.scale)?;
    let att = att.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, 1, -1])?;
    let h = x.add(quantized_matmul(&att, w.o.w, w.o.scales, w.o.biases, f)?)?;
    let hn = rms_norm(&h, &l.norms[1], shape.eps)?;
    let g = swiglu_quantized_matmul(&hn, w.gate, w.up, f)?;
    Ok(h.add(quantized_matmul(
        &g,
        w.down.w,
        w.down.scales,
        w.down.biases,
        f,
    )?)?)
}

/// The step as one node (x [B, L, D]: L positions per row).
fn by_layer(node: &LayerNode, x: &Array, caches: &mut [Cache]) -> TestResult<Array> {
    let rows: Vec<RowCache> = caches.iter().map(row).collect();
    let (h, written) = node.step(x, &rows)?;
    drop(rows);
    let length = x.shape()[1];
    for (c, (k, v)) in caches.iter_mut().zip(written) {
        (c.keys, c.values, c.len) = (k, v, c.len + length);
    }
    Ok(h)
}

/// Row `c`, its buffers its alone.
fn row(c: &Cache) -> RowCache<'_> {
    RowCache {
        keys: &c.keys,
        values: &c.values,
        offset: c.len,
        exclusive: true,
    }
}

/// Buffers of their own with `c`'s values.
fn deep_copy(c: &Cache) -> TestResult<Cache> {
    let copy = |a: &Array| -> TestResult<Array> {
        Ok(Array::from_slice(a.try_as_slice::<f32>()?, a.shape()))
    };
    Ok(Cache {
        keys: copy(&c.keys)?,
        values: copy(&c.values)?,
        len: c.len,
    })
}

fn fresh_caches(d: Dims, lens: &[i32], capacity: i32) -> TestResult<Vec<Cache>> {
    lens.iter()
        .map(|&len| {
            let shape = [1, d.kv_heads, capacity, d.head_dim];
            let (keys, values) = (normal(&shape, 1.0)?, normal(&shape, 1.0)?);
            eval([&keys, &values])?;
            Ok(Cache { keys, values, len })
        })
        .collect()
}

/// Room for `steps` more positions in every row's cache.
fn capacity(lens: &[i32], steps: i32) -> i32 {
    lens.iter().max().map_or(0, |l| l + steps) + 8
}

/// A rope over half the head (traditional, with a frequency table, when `extras`).
fn test_shape(d: Dims, format: Format, extras: bool, freqs: &Array) -> LayerShape<'_> {
    LayerShape {
        heads: d.heads,
        kv_heads: d.kv_heads,
        eps: 1e-5,
        scale: (d.head_dim as f32).powf(-0.5),
        rope: RopeSpec {
            dims: d.head_dim / 2,
            traditional: extras,
            base: 10000.0,
            freqs: extras.then_some(freqs),
            scale: 1.0,
        },
        format,
    }
}

fn frequencies(d: Dims) -> TestResult<Array> {
    Ok(normal(&[d.head_dim / 4], 1.0)?
        .abs()?
        .add(Array::from_f32(1.0))?)
}

/// Three steps both ways from the same caches: the same bits at every step.
fn same_bits(d: Dims, format: Format, extras: bool, lens: &[i32]) -> TestResult {
    let layer = Layer::random(d, format, extras)?;
    let freqs = frequencies(d)?;
    let shape = test_shape(d, format, extras, &freqs);
    let mut ours = fresh_caches(d, lens, capacity(lens, 3))?;
    let mut theirs = ours.iter().map(deep_copy).collect::<TestResult<Vec<_>>>()?;
    let b = lens.len() as i32;
    let node = LayerNode::new(&layer.weights(), &shape)?;
    for step in 0..3 {
        let x = normal(&[b, 1, d.hidden], 1.0)?;
        let mine = by_layer(&node, &x, &mut ours)?;
        let reference = by_nodes(&layer, &shape, &x, &mut theirs)?;
        let what = format!("{d:?} {format:?} extras {extras} rows {lens:?} step {step}");
        assert_eq!(bits(&mine)?, bits(&reference)?, "output, {what}");
        for (o, t) in ours.iter().zip(&theirs) {
            assert_eq!(bits(&o.keys)?, bits(&t.keys)?, "keys, {what}");
            assert_eq!(bits(&o.values)?, bits(&t.values)?, "values, {what}");
        }
    }
    Ok(())
}

#[test]
fn one_node_has_the_bits_of_the_step_built_node_by_node() -> TestResult {
    random::seed(11)?;
    let smol = Dims::new(192, 6, 2, 32, 320);
    same_bits(smol, Format::new(4, 64)?, false, &[5])?;
    same_bits(smol, Format::new(4, 64)?, false, &[0, 9, 20])?;
    let square = Dims::new(128, 4, 4, 32, 256);
    same_bits(square, Format::new(8, 32)?, true, &[3, 0])?;
    same_bits(square, Format::new(2, 128)?, true, &[1])?;
    // A row's few head groups over 512 keys or more: each group's scores and values in ranges.
    same_bits(smol, Format::new(4, 64)?, false, &[520])?;
    // The integer path: q, k and v (gate and up) one product of parts in the layer's node,
    // node by node three (two).
    let int8 = |bits| {
        Ok::<_, quant_cpu::FormatError>(Format::new(bits, 64)?.with_numerics(Numerics::Int8))
    };
    same_bits(smol, int8(4)?, false, &[0, 9, 20])?;
    same_bits(smol, int8(4)?, false, &[513])?;
    same_bits(square, int8(8)?, true, &[3, 0])?;
    // MLX's float modes, without biases, in both numerics (mxfp8 has no integer kernel: its
    // products take the f32 path in either).
    for mode in [Mode::Mxfp4, Mode::Nvfp4, Mode::Mxfp8] {
        let f = mode.float_format().ok_or("a float mode has a format")?;
        same_bits(smol, f, false, &[0, 9, 20])?;
        same_bits(square, f.with_numerics(Numerics::Int8), true, &[3, 0])?;
    }
    Ok(())
}

/// One step of `length` positions per row against `length` one-position steps from the same
/// caches: every position's output and the caches, bit for bit.
fn positions_as_decode_steps(d: Dims, format: Format, lens: &[i32], length: i32) -> TestResult {
    let layer = Layer::random(d, format, true)?;
    let freqs = frequencies(d)?;
    let shape = test_shape(d, format, true, &freqs);
    let node = LayerNode::new(&layer.weights(), &shape)?;
    let mut ours = fresh_caches(d, lens, capacity(lens, length))?;
    let mut theirs = ours.iter().map(deep_copy).collect::<TestResult<Vec<_>>>()?;
    let x = normal(&[lens.len() as i32, length, d.hidden], 1.0)?;
    let all = by_layer(&node, &x, &mut ours)?;
    let what = format!("{d:?} {format:?} rows {lens:?} length {length}");
    for j in 0..length {
        let one = by_layer(&node, &x.index((.., j..j + 1, ..)), &mut theirs)?;
        let mine = all
            .index((.., j..j + 1, ..))
            .multiply(Array::from_f32(1.0))?;
        assert_eq!(bits(&mine)?, bits(&one)?, "position {j}, {what}");
    }
    for (o, t) in ours.iter().zip(&theirs) {
        assert_eq!(o.len, t.len);
        assert_eq!(bits(&o.keys)?, bits(&t.keys)?, "keys, {what}");
        assert_eq!(bits(&o.values)?, bits(&t.values)?, "values, {what}");
    }
    Ok(())
}

#[test]
fn several_positions_have_the_bits_of_as_many_decode_steps() -> TestResult {
    random::seed(16)?;
    let smol = Dims::new(192, 6, 2, 32, 320);
    positions_as_decode_steps(smol, Format::new(4, 64)?, &[7], 5)?;
    positions_as_decode_steps(smol, Format::new(4, 64)?, &[515], 5)?;
    positions_as_decode_steps(smol, Format::new(4, 64)?, &[0, 12, 3], 3)?;
    let square = Dims::new(128, 4, 4, 32, 256);
    positions_as_decode_steps(square, Format::new(8, 32)?, &[2, 9], 16)?;
    let int8 = Format::new(4, 64)?.with_numerics(Numerics::Int8);
    positions_as_decode_steps(smol, int8, &[0, 12, 3], 3)?;
    Ok(())
}

#[test]
fn a_shared_cache_is_copied_and_an_exclusive_one_written_in_place() -> TestResult {
    random::seed(12)?;
    let d = Dims::new(128, 4, 2, 32, 128);
    let layer = Layer::random(d, Format::new(4, 64)?, false)?;
    let shape = small_shape(Format::new(4, 64)?);
    for exclusive in [false, true] {
        let caches = fresh_caches(d, &[4], 8)?;
        let (kept_keys, kept_values) = (caches[0].keys.clone(), caches[0].values.clone());
        let before = (bits(&kept_keys)?, bits(&kept_values)?);
        let x = normal(&[1, 1, 128], 1.0)?;
        let r = RowCache {
            exclusive,
            ..row(&caches[0])
        };
        let (h, written) = decode_layer(&x, &layer.weights(), &shape, &[r])?;
        let (keys, values) = &written[0];
        eval([&h, keys, values])?;
        assert_ne!(bits(keys)?, before.0, "the new position was written");
        // Every position but the new one keeps its value, in the output and the input.
        let position =
            |a: &Array, p: i32| bits(&a.index((.., .., p, ..)).multiply(Array::from_f32(1.0))?);
        for p in (0..8).filter(|p| *p != 4) {
            assert_eq!(position(keys, p)?, position(&kept_keys, p)?);
            assert_eq!(position(values, p)?, position(&kept_values, p)?);
        }
        let after = (bits(&kept_keys)?, bits(&kept_values)?);
        match exclusive {
            false => assert_eq!(after, before, "a shared cache was written"),
            true => assert_eq!(after, (bits(keys)?, bits(values)?), "not written in place"),
        }
    }
    Ok(())
}

#[test]
fn a_node_keeps_its_weights_when_the_caller_drops_theirs() -> TestResult {
    random::seed(14)?;
    let d = Dims::new(128, 4, 2, 32, 128);
    let format = Format::new(4, 64)?;
    let layer = Layer::random(d, format, false)?;
    let shape = small_shape(format);
    let node = LayerNode::new(&layer.weights(), &shape)?;
    let x = normal(&[1, 1, 128], 1.0)?;
    let step = |node: &LayerNode| -> TestResult<Vec<u32>> {
        random::seed(15)?;
        let mut caches = fresh_caches(d, &[3], 8)?;
        bits(&by_layer(node, &x, &mut caches)?)
    };
    let before = step(&node)?;
    drop(layer);
    assert_eq!(step(&node)?, before);
    Ok(())
}

/// A 4-head, 2-kv-head layer's shape.
fn small_shape(format: Format) -> LayerShape<'static> {
    LayerShape {
        heads: 4,
        kv_heads: 2,
        eps: 1e-6,
        scale: 0.2,
        rope: RopeSpec {
            dims: 32,
            traditional: false,
            base: 10000.0,
            freqs: None,
            scale: 1.0,
        },
        format,
    }
}

#[test]
fn operands_the_layer_does_not_take_are_errors_that_say_why() -> TestResult {
    random::seed(13)?;
    let d = Dims::new(128, 4, 2, 32, 128);
    let format = Format::new(4, 64)?;
    let layer = Layer::random(d, format, false)?;
    let shape = small_shape(format);
    let x = normal(&[1, 1, 128], 1.0)?;
    let full = fresh_caches(d, &[8], 8)?;
    let e = decode_layer(&x, &layer.weights(), &shape, &[row(&full[0])]).err();
    let e = e.ok_or("a write past the capacity accepted")?.to_string();
    assert!(e.contains("writes position 8 of a cache of 8"), "{e}");
    let three = normal(&[1, 3, 128], 1.0)?;
    let e = decode_layer(
        &three,
        &layer.weights(),
        &shape,
        &[row(&fresh_caches(d, &[6], 8)?[0])],
    );
    let e = e
        .err()
        .ok_or("positions past the capacity accepted")?
        .to_string();
    assert!(e.contains("writes positions 6..8 of a cache of 8"), "{e}");
    let wide = fresh_caches(Dims { head_dim: 16, ..d }, &[0], 8)?;
    let e = decode_layer(&x, &layer.weights(), &shape, &[row(&wide[0])]).err();
    let e = e.ok_or("a cache of the wrong width accepted")?.to_string();
    assert!(
        e.contains("row 0's cache must be float32 [1, 2, capacity, 32]"),
        "{e}"
    );
    let caches = fresh_caches(d, &[0], 8)?;
    let two_rows = normal(&[2, 1, 128], 1.0)?;
    let e = decode_layer(&two_rows, &layer.weights(), &shape, &[row(&caches[0])]).err();
    let e = e.ok_or("two rows with one cache accepted")?.to_string();
    assert!(e.contains("one offset per row"), "{e}");
    let bad = LayerShape { heads: 3, ..shape };
    let e = decode_layer(&x, &layer.weights(), &bad, &[row(&caches[0])]).err();
    let e = e.ok_or("3 heads over 2 kv heads accepted")?.to_string();
    assert!(e.contains("multiple of kv heads"), "{e}");
    let mut weights = layer.weights();
    weights.up.biases = None;
    let e = LayerNode::new(&weights, &shape).err();
    let e = e
        .ok_or("affine weights without biases accepted")?
        .to_string();
    assert!(e.contains("the layer's up weight has no biases"), "{e}");
    let mxfp4 = Mode::Mxfp4.float_format().ok_or("mxfp4 has a format")?;
    let e = LayerNode::new(&layer.weights(), &small_shape(mxfp4)).err();
    let e = e.ok_or("biases in a float mode accepted")?.to_string();
    assert!(
        e.contains("the layer's q weight has biases, which mxfp4"),
        "{e}"
    );
    Ok(())
}
