//! The fused forward pass of one shard: the embeddings, every block with its Q, K and V in one
//! product and causal attention read from views, the final LayerNorm and the logits; then the
//! loss and, in place of the logits, its gradient.

use super::{Heads, Shard, causal_blocks};
use crate::ch03_mlp::{Activation, activation_forward_into};
use crate::ch06_attention::layer_norm_forward_into;
use crate::ch09_gpt::model::Gpt;
use crate::error::Result;
use crate::float::Float;
use crate::matmul::{MatMut, MatRef, Op, gemm, gemm_view};
use nalgebra::DMatrix;

impl<T: Float> Shard<T> {
    // ───────────────────────────── forward ─────────────────────────────

    pub(super) fn forward(
        &mut self,
        model: &Gpt<T>,
        w_qkv: &[(DMatrix<T>, DMatrix<T>)],
        inputs: &[u32],
        t: usize,
    ) -> Result<()> {
        model.embed_into(inputs, t, &mut self.x); //                            x₀ = W_E[u] + W_P[t]
        let heads = model.config.heads;
        for ((blk, s), (w, b)) in model.blocks.iter().zip(self.blocks.iter_mut()).zip(w_qkv) {
            layer_norm_forward_into(&blk.ln1, &self.x, &mut s.ln1, &mut s.n1); //       n₁ = LN₁(x)
            gemm(T::one(), &s.n1, Op::N, w, Op::N, T::zero(), &mut s.qkv)?; //     [Q K V] = n₁W_QKV
            add_row(&mut s.qkv, b); //                                                  … + b_QKV
            causal_attention_forward(&s.qkv, heads, t, &mut s.weights, &mut s.att)?; // every head
            // h = x + att·W_O
            gemm(T::one(), &s.att, Op::N, &blk.attn.w_o, Op::N, T::one(), &mut self.x)?;
            add_row(&mut self.x, &blk.attn.b_o); //                                     … + b_O
            layer_norm_forward_into(&blk.ln2, &self.x, &mut s.ln2, &mut s.n2); //       n₂ = LN₂(h)
            gemm(T::one(), &s.n2, Op::N, &blk.ffn.w1, Op::N, T::zero(), &mut s.z1)?; // z₁ = n₂W₁
            add_row(&mut s.z1, &blk.ffn.b1); //                                         … + b₁
            // a₁ = GELU(z₁)
            activation_forward_into(Activation::GeluTanh, s.z1.as_slice(), s.a1.as_mut_slice());
            // x' = h + a₁W₂
            gemm(T::one(), &s.a1, Op::N, &blk.ffn.w2, Op::N, T::one(), &mut self.x)?;
            add_row(&mut self.x, &blk.ffn.b2); //                                       … + b₂
        }
        // h_f = LN_f(x_L)
        layer_norm_forward_into(&model.ln_f, &self.x, &mut self.ln_f, &mut self.h_f);
        // z = h_f W_Uᵀ
        gemm(T::one(), &self.h_f, Op::N, model.unembedding(), Op::T, T::zero(), &mut self.logits)?;
        crate::float::ensure_finite(
            "FusedStep::loss_and_grads",
            "logits (a weight holds NaN or ∞)",
            &self.logits,
        )
    }

    /// The loss of this shard's scored rows, and ∂L/∂z in place of its logits
    /// ([`cross_entropy_by_columns`]).
    pub(super) fn loss_and_logit_gradient(&mut self, targets: &[Option<u32>], scale: T) -> f64 {
        cross_entropy_by_columns(&mut self.logits, targets, scale)
    }
}

/// L_s = Σ over scored rows of logsumexp(z_r) − z_r\[target\] (returned, in f64), and in place of
/// the logits z (N×V) ∂L/∂z = scale·(softmax(z_r) − onehot(target)) on scored rows, 0 elsewhere.
///
/// Chapter 2's [`cross_entropy_from_logits_with_gradient`] computed in place: that function
/// returns new matrices, and the step would first gather the scored rows into one. Here the N×V
/// logits are read column by column (the order they are stored in) for every row at once and
/// overwritten by their gradient, so nothing is allocated but a few vectors of length N. What
/// fusing gained was measured for the step as a whole (chapter 9 §9: the fused step 1.35× the
/// reference on one thread, 2.77× on two), not for this function alone. A test holds it to
/// chapter 2's function.
///
/// [`cross_entropy_from_logits_with_gradient`]:
///     crate::ch02_softmax::cross_entropy_from_logits_with_gradient
pub(super) fn cross_entropy_by_columns<T: Float>(
    logits: &mut DMatrix<T>,
    targets: &[Option<u32>],
    scale: T,
) -> f64 {
    let n = logits.nrows();
    let z = logits.as_mut_slice();
    // Row maxima and sums, column by column for every row at once (see the module notes).
    let (max, sum) = (&mut vec![T::neg_infinity(); n], &mut vec![T::zero(); n]);
    for column in z.chunks_exact(n) {
        for (m, &v) in max.iter_mut().zip(column) {
            *m = m.max(v);
        }
    }
    // −ln p(target) = ln Σ exp(z − max) − (z_target − max): taken before z is overwritten.
    let shifted_targets: Vec<(usize, f64)> = targets
        .iter()
        .enumerate()
        .filter_map(|(r, u)| u.map(|u| (r, (z[u as usize * n + r] - max[r]).as_f64())))
        .collect();
    for column in z.chunks_exact_mut(n) {
        for ((e, s), &m) in column.iter_mut().zip(sum.iter_mut()).zip(max.iter()) {
            *e = (*e - m).exp(); //                                        e = exp(z − max z)
            *s += *e;
        }
    }
    let loss = shifted_targets.iter().map(|&(r, zt)| sum[r].as_f64().ln() - zt).sum();
    let factor: Vec<T> = targets
        .iter()
        .zip(sum.iter())
        .map(|(t, &s)| if t.is_some() { scale / s } else { T::zero() })
        .collect();
    for column in z.chunks_exact_mut(n) {
        for (e, &k) in column.iter_mut().zip(&factor) {
            *e *= k; //                                                       scale·softmax(z)
        }
    }
    for (r, target) in targets.iter().enumerate() {
        if let Some(u) = target {
            z[*u as usize * n + r] -= scale; //                               − scale·onehot
        }
    }
    loss
}

/// m\[r, :\] += b for every row r (b is 1×C): chapter 6's `add_row` in place, so the step
/// allocates nothing (the reference allocates a new matrix per bias). A test holds the two equal.
pub(super) fn add_row<T: Float>(m: &mut DMatrix<T>, b: &DMatrix<T>) {
    let n = m.nrows();
    for (column, &bias) in m.as_mut_slice().chunks_exact_mut(n).zip(b.iter()) {
        column.iter_mut().for_each(|v| *v += bias);
    }
}

/// Causal self-attention of every head of every sequence, read straight from \[Q K V\] (N×3d) as
/// views and written straight into the concatenated output `att` (N×d). For sequence s and head
/// h, with A stored column-major (A\[i + jT\]), block by block of query rows r0 … r1 − 1, which
/// see only the keys 0 … r1 − 1:
///
/// ```text
/// S[r0..r1, ..r1] = (1/√d_k) Q[r0..r1] K[..r1]ᵀ        one product per block
/// A[i, j] = exp(S[i, j] − max_{j′ ≤ i} S[i, j′]) / Σ_{j′ ≤ i} exp(…)   for j ≤ i,
///           0 for j > i (the mask)
/// O[r0..r1] = A[r0..r1, ..r1] V[..r1]                  one product per block
/// ```
///
/// The row statistics of the softmax are gathered column by column for all rows at once.
///
/// Chapter 6's [`attention_forward`](crate::ch06_attention::attention_forward) with the causal
/// mask is the specification; it copies each head out of the projections and computes all T²
/// scores before masking half. This version was kept for what the step as a whole measured
/// (chapter 9 §9: the fused step 1.35× the reference on one thread, 2.77× on two; at T = 64 the
/// blocks do 3/4 of the T² work). A test holds it, and its backward, to chapter 6's.
pub(super) fn causal_attention_forward<T: Float>(
    qkv: &DMatrix<T>,
    heads: usize,
    t: usize,
    weights: &mut [T],
    att: &mut DMatrix<T>,
) -> Result<()> {
    let n = qkv.nrows();
    let d = att.ncols();
    let d_k = d / heads;
    let scale = T::of(1.0 / (d_k as f64).sqrt());
    let at = Heads { n, t, d_k };
    let buf = qkv.as_slice();
    let mut max = vec![T::zero(); t];
    let mut sum = vec![T::zero(); t];
    for (s, per_seq) in weights.chunks_exact_mut(heads * t * t).enumerate() {
        for (h, a) in per_seq.chunks_exact_mut(t * t).enumerate() {
            let (q, k, v) = (h * d_k, d + h * d_k, 2 * d + h * d_k);
            for (r0, r1) in causal_blocks(t) {
                let scores = MatMut::new(&mut a[r0..], r1 - r0, r1, t)?;
                gemm_view(
                    scale,
                    at.rows(buf, q, s, (r0, r1))?,
                    Op::N,
                    at.rows(buf, k, s, (0, r1))?,
                    Op::T,
                    T::zero(),
                    scores,
                )?; // S = s·QKᵀ
            }
            max.fill(T::neg_infinity());
            for (j, column) in a.chunks_exact(t).enumerate() {
                for (m, &v) in max[j..].iter_mut().zip(&column[j..]) {
                    *m = m.max(v);
                }
            }
            sum.fill(T::zero());
            for (j, column) in a.chunks_exact_mut(t).enumerate() {
                column[..j].fill(T::zero()); // M: j > i masked, weight 0
                for ((e, total), &m) in column[j..].iter_mut().zip(&mut sum[j..]).zip(&max[j..]) {
                    *e = (*e - m).exp(); //     exp(S − max)
                    *total += *e;
                }
            }
            sum.iter_mut().for_each(|v| *v = T::one() / *v);
            for (j, column) in a.chunks_exact_mut(t).enumerate() {
                for (e, &inv) in column[j..].iter_mut().zip(&sum[j..]) {
                    *e *= inv; //               A = softmax(S)
                }
            }
            for (r0, r1) in causal_blocks(t) {
                let weights = MatRef::new(&a[r0..], r1 - r0, r1, t)?;
                let out = at.rows_mut(att.as_mut_slice(), h * d_k, s, (r0, r1))?;
                gemm_view(
                    T::one(),
                    weights,
                    Op::N,
                    at.rows(buf, v, s, (0, r1))?,
                    Op::N,
                    T::zero(),
                    out,
                )?; // O = A V
            }
        }
    }
    Ok(())
}
