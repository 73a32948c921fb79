//! Cross-entropy: from probabilities (and its gradient −y/ŷ, which the Jacobian turns into
//! ŷ − y), and from logits by log-sum-exp, the form every training loop uses.

use super::probabilities::{
    check_distribution, divide_rows, row_of, shifted_exponentials, softmax_jacobian, vector_of,
};
use crate::error::{Error, Result, invalid, shape_error};
use crate::float::Float;
use nalgebra::{DMatrix, DVector};

// ───────────────────────────── input checks ─────────────────────────────

/// Checks that two vectors (a target and a prediction) have the same length.
pub(super) fn check_same_length<T>(
    op: &'static str,
    arg: &'static str,
    a: &DVector<T>,
    b: &DVector<T>,
) -> Result<()> {
    if a.len() == b.len() {
        Ok(())
    } else {
        Err(shape_error(
            op,
            arg,
            format!("equal lengths (got {} first)", a.len()),
            format!("{} and {}", a.len(), b.len()),
        ))
    }
}

/// Checks class targets against N rows of K classes: one target per row, each below K.
pub(super) fn check_targets(
    op: &'static str,
    targets: &[usize],
    rows: usize,
    classes: usize,
) -> Result<()> {
    if targets.len() != rows {
        return Err(shape_error(
            op,
            "logits and targets",
            format!("{rows} targets (one per row of the logits)"),
            format!("{} targets for {rows} rows", targets.len()),
        ));
    }
    if let Some(i) = targets.iter().position(|&t| t >= classes) {
        return Err(invalid(
            op,
            "targets",
            format!(
                "targets[{i}] = {} but there are only {classes} classes (0..{classes})",
                targets[i]
            ),
        ));
    }
    Ok(())
}

// ───────────────────────────── cross-entropy from probabilities ─────────────────────────────

/// The one-hot vector of length `classes` with a 1 at `class`.
pub fn one_hot<T: Float>(classes: usize, class: usize) -> Result<DVector<T>> {
    if classes == 0 {
        return Err(Error::Empty { op: "one_hot", arg: "classes" });
    }
    if class >= classes {
        return Err(invalid(
            "one_hot",
            "class",
            format!("{class} is not below the number of classes {classes}"),
        ));
    }
    Ok(DVector::from_fn(classes, |i, _| if i == class { T::one() } else { T::zero() }))
}

/// L(y, ŷ) = −Σᵢ yᵢ ln ŷᵢ, with 0·ln 0 = 0. For a one-hot y this is −ln ŷ_true.
///
/// Both arguments must be distributions of equal length. Where ŷᵢ = 0 but yᵢ > 0 the loss is +∞
/// (the truth was declared impossible); [`cross_entropy_from_logits`] never meets that case.
pub fn cross_entropy<T: Float>(y: &DVector<T>, y_hat: &DVector<T>) -> Result<T> {
    const OP: &str = "cross_entropy";
    check_same_length(OP, "y and y_hat", y, y_hat)?;
    check_distribution(OP, "y", y.as_slice())?;
    check_distribution(OP, "y_hat", y_hat.as_slice())?;
    Ok(y.iter()
        .zip(y_hat.iter())
        .filter(|&(&yi, _)| yi > T::zero())
        .map(|(&yi, &pi)| -yi * pi.ln())
        .sum())
}

/// ∂L/∂ŷᵢ = −yᵢ/ŷᵢ, the derivative of [`cross_entropy`] with respect to the probabilities
/// (D0 prints yᵢ − ŷᵢ here; see the errata). Errors where ŷᵢ = 0 < yᵢ (infinite slope).
pub fn d_cross_entropy_d_probabilities<T: Float>(
    y: &DVector<T>,
    y_hat: &DVector<T>,
) -> Result<DVector<T>> {
    const OP: &str = "d_cross_entropy_d_probabilities";
    check_same_length(OP, "y and y_hat", y, y_hat)?;
    check_distribution(OP, "y", y.as_slice())?;
    check_distribution(OP, "y_hat", y_hat.as_slice())?;
    if let Some(i) = (0..y.len()).find(|&i| y[i] > T::zero() && y_hat[i] == T::zero()) {
        return Err(invalid(
            OP,
            "y_hat",
            format!("y_hat[{i}] = 0 where y[{i}] > 0: the slope −y/ŷ is infinite there"),
        ));
    }
    Ok(DVector::from_fn(
        y.len(),
        |i, _| if y[i] > T::zero() { -y[i] / y_hat[i] } else { T::zero() },
    ))
}

/// ∂L/∂z = ŷ − y: the gradient of the cross-entropy with respect to the logits that produced ŷ by
/// softmax. Both arguments distributions of equal length.
pub fn d_cross_entropy_d_logits<T: Float>(
    y: &DVector<T>,
    y_hat: &DVector<T>,
) -> Result<DVector<T>> {
    const OP: &str = "d_cross_entropy_d_logits";
    check_same_length(OP, "y and y_hat", y, y_hat)?;
    check_distribution(OP, "y", y.as_slice())?;
    check_distribution(OP, "y_hat", y_hat.as_slice())?;
    Ok(y_hat - y)
}

/// The same gradient the long way, by the chain rule: ∂L/∂z = Jᵀ·∂L/∂ŷ with J from
/// [`softmax_jacobian`] and ∂L/∂ŷ from [`d_cross_entropy_d_probabilities`]. Algebraically
/// Σᵢ (−yᵢ/ŷᵢ)·ŷᵢ(δᵢⱼ − ŷⱼ) = −yⱼ + ŷⱼ Σᵢ yᵢ = ŷⱼ − yⱼ.
pub fn d_logits_by_chain_rule<T: Float>(y: &DVector<T>, y_hat: &DVector<T>) -> Result<DVector<T>> {
    let d_y_hat = d_cross_entropy_d_probabilities(y, y_hat)?;
    let jacobian = softmax_jacobian(y_hat)?;
    let d_col = DMatrix::from_column_slice(d_y_hat.len(), 1, d_y_hat.as_slice());
    let d_z = crate::matmul::matmul_tn(&jacobian, &d_col)?;
    Ok(DVector::from_column_slice(d_z.as_slice()))
}

/// (1 − α)·ŷ + α·y = ŷ − α(ŷ − y): the gradient step applied to the *probabilities*, which is what
/// D3 computes by hand. It is not a gradient-descent step (that moves the logits; see
/// [`logit_step`]); it mixes ŷ towards y and, since Σ(ŷ − y) = 0, keeps the sum at exactly 1.
pub fn mix_towards_target<T: Float>(
    y_hat: &DVector<T>,
    y: &DVector<T>,
    alpha: T,
) -> Result<DVector<T>> {
    const OP: &str = "mix_towards_target";
    check_same_length(OP, "y_hat and y", y_hat, y)?;
    check_distribution(OP, "y_hat", y_hat.as_slice())?;
    check_distribution(OP, "y", y.as_slice())?;
    if !(alpha.is_finite() && alpha >= T::zero() && alpha <= T::one()) {
        return Err(invalid(OP, "alpha", format!("a mixing weight lies in [0, 1], got {alpha}")));
    }
    Ok(y_hat - (y_hat - y) * alpha)
}

// ───────────────────────────── cross-entropy from logits ─────────────────────────────

/// The mean cross-entropy of N rows of logits against integer targets, and (P − Y)/N.
fn cross_entropy_core<T: Float>(
    op: &'static str,
    logits: &DMatrix<T>,
    targets: &[usize],
    want_gradient: bool,
) -> Result<(T, Option<DMatrix<T>>)> {
    if logits.is_empty() {
        return Err(Error::Empty { op, arg: "logits" });
    }
    check_targets(op, targets, logits.nrows(), logits.ncols())?;
    if let Some(r) = (0..targets.len()).find(|&r| logits[(r, targets[r])] == T::neg_infinity()) {
        return Err(invalid(
            op,
            "targets",
            format!(
                "row {r}'s target class {} is masked (logit −∞): its loss is infinite",
                targets[r]
            ),
        ));
    }
    let (e, max, sums) = shifted_exponentials(op, "logits", logits, T::one())?;
    let n = T::of(logits.nrows() as f64);
    // ℓ_r = −ln ŷ_r,t = ln Σ꜀ e^{z_rc − max_r} − (z_rt − max_r)
    let loss =
        (0..targets.len()).map(|r| sums[r].ln() - (logits[(r, targets[r])] - max[r])).sum::<T>()
            / n;
    if !want_gradient {
        return Ok((loss, None));
    }
    // L = (1/N) Σ_r ℓ_r  ⇒  ∂L/∂z_rc = (ŷ_rc − y_rc)/N
    let mut d = e;
    divide_rows(&mut d, &sums);
    for (r, &t) in targets.iter().enumerate() {
        d[(r, t)] -= T::one();
    }
    d /= n;
    Ok((loss, Some(d)))
}

/// The mean cross-entropy from logits: L = (1/N) Σ_r −ln softmax(z_r)_{t_r}, with
/// −ln softmax(z)_t = ln Σ꜀ e^{z_c} − z_t evaluated by log-sum-exp.
///
/// Shapes: logits N×K, targets N class indices in 0..K. Masked (−∞) logits are allowed except at a
/// target. Errors: empty logits, NaN or +∞, a fully masked row, a target out of range or masked,
/// N ≠ number of targets.
pub fn cross_entropy_from_logits<T: Float>(logits: &DMatrix<T>, targets: &[usize]) -> Result<T> {
    Ok(cross_entropy_core("cross_entropy_from_logits", logits, targets, false)?.0)
}

/// Backward of [`cross_entropy_from_logits`]: ∂L/∂Z = (P − Y)/N, with P = softmax rows of Z and Y
/// the one-hot rows of the targets. Shapes: as the forward; the result N×K.
pub fn cross_entropy_from_logits_backward<T: Float>(
    logits: &DMatrix<T>,
    targets: &[usize],
) -> Result<DMatrix<T>> {
    let (_, d) = cross_entropy_core("cross_entropy_from_logits_backward", logits, targets, true)?;
    d.ok_or_else(|| {
        invalid("cross_entropy_from_logits_backward", "logits", "gradient not computed")
    })
}

/// The loss and its gradient in one pass (one softmax instead of two), for training loops.
pub fn cross_entropy_from_logits_with_gradient<T: Float>(
    logits: &DMatrix<T>,
    targets: &[usize],
) -> Result<(T, DMatrix<T>)> {
    let (loss, d) =
        cross_entropy_core("cross_entropy_from_logits_with_gradient", logits, targets, true)?;
    Ok((
        loss,
        d.ok_or_else(|| {
            invalid("cross_entropy_from_logits_with_gradient", "logits", "gradient not computed")
        })?,
    ))
}

/// −ln softmax(z)_target for one vector of logits.
pub fn cross_entropy_from_logit_vector<T: Float>(z: &DVector<T>, target: usize) -> Result<T> {
    cross_entropy_from_logits(&row_of(z), &[target])
}

/// One gradient-descent step on the logits of one example: z ← z − α(softmax(z) − y).
pub fn logit_step<T: Float>(
    z: &DVector<T>,
    target: usize,
    learning_rate: f64,
) -> Result<DVector<T>> {
    crate::optim::check_learning_rate("logit_step", learning_rate)?;
    let d = cross_entropy_from_logits_backward(&row_of(z), &[target])?;
    Ok(z - vector_of(&d) * T::of(learning_rate))
}
