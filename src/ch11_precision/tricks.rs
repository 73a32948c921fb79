//! Overflow and cancellation: the formulas as printed, next to the forms earlier chapters use.
//!
//! Each function here is the *printed* formula, evaluated as written, so the chapter can show
//! where it breaks; the stable form it is compared with lives in the chapter that uses it:
//! - e^z overflows once z passes ln(largest number) ([`overflow_threshold`]): 709.78 in f64,
//!   88.72 in f32, 11.09 in f16. [`softmax_unshifted`] then divides ∞ by ∞; chapter 2's
//!   [`crate::ch02_softmax::softmax`] subtracts the maximum first, so every exponent is ≤ 0.
//! - 1 − σ(z) for large z subtracts two nearly equal numbers ([`one_minus_sigmoid`]): every
//!   digit of it is lost once σ(z) rounds to 1, and [`bce_through_probability`] then takes
//!   ln 0. Chapter 1's [`crate::ch01_logistic::bce_from_logit`] never forms 1 − σ(z).
//! - ln Σ e^{zᵢ} ([`log_sum_exp_unshifted`]) overflows or underflows; chapter 2's
//!   [`crate::ch02_softmax::log_sum_exp`] computes max z + ln Σ e^{zᵢ − max z}.

use crate::ch01_logistic::sigmoid;
use crate::error::{Error, Result};
use crate::float::Float;

use super::format::Format;

/// ln of the format's largest finite number: e^z is finite below it and overflows above it.
pub fn overflow_threshold(format: Format) -> f64 {
    format.max_normal().ln()
}

fn nonempty<T>(op: &'static str, z: &[T]) -> Result<()> {
    if z.is_empty() { Err(Error::Empty { op, arg: "z" }) } else { Ok(()) }
}

/// e^{zᵢ} / Σⱼ e^{zⱼ} exactly as printed, without subtracting the maximum: NaN (∞/∞) once a
/// logit passes [`overflow_threshold`], 0/0 once they are all far below it. Errors when `z` is
/// empty.
pub fn softmax_unshifted<T: Float>(z: &[T]) -> Result<Vec<T>> {
    nonempty("softmax_unshifted", z)?;
    let e: Vec<T> = z.iter().map(|&v| v.exp()).collect();
    let total = e.iter().fold(T::zero(), |s, &v| s + v);
    Ok(e.into_iter().map(|v| v / total).collect())
}

/// ln Σᵢ e^{zᵢ} exactly as printed: ∞ when one e^{zᵢ} overflows, −∞ when all underflow. Errors
/// when `z` is empty.
pub fn log_sum_exp_unshifted<T: Float>(z: &[T]) -> Result<T> {
    nonempty("log_sum_exp_unshifted", z)?;
    Ok(z.iter().fold(T::zero(), |s, &v| s + v.exp()).ln())
}

/// 1 − σ(z) as printed: σ(z) rounded, then subtracted from 1. For z ≫ 0 the two are nearly
/// equal and the difference keeps only the few bits in which they differ; from z ≈ ln(2/ε)
/// (36.7 in f64, 16.6 in f32), where e^{−z} is under half of ε, 1 + e^{−z} rounds to 1, σ(z) is
/// 1 and the result is 0. The exact value is σ(−z).
pub fn one_minus_sigmoid<T: Float>(z: T) -> T {
    T::one() - sigmoid(z)
}

/// The loss −[y ln σ(z) + (1 − y) ln(1 − σ(z))] through the rounded probability σ(z), as
/// printed: +∞ for y = 0 once σ(z) rounds to 1 (and for y = 1 once it underflows to 0).
pub fn bce_through_probability<T: Float>(y: T, z: T) -> T {
    let p = sigmoid(z);
    -(y * p.ln() + (T::one() - y) * (T::one() - p).ln())
}

/// The relative error |computed − exact| / |exact| of a result.
pub fn relative_error(computed: f64, exact: f64) -> f64 {
    ((computed - exact) / exact).abs()
}
