//! The kept-buffer step's forward and backward passes, each backward line naming the forward line
//! it differentiates, and causal grouped-query attention on views of \[Q K V\].

use super::{
    BlockSaved, DecoderStep, PER_LAYER, Run, blocks, cols_mut, cut_into, rms, rms_backward,
    rms_forward, rotate_in_place, side_by_side,
};
use crate::ch09_gpt::model::scatter_embedding_gradient;
use crate::ch12_modern::decoder::{Mlp, Norm, gate_and_slope};
use crate::ch12_modern::glu::{Gate, GatedMlp};
use crate::error::{Result, invalid};
use crate::float::Float;
use crate::matmul::{MatMut, MatRef, Op, gemm_with};
use nalgebra::DMatrix;

/// The gated MLP of a block ([`super::supports`] has checked the kind).
fn gated<T: Float>(mlp: &Mlp<T>) -> Result<&GatedMlp<T>> {
    match mlp {
        Mlp::Gated(g) => Ok(g),
        Mlp::Gelu(_) => Err(invalid("DecoderStep", "model", "has a GELU MLP")),
    }
}

fn gamma_of<T: Float>(norm: &Norm<T>) -> Result<&DMatrix<T>> {
    Ok(rms(norm)?.0)
}

/// φ(a) and φ′(a) of SwiGLU in the model's type: one σ(a) gives both, φ = aσ and
/// φ′ = σ(1 + a(1 − σ)), the operations of [`gate_and_slope`] (the same bits in f64). σ is
/// chapter 1's, written without a branch: with e = exp(−|a|), σ = 1/(1 + e) for a ≥ 0 and
/// e/(1 + e) below, the same two expressions (exp(−a) and exp(a) are exp(−|a|) on their sides), so
/// the same bits, in a loop the compiler need not split.
fn swish_and_slope<T: Float>(a: T) -> (T, T) {
    let e = (-a.abs()).exp();
    let top = if a >= T::zero() { T::one() } else { e };
    let s = top / (T::one() + e); //                                         σ(a)
    (a * s, s * (T::one() + a * (T::one() - s)))
}

/// φ(A) into `phi` (which holds A), φ′(A) into `slope`, H = φ(A) ⊙ B into `h`; the gate once per
/// entry (GeGLU through the lesson's f64 functions).
fn gate_forward<T: Float>(gate: Gate, phi: &mut [T], slope: &mut [T], h: &mut [T], b: &[T]) {
    let entries = phi.iter_mut().zip(slope.iter_mut()).zip(h.iter_mut().zip(b));
    match gate {
        Gate::Swish => {
            for ((p, sl), (h, &b)) in entries {
                (*p, *sl) = swish_and_slope(*p); //                     φ(A), φ′(A)
                *h = *p * b; //                                          H = φ(A) ⊙ B
            }
        }
        Gate::Gelu => {
            for ((p, sl), (h, &b)) in entries {
                let (f, d) = gate_and_slope(gate, p.as_f64());
                (*p, *sl) = (T::of(f), T::of(d));
                *h = *p * b;
            }
        }
    }
}

impl<T: Float> Run<'_, T> {
    /// C ← α·op(A)·op(B) + β·C with the step's settings.
    #[allow(clippy::too_many_arguments)]
    fn gemm<'a>(
        &self,
        alpha: T,
        a: impl Into<MatRef<'a, T>>,
        ta: Op,
        b: impl Into<MatRef<'a, T>>,
        tb: Op,
        beta: T,
        c: impl Into<MatMut<'a, T>>,
    ) -> Result<()>
    where
        T: 'a,
    {
        gemm_with(self.settings, alpha, a, ta, b, tb, beta, c).map(|_| ())
    }

    /// The forward pass into the logits (N×V, in `w.logits`).
    pub(super) fn forward(&self, w: &mut DecoderStep<T>, inputs: &[u32]) -> Result<()> {
        let m = self.model;
        let c = &m.config;
        let (d_h, heads, kv_heads) = (c.head_dim(), c.n_heads, c.n_kv_heads);
        let rope = m.rope.as_ref().ok_or_else(|| invalid("DecoderStep", "model", "no rope"))?;
        let (one, zero) = (T::one(), T::zero());
        let empty = DMatrix::zeros(0, 0);
        // x₀ = W_E[u]
        let (n, v, f) = (inputs.len(), c.vocab_size, c.hidden);
        let wte = m.wte.as_slice();
        for (col, out) in w.x.as_mut_slice().chunks_exact_mut(n).enumerate() {
            for (o, &u) in out.iter_mut().zip(inputs) {
                *o = wte[col * v + u as usize];
            }
        }
        for (layer, s) in m.layers.iter().zip(w.blocks.iter_mut()) {
            let a = &layer.attn;
            rms_forward(rms(&layer.norm1)?, &w.x, &mut s.x_hat1, &mut s.r1, &mut s.n1); // n₁
            side_by_side(&mut s.w_qkv, [&a.w_q, &a.w_k, &a.w_v]);
            self.gemm(one, &s.n1, Op::N, &s.w_qkv, Op::N, zero, &mut s.qkv)?; // [Q K V] = n₁W_QKV
            rotate_in_place(&mut s.qkv, heads + kv_heads, rope, self.t, one); // rope(Q), rope(K)
            self.attention_forward(s, (heads, kv_heads, d_h), &mut w.rows)?; // O_h
            self.gemm(one, &s.att, Op::N, &a.w_o, Op::N, one, &mut w.x)?; // h = x + att·W_O
            rms_forward(rms(&layer.norm2)?, &w.x, &mut s.x_hat2, &mut s.r2, &mut s.n2); // n₂
            let g = gated(&layer.mlp)?;
            side_by_side(&mut s.w_gu, [&g.w_gate, &g.w_up, &empty]);
            self.gemm(one, &s.n2, Op::N, &s.w_gu, Op::N, zero, &mut s.ab)?; // [A B] = n₂[W_g W_u]
            let (phi, b) = s.ab.as_mut_slice().split_at_mut(n * f);
            gate_forward(g.gate, phi, s.slope.as_mut_slice(), s.h.as_mut_slice(), b); // H = φ(A)⊙B
            self.gemm(one, &s.h, Op::N, &g.w_down, Op::N, one, &mut w.x)?; // x' = h + H W_down
        }
        let norm_f = rms(&m.norm_f)?;
        rms_forward(norm_f, &w.x, &mut w.x_hat_f, &mut w.r_f, &mut w.h_f); // h_f = Norm_f(x_L)
        let u = m.unembedding();
        self.gemm(one, &w.h_f, Op::N, u, Op::T, zero, &mut w.logits)?; //      z = h_f W_Uᵀ
        crate::float::ensure_finite("Decoder::loss_and_grads", "logits", &w.logits)
    }

    /// Causal attention of every query head of every sequence, read from the views of \[Q K V\]
    /// and written into `att`: per sequence s and query head h (key/value head g = ⌊h/(H/H_kv)⌋),
    /// by blocks of query rows r0 … r1 − 1, which see the keys 0 … r1 − 1 only,
    ///
    /// ```text
    /// S[r0..r1, ..r1] = (1/√d_h) Q_h[r0..r1] K_g[..r1]ᵀ
    /// A[i, j] = exp(S[i, j] − max_{j′ ≤ i} S[i, j′]) / Σ_{j′ ≤ i} exp(…)  (j ≤ i), 0 (j > i)
    /// O_h[r0..r1] = A[r0..r1, ..r1] V_g[..r1]
    /// ```
    fn attention_forward(
        &self,
        s: &mut BlockSaved<T>,
        (heads, kv_heads, d_h): (usize, usize, usize),
        stats: &mut [T],
    ) -> Result<()> {
        let (n, t) = (s.qkv.nrows(), self.t);
        let group = heads / kv_heads;
        let scale = T::of(1.0 / (d_h as f64).sqrt());
        let buf = s.qkv.as_slice();
        let out = s.att.as_mut_slice();
        let view = |col0: usize, seq: usize, (i0, i1): (usize, usize)| {
            MatRef::new(&buf[col0 * n + seq * t + i0..], i1 - i0, d_h, n)
        };
        for (seq, per_seq) in s.weights.chunks_exact_mut(heads * t * t).enumerate() {
            for (h, a) in per_seq.chunks_exact_mut(t * t).enumerate() {
                let g = h / group;
                let (q, k, v) = (h * d_h, (heads + g) * d_h, (heads + kv_heads + g) * d_h);
                for (r0, r1) in blocks(t) {
                    let s_block = MatMut::new(&mut a[r0..], r1 - r0, r1, t)?;
                    let (qb, kb) = (view(q, seq, (r0, r1))?, view(k, seq, (0, r1))?);
                    self.gemm(scale, qb, Op::N, kb, Op::T, T::zero(), s_block)?; // S = sQKᵀ
                }
                masked_softmax(a, t, stats);
                for (r0, r1) in blocks(t) {
                    let a_block = MatRef::new(&a[r0..], r1 - r0, r1, t)?;
                    let o = MatMut::new(&mut out[q * n + seq * t + r0..], r1 - r0, d_h, n)?;
                    let vb = view(v, seq, (0, r1))?;
                    self.gemm(T::one(), a_block, Op::N, vb, Op::N, T::zero(), o)?; // O = A V
                }
            }
        }
        Ok(())
    }

    /// The backward pass from ∂L/∂z (in place of the logits) into the workspace's gradients.
    pub(super) fn backward(&self, w: &mut DecoderStep<T>, inputs: &[u32]) -> Result<()> {
        let m = self.model;
        let c = &m.config;
        let (d_h, heads, kv_heads) = (c.head_dim(), c.n_heads, c.n_kv_heads);
        let (n, f) = (inputs.len(), c.hidden);
        let rope = m.rope.as_ref().ok_or_else(|| invalid("DecoderStep", "model", "no rope"))?;
        let (one, zero) = (T::one(), T::zero());
        let layers = m.layers.len();
        let g = &mut w.grads;
        let (norm_f_slot, u_slot) = (1 + PER_LAYER * layers, 2 + PER_LAYER * layers);
        let u_slot = if m.lm_head.is_some() { u_slot } else { 0 }; // tied: into W_E's slot
        // z = h_f W_Uᵀ ⇒ ∂h_f = ∂z W_U, ∂W_U = ∂zᵀ h_f
        let u = m.unembedding();
        self.gemm(one, &w.logits, Op::N, u, Op::N, zero, &mut w.d_n)?;
        self.gemm(one, &w.logits, Op::T, &w.h_f, Op::N, zero, &mut g[u_slot])?;
        // h_f = Norm_f(x_L) ⇒ ∂x_L (x now holds ∂L/∂x)
        w.x.fill(zero);
        let saved = (&w.x_hat_f, w.r_f.as_slice());
        let gamma_f = gamma_of(&m.norm_f)?;
        rms_backward(gamma_f, saved, &w.d_n, &mut w.x, &mut g[norm_f_slot], &mut w.rows);
        for (l, (layer, s)) in m.layers.iter().zip(&w.blocks).enumerate().rev() {
            let at = |k: usize| 1 + PER_LAYER * l + k;
            let (a, mlp) = (&layer.attn, gated(&layer.mlp)?);
            // x' = h + H W_down ⇒ ∂h = ∂x' (kept in x), ∂W_down = Hᵀ∂x', ∂H = ∂x' W_downᵀ
            self.gemm(one, &s.h, Op::T, &w.x, Op::N, zero, &mut g[at(8)])?;
            let d_hidden = cols_mut(&mut w.d_ab, 0, f)?;
            self.gemm(one, &w.x, Op::N, &mlp.w_down, Op::T, zero, d_hidden)?;
            // H = φ(A) ⊙ B ⇒ ∂A = ∂H ⊙ B ⊙ φ′(A), ∂B = ∂H ⊙ φ(A)
            let (phi, b) = s.ab.as_slice().split_at(n * f);
            let saved = b.iter().zip(phi).zip(s.slope.as_slice());
            let (d_a, d_b) = w.d_ab.as_mut_slice().split_at_mut(n * f);
            for ((da, db), ((&b, &p), &sl)) in d_a.iter_mut().zip(d_b.iter_mut()).zip(saved) {
                let d = *da;
                *da = d * b * sl;
                *db = d * p;
            }
            // [A B] = n₂[W_gate W_up] ⇒ ∂[W_gate W_up] = n₂ᵀ[∂A ∂B],
            //                          ∂n₂ = [∂A ∂B][W_gate W_up]ᵀ = ∂A W_gateᵀ + ∂B W_upᵀ
            self.gemm(one, &s.n2, Op::T, &w.d_ab, Op::N, zero, &mut w.d_w_gu)?;
            let [d_gate, d_up] = slots(g, [at(6), at(7)])?;
            cut_into(&w.d_w_gu, [d_gate, d_up, &mut DMatrix::zeros(0, 0)]);
            self.gemm(one, &w.d_ab, Op::N, &s.w_gu, Op::T, zero, &mut w.d_n)?;
            // n₂ = Norm₂(h) ⇒ ∂h += Norm₂ backward(∂n₂)
            let (gamma2, saved) = (gamma_of(&layer.norm2)?, (&s.x_hat2, s.r2.as_slice()));
            rms_backward(gamma2, saved, &w.d_n, &mut w.x, &mut g[at(5)], &mut w.rows);
            // h = x + att·W_O ⇒ ∂x = ∂h (kept), ∂W_O = attᵀ∂h, ∂att = ∂h W_Oᵀ
            self.gemm(one, &s.att, Op::T, &w.x, Op::N, zero, &mut g[at(4)])?;
            self.gemm(one, &w.x, Op::N, &a.w_o, Op::T, zero, &mut w.d_att)?;
            // O_h = attention(q_h, k_g, v_g) ⇒ ∂[Q K V] (rotated)
            let sizes = (heads, kv_heads, d_h);
            self.attention_backward(
                s,
                sizes,
                &w.d_att,
                &mut w.d_qkv,
                &mut w.d_scores,
                &mut w.rows,
            )?;
            // q = rope(Q), k = rope(K) ⇒ ∂Q, ∂K by the transposed rotation
            rotate_in_place(&mut w.d_qkv, heads + kv_heads, rope, self.t, -one);
            // [Q K V] = n₁[W_Q W_K W_V] ⇒ ∂[W_Q W_K W_V] = n₁ᵀ∂[Q K V],
            //                           ∂n₁ = ∂[Q K V][W_Q W_K W_V]ᵀ = ∂Q W_Qᵀ + ∂K W_Kᵀ + ∂V W_Vᵀ
            self.gemm(one, &s.n1, Op::T, &w.d_qkv, Op::N, zero, &mut w.d_w_qkv)?;
            cut_into(&w.d_w_qkv, slots(g, [at(1), at(2), at(3)])?);
            self.gemm(one, &w.d_qkv, Op::N, &s.w_qkv, Op::T, zero, &mut w.d_n)?;
            // n₁ = Norm₁(x) ⇒ ∂x += Norm₁ backward(∂n₁)
            let (gamma1, saved) = (gamma_of(&layer.norm1)?, (&s.x_hat1, s.r1.as_slice()));
            rms_backward(gamma1, saved, &w.d_n, &mut w.x, &mut g[at(0)], &mut w.rows);
        }
        // x₀ = W_E[u] ⇒ ∂W_E[u] += ∂x₀ (tied: W_U's part is in the slot already)
        if m.lm_head.is_some() {
            g[0].fill(zero);
        }
        scatter_embedding_gradient(&w.x, inputs, self.t, &mut g[0], None);
        Ok(())
    }

    /// Backward of [`Run::attention_forward`] given ∂L/∂O (`d_att`): writes ∂L/∂\[Q K V\]
    /// (rotated) into `d_qkv`. Per sequence and query head h, key/value head g:
    ///
    /// ```text
    /// O = A V        ⇒ ∂V_g[c0..c1] += A[c0.., c0..c1]ᵀ ∂O[c0..],  ∂A = ∂O V_gᵀ
    /// A = softmax(S) ⇒ ∂S = A ⊙ (∂A − rowsum(A ⊙ ∂A))     (0 where masked)
    /// S = s·QKᵀ      ⇒ ∂Q_h = s ∂S K_g,  ∂K_g[c0..c1] += s ∂S[c0.., c0..c1]ᵀ Q_h[c0..]
    /// ```
    ///
    /// A key/value head's gradient is the sum over the H/H_kv query heads of its group: the first
    /// writes it (β = 0), the others add (β = 1).
    fn attention_backward<'a>(
        &self,
        s: &'a BlockSaved<T>,
        (heads, kv_heads, d_h): (usize, usize, usize),
        d_att: &'a DMatrix<T>,
        d_qkv: &mut DMatrix<T>,
        d_scores: &mut [T],
        row: &mut [T],
    ) -> Result<()> {
        let (n, t) = (s.qkv.nrows(), self.t);
        let group = heads / kv_heads;
        let scale = T::of(1.0 / (d_h as f64).sqrt());
        let (buf, d_o) = (s.qkv.as_slice(), d_att.as_slice());
        let view = |m: &'a [T], col0: usize, seq: usize, (i0, i1): (usize, usize)| {
            MatRef::new(&m[col0 * n + seq * t + i0..], i1 - i0, d_h, n)
        };
        let row = &mut row[..t];
        for (seq, per_seq) in s.weights.chunks_exact(heads * t * t).enumerate() {
            for (h, a) in per_seq.chunks_exact(t * t).enumerate() {
                let g = h / group;
                let beta = if h % group == 0 { T::zero() } else { T::one() };
                let (q, k, v) = (h * d_h, (heads + g) * d_h, (heads + kv_heads + g) * d_h);
                for (c0, c1) in blocks(t) {
                    let a_block = MatRef::new(&a[c0 + c0 * t..], t - c0, c1 - c0, t)?;
                    let d_ob = view(d_o, q, seq, (c0, t))?;
                    let d_v = head_mut(d_qkv, (v, d_h), seq * t, (c0, c1))?;
                    self.gemm(T::one(), a_block, Op::T, d_ob, Op::N, beta, d_v)?; // ∂V += Aᵀ∂O
                }
                for (r0, r1) in blocks(t) {
                    let d_a = MatMut::new(&mut d_scores[r0..], r1 - r0, r1, t)?;
                    let (d_ob, vb) = (view(d_o, q, seq, (r0, r1))?, view(buf, v, seq, (0, r1))?);
                    self.gemm(T::one(), d_ob, Op::N, vb, Op::T, T::zero(), d_a)?; // ∂A = ∂O Vᵀ
                }
                // A = softmax(S) ⇒ ∂S = A ⊙ (∂A − rowsum(A ⊙ ∂A)), on j ≤ i; 0 above.
                row.fill(T::zero());
                for (j, (da, aa)) in d_scores.chunks_exact(t).zip(a.chunks_exact(t)).enumerate() {
                    for ((r, &x), &y) in row[j..].iter_mut().zip(&aa[j..]).zip(&da[j..]) {
                        *r += x * y;
                    }
                }
                let columns = d_scores.chunks_exact_mut(t).zip(a.chunks_exact(t)).enumerate();
                for (j, (da, aa)) in columns {
                    da[..j].fill(T::zero());
                    for ((ds, &x), &r) in da[j..].iter_mut().zip(&aa[j..]).zip(&row[j..]) {
                        *ds = x * (*ds - r);
                    }
                }
                for (r0, r1) in blocks(t) {
                    let d_s = MatRef::new(&d_scores[r0..], r1 - r0, r1, t)?;
                    let kb = view(buf, k, seq, (0, r1))?;
                    let d_q = head_mut(d_qkv, (q, d_h), seq * t, (r0, r1))?;
                    self.gemm(scale, d_s, Op::N, kb, Op::N, T::zero(), d_q)?; // ∂Q = s ∂S K
                }
                for (c0, c1) in blocks(t) {
                    let d_s = MatRef::new(&d_scores[c0 + c0 * t..], t - c0, c1 - c0, t)?;
                    let qb = view(buf, q, seq, (c0, t))?;
                    let d_k = head_mut(d_qkv, (k, d_h), seq * t, (c0, c1))?;
                    self.gemm(scale, d_s, Op::T, qb, Op::N, beta, d_k)?; // ∂K += s ∂Sᵀ Q
                }
            }
        }
        Ok(())
    }
}

/// The causal softmax of one head's T×T scores (column-major, entry (i, j) at i + jT) in place:
/// row i over j ≤ i, zero above the diagonal; `stats` is scratch of at least 2T.
fn masked_softmax<T: Float>(a: &mut [T], t: usize, stats: &mut [T]) {
    let (max, sum) = stats[..2 * t].split_at_mut(t);
    max.fill(T::neg_infinity());
    for (j, column) in a.chunks_exact(t).enumerate() {
        for (mx, &s) in max[j..].iter_mut().zip(&column[j..]) {
            *mx = mx.max(s);
        }
    }
    sum.fill(T::zero());
    for (j, column) in a.chunks_exact_mut(t).enumerate() {
        column[..j].fill(T::zero()); //                                M: j > i masked
        for ((e, total), &mx) in column[j..].iter_mut().zip(&mut sum[j..]).zip(&max[j..]) {
            *e = (*e - mx).exp(); //                                   exp(S − max)
            *total += *e;
        }
    }
    sum.iter_mut().for_each(|s| *s = T::one() / *s);
    for (j, column) in a.chunks_exact_mut(t).enumerate() {
        for (e, &inv) in column[j..].iter_mut().zip(&sum[j..]) {
            *e *= inv; //                                              A = softmax(S)
        }
    }
}

/// Rows first + i0 … first + i1 − 1 of the d_h columns from col0 of `m`, to be written where they
/// are.
fn head_mut<T: Float>(
    m: &mut DMatrix<T>,
    (col0, d_h): (usize, usize),
    first: usize,
    (i0, i1): (usize, usize),
) -> Result<MatMut<'_, T>> {
    let n = m.nrows();
    MatMut::new(&mut m.as_mut_slice()[col0 * n + first + i0..], i1 - i0, d_h, n)
}

/// The gradient tensors at `at`, each once.
fn slots<T: Float, const K: usize>(
    g: &mut [DMatrix<T>],
    at: [usize; K],
) -> Result<[&mut DMatrix<T>; K]> {
    g.get_disjoint_mut(at).map_err(|_| invalid("DecoderStep", "model", "two tensors in one slot"))
}
