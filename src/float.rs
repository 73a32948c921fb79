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
pub fn ensure_finite<T: Float>(op: &'static str, arg: &'static str, m: &DMatrix<T>) -> crate::Result<()> {
    match first_non_finite(m.as_slice()) {
        // Column-major storage: entry i is row i mod R of column i div R.
        Some(i) => Err(crate::Error::NonFinite { op, arg, at: format!("row {}, column {}", i % m.nrows(), i / m.nrows()) }),
        None => Ok(()),
    }
}

/// Fails with [`crate::Error::NonFinite`] naming the first NaN or infinite entry of `v`.
pub fn ensure_finite_slice<T: Float>(op: &'static str, arg: &'static str, v: &[T]) -> crate::Result<()> {
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
}
