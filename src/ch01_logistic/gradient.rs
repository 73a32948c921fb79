//! The gradient of the loss: the document's three chain-rule factors for one sample, and the
//! batch gradient through [`logits_backward`].

use super::loss::bce_mean_from_logits;
use super::neuron::{logits_backward, logits_forward, sigmoid};
use crate::error::Result;
use crate::float::Float;
use nalgebra::{DMatrix, DVector};

// ───────────────────────── the three chain-rule factors ─────────────────────────

/// Factor ①: ∂ℓ/∂ŷ = −(y/ŷ − (1 − y)/(1 − ŷ)) = (ŷ − y)/(ŷ(1 − ŷ)).
pub fn d_loss_d_yhat<T: Float>(y: T, y_hat: T) -> T {
    (y_hat - y) / (y_hat * (T::one() - y_hat))
}

/// Factor ②: ∂ŷ/∂z = ŷ(1 − ŷ).
pub fn d_yhat_d_z<T: Float>(y_hat: T) -> T {
    y_hat * (T::one() - y_hat)
}

/// Factor ③: ∂z/∂w = x (the input, not z), because z = wᵀx + b is linear in w.
pub fn d_z_d_w<T: Float>(x: &DVector<T>) -> DVector<T> {
    x.clone()
}

/// The product of the three factors for one sample: ∂ℓ/∂w = ① · ② · ③ = (ŷ − y)·x, for w and x
/// of length D.
///
/// ① · ② is computed as the simplified ŷ − y, not as the two factors multiplied: ŷ(1 − ŷ) cancels
/// on paper, but in f64 σ(z) rounds to exactly 1 for z ≥ 37 (and 1 − ŷ to 0), so the product
/// of the factors as written is 0/0 · 0 = NaN there (chapter 11 shows why).
pub fn sample_gradient<T: Float>(w: &DVector<T>, b: T, x: &DVector<T>, y: T) -> Result<DVector<T>> {
    let xm = DMatrix::from_row_slice(1, x.len(), x.as_slice());
    let z = logits_forward(w, b, &xm)?[0];
    let y_hat = sigmoid(z);
    // ① · ② = (ŷ − y)/(ŷ(1 − ŷ)) · ŷ(1 − ŷ) = ŷ − y
    let factor = y_hat - y;
    Ok(d_z_d_w(x) * factor)
}

/// The mean loss and its gradients over a batch:
/// L = (1/N) Σ ℓᵢ, ∇w L = (1/N) Σ (ŷᵢ − yᵢ) xᵢ, ∂L/∂b = (1/N) Σ (ŷᵢ − yᵢ).
pub fn loss_and_gradient<T: Float>(
    w: &DVector<T>,
    b: T,
    x: &DMatrix<T>,
    y: &DVector<T>,
) -> Result<(T, DVector<T>, T)> {
    let z = logits_forward(w, b, x)?;
    let loss = bce_mean_from_logits(&z, y)?;
    let n = T::of(x.nrows() as f64);
    // ℓ = bce_from_logit(y, z)  ⇒  ∂L/∂zᵢ = (σ(zᵢ) − yᵢ)/N
    let d_z = DVector::from_iterator(
        z.len(),
        z.iter().zip(y.iter()).map(|(&zi, &yi)| (sigmoid(zi) - yi) / n),
    );
    let g = logits_backward(x, w, &d_z)?;
    Ok((loss, g.d_w, g.d_b))
}
