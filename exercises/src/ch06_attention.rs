//! Chapter 6: attention — [chapters/ch06_attention.md](../../chapters/ch06_attention.md).
//!
//! The main crate's attention takes an `AttnSpec` for batches of sequences and extra masks; the
//! exercises here work on one sequence, with the same formulas. Replace each `todo!()` with your
//! answer, then run `cargo test -p llm-workbook-exercises --test ch06_attention`.

use llm_workbook::Result;
use nalgebra::DMatrix;

/// **The causal mask**: an additive T_q×T_k matrix, 0 where query i may see key j and −∞
/// (`f64::NEG_INFINITY`) elsewhere. Query i sits at position i + (T_k − T_q) of the keys (the
/// queries are the last T_q positions, as with a key/value cache), so it sees keys
/// j ≤ i + T_k − T_q; for T_q = T_k that is the lower triangle, diagonal included. Return an
/// error when T_q or T_k is 0 or T_k < T_q.
///
/// Chapter: [1. Scaled dot-product attention](../../chapters/ch06_attention.md#1-scaled-dot-product-attention).
pub fn causal_mask(q_len: usize, kv_len: usize) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch06_attention::causal_mask(q_len, kv_len);
    todo!()
}

/// **Scaled dot-product attention, forward**: S = QKᵀ/√d_k (+ the causal mask when `causal`),
/// A = row-softmax(S), O = A V. Shapes: q T_q×d_k, k T_k×d_k, v T_k×d_v; return (O, A) with O
/// T_q×d_v and A T_q×T_k (each row of A a distribution over the keys).
///
/// Chapter: [1. Scaled dot-product attention](../../chapters/ch06_attention.md#1-scaled-dot-product-attention).
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

/// The main crate's functions in this chapter's one-sequence signatures (used by the
/// `solutions` feature and by the judges' own tests).
pub mod solution {
    use llm_workbook::Result;
    use llm_workbook::ch06_attention as book;
    use nalgebra::DMatrix;

    fn spec(q: &DMatrix<f64>, k: &DMatrix<f64>, causal: bool) -> book::AttnSpec<f64> {
        let spec = book::AttnSpec::cross(q.nrows(), k.nrows());
        book::AttnSpec { causal, ..spec }
    }

    /// [`super::attention_forward`] by `llm_workbook::ch06_attention::attention_forward`.
    pub fn attention_forward(
        q: &DMatrix<f64>,
        k: &DMatrix<f64>,
        v: &DMatrix<f64>,
        causal: bool,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>)> {
        let a = book::attention_forward(q, k, v, &spec(q, k, causal))?;
        Ok((a.out, a.weights))
    }

    /// [`super::attention_backward`] by `llm_workbook::ch06_attention::attention_backward`.
    pub fn attention_backward(
        q: &DMatrix<f64>,
        k: &DMatrix<f64>,
        v: &DMatrix<f64>,
        weights: &DMatrix<f64>,
        d_out: &DMatrix<f64>,
        causal: bool,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)> {
        let g = book::attention_backward(q, k, v, weights, d_out, &spec(q, k, causal))?;
        Ok((g.d_q, g.d_k, g.d_v))
    }

    fn norm(gamma: &DMatrix<f64>, beta: DMatrix<f64>, eps: f64) -> book::LayerNorm<f64> {
        book::LayerNorm { gamma: gamma.clone(), beta, eps, placement: book::Epsilon::InsideSqrt }
    }

    /// [`super::layer_norm_forward`] by `llm_workbook::ch06_attention::layer_norm_forward`.
    pub fn layer_norm_forward(
        x: &DMatrix<f64>,
        gamma: &DMatrix<f64>,
        beta: &DMatrix<f64>,
        eps: f64,
    ) -> Result<DMatrix<f64>> {
        Ok(book::layer_norm_forward(&norm(gamma, beta.clone(), eps), x)?.0)
    }

    /// [`super::layer_norm_backward`] by `llm_workbook::ch06_attention::layer_norm_backward`.
    pub fn layer_norm_backward(
        x: &DMatrix<f64>,
        gamma: &DMatrix<f64>,
        d_y: &DMatrix<f64>,
        eps: f64,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)> {
        let ln = norm(gamma, DMatrix::zeros(gamma.nrows(), gamma.ncols()), eps);
        let (_, cache) = book::layer_norm_forward(&ln, x)?;
        let g = book::layer_norm_backward(&ln, &cache, d_y)?;
        Ok((g.d_x, g.d_gamma, g.d_beta))
    }
}
