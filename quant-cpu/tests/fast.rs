//! The one-node CPU RMS norm and rope against MLX's own `fast::rms_norm` and `fast::rope`
//! (which are their fallbacks of plain ops on the CPU): bit for bit, over row counts, strided
//! inputs, partial and traditional rotations, per-row offsets, frequency tables and far
//! positions; and operands they do not take are errors that say why.

mod common;

use common::{bits, TestResult};
use mlx_rs::{fast, random, Array, Dtype};
use quant_cpu::fast::{causal_attention, decode_attention, logsumexp, rms_norm, rope, RopeSpec};
use quant_cpu::Numerics;

fn normal(shape: &[i32], scale: f32) -> TestResult<Array> {
    Ok(random::normal::<f32>(shape, None, Some(scale), None)?)
}

#[test]
fn rms_norm_has_the_bits_of_mlx_fast_rms_norm() -> TestResult {
    random::seed(7)?;
    for (shape, scale, eps) in [
        (vec![1, 1, 576], 1.0, 1e-5),
        (vec![3, 5, 64], 30.0, 1e-6),
        (vec![2, 7, 4, 128], 0.01, 1e-5),
        (vec![1, 9], 1e3, 1e-2),
    ] {
        let x = normal(&shape, scale)?;
        let d = *shape.last().ok_or("no dims")?;
        let w = normal(&[d], 1.0)?;
        let theirs = fast::rms_norm(&x, Some(&w), eps)?;
        assert_eq!(bits(&rms_norm(&x, &w, eps)?)?, bits(&theirs)?, "{shape:?}");
    }
    // A strided view (a transpose) is read in place.
    let x = normal(&[6, 4, 32], 2.0)?.transpose_axes(&[1, 0, 2])?;
    let w = normal(&[32], 1.0)?;
    let theirs = fast::rms_norm(&x, Some(&w), 1e-5)?;
    assert_eq!(bits(&rms_norm(&x, &w, 1e-5)?)?, bits(&theirs)?, "strided");
    Ok(())
}

/// Ours and MLX's rope of `x` from `offsets`, as bits.
fn both_ropes(x: &Array, offsets: &[i32], spec: &RopeSpec) -> TestResult<(Vec<u32>, Vec<u32>)> {
    let base = spec.freqs.is_none().then_some(spec.base);
    let (ours, theirs) = match offsets {
        [one] => (
            rope(x, &Array::from_int(*one), spec)?,
            fast::rope(
                x,
                spec.dims,
                spec.traditional,
                base,
                spec.scale,
                *one,
                spec.freqs,
            )?,
        ),
        rows => {
            let offsets = Array::from_slice(rows, &[rows.len() as i32]);
            (
                rope(x, &offsets, spec)?,
                fast::rope_dynamic(
                    x,
                    spec.dims,
                    spec.traditional,
                    base,
                    spec.scale,
                    &offsets,
                    spec.freqs,
                )?,
            )
        }
    };
    Ok((bits(&ours)?, bits(&theirs)?))
}

#[test]
fn rope_has_the_bits_of_mlx_fast_rope() -> TestResult {
    random::seed(11)?;
    let freqs = random::uniform::<f32, f32>(1.0, 5e5, &[16], None)?;
    let head = |dims, traditional, base, scale, freqs| RopeSpec {
        dims,
        traditional,
        base,
        freqs,
        scale,
    };
    let specs = [
        head(64, false, 10000.0, 1.0, None),
        head(64, true, 10000.0, 1.0, None),
        head(32, false, 100000.0, 0.25, None),
        head(32, true, 500000.0, 1.0, Some(&freqs)),
        head(32, false, 1.0, 0.5, Some(&freqs)),
    ];
    // Prefill from 0, a decode step far out, and a batch of rows each at its own position;
    // chunks whose angles the stream thread's table holds, grows to, or does not reach.
    let cases: [(&[i32], &[i32]); 6] = [
        (&[1, 9, 5, 64], &[0]),
        (&[1, 3, 1, 64], &[70000]),
        (&[3, 4, 1, 64], &[5, 0, 123457]),
        (&[2, 2, 6, 64], &[17]),
        (&[1, 2, 40, 64], &[30]),
        (&[1, 2, 3, 64], &[32766]),
    ];
    for spec in &specs {
        for (shape, offsets) in cases {
            let x = normal(shape, 3.0)?;
            let (ours, theirs) = both_ropes(&x, offsets, spec)?;
            assert_eq!(ours, theirs, "{spec:?} {shape:?} from {offsets:?}");
        }
    }
    // Heads as the attention makes them: [B, L, heads, D] transposed to [B, heads, L, D].
    let x = normal(&[2, 5, 3, 64], 1.0)?.transpose_axes(&[0, 2, 1, 3])?;
    let (ours, theirs) = both_ropes(&x, &[4, 8], &specs[0])?;
    assert_eq!(ours, theirs, "strided");
    Ok(())
}

#[test]
fn operands_the_nodes_do_not_take_are_errors_that_say_why() -> TestResult {
    let x = Array::zeros::<f32>(&[1, 2, 3, 8])?;
    let spec = RopeSpec {
        dims: 8,
        traditional: false,
        base: 10000.0,
        freqs: None,
        scale: 1.0,
    };
    let half = x.as_dtype(Dtype::Bfloat16)?;
    let e = rope(&half, &Array::from_int(0), &spec)
        .err()
        .ok_or("bf16 x accepted")?;
    assert!(e.to_string().contains("float32"), "{e}");
    let odd = RopeSpec { dims: 7, ..spec };
    let e = rope(&x, &Array::from_int(0), &odd)
        .err()
        .ok_or("odd dims accepted")?;
    assert!(e.to_string().contains("dims 7"), "{e}");
    let three = Array::from_slice(&[0, 1, 2], &[3]);
    let e = rope(&x, &three, &spec)
        .err()
        .ok_or("3 offsets for 1 row accepted")?;
    assert!(e.to_string().contains("offsets"), "{e}");
    let e = rms_norm(&x, &Array::ones::<f32>(&[4])?, 1e-5)
        .err()
        .ok_or("[4] weight accepted")?;
    assert!(e.to_string().contains("weight"), "{e}");
    Ok(())
}

/// Keys or values as a KV cache holds them: the first `len` positions of a longer buffer.
fn cached(kv_heads: i32, len: i32, d: i32, scale: f32) -> TestResult<Array> {
    use mlx_rs::ops::indexing::IndexOp;
    Ok(normal(&[1, kv_heads, len + 7, d], scale)?.index((.., .., ..len, ..)))
}

#[test]
fn decode_attention_has_the_bits_of_mlx_sdpa_per_row() -> TestResult {
    random::seed(5)?;
    // Where skinny-gemm takes the products, a kv head's query heads go in one product: the
    // cases below then cover 3 and 4 heads per product as well as one.
    let x86_linux = cfg!(all(target_os = "linux", target_arch = "x86_64"));
    assert_eq!(
        skinny_gemm::rows_alone(3),
        x86_linux && skinny_gemm::active()
    );
    // (heads, kv heads, d, dv, each row's cached length)
    let cases: [(i32, i32, i32, i32, &[i32]); 4] = [
        (9, 3, 64, 64, &[1]),
        (9, 3, 64, 64, &[300]),
        (4, 4, 32, 48, &[17, 5, 129]),
        (8, 2, 16, 16, &[64, 1]),
    ];
    for (heads, kv_heads, d, dv, lens) in cases {
        let b = lens.len() as i32;
        let q = normal(&[b, heads, 1, d], 2.0)?;
        let mut kv = Vec::new();
        for &len in lens {
            kv.push((
                cached(kv_heads, len, d, 1.5)?,
                cached(kv_heads, len, dv, 1.0)?,
            ));
        }
        let rows: Vec<(&Array, &Array)> = kv.iter().map(|(k, v)| (k, v)).collect();
        let scale = 1.0 / (d as f32).sqrt();
        let ours = decode_attention(&q, &rows, scale)?;
        assert_eq!(ours.shape(), &[b, heads, 1, dv]);
        let qs = q.split_equal(b, 0)?;
        let mut theirs = Vec::new();
        for (r, (k, v)) in kv.iter().enumerate() {
            theirs.push(fast::scaled_dot_product_attention(
                &qs[r], k, v, scale, None, None,
            )?);
        }
        let theirs = mlx_rs::ops::concatenate(&theirs, 0)?;
        assert_eq!(
            bits(&ours)?,
            bits(&theirs)?,
            "{heads}/{kv_heads} heads, rows {lens:?}"
        );
    }
    Ok(())
}

#[test]
fn causal_attention_has_the_bits_of_mlx_causal_sdpa() -> TestResult {
    use mlx_rs::fast::ScaledDotProductAttentionMask;
    random::seed(6)?;
    // (heads, kv heads, d, dv, queries, cached keys in all): prefill blocks as the backend
    // cuts them (the keys up to the block's last query, in a longer cache buffer).
    let cases: [(i32, i32, i32, i32, i32, i32); 5] = [
        (9, 3, 64, 64, 128, 128),
        (9, 3, 64, 64, 128, 640),
        (9, 3, 64, 64, 17, 17),
        (4, 4, 32, 48, 2, 40),
        (8, 2, 16, 16, 100, 300),
    ];
    for (heads, kv_heads, d, dv, len, keys) in cases {
        let q = normal(&[1, heads, len, d], 2.0)?;
        let (k, v) = (
            cached(kv_heads, keys, d, 1.5)?,
            cached(kv_heads, keys, dv, 1.0)?,
        );
        let scale = 1.0 / (d as f32).sqrt();
        let ours = causal_attention(&q, &k, &v, scale, Numerics::Exact)?;
        let mask = Some(ScaledDotProductAttentionMask::Causal);
        let theirs = fast::scaled_dot_product_attention(&q, &k, &v, scale, mask, None)?;
        assert_eq!(ours.shape(), &[1, heads, len, dv]);
        assert_eq!(
            bits(&ours)?,
            bits(&theirs)?,
            "{heads}/{kv_heads} heads, {len} queries over {keys} keys"
        );
        // The int8 numerics' own order: the same values, within f32 rounding.
        let own = causal_attention(&q, &k, &v, scale, Numerics::Int8)?;
        let worst = ours.subtract(&own)?.abs()?.max(None)?.item_exact::<f32>();
        assert!(
            worst < 2e-5,
            "{heads}/{kv_heads} heads, {len}/{keys}: {worst}"
        );
    }
    let q = normal(&[1, 4, 8, 32], 1.0)?;
    let short = cached(4, 7, 32, 1.0)?;
    let e = causal_attention(&q, &short, &short, 1.0, Numerics::Int8).err();
    let e = e.ok_or("fewer keys than queries accepted")?.to_string();
    assert!(e.contains("fewer keys than queries"), "{e}");
    Ok(())
}

#[test]
fn logsumexp_has_the_bits_of_mlx_logsumexp() -> TestResult {
    random::seed(13)?;
    let with = |values: &[f32]| Array::from_slice(values, &[1, values.len() as i32]);
    let cases = [
        normal(&[1, 49152], 8.0)?,
        normal(&[3, 7], 1.0)?,
        normal(&[2, 3, 100], 50.0)?,
        normal(&[4, 33], 1.0)?.transpose_axes(&[1, 0])?,
        with(&[f32::NEG_INFINITY, 1.0, f32::NEG_INFINITY]),
        with(&[f32::NEG_INFINITY; 5]),
        with(&[f32::INFINITY, 1.0]),
        with(&[0.0, -0.0, f32::NAN, 2.0]),
        with(&[-0.0, -0.0]),
    ];
    for x in &cases {
        let theirs = mlx_rs::ops::logsumexp_axis(x, -1, true)?;
        assert_eq!(bits(&logsumexp(x)?)?, bits(&theirs)?, "{:?}", x.shape());
    }
    Ok(())
}

#[test]
fn attention_and_logsumexp_refuse_what_they_do_not_take() -> TestResult {
    let q = Array::zeros::<f32>(&[2, 4, 1, 8])?;
    let k = Array::zeros::<f32>(&[1, 2, 5, 8])?;
    let e = decode_attention(&q, &[(&k, &k)], 1.0)
        .err()
        .ok_or("one row of keys for two queries accepted")?;
    assert!(e.to_string().contains("per row"), "{e}");
    let three = Array::zeros::<f32>(&[1, 3, 5, 8])?;
    let e = decode_attention(&q, &[(&three, &three), (&three, &three)], 1.0)
        .err()
        .ok_or("4 heads over 3 kv heads accepted")?;
    assert!(e.to_string().contains("multiple"), "{e}");
    let long = Array::zeros::<f32>(&[2, 4, 2, 8])?;
    let e = decode_attention(&long, &[(&k, &k), (&k, &k)], 1.0)
        .err()
        .ok_or("two query positions accepted")?;
    assert!(e.to_string().contains("[B, heads, 1, d]"), "{e}");
    let e = logsumexp(&Array::zeros::<f32>(&[2, 0])?)
        .err()
        .ok_or("an empty row accepted")?;
    assert!(e.to_string().contains("n > 0"), "{e}");
    Ok(())
}
