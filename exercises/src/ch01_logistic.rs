//! Chapter 1: one sigmoid neuron — [chapters/ch01_logistic.md](../../chapters/ch01_logistic.md).
//!
//! Replace each `todo!()` with your answer, then run
//! `cargo test -p llm-workbook-exercises --test ch01_logistic`.
//!
//! Where a doc comment asks for an error, return one of `llm_workbook::Error`'s variants, whose
//! message is one line naming the argument: `Err(llm_workbook::error::invalid("op", "arg",
//! "why"))` for a bad value, `Err(llm_workbook::Error::Empty { op: "op", arg: "arg" })` for an
//! empty input and `Err(llm_workbook::error::shape_error("op", "arg", expected, got))` for shapes
//! that disagree (`llm_workbook::error::shape_of(&m)` writes a matrix's shape as `rows×cols`).

use llm_workbook::Result;
use nalgebra::{DMatrix, DVector};

/// **The sigmoid**: σ(z) = 1 / (1 + e^{−z}), a logit z turned into P(y = 1 | x).
///
/// It must stay finite and exact in the tails: σ(−1000) is 0, not NaN (e^{1000} overflows; for
/// z < 0 use the equal form e^{z} / (1 + e^{z})).
///
/// Chapter: [1. The model](../../chapters/ch01_logistic.md#1-the-model).
pub fn sigmoid(z: f64) -> f64 {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch01_logistic::sigmoid(z);
    todo!()
}

/// **The logits of a batch**: z = X w + b, one logit per row of X.
///
/// Shapes: w has length D, x is N×D (one sample per row), the result has length N. Return an
/// error (not a panic) when x does not have D columns.
///
/// Chapter: [1. The model](../../chapters/ch01_logistic.md#1-the-model).
pub fn logits_forward(w: &DVector<f64>, b: f64, x: &DMatrix<f64>) -> Result<DVector<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch01_logistic::logits_forward(w, b, x);
    todo!()
}

/// **Binary cross-entropy from the logit**: ℓ = −[y ln σ(z) + (1 − y) ln(1 − σ(z))], computed
/// from z without forming σ(z), so it stays finite: ℓ = max(z, 0) − y z + ln(1 + e^{−|z|}).
///
/// y is the label (0 or 1), z the logit. ℓ(0, 1000) is 1000, not ∞.
///
/// Chapter: [2. The loss](../../chapters/ch01_logistic.md#2-the-loss-binary-cross-entropy).
pub fn bce_from_logit(y: f64, z: f64) -> f64 {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch01_logistic::bce_from_logit(y, z);
    todo!()
}

/// **The gradient of one neuron's loss**: for one sample x (length D) with label y,
/// ŷ = σ(wᵀx + b) and ℓ = BCE(y, ŷ), return ∂ℓ/∂w = (ŷ − y)·x (length D).
///
/// The three factors ∂ℓ/∂ŷ · ∂ŷ/∂z · ∂z/∂w collapse to this. Compute the collapsed form: it
/// stays right in the tails (at z = −40 and y = 0 it is σ(−40)·x ≈ 4.2·10⁻¹⁸·x, not 0), where the
/// factors multiplied as written give ∞·0 = NaN once ŷ rounds to 0 or 1.
///
/// Chapter: [3. The gradient](../../chapters/ch01_logistic.md#3-the-gradient-one-factor-at-a-time).
pub fn sample_gradient(w: &DVector<f64>, b: f64, x: &DVector<f64>, y: f64) -> Result<DVector<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch01_logistic::sample_gradient(w, b, x, y);
    todo!()
}

/// **The backward of the logits**: given z = X w + b and ∂L/∂z (length N), return
/// (∂L/∂X, ∂L/∂w, ∂L/∂b) = (∂L/∂z · wᵀ, Xᵀ · ∂L/∂z, Σᵢ ∂L/∂zᵢ).
///
/// Shapes: x N×D, w length D, d_z length N; ∂L/∂X is N×D, ∂L/∂w length D.
///
/// Chapter: [3. The gradient](../../chapters/ch01_logistic.md#3-the-gradient-one-factor-at-a-time).
pub fn logits_backward(
    x: &DMatrix<f64>,
    w: &DVector<f64>,
    d_z: &DVector<f64>,
) -> Result<(DMatrix<f64>, DVector<f64>, f64)> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch01_logistic::logits_backward(x, w, d_z).map(|g| (g.d_x, g.d_w, g.d_b));
    todo!()
}
