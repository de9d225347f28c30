//! The one-node CPU RMS norm and rope against MLX's own `fast::rms_norm` and `fast::rope`
//! (which are their fallbacks of plain ops on the CPU): bit for bit, over row counts, strided
//! inputs, partial and traditional rotations, per-row offsets, frequency tables and far
//! positions; and operands they do not take are errors that say why.

mod common;

use common::{bits, TestResult};
use mlx_rs::{fast, random, Array, Dtype};
use quant_cpu::fast::{rms_norm, rope, RopeSpec};

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
    // Prefill from 0, a decode step far out, and a batch of rows each at its own position.
    let cases: [(&[i32], &[i32]); 4] = [
        (&[1, 9, 5, 64], &[0]),
        (&[1, 3, 1, 64], &[70000]),
        (&[3, 4, 1, 64], &[5, 0, 123457]),
        (&[2, 2, 6, 64], &[17]),
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
