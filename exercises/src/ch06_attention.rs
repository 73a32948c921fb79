//! Chapter 6: attention — [chapters/ch06_attention.md](../../chapters/ch06_attention.md).
//!
//! The main crate's attention takes an `AttnSpec` for batches of sequences and extra masks; the
//! exercises here work on one sequence, with the same formulas. Replace each `todo!()` with your
//! answer, then run `cargo test -p llm-workbook-exercises --test ch06_attention`.
//!
//! Where a doc comment asks for an error, return one of `llm_workbook::Error`'s variants, whose
//! message is one line naming the argument: `Err(llm_workbook::error::invalid("op", "arg",
//! "why"))` for a bad value, `Err(llm_workbook::Error::Empty { op: "op", arg: "arg" })` for an
//! empty input and `Err(llm_workbook::error::shape_error("op", "arg", expected, got))` for shapes
//! that disagree (`llm_workbook::error::shape_of(&m)` writes a matrix's shape as `rows×cols`).

use llm_workbook::Result;
use llm_workbook::ch06_attention::{
    Block, BlockCache, BlockGrads, Ffn, FfnCache, FfnGrads, MhaCache, MhaGrads, MultiHead,
};
use nalgebra::DMatrix;

/// **The causal mask**: an additive T_q×T_k matrix, 0 where query i may see key j and −∞
/// (`f64::NEG_INFINITY`) elsewhere. Query i sits at position i + (T_k − T_q) of the keys (the
/// queries are the last T_q positions, as with a key/value cache), so it sees keys
/// j ≤ i + T_k − T_q; for T_q = T_k that is the lower triangle, diagonal included. Return an
/// error when T_q or T_k is 0 or T_k < T_q.
///
/// Chapter: [1. Scaled dot-product attention][ch].
///
/// [ch]: ../../chapters/ch06_attention.md#1-scaled-dot-product-attention
pub fn causal_mask(q_len: usize, kv_len: usize) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch06_attention::causal_mask(q_len, kv_len);
    todo!()
}

/// **Scaled dot-product attention, forward**: S = QKᵀ/√d_k (+ the causal mask when `causal`),
/// A = row-softmax(S), O = A V. Shapes: q T_q×d_k, k T_k×d_k, v T_k×d_v; return (O, A) with O
/// T_q×d_v and A T_q×T_k (each row of A a distribution over the keys).
///
/// Chapter: [1. Scaled dot-product attention][ch].
///
/// [ch]: ../../chapters/ch06_attention.md#1-scaled-dot-product-attention
pub fn attention_forward(
    q: &DMatrix<f64>,
    k: &DMatrix<f64>,
    v: &DMatrix<f64>,
    causal: bool,
) -> Result<(DMatrix<f64>, DMatrix<f64>)> {
    #[cfg(feature = "solutions")]
    return solution::attention_forward(q, k, v, causal);
    todo!()
}

/// **Scaled dot-product attention, backward**: from the forward's A (T_q×T_k) and ∂L/∂O, return
/// (∂L/∂Q, ∂L/∂K, ∂L/∂V): ∂L/∂V = Aᵀ ∂L/∂O, ∂L/∂A = ∂L/∂O Vᵀ, ∂L/∂S = softmax backward of
/// ∂L/∂A (chapter 2), ∂L/∂Q = ∂L/∂S K/√d_k, ∂L/∂K = (∂L/∂S)ᵀ Q/√d_k. Masked entries have A = 0
/// and need no special case.
///
/// Chapter: [Backward](../../chapters/ch06_attention.md#backward).
pub fn attention_backward(
    q: &DMatrix<f64>,
    k: &DMatrix<f64>,
    v: &DMatrix<f64>,
    weights: &DMatrix<f64>,
    d_out: &DMatrix<f64>,
    causal: bool,
) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)> {
    #[cfg(feature = "solutions")]
    return solution::attention_backward(q, k, v, weights, d_out, causal);
    todo!()
}

/// **LayerNorm, forward**: for each row x of X (N×C), μ = mean(x), σ² = mean((x − μ)²) (the
/// population variance), x̂ = (x − μ)/√(σ² + ε), y = γ ⊙ x̂ + β. γ and β are 1×C.
///
/// Chapter: [3. LayerNorm](../../chapters/ch06_attention.md#3-layernorm).
pub fn layer_norm_forward(
    x: &DMatrix<f64>,
    gamma: &DMatrix<f64>,
    beta: &DMatrix<f64>,
    eps: f64,
) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return solution::layer_norm_forward(x, gamma, beta, eps);
    todo!()
}

/// **LayerNorm, backward**: for y = γ ⊙ x̂ + β as in [`layer_norm_forward`] and ∂L/∂Y (N×C),
/// return (∂L/∂X, ∂L/∂γ, ∂L/∂β). Per row, with g = γ ⊙ ∂L/∂y and s = √(σ² + ε):
/// ∂L/∂x = (g − mean(g) − x̂ · mean(g ⊙ x̂)) / s; ∂L/∂γ = Σ_rows ∂L/∂y ⊙ x̂; ∂L/∂β = Σ_rows ∂L/∂y.
/// Rows shifted by 10⁸ have the same gradients: take σ² as the mean of (x − μ)², never as
/// E\[x²\] − μ², whose two terms near 10¹⁶ lose the difference to rounding.
///
/// Chapter: [3. LayerNorm](../../chapters/ch06_attention.md#3-layernorm).
pub fn layer_norm_backward(
    x: &DMatrix<f64>,
    gamma: &DMatrix<f64>,
    d_y: &DMatrix<f64>,
    eps: f64,
) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)> {
    #[cfg(feature = "solutions")]
    return solution::layer_norm_backward(x, gamma, d_y, eps);
    todo!()
}

/// **Splitting into heads**: m is N×(H·w); head h gets the N×w block of columns h·w … (h+1)·w − 1.
/// Return an error when the width is not a multiple of H or H is 0.
///
/// Chapter: [2. Multi-head attention](../../chapters/ch06_attention.md#2-multi-head-attention).
pub fn split_heads(m: &DMatrix<f64>, heads: usize) -> Result<Vec<DMatrix<f64>>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch06_attention::split_heads(m, heads);
    todo!()
}

/// **Merging heads**: the inverse of [`split_heads`], the per-head outputs side by side (H
/// matrices of N rows each give one N×(Σ widths) matrix). Error on no parts or unequal rows.
///
/// Chapter: [2. Multi-head attention](../../chapters/ch06_attention.md#2-multi-head-attention).
pub fn concat_heads(parts: &[DMatrix<f64>]) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch06_attention::concat_heads(parts);
    todo!()
}

/// **Multi-head attention, backward**: the forward (`llm_workbook::ch06_attention::mha_forward`)
/// is Q = X_q W_Q + b_Q, K = X_kv W_K + b_K, V = X_kv W_V + b_V, head h = attention of columns
/// h·d_k … (h+1)·d_k − 1 of Q, K and V (weights in `cache.weights[h]`, lengths and masks in
/// `cache.spec`), C = Concat(heads), out = C W_O + b_O. From ∂L/∂out ((B·T_q)×C_out) return
/// every gradient as an `MhaGrads`:
/// ∂W_O = Cᵀ ∂out, ∂b_O = Σ_rows ∂out, ∂C = ∂out W_Oᵀ; head h's attention backward on its
/// columns of ∂C gives ∂Q_h, ∂K_h, ∂V_h, side by side again ∂Q, ∂K, ∂V; then
/// ∂X_q = ∂Q W_Qᵀ, ∂X_kv = ∂K W_Kᵀ + ∂V W_Vᵀ, ∂W_Q = X_qᵀ ∂Q, ∂W_K = X_kvᵀ ∂K,
/// ∂W_V = X_kvᵀ ∂V, each ∂b the column sums of its ∂Q, ∂K or ∂V. Chapter 6's
/// `attention_backward`, `split_heads` and `concat_heads` are yours to use.
///
/// Chapter: [2. Multi-head attention](../../chapters/ch06_attention.md#2-multi-head-attention).
pub fn mha_backward(
    p: &MultiHead<f64>,
    cache: &MhaCache<f64>,
    d_out: &DMatrix<f64>,
) -> Result<MhaGrads<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch06_attention::mha_backward(p, cache, d_out);
    todo!()
}

/// **The feed-forward net, backward**: the forward is z₁ = xW₁ + b₁, a₁ = f(z₁), y = a₁W₂ + b₂
/// (x N×C, W₁ C×F, W₂ F×C_out; `cache` holds x, z₁ and a₁; f is `ffn.act`). From ∂L/∂y
/// (N×C_out) return an `FfnGrads`, one dense backward per dense forward, last first:
/// ∂W₂ = a₁ᵀ ∂y, ∂b₂ = Σ_rows ∂y, ∂a₁ = ∂y W₂ᵀ; ∂z₁ = f′(z₁) ⊙ ∂a₁; ∂W₁ = xᵀ ∂z₁,
/// ∂b₁ = Σ_rows ∂z₁, ∂x = ∂z₁ W₁ᵀ. Chapter 3's `dense_backward` and `activation_backward` are
/// yours to use.
///
/// Chapter: [4. The feed-forward net](../../chapters/ch06_attention.md#4-the-feed-forward-net).
pub fn ffn_backward(
    ffn: &Ffn<f64>,
    cache: &FfnCache<f64>,
    d_y: &DMatrix<f64>,
) -> Result<FfnGrads<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch06_attention::ffn_backward(ffn, cache, d_y);
    todo!()
}

/// **The block, backward**: the forward (`llm_workbook::ch06_attention::block_forward`) is, by
/// `blk.order`, pre-LN: n₁ = LN₁(x), h = x + MHA(n₁, n₁), y = h + FFN(LN₂(h)); or post-LN:
/// h = LN₁(x + MHA(x, x)), y = LN₂(h + FFN(h)). From ∂L/∂y ((B·T)×C) return a `BlockGrads`: ∂L/∂x
/// and the gradients of MHA, LN₁, the FFN and LN₂, through chapter 6's `mha_backward`,
/// `layer_norm_backward` and `ffn_backward` with the caches in `cache`. Two rules: a residual
/// x + f(x) sends its gradient to x directly *and* through f (the two add); self-attention
/// reads one input as queries and as keys/values, so that input's gradient is d_x_q + d_x_kv.
///
/// Chapter: [5. The block: residuals, pre-LN and post-LN][ch].
///
/// [ch]: ../../chapters/ch06_attention.md#5-the-block-residuals-pre-ln-and-post-ln
pub fn block_backward(
    blk: &Block<f64>,
    cache: &BlockCache<f64>,
    d_y: &DMatrix<f64>,
) -> Result<BlockGrads<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch06_attention::block_backward(blk, cache, d_y);
    todo!()
}

// The `solutions` feature's adapters (src/solutions.rs).
#[cfg(feature = "solutions")]
use llm_workbook_exercises::solutions::ch06_attention as solution;
