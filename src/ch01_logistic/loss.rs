//! Binary cross-entropy, from a probability and (stably) from a logit, and the likelihood it is
//! the negative logarithm of.

use crate::error::{Error, Result, invalid, shape_error};
use crate::float::Float;
use nalgebra::DVector;

/// Checks labels against a batch of n rows: one label per row, each 0 or 1.
pub(super) fn check_labels<T: Float>(op: &'static str, y: &DVector<T>, n: usize) -> Result<()> {
    if y.len() != n {
        return Err(shape_error(
            op,
            "y and x",
            format!("{n} labels (one per row of x)"),
            format!("{} labels", y.len()),
        ));
    }
    if let Some(i) = y.iter().position(|&v| v != T::zero() && v != T::one()) {
        return Err(invalid(op, "y", format!("labels must be 0 or 1; y[{i}] = {}", y[i])));
    }
    Ok(())
}

/// ℓ(y, ŷ) = −[y ln ŷ + (1 − y) ln(1 − ŷ)] from a probability. Exact at the printed formula but
/// infinite when ŷ reaches 0 or 1 exactly; prefer [`bce_from_logit`].
pub fn bce<T: Float>(y: T, y_hat: T) -> T {
    -(y * y_hat.ln() + (T::one() - y) * (T::one() - y_hat).ln())
}

/// ℓ from the logit z instead of ŷ = σ(z): max(z, 0) − y·z + ln(1 + e^{−|z|}).
/// Finite and exact for any finite z (at z = ±1000 too), because ln ŷ = −ln(1 + e^{−z}) is never
/// formed from a rounded ŷ.
///
/// Written as (1 − y)·max(z, 0) + y·max(−z, 0) + ln(1 + e^{−|z|}) (the same sum, since
/// z = max(z, 0) − max(−z, 0)), with a term whose weight is 0 dropped rather than multiplied, so
/// an infinite logit gives the limit instead of ∞ − ∞: ℓ(1, +∞) = ℓ(0, −∞) = 0 and
/// ℓ(0, +∞) = ℓ(1, −∞) = +∞. A NaN in y or z propagates to a NaN loss (the batch function
/// [`bce_mean_from_logits`] refuses non-finite logits instead).
pub fn bce_from_logit<T: Float>(y: T, z: T) -> T {
    let weighted = |weight: T, part: T| if weight == T::zero() { T::zero() } else { weight * part };
    let wrong_side = weighted(T::one() - y, z.max(T::zero())) + weighted(y, (-z).max(T::zero()));
    if z.is_nan() { z } else { wrong_side + (-z.abs()).exp().ln_1p() }
}

/// Mean BCE over a batch, from logits. Errors on an empty batch, mismatched lengths, labels
/// outside {0, 1} or non-finite logits.
pub fn bce_mean_from_logits<T: Float>(z: &DVector<T>, y: &DVector<T>) -> Result<T> {
    if z.is_empty() {
        return Err(Error::Empty { op: "bce_mean_from_logits", arg: "z" });
    }
    check_labels("bce_mean_from_logits", y, z.len())?;
    if let Some(i) = z.iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFinite {
            op: "bce_mean_from_logits",
            arg: "z",
            at: format!("index {i}"),
        });
    }
    let n = T::of(z.len() as f64);
    Ok(z.iter().zip(y.iter()).map(|(&zi, &yi)| bce_from_logit(yi, zi)).sum::<T>() / n)
}

/// The Bernoulli probability of label y under ŷ: ŷ^y (1 − ŷ)^{1−y} (ŷ when y = 1, 1 − ŷ when
/// y = 0).
pub fn bernoulli_likelihood<T: Float>(y: T, y_hat: T) -> T {
    y_hat.powf(y) * (T::one() - y_hat).powf(T::one() - y)
}

fn check_same_length<T: Float>(op: &'static str, y: &DVector<T>, y_hat: &DVector<T>) -> Result<()> {
    if y.len() == y_hat.len() {
        Ok(())
    } else {
        Err(shape_error(
            op,
            "y and y_hat",
            format!("y_hat of length {} (one probability per label)", y.len()),
            format!("{}", y_hat.len()),
        ))
    }
}

/// The likelihood of a batch: Πᵢ ŷᵢ^{yᵢ}(1 − ŷᵢ)^{1−yᵢ}. Equals exp(−N·BCE). Errors when y and
/// ŷ differ in length (an empty batch has likelihood 1).
pub fn batch_likelihood<T: Float>(y: &DVector<T>, y_hat: &DVector<T>) -> Result<T> {
    check_same_length("batch_likelihood", y, y_hat)?;
    Ok(y.iter()
        .zip(y_hat.iter())
        .map(|(&yi, &pi)| bernoulli_likelihood(yi, pi))
        .fold(T::one(), |a, b| a * b))
}

/// The log-likelihood Σᵢ [yᵢ ln ŷᵢ + (1 − yᵢ) ln(1 − ŷᵢ)], the negative of the summed loss.
/// Errors when y and ŷ differ in length.
pub fn log_likelihood<T: Float>(y: &DVector<T>, y_hat: &DVector<T>) -> Result<T> {
    check_same_length("log_likelihood", y, y_hat)?;
    Ok(y.iter().zip(y_hat.iter()).map(|(&yi, &pi)| -bce(yi, pi)).sum())
}
