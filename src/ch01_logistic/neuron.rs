//! One neuron: the sigmoid, the 0.5 rule, and the logit z = Xw + b with its backward pass.

use crate::error::{Error, Result, shape_error};
use crate::float::{Float, ensure_finite};
use nalgebra::{DMatrix, DVector};

/// The decision threshold: predict class 1 when σ(z) ≥ 0.5, i.e. when z ≥ 0.
pub const THRESHOLD: f64 = 0.5;

// ───────────────────────────── the sigmoid ─────────────────────────────

/// σ(z) = 1/(1 + e^{−z}), computed without overflow for any z: for z ≥ 0 as 1/(1 + e^{−z}),
/// for z < 0 as e^{z}/(1 + e^{z}), so the exponential never exceeds 1.
pub fn sigmoid<T: Float>(z: T) -> T {
    if z >= T::zero() {
        T::one() / (T::one() + (-z).exp())
    } else {
        let e = z.exp();
        e / (T::one() + e)
    }
}

/// σ′(z) = σ(z)(1 − σ(z)).
pub fn sigmoid_derivative<T: Float>(z: T) -> T {
    let s = sigmoid(z);
    s * (T::one() - s)
}

/// The 0.5 rule: class 1 when σ(z) ≥ 0.5.
pub fn classify<T: Float>(probability: T) -> u8 {
    u8::from(probability >= T::of(THRESHOLD))
}

// ───────────────────────────── input checks ─────────────────────────────

fn check_batch<T: Float>(op: &'static str, w: &DVector<T>, x: &DMatrix<T>) -> Result<()> {
    if x.nrows() == 0 {
        return Err(Error::Empty { op, arg: "x (the batch)" });
    }
    if w.len() != x.ncols() {
        return Err(shape_error(
            op,
            "w and x",
            format!("w of length {} (one weight per column of x)", x.ncols()),
            format!("w of length {}, x {}×{}", w.len(), x.nrows(), x.ncols()),
        ));
    }
    ensure_finite(op, "x", x)?;
    if let Some(i) = w.iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFinite { op, arg: "w", at: format!("index {i}") });
    }
    Ok(())
}

// ───────────────────────────── forward / backward ─────────────────────────────

/// z = Xw + b: one logit per row. Shapes: x N×D, w D, result N.
pub fn logits_forward<T: Float>(w: &DVector<T>, b: T, x: &DMatrix<T>) -> Result<DVector<T>> {
    check_batch("logits_forward", w, x)?;
    let wm = DMatrix::from_column_slice(w.len(), 1, w.as_slice());
    let z = crate::matmul::matmul(x, &wm)?;
    Ok(DVector::from_iterator(z.nrows(), z.iter().map(|&v| v + b)))
}

/// Gradients of [`logits_forward`].
#[derive(Clone, Debug)]
pub struct LogitGrads<T: Float> {
    /// ∂L/∂x = ∂L/∂z · wᵀ, N×D.
    pub d_x: DMatrix<T>,
    /// ∂L/∂w = Xᵀ · ∂L/∂z, length D.
    pub d_w: DVector<T>,
    /// ∂L/∂b = Σᵢ ∂L/∂zᵢ.
    pub d_b: T,
}

/// Backward of [`logits_forward`]: from ∂L/∂z (length N) to the gradients of x, w and b.
pub fn logits_backward<T: Float>(
    x: &DMatrix<T>,
    w: &DVector<T>,
    d_z: &DVector<T>,
) -> Result<LogitGrads<T>> {
    if d_z.len() != x.nrows() || w.len() != x.ncols() {
        return Err(shape_error(
            "logits_backward",
            "x, w and d_z",
            format!("w of length {} and d_z of length {}", x.ncols(), x.nrows()),
            format!("x {}×{}, w {}, d_z {}", x.nrows(), x.ncols(), w.len(), d_z.len()),
        ));
    }
    let dzm = DMatrix::from_column_slice(d_z.len(), 1, d_z.as_slice());
    let wm = DMatrix::from_column_slice(w.len(), 1, w.as_slice());
    let d_w = crate::matmul::matmul_tn(x, &dzm)?; // z = Xw + b ⇒ ∂L/∂w = Xᵀ ∂L/∂z
    let d_x = crate::matmul::matmul_nt(&dzm, &wm)?; // z = Xw + b ⇒ ∂L/∂X = ∂L/∂z wᵀ
    let d_b = d_z.iter().copied().sum(); //             z = Xw + b ⇒ ∂L/∂b = Σᵢ ∂L/∂zᵢ
    Ok(LogitGrads { d_x, d_w: DVector::from_column_slice(d_w.as_slice()), d_b })
}

/// ŷ = σ(Xw + b) for every row of x.
pub fn predict_proba<T: Float>(w: &DVector<T>, b: T, x: &DMatrix<T>) -> Result<DVector<T>> {
    Ok(logits_forward(w, b, x)?.map(sigmoid))
}
