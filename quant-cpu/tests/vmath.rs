//! The vector exp kernels (`cpp/vmath.h`) give MLX's scalar bits on every instruction set this
//! CPU runs: over random rows at several scales, every tail length, and the values where the
//! algorithm branches (±88, half-integer multiples of ln 2, zeros, infinities, NaN,
//! subnormals).

use quant_cpu::fast::{vmath, Vmath, VmathIsa};

/// A small deterministic generator (no test depends on a seed elsewhere).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// MLX's rounded log2(e) (`x * 1.442695f`), not the exact constant: the tests aim at its steps.
#[allow(clippy::approx_constant)]
const MLX_LOG2_E: f32 = 1.442_695;

fn specials() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        88.0,
        -88.0,
        88.000_01,
        -88.000_01,
        87.999_99,
        -87.999_99,
        1e-45,
        -1e-45,
        f32::MIN_POSITIVE,
        f32::MAX,
        f32::MIN,
        1e30,
        -1e30,
    ];
    // x * log2(e) at and around k + 1/2, where MLX's rounding decides.
    for k in -130..130 {
        let x = (k as f32 + 0.5) / MLX_LOG2_E;
        v.extend([
            x,
            f32::from_bits(x.to_bits() + 1),
            f32::from_bits(x.to_bits() - 1),
        ]);
    }
    v
}

fn rows() -> Vec<Vec<f32>> {
    let mut g = Lcg(9);
    let mut rows = vec![specials()];
    for scale in [1.0, 10.0, 100.0] {
        for len in (0..40).chain([257, 1000]) {
            rows.push((0..len).map(|_| g.next() * scale).collect());
        }
    }
    rows
}

fn isas() -> Vec<(VmathIsa, Vmath)> {
    [VmathIsa::Avx2, VmathIsa::Avx512]
        .into_iter()
        .filter_map(|isa| vmath(isa).map(|t| (isa, t)))
        .collect()
}

fn to_bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn exp_has_mlx_scalar_bits_on_every_isa() {
    let scalar = vmath(VmathIsa::Scalar).expect("the scalar table is always there");
    assert!(
        !isas().is_empty() || !cfg!(target_arch = "x86_64"),
        "no vector ISA tested"
    );
    for (isa, t) in isas() {
        for row in rows() {
            for shift in [0.0f32, 3.5, -20.0, 87.0] {
                let (mut ours, mut theirs) = (vec![0.0; row.len()], vec![0.0; row.len()]);
                let n = row.len() as i64;
                // SAFETY: both buffers hold n floats.
                unsafe {
                    (t.exp_shifted)(row.as_ptr(), shift, ours.as_mut_ptr(), n);
                    (scalar.exp_shifted)(row.as_ptr(), shift, theirs.as_mut_ptr(), n);
                }
                assert_eq!(to_bits(&ours), to_bits(&theirs), "{isa:?} exp, {n} values");
            }
        }
    }
}

#[test]
fn silu_times_up_has_mlx_scalar_bits_on_every_isa() {
    let scalar = vmath(VmathIsa::Scalar).expect("the scalar table is always there");
    for (isa, t) in isas() {
        for row in rows() {
            let up: Vec<f32> = row.iter().rev().map(|x| x * 0.5 + 1.0).collect();
            let (mut ours, mut theirs) = (row.clone(), row.clone());
            let n = row.len() as i64;
            // SAFETY: each buffer holds n floats.
            unsafe {
                (t.silu_mul)(ours.as_mut_ptr(), up.as_ptr(), n);
                (scalar.silu_mul)(theirs.as_mut_ptr(), up.as_ptr(), n);
            }
            assert_eq!(to_bits(&ours), to_bits(&theirs), "{isa:?} silu, {n} values");
        }
    }
}

#[test]
fn row_maximum_matches_or_defers_to_mlx() {
    let scalar = vmath(VmathIsa::Scalar).expect("the scalar table is always there");
    let mut g = Lcg(3);
    let mut cases = rows();
    cases.push(vec![-0.0, 0.0, -1.0]);
    cases.push(
        (0..50)
            .map(|i| if i == 31 { f32::NAN } else { g.next() })
            .collect(),
    );
    cases.push(vec![f32::NEG_INFINITY; 20]);
    for (isa, t) in isas() {
        for row in &cases {
            let (mut ours, mut theirs) = (0.0f32, 0.0f32);
            let n = row.len() as i64;
            // SAFETY: the row holds n floats.
            let (kept, _) = unsafe {
                (
                    (t.max)(row.as_ptr(), n, &mut ours),
                    (scalar.max)(row.as_ptr(), n, &mut theirs),
                )
            };
            let deferred = row.iter().any(|x| x.is_nan()) || theirs == 0.0;
            assert_eq!(kept, !deferred, "{isa:?}: {n} values, max {theirs}");
            if kept {
                assert_eq!(
                    ours.to_bits(),
                    theirs.to_bits(),
                    "{isa:?} max of {n} values"
                );
            }
        }
    }
}
