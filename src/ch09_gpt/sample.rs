//! Choosing the next token from the logits: greedy, temperature, top-k, top-p.
//!
//! With logits z over the vocabulary, sampling at temperature T draws token i with probability
//! softmax(z/T)ᵢ (document 001: a larger T flattens the distribution towards the unlikely
//! tokens; as T → 0 all the mass goes to the largest logit, so T → 0 is greedy decoding, which is
//! offered as its own mode because T = 0 itself would divide by zero). Top-k keeps only the k
//! largest logits before the softmax; top-p (nucleus sampling) keeps the smallest set of most
//! likely tokens whose probabilities add up to at least p, and renormalises. Draws come from the
//! crate's seeded [`Rng`], so a seed fixes the text.

use crate::error::{Error, Result, invalid};
use crate::float::Float;
use crate::rng::Rng;

/// How the next token is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decoding {
    /// Always the most likely token (the first one on a tie).
    Greedy,
    /// A random draw from the tempered, truncated distribution.
    Sample {
        /// T > 0.
        temperature: f64,
        /// Keep only the k most likely tokens (k ≥ 1), if set.
        top_k: Option<usize>,
        /// Keep the smallest most-likely set with total probability ≥ p, p ∈ (0, 1], if set.
        top_p: Option<f64>,
    },
}

impl Decoding {
    /// Plain sampling at temperature T.
    pub fn temperature(t: f64) -> Decoding {
        Decoding::Sample { temperature: t, top_k: None, top_p: None }
    }

    /// Checks T > 0 (finite), k ≥ 1 and p ∈ (0, 1].
    pub fn validate(&self) -> Result<()> {
        const OP: &str = "Decoding";
        if let Decoding::Sample { temperature, top_k, top_p } = *self {
            if !(temperature.is_finite() && temperature > 0.0) {
                return Err(invalid(
                    OP,
                    "temperature",
                    format!("must be finite and > 0 to sample (T → 0 is greedy decoding: ask for that instead), got {temperature}"),
                ));
            }
            if top_k == Some(0) {
                return Err(invalid(OP, "top_k", "must keep at least 1 token, got 0"));
            }
            if let Some(p) = top_p
                && !(p > 0.0 && p <= 1.0)
            {
                return Err(invalid(OP, "top_p", format!("must lie in (0, 1], got {p}")));
            }
        }
        Ok(())
    }
}

/// The index of the largest logit (the first on a tie). Errors on an empty or non-finite vector.
pub fn argmax<T: Float>(logits: &[T]) -> Result<usize> {
    check_logits("argmax", logits)?;
    let mut best = 0;
    for (i, &z) in logits.iter().enumerate() {
        if z > logits[best] {
            best = i;
        }
    }
    Ok(best)
}

fn check_logits<T: Float>(op: &'static str, logits: &[T]) -> Result<()> {
    if logits.is_empty() {
        return Err(Error::Empty { op, arg: "logits" });
    }
    crate::float::ensure_finite_slice(op, "logits", logits)
}

/// The distribution a [`Decoding::Sample`] draws from, as (token, probability) pairs, most
/// likely first (ties by token id), computed in f64 with the maximum subtracted before exp.
/// For [`Decoding::Greedy`] it is the single argmax with probability 1.
pub fn distribution<T: Float>(logits: &[T], decoding: &Decoding) -> Result<Vec<(usize, f64)>> {
    const OP: &str = "distribution";
    decoding.validate()?;
    check_logits(OP, logits)?;
    let (temperature, top_k, top_p) = match *decoding {
        Decoding::Greedy => return Ok(vec![(argmax(logits)?, 1.0)]),
        Decoding::Sample { temperature, top_k, top_p } => (temperature, top_k, top_p),
    };
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].as_f64().total_cmp(&logits[a].as_f64()).then(a.cmp(&b)));
    if let Some(k) = top_k {
        order.truncate(k);
    }
    let max = logits[order[0]].as_f64();
    let weights: Vec<f64> = order.iter().map(|&i| ((logits[i].as_f64() - max) / temperature).exp()).collect();
    let total: f64 = weights.iter().sum();
    let mut dist: Vec<(usize, f64)> = order.into_iter().zip(weights.into_iter().map(|w| w / total)).collect();
    if let Some(p) = top_p {
        let mut cumulative = 0.0;
        let mut keep = dist.len();
        for (n, (_, q)) in dist.iter().enumerate() {
            cumulative += q;
            // Rounding may leave the total a hair under 1: p = 1 keeps everything.
            if cumulative >= p && p < 1.0 {
                keep = n + 1;
                break;
            }
        }
        dist.truncate(keep);
        let kept: f64 = dist.iter().map(|(_, q)| q).sum();
        for (_, q) in dist.iter_mut() {
            *q /= kept;
        }
    }
    Ok(dist)
}

/// Picks the next token: the argmax, or one draw u ~ U[0, 1) from [`distribution`] (the first
/// token whose cumulative probability exceeds u).
pub fn choose<T: Float>(logits: &[T], decoding: &Decoding, rng: &mut Rng) -> Result<usize> {
    let dist = distribution(logits, decoding)?;
    if matches!(decoding, Decoding::Greedy) {
        return Ok(dist[0].0);
    }
    let u = rng.next_f64();
    let mut cumulative = 0.0;
    for &(token, q) in &dist {
        cumulative += q;
        if u < cumulative {
            return Ok(token);
        }
    }
    // u fell in the rounding gap above the last cumulative sum: the last kept token.
    Ok(dist[dist.len() - 1].0)
}
