//! Direct preference optimisation (Rafailov et al. 2023): learning from pairs of a better and a
//! worse answer, with no reward model and no sampling.
//!
//! For a prompt x, a chosen answer y_w and a rejected one y_l, the policy π (being trained) and a
//! frozen reference π_ref (the fine-tuned start) each give the answers' sequence log-probabilities
//! (chapter 13's [`super::sequence_log_prob_forward`]). The implicit reward of an answer is
//! β ln(π(y)/π_ref(y)), and the loss asks the chosen one's to exceed the rejected one's:
//!
//! ```text
//! m = β[(ln π(y_w) − ln π_ref(y_w)) − (ln π(y_l) − ln π_ref(y_l))]   (the reward margin)
//! L = −ln σ(m) = ln(1 + e^{−m})
//! ∂L/∂m = σ(m) − 1,   ∂L/∂ln π(y_w) = β(σ(m) − 1),   ∂L/∂ln π(y_l) = β(1 − σ(m))
//! ```
//!
//! At m = 0 (the policy still equal to the reference) L = ln 2. The gradient fades as m grows:
//! a pair already ranked by a wide margin teaches little. β sets how far from π_ref that is.

use crate::error::{Error, Result, invalid};

/// One preference pair's four sequence log-probabilities.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DpoPair {
    /// ln π(y_w | x), the policy's log-probability of the chosen answer.
    pub chosen: f64,
    /// ln π(y_l | x), the policy's log-probability of the rejected answer.
    pub rejected: f64,
    /// ln π_ref(y_w | x), the reference's, frozen.
    pub ref_chosen: f64,
    /// ln π_ref(y_l | x), the reference's, frozen.
    pub ref_rejected: f64,
}

/// What [`dpo_backward`] needs, and what DPO reports.
#[derive(Clone, Debug, PartialEq)]
pub struct DpoCache {
    /// β > 0.
    pub beta: f64,
    /// m = β·((ln π(y_w) − ln π_ref(y_w)) − (ln π(y_l) − ln π_ref(y_l))), one per pair: the
    /// implicit reward margin.
    pub margins: Vec<f64>,
}

impl DpoCache {
    /// The share of pairs whose implicit reward ranks the chosen answer first (m > 0).
    pub fn accuracy(&self) -> f64 {
        self.margins.iter().filter(|&&m| m > 0.0).count() as f64 / self.margins.len() as f64
    }
}

/// Gradients of the mean DPO loss with respect to the policy's sequence log-probabilities (the
/// reference is frozen).
#[derive(Clone, Debug, PartialEq)]
pub struct DpoGrads {
    /// ∂L/∂ln π(y_w), one per pair.
    pub d_chosen: Vec<f64>,
    /// ∂L/∂ln π(y_l), one per pair.
    pub d_rejected: Vec<f64>,
}

/// σ(m) = 1/(1 + e^{−m}), computed without overflow for either sign.
pub fn sigmoid(m: f64) -> f64 {
    if m >= 0.0 { 1.0 / (1.0 + (-m).exp()) } else { m.exp() / (1.0 + m.exp()) }
}

/// −ln σ(m) = ln(1 + e^{−m}) = max(−m, 0) + ln(1 + e^{−|m|}), finite for every finite m.
pub fn neg_log_sigmoid(m: f64) -> f64 {
    (-m).max(0.0) + (-m.abs()).exp().ln_1p()
}

/// The implicit reward margin of one pair, m = β·((ln π(y_w) − ln π_ref(y_w)) − (ln π(y_l) −
/// ln π_ref(y_l))).
pub fn reward_margin(pair: &DpoPair, beta: f64) -> f64 {
    beta * ((pair.chosen - pair.ref_chosen) - (pair.rejected - pair.ref_rejected))
}

/// L = (1/P) Σ_p −ln σ(m_p) over P pairs. Errors in one line: no pairs, β not finite and > 0, a
/// log-probability that is not finite or is > 0 (naming the pair).
pub fn dpo_forward(pairs: &[DpoPair], beta: f64) -> Result<(f64, DpoCache)> {
    const OP: &str = "dpo_forward";
    if pairs.is_empty() {
        return Err(Error::Empty { op: OP, arg: "pairs" });
    }
    if !(beta.is_finite() && beta > 0.0) {
        return Err(invalid(OP, "beta", format!("β must be finite and > 0; got {beta}")));
    }
    for (i, p) in pairs.iter().enumerate() {
        let values = [p.chosen, p.rejected, p.ref_chosen, p.ref_rejected];
        if values.iter().any(|v| !v.is_finite() || *v > 0.0) {
            let reason = format!("pair {i} holds {values:?}: each must be a finite value ≤ 0");
            return Err(invalid(OP, "pairs", reason));
        }
    }
    let margins: Vec<f64> = pairs.iter().map(|p| reward_margin(p, beta)).collect(); // m
    let loss = margins.iter().map(|&m| neg_log_sigmoid(m)).sum::<f64>() / pairs.len() as f64;
    Ok((loss, DpoCache { beta, margins }))
}

/// Backward of [`dpo_forward`]: ∂L/∂ln π(y_w) = β(σ(m) − 1)/P and ∂L/∂ln π(y_l) = β(1 − σ(m))/P
/// for each pair.
pub fn dpo_backward(cache: &DpoCache) -> DpoGrads {
    let p = cache.margins.len() as f64;
    // L = (1/P) Σ −ln σ(m)  ⇒  ∂L/∂m = (σ(m) − 1)/P
    let d_m: Vec<f64> = cache.margins.iter().map(|&m| (sigmoid(m) - 1.0) / p).collect();
    // m = β[(ln π(y_w) − …) − (ln π(y_l) − …)]  ⇒  ∂m/∂ln π(y_w) = β, ∂m/∂ln π(y_l) = −β
    DpoGrads {
        d_chosen: d_m.iter().map(|&d| cache.beta * d).collect(),
        d_rejected: d_m.iter().map(|&d| -cache.beta * d).collect(),
    }
}
