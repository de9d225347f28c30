use super::lanes::{exp, Lanes, Portable};
use super::{attend_causal_with, Set, Side};

/// Deterministic values in -1..1.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// A side [heads, len, width] stored with `pad` spare values after each row.
fn side(data: &[f32], heads: usize, len: usize, width: usize, pad: usize) -> Side<'_> {
    Side {
        data,
        heads,
        len,
        width,
        head_stride: len * (width + pad),
        row_stride: width + pad,
    }
}

/// One query row's attention in plain f64 (a check of the meaning, not the bits).
fn meaning(q: &[f32], k: &Side, v: &Side, g: usize, seen: usize) -> Vec<f64> {
    let row =
        |s: &Side, j: usize| s.data[g * s.head_stride + j * s.row_stride..][..s.width].to_vec();
    let s: Vec<f64> = (0..seen)
        .map(|j| {
            q.iter()
                .zip(row(k, j))
                .map(|(&a, b)| a as f64 * b as f64)
                .sum()
        })
        .collect();
    let top = s.iter().cloned().fold(f64::MIN, f64::max);
    let e: Vec<f64> = s.iter().map(|x| (x - top).exp()).collect();
    let sum: f64 = e.iter().sum();
    (0..v.width)
        .map(|c| (0..seen).map(|j| e[j] / sum * row(v, j)[c] as f64).sum())
        .collect()
}

struct Case {
    heads: usize,
    kv_heads: usize,
    len: usize,
    t: usize,
    d: usize,
    dv: usize,
}

fn run(set: Set, c: &Case, q: &[f32], kv: (&[f32], &[f32]), pad: usize) -> Vec<f32> {
    let keys = side(kv.0, c.kv_heads, c.t, c.d, pad);
    let vals = side(kv.1, c.kv_heads, c.t, c.dv, pad);
    let mut out = vec![f32::NAN; c.heads * c.len * c.dv];
    attend_causal_with(
        set,
        &q[..c.heads * c.len * c.d],
        c.heads,
        keys,
        vals,
        &mut out,
    );
    out
}

const CASES: [Case; 5] = [
    Case {
        heads: 2,
        kv_heads: 1,
        len: 1,
        t: 1,
        d: 16,
        dv: 16,
    },
    Case {
        heads: 3,
        kv_heads: 3,
        len: 37,
        t: 37,
        d: 64,
        dv: 64,
    },
    Case {
        heads: 4,
        kv_heads: 2,
        len: 70,
        t: 101,
        d: 80,
        dv: 72,
    },
    Case {
        heads: 2,
        kv_heads: 1,
        len: 5,
        t: 300,
        d: 24,
        dv: 100,
    },
    Case {
        heads: 1,
        kv_heads: 1,
        len: 130,
        t: 130,
        d: 128,
        dv: 128,
    },
];

#[test]
fn every_set_gives_the_portable_bits_and_the_meaning() {
    for (i, c) in CASES.iter().enumerate() {
        let pad = i % 2 * 3;
        let q = values(c.heads * c.len * c.d, i as u64);
        let k = values(c.kv_heads * c.t * (c.d + pad), 100 + i as u64);
        let v = values(c.kv_heads * c.t * (c.dv + pad), 200 + i as u64);
        let want = run(Set::Portable, c, &q, (&k, &v), pad);
        let (keys, vals) = (
            side(&k, c.kv_heads, c.t, c.d, pad),
            side(&v, c.kv_heads, c.t, c.dv, pad),
        );
        for h in 0..c.heads {
            for r in 0..c.len {
                let seen = c.t - c.len + r + 1;
                let g = h / (c.heads / c.kv_heads);
                let at = (h * c.len + r) * c.dv;
                let q_row = &q[(h * c.len + r) * c.d..][..c.d];
                for (x, y) in want[at..at + c.dv]
                    .iter()
                    .zip(meaning(q_row, &keys, &vals, g, seen))
                {
                    assert!(
                        (*x as f64 - y).abs() < 1e-5,
                        "case {i} head {h} row {r}: {x} vs {y}"
                    );
                }
            }
        }
        for set in Set::available() {
            let got = run(set, c, &q, (&k, &v), pad);
            let same = got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "case {i}: {set:?} differs from the portable kernel");
        }
    }
    if !Set::available().contains(&Set::Avx512) {
        println!("this CPU has no AVX-512: its attention kernel was not tested here");
    }
}

/// A query's row has the same bits however the prompt was split: alone at its position, or
/// inside a longer chunk (a prefix-cache hit, a chunked prefill).
#[test]
fn a_row_has_the_same_bits_in_any_chunk() {
    let c = Case {
        heads: 2,
        kv_heads: 1,
        len: 90,
        t: 90,
        d: 64,
        dv: 64,
    };
    let q = values(c.heads * c.len * c.d, 7);
    let (k, v) = (values(c.t * c.d, 8), values(c.t * c.dv, 9));
    for set in Set::available() {
        let whole = run(set, &c, &q, (&k, &v), 0);
        for (start, len) in [(89, 1), (40, 50), (63, 3)] {
            let t = start + len;
            let part = Case { len, t, ..c };
            let q_part: Vec<f32> = (0..c.heads)
                .flat_map(|h| q[(h * c.len + start) * c.d..][..len * c.d].to_vec())
                .collect();
            let got = run(set, &part, &q_part, (&k[..t * c.d], &v[..t * c.dv]), 0);
            for h in 0..c.heads {
                let want = &whole[(h * c.len + start) * c.dv..][..len * c.dv];
                let same = got[h * len * c.dv..][..len * c.dv]
                    .iter()
                    .zip(want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{set:?}: rows {start}..{t} of head {h} differ in a chunk"
                );
            }
        }
    }
}

#[test]
fn exp_has_mlx_s_edges() {
    let x = [
        f32::NAN,
        89.0,
        -89.0,
        0.0,
        1.0,
        -1.0,
        88.0,
        -87.5,
        0.5,
        10.0,
        -10.0,
        2.0,
        3.0,
        -3.0,
        20.0,
        -20.0,
    ];
    // SAFETY: portable lanes.
    let got = unsafe { exp(Portable::load(x.as_ptr())).lanes() };
    assert!(got[0].is_nan() && got[1] == f32::INFINITY && got[2] == 0.0 && got[3] == 1.0);
    for (a, b) in x[4..].iter().zip(&got[4..]) {
        assert!(((a.exp() - b) / a.exp()).abs() < 1e-5, "exp({a}) = {b}");
    }
}
