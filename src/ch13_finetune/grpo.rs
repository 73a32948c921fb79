//! Group relative policy optimisation (Shao et al. 2024, DeepSeekMath): reinforcement learning
//! from a reward a program computes, with the group's own mean as the baseline.
//!
//! For one prompt the policy samples G answers and a rule scores them, r_1 … r_G. Each answer's
//! advantage is its reward measured against its group's:
//!
//! ```text
//! A_i = (r_i − mean(r)) / (std(r) + ε)        (std over the G rewards, 1/G; ε keeps 0/0 away)
//! ```
//!
//! A group whose rewards are all equal has A = 0 everywhere: it teaches nothing. Every token t of
//! answer i then gets the PPO-style clipped surrogate and a penalty for leaving the reference
//! π_ref, estimated per token by Schulman's k3 (unbiased for KL(π‖π_ref), and never negative):
//!
//! ```text
//! ρ_t = π(y_t)/π_old(y_t) = e^{ℓ_t − ℓ_old,t}          (ℓ_t = ln π(y_t), chapter 13's log-prob)
//! s_t = min(ρ_t A, clip(ρ_t, 1 − ε_c, 1 + ε_c) A)
//! k_t = π_ref/π − ln(π_ref/π) − 1 = e^{ℓ_ref,t − ℓ_t} − (ℓ_ref,t − ℓ_t) − 1 ≥ 0
//! L = −(1/|M|) Σ_t m_t (s_t − β k_t)                  (the mean over the answer's tokens)
//! ```
//!
//! π_old is the policy that sampled the answers (equal to π on the first update, ρ = 1). The
//! per-answer mean 1/|M| weighs a short answer's tokens more than a long one's: its length bias.

use super::sft::{TokenCache, check_log_probs, token_log_probs, token_log_probs_backward};
use crate::error::{Error, Result, invalid, shape_error};
use crate::float::ensure_finite_slice;
use nalgebra::DMatrix;

/// The ε added to the group's standard deviation, this chapter's choice (small beside any spread
/// of rewards in {0, 1}): an all-equal group gives 0/ε = 0 instead of 0/0.
pub const ADVANTAGE_EPS: f64 = 1e-4;

/// A_i = (r_i − mean(r)) / (std(r) + ε) with std(r) = √((1/G) Σ (r_i − mean(r))²). Errors on
/// fewer than 2 rewards, a non-finite reward, ε not finite and ≥ 0.
pub fn group_advantages(rewards: &[f64], eps: f64) -> Result<Vec<f64>> {
    const OP: &str = "group_advantages";
    if rewards.len() < 2 {
        let reason = format!("a group needs at least 2 rewards; got {}", rewards.len());
        return Err(invalid(OP, "rewards", reason));
    }
    ensure_finite_slice(OP, "rewards", rewards)?;
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(invalid(OP, "eps", format!("ε must be finite and ≥ 0; got {eps}")));
    }
    let g = rewards.len() as f64;
    let mean = rewards.iter().sum::<f64>() / g;
    let std = (rewards.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / g).sqrt();
    if std + eps == 0.0 {
        return Ok(vec![0.0; rewards.len()]); // all equal with ε = 0: no signal, not 0/0
    }
    Ok(rewards.iter().map(|r| (r - mean) / (std + eps)).collect())
}

/// Schulman's k3 estimator of KL(π‖π_ref) at one sampled token: with q = π_ref/π =
/// e^{ℓ_ref − ℓ}, k3 = q − ln q − 1 ≥ 0 (ln q ≤ q − 1), zero exactly when π = π_ref.
pub fn k3(log_ref: f64, log_pi: f64) -> f64 {
    let log_q = log_ref - log_pi;
    log_q.exp() - log_q - 1.0
}

/// min(ρA, clip(ρ, 1 − ε_c, 1 + ε_c)A): the ratio is cut off only where that lowers the objective.
pub fn clipped_surrogate(ratio: f64, advantage: f64, clip_eps: f64) -> f64 {
    let clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps);
    (ratio * advantage).min(clipped * advantage)
}

/// The clip range ε_c and the KL weight β of GRPO.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GrpoSpec {
    /// ε_c in (0, 1): the ratio counts only within 1 ± ε_c where that binds.
    pub clip_eps: f64,
    /// β ≥ 0, the weight of the k3 penalty.
    pub kl_beta: f64,
}

/// One sampled answer as GRPO sees it: the policy's logits over the whole sequence and, per
/// position, what the sampling policy and the reference gave the sampled token.
#[derive(Clone, Copy, Debug)]
pub struct GrpoSample<'a> {
    /// z, T×V, the policy's logits.
    pub logits: &'a DMatrix<f64>,
    /// y_t, the sampled tokens (and the prompt's), one per row.
    pub targets: &'a [usize],
    /// m_t, true at the answer's positions.
    pub mask: &'a [bool],
    /// ℓ_old,t = ln π_old(y_t), one per row (ignored where m_t is false).
    pub old_log_probs: &'a [f64],
    /// ℓ_ref,t = ln π_ref(y_t), one per row (ignored where m_t is false).
    pub ref_log_probs: &'a [f64],
    /// A, the answer's group advantage.
    pub advantage: f64,
}

/// What [`grpo_backward`] needs, and what GRPO reports per token: the log-softmax's cache and
/// the per-token values [`grpo_tokens_forward`] computes from its ℓ_t.
#[derive(Clone, Debug, PartialEq)]
pub struct GrpoCache {
    /// The token log-probabilities' cache.
    pub tokens: TokenCache,
    /// ρ_t, the clipping, π_ref/π and k_t at each token, A and β.
    pub terms: GrpoTerms,
}

/// L = −(1/|M|) Σ_t m_t (min(ρ_t A, clip(ρ_t)A) − β k_t) for one answer. Errors in one line: as
/// the masked cross-entropy for logits, targets and mask; log-probabilities not one finite value
/// ≤ 0 per row; ε_c outside (0, 1); β not finite and ≥ 0; a non-finite advantage.
pub fn grpo_forward(spec: GrpoSpec, sample: GrpoSample) -> Result<(f64, GrpoCache)> {
    const OP: &str = "grpo_forward";
    check_spec(OP, spec, sample.advantage)?;
    let (ell, tokens) = token_log_probs(OP, sample.logits, sample.targets, sample.mask)?;
    let t = GrpoTokens {
        log_probs: &ell,
        mask: sample.mask,
        old_log_probs: sample.old_log_probs,
        ref_log_probs: sample.ref_log_probs,
        advantage: sample.advantage,
    };
    let (loss, terms) = grpo_terms(OP, spec, t)?;
    Ok((loss, GrpoCache { tokens, terms }))
}

/// One sampled answer's per-token log-probabilities, as GRPO on a whole model sees them: the
/// policy's ℓ_t = ln π(y_t) (from the model's forward pass, chapter 9's
/// `FusedStep::target_log_probs`), the sampling policy's and the reference's, the answer's mask
/// and its advantage. All slices have one entry per position; entries where m_t is false are
/// not read.
#[derive(Clone, Copy, Debug)]
pub struct GrpoTokens<'a> {
    /// ℓ_t = ln π(y_t), the policy's.
    pub log_probs: &'a [f64],
    /// m_t, true at the answer's positions.
    pub mask: &'a [bool],
    /// ℓ_old,t = ln π_old(y_t).
    pub old_log_probs: &'a [f64],
    /// ℓ_ref,t = ln π_ref(y_t).
    pub ref_log_probs: &'a [f64],
    /// A, the answer's group advantage.
    pub advantage: f64,
}

/// Per-token values of `grpo_terms`, what [`grpo_log_prob_gradient`] needs.
#[derive(Clone, Debug, PartialEq)]
pub struct GrpoTerms {
    /// m_t.
    pub mask: Vec<bool>,
    /// ρ_t (1 where m_t is false).
    pub ratios: Vec<f64>,
    /// True where the minimum is the unclipped ρA.
    pub unclipped: Vec<bool>,
    /// π_ref/π at the sampled token.
    pub ref_ratios: Vec<f64>,
    /// k_t (0 where m_t is false).
    pub kl: Vec<f64>,
    /// A.
    pub advantage: f64,
    /// β.
    pub kl_beta: f64,
}

/// [`grpo_forward`] from the per-token log-probabilities instead of the logits: the same
/// L = −(1/|M|) Σ_t m_t (min(ρ_t A, clip(ρ_t)A) − β k_t), for an answer whose ℓ_t a whole
/// model computed. Errors in one line: ε_c or β out of range, a non-finite advantage, a slice of
/// another length than `log_probs` or holding a value not finite and ≤ 0, no answer position.
pub fn grpo_tokens_forward(spec: GrpoSpec, t: GrpoTokens) -> Result<(f64, GrpoTerms)> {
    grpo_terms("grpo_tokens_forward", spec, t)
}

/// The checks both forms make first, naming `op`: ε_c in (0, 1), β finite and ≥ 0, the
/// advantage finite.
fn check_spec(op: &'static str, spec: GrpoSpec, advantage: f64) -> Result<()> {
    if !(spec.clip_eps > 0.0 && spec.clip_eps < 1.0) {
        let reason = format!("ε_c must be in (0, 1); got {}", spec.clip_eps);
        return Err(invalid(op, "clip_eps", reason));
    }
    if !(spec.kl_beta.is_finite() && spec.kl_beta >= 0.0) {
        let reason = format!("β must be finite and ≥ 0; got {}", spec.kl_beta);
        return Err(invalid(op, "kl_beta", reason));
    }
    if !advantage.is_finite() {
        return Err(Error::NonFinite { op, arg: "advantage", at: "its only entry".into() });
    }
    Ok(())
}

/// The per-token values of both forms from ℓ_t (`t`), after their checks, and the loss.
fn grpo_terms(op: &'static str, spec: GrpoSpec, t: GrpoTokens) -> Result<(f64, GrpoTerms)> {
    check_spec(op, spec, t.advantage)?;
    let n = t.log_probs.len();
    check_log_probs(op, "log_probs", t.log_probs, n)?;
    if t.mask.len() != n {
        return Err(shape_error(op, "mask", format!("{n} values"), t.mask.len().to_string()));
    }
    if !t.mask.contains(&true) {
        return Err(invalid(op, "mask", "no answer position: nothing to average over"));
    }
    check_log_probs(op, "old_log_probs", t.old_log_probs, n)?;
    check_log_probs(op, "ref_log_probs", t.ref_log_probs, n)?;
    let (ell, a) = (t.log_probs, t.advantage);
    let (mut ratios, mut unclipped) = (vec![1.0; n], vec![false; n]);
    let (mut ref_ratios, mut kl) = (vec![1.0; n], vec![0.0; n]);
    let mut objective = 0.0;
    for i in (0..n).filter(|&i| t.mask[i]) {
        let rho = (ell[i] - t.old_log_probs[i]).exp(); //                   ρ = e^{ℓ − ℓ_old}
        let s = clipped_surrogate(rho, a, spec.clip_eps); //                s = min(ρA, clip(ρ)A)
        ratios[i] = rho;
        unclipped[i] = rho * a == s;
        ref_ratios[i] = (t.ref_log_probs[i] - ell[i]).exp(); //             q = π_ref/π
        kl[i] = k3(t.ref_log_probs[i], ell[i]); //                          k = q − ln q − 1
        objective += s - spec.kl_beta * kl[i]; //                           Σ m_t (s − βk)
    }
    let answer = t.mask.iter().filter(|&&m| m).count() as f64;
    let mask = t.mask.to_vec();
    let kl_beta = spec.kl_beta;
    let terms = GrpoTerms { mask, ratios, unclipped, ref_ratios, kl, advantage: a, kl_beta };
    Ok((-objective / answer, terms)) //                                     L = −(1/|M|) Σ …
}

/// ∂L/∂ℓ_t of [`grpo_tokens_forward`], one per position (0 off the answer):
/// −(1/|M|) (ρ_t A · [ρ_t A is the minimum] − β (1 − π_ref/π)). A model's step then needs
/// only the weights −∂L/∂ℓ_t on its token cross-entropies (the gradient of Σ_t c_t ℓ_t is that
/// of Σ_t (−c_t)(−ℓ_t)).
pub fn grpo_log_prob_gradient(terms: &GrpoTerms) -> Vec<f64> {
    let answer = terms.mask.iter().filter(|&&m| m).count() as f64;
    let (ratios, a) = (&terms.ratios, terms.advantage);
    (0..ratios.len())
        .map(|t| {
            if !terms.mask[t] {
                return 0.0;
            }
            // s = min(ρA, clip(ρ)A), ρ = e^{ℓ − ℓ_old}  ⇒  ∂s/∂ℓ = ρA on the unclipped branch
            let d_s = if terms.unclipped[t] { ratios[t] * a } else { 0.0 };
            // k = e^{ℓ_ref − ℓ} − (ℓ_ref − ℓ) − 1  ⇒  ∂k/∂ℓ = 1 − e^{ℓ_ref − ℓ}
            let d_k = 1.0 - terms.ref_ratios[t];
            // L = −(1/|M|) Σ (s − βk)
            -(d_s - terms.kl_beta * d_k) / answer
        })
        .collect()
}

/// Backward of [`grpo_forward`] to the logits (T×V). Per answer token, with ∂ρ/∂ℓ = ρ and
/// ∂k/∂ℓ = 1 − e^{ℓ_ref − ℓ}:
///
/// ```text
/// ∂L/∂ℓ_t = −(1/|M|) (ρ_t A · [ρ_t A is the minimum] − β (1 − π_ref/π))
/// ```
///
/// then through the log-softmax. Where the clipped term is the minimum its gradient is 0: the
/// ratio has moved far enough in the advantage's direction.
pub fn grpo_backward(cache: &GrpoCache) -> Result<DMatrix<f64>> {
    token_log_probs_backward(&cache.tokens, &grpo_log_prob_gradient(&cache.terms))
}
