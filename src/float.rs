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
    for c in 0..m.ncols() {
        for r in 0..m.nrows() {
            if !m[(r, c)].is_finite() {
                return Err(crate::Error::NonFinite { op, arg, at: format!("row {r}, column {c}") });
            }
        }
    }
    Ok(())
}

/// Fails with [`crate::Error::NonFinite`] naming the first NaN or infinite entry of `v`.
pub fn ensure_finite_slice<T: Float>(op: &'static str, arg: &'static str, v: &[T]) -> crate::Result<()> {
    match v.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(crate::Error::NonFinite { op, arg, at: format!("index {i}") }),
        None => Ok(()),
    }
}

/// Converts a matrix between float types (f64 worked examples to the f32 GPT and back).
pub fn cast<A: Float, B: Float>(m: &DMatrix<A>) -> DMatrix<B> {
    m.map(|x| B::of(x.as_f64()))
}
