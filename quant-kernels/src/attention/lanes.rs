//! Sixteen f32 lanes: the only operations the attention kernel takes, so that every
//! instruction set computes the same bits. [`Portable`] is the reference: plain f32 code with
//! the semantics of the x86 instructions the others use (`maxps`, `cvttps2dq`, fused
//! multiply-add).

/// Lanes per vector, on every set (AVX2 takes two registers).
pub const LANES: usize = 16;

/// A vector of 16 f32 lanes on one instruction set.
///
/// # Safety
/// Every method needs the set's features; pointers must be readable (writable) for the lanes
/// they name.
pub(crate) trait Lanes: Copy {
    /// Rows of queries the kernel's inner loops take at once (their accumulators fill the
    /// registers).
    const ROWS: usize;
    /// Vectors of a value row one pass over the keys takes.
    const COLS: usize;
    unsafe fn splat(v: f32) -> Self;
    unsafe fn load(p: *const f32) -> Self;
    /// Lanes `0..n` from `p` (n < 16), the rest `fill`.
    unsafe fn load_part(p: *const f32, n: usize, fill: f32) -> Self;
    unsafe fn store(self, p: *mut f32);
    /// Lanes `0..n` to `p` (n < 16).
    unsafe fn store_part(self, p: *mut f32, n: usize);
    unsafe fn add(self, b: Self) -> Self;
    unsafe fn sub(self, b: Self) -> Self;
    unsafe fn mul(self, b: Self) -> Self;
    /// `self * b + c`, rounded once.
    unsafe fn fma(self, b: Self, c: Self) -> Self;
    /// `self > b ? self : b`, lane by lane (`maxps`).
    unsafe fn max(self, b: Self) -> Self;
    unsafe fn floor(self) -> Self;
    /// 1 where `self >= b` (ordered), else 0.
    unsafe fn ge_one(self, b: Self) -> Self;
    /// 2^i for whole i: `(trunc(i) + 127) << 23` in the exponent bits.
    unsafe fn pow2(self) -> Self;
    /// Where `self` is NaN, `nan`; where it is above 88, infinity; below -88, 0; else `v`.
    unsafe fn exp_edges(self, v: Self) -> Self;
    /// The 16 lanes in memory.
    unsafe fn lanes(self) -> [f32; LANES] {
        let mut a = [0.0; LANES];
        self.store(a.as_mut_ptr());
        a
    }
}

/// The reference lanes: plain f32 arithmetic, one lane at a time.
#[derive(Clone, Copy)]
pub(crate) struct Portable([f32; LANES]);

impl Portable {
    fn map(self, b: Self, f: impl Fn(f32, f32) -> f32) -> Self {
        let mut out = [0.0; LANES];
        for (i, o) in out.iter_mut().enumerate() {
            *o = f(self.0[i], b.0[i]);
        }
        Portable(out)
    }
}

impl Lanes for Portable {
    const ROWS: usize = 4;
    const COLS: usize = 4;
    unsafe fn splat(v: f32) -> Self {
        Portable([v; LANES])
    }
    unsafe fn load(p: *const f32) -> Self {
        Portable(std::ptr::read_unaligned(p as *const [f32; LANES]))
    }
    unsafe fn load_part(p: *const f32, n: usize, fill: f32) -> Self {
        let mut a = [fill; LANES];
        std::ptr::copy_nonoverlapping(p, a.as_mut_ptr(), n);
        Portable(a)
    }
    unsafe fn store(self, p: *mut f32) {
        std::ptr::write_unaligned(p as *mut [f32; LANES], self.0)
    }
    unsafe fn store_part(self, p: *mut f32, n: usize) {
        std::ptr::copy_nonoverlapping(self.0.as_ptr(), p, n);
    }
    unsafe fn add(self, b: Self) -> Self {
        self.map(b, |x, y| x + y)
    }
    unsafe fn sub(self, b: Self) -> Self {
        self.map(b, |x, y| x - y)
    }
    unsafe fn mul(self, b: Self) -> Self {
        self.map(b, |x, y| x * y)
    }
    unsafe fn fma(self, b: Self, c: Self) -> Self {
        let mut out = [0.0; LANES];
        for (i, o) in out.iter_mut().enumerate() {
            *o = self.0[i].mul_add(b.0[i], c.0[i]);
        }
        Portable(out)
    }
    unsafe fn max(self, b: Self) -> Self {
        self.map(b, |x, y| if x > y { x } else { y })
    }
    unsafe fn floor(self) -> Self {
        self.map(self, |x, _| x.floor())
    }
    unsafe fn ge_one(self, b: Self) -> Self {
        self.map(b, |x, y| if x >= y { 1.0 } else { 0.0 })
    }
    unsafe fn pow2(self) -> Self {
        self.map(self, |x, _| {
            // cvttps2dq: out of range (and NaN) gives i32::MIN.
            let i = match x > -2147483648.0 && x < 2147483648.0 {
                true => x as i32,
                false => i32::MIN,
            };
            f32::from_bits((i.wrapping_add(127) as u32).wrapping_shl(23))
        })
    }
    unsafe fn exp_edges(self, v: Self) -> Self {
        self.map(v, |x, v| match () {
            _ if x.is_nan() => x,
            _ if x > 88.0 => f32::INFINITY,
            _ if x < -88.0 => 0.0,
            _ => v,
        })
    }
}

/// MLX's exp (`simd::exp`): y = x·log2(e) split as 2^round(y) · p(y − round(y)), the
/// rounding as `floor(y) + (y − floor(y) >= 0.5)`.
///
/// # Safety
/// The set's features.
#[inline(always)]
#[allow(clippy::excessive_precision, clippy::approx_constant)] // MLX's literals, as written
pub(crate) unsafe fn exp<V: Lanes>(x0: V) -> V {
    let x = x0.mul(V::splat(1.442695));
    let whole = x.floor();
    let ipart = whole.add(x.sub(whole).ge_one(V::splat(0.5)));
    let f = x.sub(ipart);
    let mut p = V::splat(1.535336188319500e-4);
    for c in [
        1.339887440266574e-3,
        9.618437357674640e-3,
        5.550332471162809e-2,
        2.402264791363012e-1,
        6.931472028550421e-1,
        1.000000000000000,
    ] {
        p = p.fma(f, V::splat(c));
    }
    x0.exp_edges(ipart.pow2().mul(p))
}

/// The lanes folded in halves (lane i with lane i + 8, then + 4, + 2, + 1) by `f`.
pub(crate) fn fold(mut a: [f32; LANES], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut w = LANES / 2;
    while w > 0 {
        for i in 0..w {
            a[i] = f(a[i], a[i + w]);
        }
        w /= 2;
    }
    a[0]
}
