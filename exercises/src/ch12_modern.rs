//! Chapter 12: today's decoder — [chapters/ch12_modern.md](../../chapters/ch12_modern.md).
//!
//! Replace each `todo!()` with your answer, then run
//! `cargo test -p llm-workbook-exercises --test ch12_modern`.
//!
//! Where a doc comment asks for an error, return one of `llm_workbook::Error`'s variants, whose
//! message is one line naming the argument: `Err(llm_workbook::error::invalid("op", "arg",
//! "why"))` for a bad value, `Err(llm_workbook::Error::Empty { op: "op", arg: "arg" })` for an
//! empty input and `Err(llm_workbook::error::shape_error("op", "arg", expected, got))` for shapes
//! that disagree. The main crate's chapters 1 to 6 are yours to call (`sigmoid`, `split_heads`,
//! `attention_forward`, `attention_backward`, `dense_backward` …).

use llm_workbook::Result;
use llm_workbook::ch12_modern::{GluGrads, Gqa, GqaGrads, Pairing};
use nalgebra::DMatrix;

/// **RMSNorm, backward**: for y = γ ⊙ x̂ with x̂ = x/r and r = √((1/C) Σ_c x_c² + ε) per row (ε
/// inside the root), return (∂L/∂x, ∂L/∂γ) from ∂L/∂y. With g = γ ⊙ ∂L/∂y, per row:
/// ∂L/∂x = (g − x̂ · mean(g ⊙ x̂)) / r, and ∂L/∂γ = Σ_rows ∂L/∂y ⊙ x̂. Shapes: x N×C, γ 1×C,
/// ∂L/∂y N×C; ∂L/∂x N×C, ∂L/∂γ 1×C. Return an error when x has no rows, γ is not 1×C with x's C
/// columns (C ≥ 1), ∂L/∂y is not N×C, or ε is not finite and > 0. Tolerance: 10⁻⁶ of each
/// value (the subtraction cancels).
///
/// Chapter: [1. RMSNorm][ch].
///
/// [ch]: ../../chapters/ch12_modern.md#1-rmsnorm
pub fn rms_norm_backward(
    x: &DMatrix<f64>,
    gamma: &DMatrix<f64>,
    d_y: &DMatrix<f64>,
    eps: f64,
) -> Result<(DMatrix<f64>, DMatrix<f64>)> {
    #[cfg(feature = "solutions")]
    return solution::rms_norm_backward(x, gamma, d_y, eps);
    todo!()
}

/// **Rotating the queries**: Q (T×(H·d_h), H = `n_heads` heads side by side, head h in columns
/// h·d_h … (h + 1)·d_h − 1) holds the rows of positions t = `start` … `start` + T − 1. In every
/// head, pair i (i = 0 … d_h/2 − 1) turns by the angle tθ_i, θ_i = base^{−2i/d_h} (the head's
/// width d_h, not the model's): (a, b) ↦ (a cos tθ_i − b sin tθ_i, a sin tθ_i + b cos tθ_i).
/// Pair i is columns (2i, 2i + 1) of the head for `Pairing::Adjacent` and (i, i + d_h/2) for
/// `Pairing::Halves`. Return the rotated T×(H·d_h) matrix; an error when Q has no rows, H is 0
/// or does not divide Q's width, d_h is 0 or odd, or the base is not finite and > 1. Tolerance:
/// 10⁻⁸ of each value.
///
/// Chapter: [2. Rotary positions][ch].
///
/// [ch]: ../../chapters/ch12_modern.md#2-rotary-positions
pub fn rope_forward(
    q: &DMatrix<f64>,
    n_heads: usize,
    start: usize,
    base: f64,
    pairing: Pairing,
) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return solution::rope_forward(q, n_heads, start, base, pairing);
    todo!()
}

/// **Rotating the queries, backward**: for Y = [`rope_forward`]`(Q, …)` with the same arguments,
/// ∂L/∂Q from ∂L/∂Y (T×(H·d_h)): each pair's rotation is orthogonal, so its backward is its
/// transpose, the rotation by −tθ_i. Errors as [`rope_forward`]. Tolerance: 10⁻⁸.
///
/// Chapter: [2. Rotary positions][ch].
///
/// [ch]: ../../chapters/ch12_modern.md#2-rotary-positions
pub fn rope_backward(
    d_y: &DMatrix<f64>,
    n_heads: usize,
    start: usize,
    base: f64,
    pairing: Pairing,
) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return solution::rope_backward(d_y, n_heads, start, base, pairing);
    todo!()
}

/// **SwiGLU, backward**: for A = X W_gate, B = X W_up, H = φ(A) ⊙ B with the gate φ(a) = a σ(a)
/// (SiLU) on the W_gate branch only, Y = H W_down (no biases), return the gradients from ∂L/∂Y:
/// ∂L/∂W_down = Hᵀ ∂L/∂Y, ∂L/∂H = ∂L/∂Y W_downᵀ, ∂L/∂A = ∂L/∂H ⊙ B ⊙ φ′(A) with
/// φ′(a) = σ(a)(1 + a(1 − σ(a))), ∂L/∂B = ∂L/∂H ⊙ φ(A), ∂L/∂W_gate = Xᵀ ∂L/∂A,
/// ∂L/∂W_up = Xᵀ ∂L/∂B, ∂L/∂X = ∂L/∂A W_gateᵀ + ∂L/∂B W_upᵀ. Shapes: x N×C, W_gate and W_up
/// C×F, W_down F×C, ∂L/∂Y N×C; `GluGrads { d_x, d_w_gate, d_w_up, d_w_down }` of the same
/// shapes as x and the weights. Return an error when C or F is 0, the shapes do not chain or
/// ∂L/∂Y is not N×C. Tolerance: 10⁻⁸.
///
/// Chapter: [3. Gated MLPs][ch].
///
/// [ch]: ../../chapters/ch12_modern.md#3-gated-mlps
pub fn swiglu_backward(
    x: &DMatrix<f64>,
    w_gate: &DMatrix<f64>,
    w_up: &DMatrix<f64>,
    w_down: &DMatrix<f64>,
    d_y: &DMatrix<f64>,
) -> Result<GluGrads<f64>> {
    #[cfg(feature = "solutions")]
    return solution::swiglu_backward(x, w_gate, w_up, w_down, d_y);
    todo!()
}

/// **Grouped-query attention, backward**: the layer `p` (H = `p.n_heads` query heads sharing
/// H_kv = `p.n_kv_heads` key/value heads; no QK-norm, rotation or biases: the judge passes
/// none) on x (N×C, B = N/T causal sequences of T = `seq_len` rows stacked): Q = X W_Q,
/// K = X W_K, V = X W_V, query head h attends with key/value head g(h) = ⌊h/(H/H_kv)⌋ (chapter
/// 6's causal attention with 1/√d_h), Y = Concat(O_1 … O_H) W_O. Recompute the forward, then
/// return the gradients from ∂L/∂Y (N×C): each key/value head is read by its whole group, so its
/// ∂L/∂K_g and ∂L/∂V_g are the *sums* over the query heads h with g(h) = g. Return `GqaGrads`
/// with d_x N×C, d_w_q, d_w_k, d_w_v, d_w_o of the weights' shapes and `d_qk_gamma`,
/// `d_biases` `None`; an error when H_kv is 0 or does not divide H, x is not N×C with N ≥ 1, T
/// is 0 or does not divide N, or ∂L/∂Y is not N×C. Tolerance: 10⁻⁶ (a chain of layers).
///
/// Chapter: [4. Grouped-query attention and QK-norm][ch].
///
/// [ch]: ../../chapters/ch12_modern.md#4-grouped-query-attention-and-qk-norm
pub fn gqa_backward(
    p: &Gqa<f64>,
    x: &DMatrix<f64>,
    seq_len: usize,
    d_y: &DMatrix<f64>,
) -> Result<GqaGrads<f64>> {
    #[cfg(feature = "solutions")]
    return solution::gqa_backward(p, x, seq_len, d_y);
    todo!()
}

/// **The key/value cache's bytes per token**: every layer keeps one key and one value of width
/// d_h for each of its H_kv key/value heads, so a token costs
/// layers · 2 · H_kv · d_h · (bytes per value). Return an error when any count is 0, H_kv does
/// not divide H (`n_heads`), or the product overflows a `u64`. Exact.
///
/// Chapter: [5. The key/value cache][ch].
///
/// [ch]: ../../chapters/ch12_modern.md#5-the-keyvalue-cache
pub fn kv_cache_bytes_per_token(
    layers: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    bytes_per_value: usize,
) -> Result<u64> {
    #[cfg(feature = "solutions")]
    return solution::kv_cache_bytes_per_token(
        layers,
        n_heads,
        n_kv_heads,
        head_dim,
        bytes_per_value,
    );
    todo!()
}

// The `solutions` feature's adapters (src/solutions.rs).
#[cfg(feature = "solutions")]
use llm_workbook_exercises::solutions::ch12_modern as solution;
