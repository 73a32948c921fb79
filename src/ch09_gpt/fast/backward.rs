//! The fused backward pass of one shard, from ∂L/∂z (left in place of the logits by the forward
//! pass) back to the embeddings, each line naming the forward line it differentiates; the
//! gradients go straight into the shard's tensors, in [`Gpt::tensors`] order.

use super::precision::{Gradient, Rounder};
use super::{Heads, Shard, causal_blocks};
use crate::ch03_mlp::{Activation, activation_backward_in_place};
use crate::ch06_attention::{LnCache, LnView, Store, layer_norm_backward_view};
use crate::ch09_gpt::model::{Gpt, Param, scatter_embedding_gradient};
use crate::error::{Result, invalid};
use crate::float::{Float, lane_sum};
use crate::matmul::{MatMut, MatRef, Op};
use nalgebra::DMatrix;

impl<T: Float> Shard<T> {
    // ───────────────────────────── backward ─────────────────────────────

    /// The backward pass; its products round their inputs as `rounder` says, each naming which
    /// of its inputs is the gradient ∂Y ([`Gradient`]: ∂z, ∂x, ∂z₁, ∂\[Q K V\]) for the tally.
    pub(super) fn backward(
        &mut self,
        model: &Gpt<T>,
        inputs: &[u32],
        t: usize,
        rounder: &mut Rounder,
    ) -> Result<()> {
        let heads = model.config.heads;
        let (one, zero) = (T::one(), T::zero());
        let (d_a, d_b) = (Gradient::A, Gradient::B);
        let g = &mut self.grads;
        let shape = g.shape();
        let slot = |p: Param, l: usize| shape.index(p, l).unwrap_or(0);
        // tied: W_U's gradient goes to W_E's slot first
        let u_slot =
            if model.lm_head().is_some() { slot(Param::LmHead, 0) } else { slot(Param::Wte, 0) };
        // z = h_f W_Uᵀ ⇒ ∂h_f = ∂z W_U, ∂W_U = ∂zᵀ h_f
        let (d_z, u) = (&self.logits, model.unembedding());
        rounder.gemm(d_a, one, d_z, Op::N, u, Op::N, zero, &mut self.d_n)?;
        rounder.gemm(d_a, one, d_z, Op::T, &self.h_f, Op::N, zero, &mut g[u_slot])?;
        // h_f = LN_f(x_L) ⇒ ∂x_L = LN_f backward (x now holds ∂L/∂x)
        self.x.fill(T::zero());
        let ln_f = (slot(Param::LnFGamma, 0), slot(Param::LnFBeta, 0));
        layer_norm_backward(model.ln_f(), &self.ln_f, &self.d_n, &mut self.x, g, ln_f)?;
        for (l, s) in self.blocks.iter_mut().enumerate().rev() {
            let at = |p: Param| slot(p, l);
            let w = |p: Param| model.params.of(p, l);
            // x' = h + a₁W₂ + b₂ ⇒ ∂h = ∂x' (kept in x), ∂W₂ = a₁ᵀ∂x', ∂b₂ = Σ ∂x', ∂a₁ = ∂x' W₂ᵀ
            rounder.gemm(d_b, one, &s.a1, Op::T, &self.x, Op::N, zero, &mut g[at(Param::W2)])?;
            column_sums(&self.x, &mut g[at(Param::B2)]);
            rounder.gemm(d_a, one, &self.x, Op::N, w(Param::W2), Op::T, zero, &mut self.d_z1)?;
            // a₁ = GELU(z₁) ⇒ ∂z₁ = GELU′(z₁) ⊙ ∂a₁
            activation_backward_in_place(
                Activation::GeluTanh,
                s.z1.as_slice(),
                self.d_z1.as_mut_slice(),
            );
            // z₁ = n₂W₁ + b₁ ⇒ ∂W₁ = n₂ᵀ∂z₁, ∂b₁ = Σ ∂z₁, ∂n₂ = ∂z₁W₁ᵀ
            rounder.gemm(d_b, one, &s.n2, Op::T, &self.d_z1, Op::N, zero, &mut g[at(Param::W1)])?;
            column_sums(&self.d_z1, &mut g[at(Param::B1)]);
            rounder.gemm(d_a, one, &self.d_z1, Op::N, w(Param::W1), Op::T, zero, &mut self.d_n)?;
            // n₂ = LN₂(h) ⇒ ∂h += LN₂ backward(∂n₂)
            layer_norm_backward(
                model.ln2(l),
                &s.ln2,
                &self.d_n,
                &mut self.x,
                g,
                (at(Param::Ln2Gamma), at(Param::Ln2Beta)),
            )?;
            // h = x + att·W_O + b_O ⇒ ∂x = ∂h (kept), ∂W_O = attᵀ∂h, ∂b_O = Σ ∂h, ∂att = ∂h W_Oᵀ
            rounder.gemm(d_b, one, &s.att, Op::T, &self.x, Op::N, zero, &mut g[at(Param::WO)])?;
            column_sums(&self.x, &mut g[at(Param::BO)]);
            rounder.gemm(d_a, one, &self.x, Op::N, w(Param::WO), Op::T, zero, &mut self.d_att)?;
            rounder.round(self.d_att.as_mut_slice(), true); // ∂O as attention's products read it
            // att = every head's softmax(s·QKᵀ + M)V ⇒ ∂[Q K V]
            causal_attention_backward(
                &s.qkv,
                heads,
                t,
                &s.weights,
                &self.d_att,
                &mut self.d_qkv,
                &mut self.d_scores,
                &mut self.row_a,
                rounder,
            )?;
            // [Q K V] = n₁W_QKV + b_QKV ⇒ ∂W_QKV = n₁ᵀ∂QKV, ∂b_QKV = Σ ∂QKV, ∂n₁ = ∂QKV W_QKVᵀ
            let (n1, d_qkv) = (&s.n1, &self.d_qkv);
            rounder.gemm(d_b, one, n1, Op::T, d_qkv, Op::N, zero, &mut g[at(Param::WQkv)])?;
            column_sums(&self.d_qkv, &mut g[at(Param::BQkv)]);
            let w_qkv = w(Param::WQkv);
            rounder.gemm(d_a, one, &self.d_qkv, Op::N, w_qkv, Op::T, zero, &mut self.d_n)?;
            // n₁ = LN₁(x) ⇒ ∂x += LN₁ backward(∂n₁)
            layer_norm_backward(
                model.ln1(l),
                &s.ln1,
                &self.d_n,
                &mut self.x,
                g,
                (at(Param::Ln1Gamma), at(Param::Ln1Beta)),
            )?;
        }
        // x₀ = W_E[u] + W_P[t] ⇒ ∂W_E[u] += ∂x₀ (row by row), ∂W_P[t] = Σ_b ∂x₀[b, t]
        let wte = slot(Param::Wte, 0);
        if model.lm_head().is_some() {
            g[wte].fill(T::zero()); // untied: W_E's only use is the lookup (tied, W_U's part is in)
        }
        let (d_wte, d_wpe) = match shape.index(Param::Wpe, 0) {
            Some(p) => {
                let [e, w] = g
                    .get_disjoint_mut([wte, p])
                    .map_err(|_| invalid("FusedStep", "model", "W_E and W_P in one slot"))?;
                w.fill(T::zero());
                (e, Some(w))
            }
            None => (&mut g[wte], None),
        };
        scatter_embedding_gradient(&self.x, inputs, t, d_wte, d_wpe);
        Ok(())
    }
}

/// out\[0, c\] = Σ_r m\[r, c\] (out is 1×C): a bias's gradient. Summed in lanes ([`lane_sum`]):
/// chapter 6's one chain of additions per column cost about 6 % of the step (chapter 9 §9, "Sums
/// over rows in lanes"). A test holds it to the plain sum, equal to rounding.
pub(super) fn column_sums<T: Float>(m: &DMatrix<T>, out: &mut DMatrix<T>) {
    let n = m.nrows();
    for (o, column) in out.as_mut_slice().iter_mut().zip(m.as_slice().chunks_exact(n)) {
        *o = lane_sum(column);
    }
}

/// Backward of chapter 6's LayerNorm given ∂L/∂y: adds ∂L/∂x into `d_x` and writes ∂L/∂γ and
/// ∂L/∂β into `grads[gamma]` and `grads[beta]`.
fn layer_norm_backward<T: Float>(
    ln: LnView<'_, T>,
    cache: &LnCache<T>,
    d_y: &DMatrix<T>,
    d_x: &mut DMatrix<T>,
    grads: &mut [DMatrix<T>],
    (gamma, beta): (usize, usize),
) -> Result<()> {
    let [d_gamma, d_beta] = grads
        .get_disjoint_mut([gamma, beta])
        .map_err(|_| invalid("FusedStep", "model", "a LayerNorm's γ and β in one slot"))?;
    layer_norm_backward_view(ln, cache, d_y, Store::Accumulate, d_x, d_gamma, d_beta);
    Ok(())
}

/// Backward of [`causal_attention_forward`] given ∂L/∂O (`d_att`, N×d): writes ∂L/∂\[Q K V\]
/// into `d_qkv` (N×3d). Per sequence and head, each line differentiating the forward line named,
/// by blocks of rows r0 … r1 − 1 (queries) or of columns c0 … c1 − 1 (keys, which only the queries
/// i ≥ c0 see):
///
/// ```text
/// O = A V        ⇒ ∂V[c0..c1] = A[c0.., c0..c1]ᵀ ∂O[c0..],
///                  ∂A[r0..r1, ..r1] = ∂O[r0..r1] V[..r1]ᵀ
/// A = softmax(S) ⇒ ∂S = A ⊙ (∂A − rowsum(A ⊙ ∂A))        (0 where masked, since A = 0 there)
/// S = s·QKᵀ      ⇒ ∂Q[r0..r1] = s ∂S[r0..r1, ..r1] K[..r1],
///                  ∂K[c0..c1] = s ∂S[c0.., c0..c1]ᵀ Q[c0..]
/// ```
///
/// ∂S is rounded as `rounder` says, as a gradient, before its two products read it.
#[allow(clippy::too_many_arguments)]
pub(super) fn causal_attention_backward<T: Float>(
    qkv: &DMatrix<T>,
    heads: usize,
    t: usize,
    weights: &[T],
    d_att: &DMatrix<T>,
    d_qkv: &mut DMatrix<T>,
    d_scores: &mut [T],
    row: &mut [T],
    rounder: &mut Rounder,
) -> Result<()> {
    let n = qkv.nrows();
    let d = d_att.ncols();
    let d_k = d / heads;
    let scale = T::of(1.0 / (d_k as f64).sqrt());
    let at = Heads { n, t, d_k };
    let (buf, d_o) = (qkv.as_slice(), d_att.as_slice());
    for (s, per_seq) in weights.chunks_exact(heads * t * t).enumerate() {
        for (h, a) in per_seq.chunks_exact(t * t).enumerate() {
            let (q, k, v, o) = (h * d_k, d + h * d_k, 2 * d + h * d_k, h * d_k);
            for (c0, c1) in causal_blocks(t) {
                let a_block = MatRef::new(&a[c0 + c0 * t..], t - c0, c1 - c0, t)?;
                let d_v = at.rows_mut(d_qkv.as_mut_slice(), v, s, (c0, c1))?;
                rounder.view_gemm(
                    T::one(),
                    a_block,
                    Op::T,
                    at.rows(d_o, o, s, (c0, t))?,
                    Op::N,
                    T::zero(),
                    d_v,
                )?; // O = AV ⇒ ∂V = Aᵀ∂O
            }
            for (r0, r1) in causal_blocks(t) {
                let d_a = MatMut::new(&mut d_scores[r0..], r1 - r0, r1, t)?;
                rounder.view_gemm(
                    T::one(),
                    at.rows(d_o, o, s, (r0, r1))?,
                    Op::N,
                    at.rows(buf, v, s, (0, r1))?,
                    Op::T,
                    T::zero(),
                    d_a,
                )?; // ∂A = ∂O Vᵀ
            }
            // A = softmax(S) ⇒ ∂S = A ⊙ (∂A − rowsum(A ⊙ ∂A)), on j ≤ i; 0 above the diagonal.
            row.fill(T::zero());
            for (j, (da, aa)) in d_scores.chunks_exact(t).zip(a.chunks_exact(t)).enumerate() {
                for ((r, &x), &y) in row[j..].iter_mut().zip(&aa[j..]).zip(&da[j..]) {
                    *r += x * y;
                }
            }
            for (j, (da, aa)) in d_scores.chunks_exact_mut(t).zip(a.chunks_exact(t)).enumerate() {
                da[..j].fill(T::zero());
                for ((ds, &x), &r) in da[j..].iter_mut().zip(&aa[j..]).zip(&row[j..]) {
                    *ds = x * (*ds - r);
                }
            }
            rounder.round(d_scores, true); // ∂S as its two products read it (chapter 11)
            for (r0, r1) in causal_blocks(t) {
                let d_s = MatRef::new(&d_scores[r0..], r1 - r0, r1, t)?;
                let d_q = at.rows_mut(d_qkv.as_mut_slice(), q, s, (r0, r1))?;
                // S = sQKᵀ ⇒ ∂Q = s ∂S K
                rounder.view_gemm(
                    scale,
                    d_s,
                    Op::N,
                    at.rows(buf, k, s, (0, r1))?,
                    Op::N,
                    T::zero(),
                    d_q,
                )?;
            }
            for (c0, c1) in causal_blocks(t) {
                let d_s = MatRef::new(&d_scores[c0 + c0 * t..], t - c0, c1 - c0, t)?;
                let d_k_block = at.rows_mut(d_qkv.as_mut_slice(), k, s, (c0, c1))?;
                let q_rows = at.rows(buf, q, s, (c0, t))?;
                // ∂K = s ∂Sᵀ Q
                rounder.view_gemm(scale, d_s, Op::T, q_rows, Op::N, T::zero(), d_k_block)?;
            }
        }
    }
    Ok(())
}
