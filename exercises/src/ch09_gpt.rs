//! Chapter 9: a small GPT — [chapters/ch09_gpt.md](../../chapters/ch09_gpt.md).
//!
//! Replace each `todo!()` with your answer, then run
//! `cargo test -p llm-workbook-exercises --test ch09_gpt`.

use llm_workbook::Result;
use llm_workbook::optim::AdamConfig;
use nalgebra::DMatrix;

/// **Sampling at temperature T**: the distribution softmax(z / T) over the tokens, as
/// (token, probability) pairs, most likely first (ties by token id). Subtract the maximum before
/// exp. Error for T ≤ 0 or empty logits.
///
/// Chapter: [5. Sampling](../../chapters/ch09_gpt.md#5-sampling).
pub fn temperature_distribution(logits: &[f64], temperature: f64) -> Result<Vec<(usize, f64)>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch09_gpt::sample::distribution(
        logits,
        &llm_workbook::ch09_gpt::sample::Decoding::temperature(temperature),
    );
    todo!()
}

/// **Top-k sampling**: keep the k largest logits (ties by token id), then softmax(z / T) over
/// those alone: (token, probability) pairs, most likely first, summing to 1. Error for k = 0.
///
/// Chapter: [5. Sampling](../../chapters/ch09_gpt.md#5-sampling).
pub fn top_k_distribution(logits: &[f64], k: usize, temperature: f64) -> Result<Vec<(usize, f64)>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch09_gpt::sample::distribution(
        logits,
        &llm_workbook::ch09_gpt::sample::Decoding::Sample {
            temperature,
            top_k: Some(k),
            top_p: None,
        },
    );
    todo!()
}

/// **One AdamW step** on one parameter tensor θ with gradient g, from the moments m, v after
/// `steps` steps (0: m and v are zero). With t = steps + 1:
/// θ ← θ − αλθ (the decoupled decay, before the moment step), m ← β₁m + (1 − β₁)g,
/// v ← β₂v + (1 − β₂)g², m̂ = m/(1 − β₁ᵗ), v̂ = v/(1 − β₂ᵗ), θ ← θ − α m̂/(√v̂ + ε).
/// Update `theta`, `m` and `v` in place.
///
/// Chapter: [4. Training](../../chapters/ch09_gpt.md#4-training).
#[allow(clippy::too_many_arguments)]
pub fn adamw_step(
    theta: &mut DMatrix<f64>,
    grad: &DMatrix<f64>,
    m: &mut DMatrix<f64>,
    v: &mut DMatrix<f64>,
    steps: u64,
    config: &AdamConfig,
    weight_decay: f64,
) -> Result<()> {
    #[cfg(feature = "solutions")]
    return solution::adamw_step(theta, grad, m, v, steps, config, weight_decay);
    todo!()
}

/// The main crate's functions in this chapter's signatures.
pub mod solution {
    use super::*;
    use llm_workbook::optim::{AdamMoments, AdamW};

    /// [`super::adamw_step`] by `llm_workbook::optim::AdamW`.
    pub fn adamw_step(
        theta: &mut DMatrix<f64>,
        grad: &DMatrix<f64>,
        m: &mut DMatrix<f64>,
        v: &mut DMatrix<f64>,
        steps: u64,
        config: &AdamConfig,
        weight_decay: f64,
    ) -> Result<()> {
        let mut opt = AdamW::new(*config, weight_decay)?;
        if steps > 0 {
            opt.moments = AdamMoments::from_parts(vec![m.clone()], vec![v.clone()], steps)?;
        }
        opt.step(&mut [theta], &[grad], &[true])?;
        *m = opt.moments.first()[0].clone();
        *v = opt.moments.second()[0].clone();
        Ok(())
    }
}
