//! Chapter 9: a small GPT — [chapters/ch09_gpt.md](../../chapters/ch09_gpt.md).
//!
//! Replace each `todo!()` with your answer, then run
//! `cargo test -p llm-workbook-exercises --test ch09_gpt`.
//!
//! Where a doc comment asks for an error, return one of `llm_workbook::Error`'s variants, whose
//! message is one line naming the argument: `Err(llm_workbook::error::invalid("op", "arg",
//! "why"))` for a bad value, `Err(llm_workbook::Error::Empty { op: "op", arg: "arg" })` for an
//! empty input and `Err(llm_workbook::error::shape_error("op", "arg", expected, got))` for shapes
//! that disagree (`llm_workbook::error::shape_of(&m)` writes a matrix's shape as `rows×cols`).

use llm_workbook::Result;
use llm_workbook::optim::AdamConfig;
use nalgebra::DMatrix;

/// **The unembedding and the loss, backward**: for the final hidden rows h (S×d, the scored
/// positions) and the unembedding W_U (V×d), the logits are z = h W_Uᵀ (S×V) and the loss is the
/// mean next-token log-loss L = −(1/S) Σ_s ln softmax(z_s)\[t_s\]. Return (L, ∂L/∂h, ∂L/∂W_U):
/// ∂L/∂z = (softmax(z) − onehot(t))/S (chapter 2), ∂L/∂h = ∂L/∂z W_U (S×d),
/// ∂L/∂W_U = (∂L/∂z)ᵀ h (V×d). Error on no rows, a width mismatch or a target ≥ V.
///
/// Chapter: [3. The backward pass](../../chapters/ch09_gpt.md#3-the-backward-pass).
pub fn lm_head_backward(
    h: &DMatrix<f64>,
    w_u: &DMatrix<f64>,
    targets: &[usize],
) -> Result<(f64, DMatrix<f64>, DMatrix<f64>)> {
    #[cfg(feature = "solutions")]
    return solution::lm_head_backward(h, w_u, targets);
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

/// **One key/value-cache step of one attention head**: `keys` and `values` are the cache
/// (n_ctx×d each), whose rows 0 … len − 1 hold the keys and values of the tokens fed so far; rows
/// from len on are not in use (they may hold anything: stale rows of an earlier sequence). For a
/// new token at position len with query q, key k and value v (each of length d): write k and v
/// into row len of the cache, then return the new token's attention output (length d)
/// o = Σ_{p ≤ len} a_p V\[p\] with a = softmax over p ≤ len of s_p = q · K\[p\] / √d. No mask is
/// needed: every cached position is in the past, and rows past len must not be read. Error when
/// len ≥ n_ctx (the cache is full) or a length is not d.
///
/// Chapter: [5. Sampling](../../chapters/ch09_gpt.md#5-sampling) (the key/value cache).
pub fn kv_cache_step(
    keys: &mut DMatrix<f64>,
    values: &mut DMatrix<f64>,
    len: usize,
    q: &[f64],
    k: &[f64],
    v: &[f64],
) -> Result<Vec<f64>> {
    #[cfg(feature = "solutions")]
    return solution::kv_cache_step(keys, values, len, q, k, v);
    todo!()
}

// The `solutions` feature's adapters (src/solutions.rs).
#[cfg(feature = "solutions")]
use llm_workbook_exercises::solutions::ch09_gpt as solution;
