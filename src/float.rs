//! The float type every chapter is generic over.
//!
//! Worked examples run in `f64` (so printed numbers can be checked to eight decimals and gradients
//! to finite differences); chapter 9's GPT runs the very same functions in `f32` for speed.

use nalgebra::{ClosedAddAssign, ClosedDivAssign, ClosedMulAssign, ClosedSubAssign, DMatrix};

/// `f32` or `f64`: num-traits' [`num_traits::Float`] for the scalar math, nalgebra's scalar
/// traits for matrix arithmetic, and [`crate::matmul::Element`] so products reach the fast kernels.
pub trait Float:
    num_traits::Float
    + num_traits::FromPrimitive
    + nalgebra::Scalar
    + ClosedAddAssign
    + ClosedSubAssign
    + ClosedMulAssign
    + ClosedDivAssign
    + std::iter::Sum
    + Default
    + std::fmt::Display
    + std::fmt::LowerExp
    + Send
    + Sync
    + crate::matmul::Element
    + 'static
{
    /// Converts an `f64` constant (a learning rate, 0.5, ε …) into this type.
    fn of(x: f64) -> Self;
    /// Widens (or keeps) the value as `f64`, for reports and comparisons.
    fn as_f64(self) -> f64;
    /// The slice itself when `Self` is `f32` (so a single-precision fast path can take it without
    /// a copy), `None` otherwise.
    fn as_f32_slice(s: &[Self]) -> Option<&[f32]>;
    /// The same, mutable.
    fn as_f32_slice_mut(s: &mut [Self]) -> Option<&mut [f32]>;
}

impl Float for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    fn as_f64(self) -> f64 {
        self as f64
    }
    fn as_f32_slice(s: &[Self]) -> Option<&[f32]> {
        Some(s)
    }
    fn as_f32_slice_mut(s: &mut [Self]) -> Option<&mut [f32]> {
        Some(s)
    }
}

impl Float for f64 {
    fn of(x: f64) -> Self {
        x
    }
    fn as_f64(self) -> f64 {
        self
    }
    fn as_f32_slice(_: &[Self]) -> Option<&[f32]> {
        None
    }
    fn as_f32_slice_mut(_: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
}

/// Fails with [`crate::Error::NonFinite`] naming the first NaN or infinite entry of `m`.
pub fn ensure_finite<T: Float>(
    op: &'static str,
    arg: &'static str,
    m: &DMatrix<T>,
) -> crate::Result<()> {
    match first_non_finite(m.as_slice()) {
        // Column-major storage: entry i is row i mod R of column i div R.
        Some(i) => Err(crate::Error::NonFinite {
            op,
            arg,
            at: format!("row {}, column {}", i % m.nrows(), i / m.nrows()),
        }),
        None => Ok(()),
    }
}

/// Fails with [`crate::Error::NonFinite`] naming the first NaN or infinite entry of `v`.
pub fn ensure_finite_slice<T: Float>(
    op: &'static str,
    arg: &'static str,
    v: &[T],
) -> crate::Result<()> {
    match first_non_finite(v) {
        Some(i) => Err(crate::Error::NonFinite { op, arg, at: format!("index {i}") }),
        None => Ok(()),
    }
}

/// The index of the first NaN or infinite value. Checked a block at a time without an early
/// exit inside the block (a loop the compiler vectorises: the check runs on every weight matrix
/// of every forward pass), then searched value by value only in a block that failed.
fn first_non_finite<T: Float>(v: &[T]) -> Option<usize> {
    const BLOCK: usize = 256;
    v.chunks(BLOCK)
        .enumerate()
        .find(|(_, block)| !block.iter().fold(true, |all, x| all & x.is_finite()))
        .and_then(|(b, block)| block.iter().position(|x| !x.is_finite()).map(|i| b * BLOCK + i))
}

/// Lanes of independent partial sums in [`lane_sum`] and its dot product. A plain `iter().sum()` is
/// one chain of additions, each waiting for the one before (about 3 cycles apiece); sixteen
/// chains side by side fill four SSE registers of f32, so the additions
/// overlap. The order of the additions is fixed by this number, not by the machine, so the sums
/// are reproducible, but they are not the bits of the one-chain sum.
pub const SUM_LANES: usize = 16;

/// Σ xᵢ, with xᵢ added into lane i mod [`SUM_LANES`] (up to the last whole group of lanes), the
/// lanes then added in order, then the remaining values one by one.
pub fn lane_sum<T: Float>(xs: &[T]) -> T {
    let mut lanes = [T::neg_zero(); SUM_LANES];
    let groups = xs.chunks_exact(SUM_LANES);
    let tail = groups.remainder();
    for group in groups {
        for (lane, &x) in lanes.iter_mut().zip(group) {
            *lane += x;
        }
    }
    lanes.into_iter().chain(tail.iter().copied()).fold(T::neg_zero(), |total, x| total + x)
}

/// Σ aᵢ·bᵢ, in the lanes and order of [`lane_sum`], for slices the caller has sized alike (inside
/// the crate only: a public dot product would owe an error for unequal lengths; this one uses the
/// common length).
pub(crate) fn lane_dot<T: Float>(a: &[T], b: &[T]) -> T {
    debug_assert_eq!(a.len(), b.len(), "lane_dot of unequal lengths");
    let len = a.len().min(b.len());
    let (a, b) = (&a[..len], &b[..len]);
    let mut lanes = [T::neg_zero(); SUM_LANES];
    let (ga, gb) = (a.chunks_exact(SUM_LANES), b.chunks_exact(SUM_LANES));
    let tail = ga.remainder().iter().zip(gb.remainder()).map(|(&x, &y)| x * y);
    for (xa, xb) in ga.zip(gb) {
        for ((lane, &x), &y) in lanes.iter_mut().zip(xa).zip(xb) {
            *lane += x * y;
        }
    }
    lanes.into_iter().chain(tail).fold(T::neg_zero(), |total, x| total + x)
}

/// Converts a matrix between float types (f64 worked examples to the f32 GPT and back).
pub fn cast<A: Float, B: Float>(m: &DMatrix<A>) -> DMatrix<B> {
    m.map(|x| B::of(x.as_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_non_finite_entry_is_named_across_block_boundaries() {
        // 300 rows: column 1 starts at storage index 300, past the first block of 256.
        let mut m = DMatrix::<f32>::zeros(300, 3);
        assert!(ensure_finite("t", "m", &m).is_ok());
        m[(5, 2)] = f32::INFINITY;
        m[(299, 1)] = f32::NAN;
        let e = ensure_finite("t", "m", &m).unwrap_err();
        assert!(e.to_string().contains("row 299, column 1"), "{e}");
        let mut v = vec![1.0f64; 1000];
        assert!(ensure_finite_slice("t", "v", &v).is_ok());
        v[999] = f64::NEG_INFINITY;
        v[700] = f64::NAN;
        assert!(ensure_finite_slice("t", "v", &v).unwrap_err().to_string().contains("index 700"));
    }

    #[test]
    fn lane_sums_add_every_value_once_in_their_fixed_order() {
        // Lengths below, at and around multiples of the lanes, so the tail and the groups are
        // both exercised; integers sum exactly, so any value dropped or added twice shows.
        for len in [0usize, 1, 15, 16, 17, 33, 100] {
            let a: Vec<f64> = (0..len).map(|i| (i % 7) as f64 + 1.0).collect();
            let b: Vec<f64> = (0..len).map(|i| (i % 5) as f64 - 2.0).collect();
            assert_eq!(lane_sum(&a), a.iter().sum::<f64>(), "len {len}");
            assert_eq!(
                lane_dot(&a, &b),
                a.iter().zip(&b).map(|(x, y)| x * y).sum::<f64>(),
                "len {len}"
            );
        }
        // The order is the lanes' and not the plain chain's: 1e16 + 1 + 1 … loses every 1 in one
        // chain, but lane 0 holds the 1e16 and lanes 1 … 15 keep their ones.
        let mut v = vec![1.0f64; 32];
        v[0] = 1e16;
        assert_eq!(v.iter().sum::<f64>(), 1e16);
        assert_eq!(lane_sum(&v), 1e16 + 30.0);
    }
}
