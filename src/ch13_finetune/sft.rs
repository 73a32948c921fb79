//! Supervised fine-tuning: the cross-entropy on the answer's tokens only.
//!
//! A fine-tuning example is a prompt followed by its answer, fed to the model as one sequence of
//! T tokens. The model's logits z_t (row t of a T×V matrix) predict token y_t. Only the answer is
//! to be learned, so a mask m_t ∈ {0, 1} marks the positions whose target is an answer token and
//! the loss averages over those alone:
//!
//! ```text
//! ℓ_t = ln softmax(z_t)_{y_t}                 (the token's log-probability)
//! ln π(y) = Σ_t m_t ℓ_t                        (the answer's log-probability, a sequence's)
//! L = −(1/|M|) Σ_t m_t ℓ_t,   |M| = Σ_t m_t   (the masked cross-entropy)
//! ```
//!
//! Both are built on [`token_log_probs_forward`] and its backward, which chapter 13's
//! preference (DPO) and reward (GRPO) losses share.

use crate::ch02_softmax::{log_softmax_rows, log_softmax_rows_backward};
use crate::error::{Error, Result, invalid, shape_error};
use crate::float::{ensure_finite, ensure_finite_slice};
use nalgebra::DMatrix;

/// What the backward of a token log-probability needs.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenCache {
    /// ln softmax(z_t) for every row, T×V.
    pub log_probs: DMatrix<f64>,
    /// y_t, one target per row.
    pub targets: Vec<usize>,
    /// m_t, true where row t's target is an answer token.
    pub mask: Vec<bool>,
}

impl TokenCache {
    /// |M|, the number of answer positions.
    pub fn answer_tokens(&self) -> usize {
        self.mask.iter().filter(|&&m| m).count()
    }
}

/// Checks logits T×V (T, V ≥ 1, finite), one target below V per row, one mask entry per row with
/// at least one answer position.
pub(crate) fn check_tokens(
    op: &'static str,
    logits: &DMatrix<f64>,
    targets: &[usize],
    mask: &[bool],
) -> Result<()> {
    if logits.is_empty() {
        return Err(Error::Empty { op, arg: "logits" });
    }
    let (t, v) = logits.shape();
    let per_row = format!("{t}, one per logits row");
    if targets.len() != t {
        return Err(shape_error(op, "targets", per_row, format!("{}", targets.len())));
    }
    if mask.len() != t {
        return Err(shape_error(op, "mask", per_row, format!("{}", mask.len())));
    }
    if let Some((i, &y)) = targets.iter().enumerate().find(|&(_, &y)| y >= v) {
        return Err(invalid(op, "targets", format!("target {i} is {y}, not below V = {v}")));
    }
    if !mask.contains(&true) {
        return Err(invalid(op, "mask", "no answer position: nothing to average over"));
    }
    ensure_finite(op, "logits", logits)
}

/// Checks one finite log-probability (≤ 0) per row, for the per-token inputs of DPO and GRPO.
pub(crate) fn check_log_probs(
    op: &'static str,
    arg: &'static str,
    v: &[f64],
    rows: usize,
) -> Result<()> {
    if v.len() != rows {
        return Err(shape_error(op, arg, format!("{rows} values"), format!("{}", v.len())));
    }
    ensure_finite_slice(op, arg, v)?;
    match v.iter().position(|&l| l > 0.0) {
        Some(i) => {
            Err(invalid(op, arg, format!("entry {i} is {} > 0, not a log-probability", v[i])))
        }
        None => Ok(()),
    }
}

/// ℓ_t = ln softmax(z_t)_{y_t} for every row (T×V logits → T values), with the cache for
/// [`token_log_probs_backward`]. Errors as [`masked_cross_entropy_forward`].
pub fn token_log_probs_forward(
    logits: &DMatrix<f64>,
    targets: &[usize],
    mask: &[bool],
) -> Result<(Vec<f64>, TokenCache)> {
    token_log_probs("token_log_probs_forward", logits, targets, mask)
}

/// [`token_log_probs_forward`], its errors naming `op`.
pub(crate) fn token_log_probs(
    op: &'static str,
    logits: &DMatrix<f64>,
    targets: &[usize],
    mask: &[bool],
) -> Result<(Vec<f64>, TokenCache)> {
    check_tokens(op, logits, targets, mask)?;
    let log_probs = log_softmax_rows(logits)?; //                    ln softmax(z_t)
    let ell = targets.iter().enumerate().map(|(t, &y)| log_probs[(t, y)]).collect(); // ℓ_t
    Ok((ell, TokenCache { log_probs, targets: targets.to_vec(), mask: mask.to_vec() }))
}

/// Backward of [`token_log_probs_forward`]: from ∂L/∂ℓ_t (T values) to ∂L/∂z (T×V),
///
/// ```text
/// ∂L/∂z_tv = ∂L/∂ℓ_t · (δ_{v y_t} − softmax(z_t)_v)
/// ```
///
/// through chapter 2's log-softmax backward with ∂L/∂(ln softmax(z_t)) one-hot at y_t.
pub fn token_log_probs_backward(cache: &TokenCache, d_ell: &[f64]) -> Result<DMatrix<f64>> {
    const OP: &str = "token_log_probs_backward";
    let (t, v) = cache.log_probs.shape();
    if d_ell.len() != t || cache.targets.len() != t {
        let expected = format!("{t}, one per logits row");
        return Err(shape_error(OP, "d_ell", expected, format!("{}", d_ell.len())));
    }
    ensure_finite_slice(OP, "d_ell", d_ell)?;
    // ℓ_t = (ln softmax(z_t))_{y_t}  ⇒  ∂L/∂(ln softmax(z_t)) = ∂L/∂ℓ_t at column y_t, else 0
    let mut d_log_probs = DMatrix::zeros(t, v);
    for (row, (&y, &d)) in cache.targets.iter().zip(d_ell).enumerate() {
        d_log_probs[(row, y)] = d;
    }
    log_softmax_rows_backward(&cache.log_probs, &d_log_probs)
}

/// ln π(y) = Σ_t m_t ℓ_t, the log-probability of the answer given the prompt. Shapes: logits
/// T×V, targets and mask T. Errors as [`masked_cross_entropy_forward`].
pub fn sequence_log_prob_forward(
    logits: &DMatrix<f64>,
    targets: &[usize],
    mask: &[bool],
) -> Result<(f64, TokenCache)> {
    sequence_log_prob("sequence_log_prob_forward", logits, targets, mask)
}

/// [`sequence_log_prob_forward`], its errors naming `op`.
fn sequence_log_prob(
    op: &'static str,
    logits: &DMatrix<f64>,
    targets: &[usize],
    mask: &[bool],
) -> Result<(f64, TokenCache)> {
    let (ell, cache) = token_log_probs(op, logits, targets, mask)?;
    let sum = ell.iter().zip(mask).filter(|&(_, &m)| m).map(|(l, _)| l).sum(); // Σ_t m_t ℓ_t
    Ok((sum, cache))
}

/// Backward of [`sequence_log_prob_forward`]: ∂L/∂ℓ_t = m_t · ∂L/∂ln π(y), then to the logits.
pub fn sequence_log_prob_backward(cache: &TokenCache, d_log_prob: f64) -> Result<DMatrix<f64>> {
    // ln π(y) = Σ_t m_t ℓ_t  ⇒  ∂L/∂ℓ_t = m_t ∂L/∂ln π(y)
    let d_ell: Vec<f64> = cache.mask.iter().map(|&m| if m { d_log_prob } else { 0.0 }).collect();
    token_log_probs_backward(cache, &d_ell)
}

/// L = −(1/|M|) Σ_t m_t ln softmax(z_t)_{y_t}: the mean cross-entropy over the answer's tokens.
///
/// Shapes: logits T×V, targets T (each below V), mask T (true at answer positions). Errors, in
/// one line naming the argument: empty logits, a targets or mask length that is not T, a target
/// ≥ V, a mask with no answer position, non-finite logits.
pub fn masked_cross_entropy_forward(
    logits: &DMatrix<f64>,
    targets: &[usize],
    mask: &[bool],
) -> Result<(f64, TokenCache)> {
    let (log_prob, cache) =
        sequence_log_prob("masked_cross_entropy_forward", logits, targets, mask)?;
    let answer = cache.answer_tokens() as f64;
    Ok((-log_prob / answer, cache)) // L = −ln π(y) / |M|
}

/// Backward of [`masked_cross_entropy_forward`] (∂L/∂L = 1): ∂L/∂z_t = m_t (softmax(z_t) −
/// onehot(y_t)) / |M|, zero on the prompt's rows. Shape T×V.
pub fn masked_cross_entropy_backward(cache: &TokenCache) -> Result<DMatrix<f64>> {
    // L = −ln π(y) / |M|  ⇒  ∂L/∂ln π(y) = −1/|M|
    sequence_log_prob_backward(cache, -1.0 / cache.answer_tokens() as f64)
}
