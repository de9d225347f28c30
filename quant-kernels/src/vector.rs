//! What every vector kernel set (AVX2, AVX-512, NEON) shares: the dispatch on a product's bit
//! width and on the dtype its scales and biases are stored in, so each set's loops are
//! monomorphic; the per-thread group sums of x; and the walk over a call's columns and rows
//! into which a set's row kernel inlines.

use super::float::{E4m3, E8m0};
use super::{bias_term, group_sums, Bf16, Operands, Out, Params, Stored, F16};

/// `f::<BITS>(args)` for the format's bit width (`Format::new` checked it is one of these);
/// `f::<_>(args)` for `f::<BITS, _>`, its other generic parameter inferred.
macro_rules! by_bits {
    ($bits:expr, $f:ident::<_>($($arg:expr),*)) => {
        match $bits {
            2 => $f::<2, _>($($arg),*),
            3 => $f::<3, _>($($arg),*),
            4 => $f::<4, _>($($arg),*),
            5 => $f::<5, _>($($arg),*),
            6 => $f::<6, _>($($arg),*),
            _ => $f::<8, _>($($arg),*),
        }
    };
    ($bits:expr, $f:ident($($arg:expr),*)) => {
        match $bits {
            2 => $f::<2>($($arg),*),
            3 => $f::<3>($($arg),*),
            4 => $f::<4>($($arg),*),
            5 => $f::<5>($($arg),*),
            6 => $f::<6>($($arg),*),
            _ => $f::<8>($($arg),*),
        }
    };
}
pub(crate) use by_bits;

/// `$body` with `$g` bound to the operands' scales and biases as [`Groups`] of their stored
/// dtype (the float modes' scale bytes, without biases). The MLX node never passes two dtypes
/// (it checks that they share one); `Operands` can say so, and then both are widened to f32
/// first.
macro_rules! by_stored {
    ($ops:expr, $g:ident => $body:expr) => {{
        use $crate::vector::Groups;
        use $crate::Params;
        match ($ops.scales, $ops.biases) {
            (Params::F32(scales), Some(Params::F32(biases))) => {
                let $g = Groups { scales, biases };
                $body
            }
            (Params::Bf16(s), Some(Params::Bf16(b))) => {
                let $g = Groups::<$crate::Bf16>::halves(s, b);
                $body
            }
            (Params::F16(s), Some(Params::F16(b))) => {
                let $g = Groups::<$crate::F16>::halves(s, b);
                $body
            }
            (Params::E8m0(s), _) => {
                let $g = Groups::<$crate::float::E8m0>::bytes(s);
                $body
            }
            (Params::E4m3(s), _) => {
                let $g = Groups::<$crate::float::E4m3>::bytes(s);
                $body
            }
            (s, b) => {
                let (scales, biases) = (s.to_f32(), b.map(|b| b.to_f32()).unwrap_or_default());
                let $g = Groups {
                    scales: &scales[..],
                    biases: &biases[..],
                };
                $body
            }
        }
    }};
}
pub(crate) use by_stored;

/// The scales and biases of a product in one stored dtype (no biases: the float modes).
#[derive(Clone, Copy)]
pub(crate) struct Groups<'a, P> {
    pub scales: &'a [P],
    pub biases: &'a [P],
}

/// A half dtype: a `repr(transparent)` u16 (only `Bf16` and `F16` implement it).
pub(crate) trait Half {}
impl Half for Bf16 {}
impl Half for F16 {}

impl<'a, T: Half> Groups<'a, T> {
    pub(crate) fn halves(scales: &'a [u16], biases: &'a [u16]) -> Groups<'a, T> {
        Groups {
            scales: as_halves(scales),
            biases: as_halves(biases),
        }
    }
}

/// `u16` bits as the half dtype `T`.
pub(crate) fn as_halves<T: Half>(v: &[u16]) -> &[T] {
    // SAFETY: a `Half` is a repr(transparent) u16, so the slice has the same layout.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const T, v.len()) }
}

/// A float mode's scale byte: a `repr(transparent)` u8 (only `E8m0` and `E4m3` implement it).
pub(crate) trait ScaleByte {}
impl ScaleByte for E8m0 {}
impl ScaleByte for E4m3 {}

impl<'a, T: ScaleByte> Groups<'a, T> {
    /// A float mode's scales, without biases.
    pub(crate) fn bytes(scales: &'a [u8]) -> Groups<'a, T> {
        Groups {
            scales: as_scale_bytes(scales),
            biases: &[],
        }
    }
}

/// Bytes as the scale byte type `T`.
fn as_scale_bytes<T: ScaleByte>(v: &[u8]) -> &[T] {
    // SAFETY: a `ScaleByte` is a repr(transparent) u8, so the slice has the same layout.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const T, v.len()) }
}

impl Params<'_> {
    /// Every value as f32 (operands whose scales and biases differ in dtype).
    pub(crate) fn to_f32(self) -> Vec<f32> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }
}

thread_local! {
    /// Each group's sum of x (`group_sums`), per thread, kept between products.
    static SUMS: std::cell::RefCell<Vec<f32>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// `f` of the group sums of x, made on this thread into its kept buffer.
#[inline(always)]
pub(crate) fn with_sums<R>(ops: &Operands, f: impl FnOnce(&[f32]) -> R) -> R {
    SUMS.with_borrow_mut(|sums| {
        group_sums(ops, sums);
        f(sums)
    })
}

/// [`each_row`] with the set's kernels `$row::<BITS, STEPS, P>` (one row of x) and, where the
/// set has one, `$pair::<BITS, STEPS, P>` (two rows sharing a step's unpacked codes), for the
/// format's steps per group (1, 2 or 4; 1 for two groups a step), on this thread's group sums
/// of x. Expanded in the
/// set's `#[target_feature]` function, whose features the closures inherit, so the kernels
/// inline with their step count known.
macro_rules! each_row_by_steps {
    ($ops:expr, $params:expr, $cols:expr, $out:expr, $row:ident::<$bits:ident, $p:ident>) => {
        each_row_by_steps!($ops, $params, $cols, $out, $row::<$bits, $p>, |w, x, s| {
            [
                $row::<$bits, STEPS, $p>(w, x[0], s),
                $row::<$bits, STEPS, $p>(w, x[1], s),
            ]
        })
    };
    ($ops:expr, $params:expr, $cols:expr, $out:expr, $row:ident::<$bits:ident, $p:ident>,
     $pair:ident::<$bits2:ident, $p2:ident>) => {
        each_row_by_steps!($ops, $params, $cols, $out, $row::<$bits, $p>, |w, x, s| {
            $pair::<$bits2, STEPS, $p2>(w, x, s)
        })
    };
    ($ops:expr, $params:expr, $cols:expr, $out:expr, $row:ident::<$bits:ident, $p:ident>,
     |$w:ident, $x:ident, $s:ident| $two:expr) => {{
        use $crate::vector::{each_row, with_sums};
        macro_rules! walk {
            ($steps:literal, $sums:ident) => {{
                const STEPS: usize = $steps;
                each_row(
                    ($ops, $params, $sums, $cols, $out),
                    |w, x, s| unsafe { $row::<$bits, STEPS, $p>(w, x, s) },
                    |$w, $x, $s| unsafe { $two },
                )
            }};
        }
        with_sums($ops, |sums| {
            match $ops.format.group / $crate::layout::STEP {
                // Groups of 16 (`nvfp4`): a step of two groups.
                0 | 1 => walk!(1, sums),
                2 => walk!(2, sums),
                _ => walk!(4, sums),
            }
        })
    }};
}
pub(crate) use each_row_by_steps;

/// What [`each_row`] walks: the product, its scales and biases, the group sums of x, the
/// columns and the output.
pub(crate) type Walk<'a, P> = (
    &'a Operands<'a>,
    Groups<'a, P>,
    &'a [f32],
    std::ops::Range<usize>,
    Out,
);

/// Each weight row of `cols` against the rows of x, two at a time by `two` and a last odd one
/// by `one` (a set's kernels for rows of x and one weight row, without the bias part), the bias
/// part added last. `two` gives each row the bits `one` gives it, so a row's result does not
/// depend on its neighbour.
#[inline(always)]
pub(crate) fn each_row<P: Stored>(
    (ops, params, sums, cols, out): Walk<P>,
    one: impl Fn(&[u8], &[f32], &[P]) -> f32,
    two: impl Fn(&[u8], [&[f32]; 2], &[P]) -> [f32; 2],
) {
    let groups = ops.k / ops.format.group;
    let x = |m: usize| &ops.x[m * ops.k..(m + 1) * ops.k];
    for n in cols {
        let (w, scales) = (ops.w_row(n), &params.scales[n * groups..(n + 1) * groups]);
        let biases = match P::FLOAT {
            true => &[][..],
            false => &params.biases[n * groups..(n + 1) * groups],
        };
        let mut m = 0;
        while m + 2 <= ops.m {
            let [a, b] = two(w, [x(m), x(m + 1)], scales);
            write(ops, (biases, sums), (m, n), a, out);
            write(ops, (biases, sums), (m + 1, n), b, out);
            m += 2;
        }
        if m < ops.m {
            write(ops, (biases, sums), (m, n), one(w, x(m), scales), out);
        }
    }
}

/// Output `(m, n)`: `v` plus its bias part (none in the float modes). Always inlined, so that `bias_term`'s FMAs take the
/// caller's target features (out of line, `mul_add` is a call to libm's `fmaf`).
#[inline(always)]
fn write<P: Stored>(
    ops: &Operands,
    (biases, sums): (&[P], &[f32]),
    (m, n): (usize, usize),
    v: f32,
    out: Out,
) {
    let v = match P::FLOAT {
        true => v,
        false => {
            let groups = biases.len();
            v + bias_term(biases, &sums[m * groups..(m + 1) * groups])
        }
    };
    // SAFETY: the set's `matmul` was given an output of `m * n` values.
    unsafe { out.write(m, n, ops.n, v) };
}
