//! The fused forward pass of one shard: the embeddings, every block with its Q, K and V in one
//! product and causal attention read from views, the final LayerNorm and the logits; then the
//! loss and, in place of the logits, its gradient.

use super::precision::{Gradient, Rounder};
use super::{Shard, causal_blocks};
use crate::ch03_mlp::{Activation, activation_forward_into};
use crate::ch06_attention::{LnCache, layer_norm_forward_view};
use crate::ch09_gpt::model::{Gpt, Param};
use crate::error::{Result, shape_error};
use crate::float::Float;
use crate::matmul::{MatMut, MatRef, Op, row_product};
use nalgebra::DMatrix;

impl<T: Float> Shard<T> {
    // ───────────────────────────── forward ─────────────────────────────

    /// The forward pass of this shard's sequences (`inputs`, T tokens each) through every block
    /// into the logits. With `Outputs::LastRow` (one sequence, no backward pass: what generation
    /// reads) the last block's attention and everything after it run for the last row only,
    /// into `self.last`: every block's \[Q K V\] still covers every row (attention and the
    /// key/value cache read them), but no later value depends on the last block's output at
    /// another row. A test holds the two to the same bits. The products round their inputs as
    /// `rounder` says, and add what that did to its tally.
    pub(super) fn forward(
        &mut self,
        model: &Gpt<T>,
        inputs: &[u32],
        t: usize,
        outputs: Outputs,
        rounder: &mut Rounder,
    ) -> Result<()> {
        model.embed_into(inputs, t, &mut self.x); //                            x₀ = W_E[u] + W_P[t]
        let heads = model.config.heads;
        let layers = model.blocks.len();
        for (l, s) in self.blocks.iter_mut().enumerate() {
            let p = |param: Param| model.params.of(param, l);
            layer_norm_forward_view(model.ln1(l), &self.x, &mut s.ln1, &mut s.n1); //  n₁ = LN₁(x)
            let w = p(Param::WQkv);
            let (n1, qkv) = (&s.n1, &mut s.qkv);
            rounder.gemm(Gradient::Neither, T::one(), n1, Op::N, w, Op::N, T::zero(), qkv)?; // n₁W
            add_row(&mut s.qkv, p(Param::BQkv)); //                     [Q K V] = n₁W_QKV + b_QKV
            rounder.round(s.qkv.as_mut_slice(), false); // Q, K, V as products read them (ch. 11)
            if outputs == Outputs::LastRow && l + 1 == layers {
                // The last row only: its attention over every key, then the rest of the block.
                let r = &mut self.last;
                let (qkv, att) = (s.qkv.as_slice(), r.att.as_mut_slice());
                let stats = &mut [T::zero(); 2];
                one_row_attention(
                    qkv,
                    t,
                    t - 1,
                    heads,
                    &mut s.weights,
                    stats,
                    att,
                    (Products::Blocked, rounder),
                )?;
                r.x.copy_from(&self.x.row(t - 1));
                let saved = (&mut r.ln2, &mut r.n2, &mut r.z1, &mut r.a1);
                after_attention(model, l, &mut r.x, &r.att, saved, rounder)?;
                return logits_of(model, &r.x, &mut r.ln_f, &mut r.h_f, &mut r.logits, rounder);
            }
            let (qkv, weights, att) = (&s.qkv, &mut s.weights, &mut s.att);
            causal_attention_forward(qkv, heads, t, weights, att, rounder)?; // every head
            let saved = (&mut s.ln2, &mut s.n2, &mut s.z1, &mut s.a1);
            after_attention(model, l, &mut self.x, &s.att, saved, rounder)?;
        }
        logits_of(model, &self.x, &mut self.ln_f, &mut self.h_f, &mut self.logits, rounder)
    }

    /// The loss of this shard's scored rows, ∂L/∂z in place of its logits and each row's
    /// −ln p(target) in `nll` ([`cross_entropy_by_columns`], one factor per row).
    pub(super) fn loss_and_logit_gradient(
        &mut self,
        targets: &[Option<u32>],
        factors: &[T],
    ) -> f64 {
        cross_entropy_by_columns(&mut self.logits, targets, factors, &mut self.nll)
    }
}

/// Which rows of the logits a forward pass must produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outputs {
    /// Every row (the training step: every position is scored).
    Every,
    /// The last row of the one sequence only (generation), into the shard's `last` buffers.
    LastRow,
}

/// The rest of a block after its attention, on the rows of x and `att` (the heads' outputs):
/// h = x + att·W_O + b_O, then x' = h + GELU(LN₂(h)W₁ + b₁)W₂ + b₂, in place in x, keeping n₂,
/// z₁ and a₁ for the backward pass (`saved`: LN₂'s cache, n₂, z₁, a₁).
fn after_attention<T: Float>(
    model: &Gpt<T>,
    l: usize,
    x: &mut DMatrix<T>,
    att: &DMatrix<T>,
    (ln2, n2, z1, a1): Saved<'_, T>,
    rounder: &mut Rounder,
) -> Result<()> {
    let p = |param: Param| model.params.of(param, l);
    let (one, zero, none) = (T::one(), T::zero(), Gradient::Neither);
    rounder.gemm(none, one, att, Op::N, p(Param::WO), Op::N, one, x)?; //       h = x + att·W_O
    add_row(x, p(Param::BO)); //                                                          … + b_O
    layer_norm_forward_view(model.ln2(l), x, ln2, n2); //                              n₂ = LN₂(h)
    rounder.gemm(none, one, n2, Op::N, p(Param::W1), Op::N, zero, z1)?; //             z₁ = n₂W₁
    add_row(z1, p(Param::B1)); //                                                         … + b₁
    // a₁ = GELU(z₁)
    activation_forward_into(Activation::GeluTanh, z1.as_slice(), a1.as_mut_slice());
    rounder.gemm(none, one, a1, Op::N, p(Param::W2), Op::N, one, x)?; //           x' = h + a₁W₂
    add_row(x, p(Param::B2)); //                                                          … + b₂
    Ok(())
}

/// What a block saves after its attention for the backward pass: LN₂'s cache, n₂, z₁ and a₁.
type Saved<'a, T> =
    (&'a mut LnCache<T>, &'a mut DMatrix<T>, &'a mut DMatrix<T>, &'a mut DMatrix<T>);

/// h_f = LN_f(x_L) and the logits z = h_f W_Uᵀ of the rows of x; an error when a logit is NaN or
/// ∞.
fn logits_of<T: Float>(
    model: &Gpt<T>,
    x: &DMatrix<T>,
    ln_f: &mut LnCache<T>,
    h_f: &mut DMatrix<T>,
    logits: &mut DMatrix<T>,
    rounder: &mut Rounder,
) -> Result<()> {
    layer_norm_forward_view(model.ln_f(), x, ln_f, h_f); //                          h_f = LN_f(x_L)
    let (u, none) = (model.unembedding(), Gradient::Neither);
    rounder.gemm(none, T::one(), h_f, Op::N, u, Op::T, T::zero(), logits)?; //       z = h_f W_Uᵀ
    crate::float::ensure_finite(
        "FusedStep::loss_and_grads",
        "logits (a weight holds NaN or ∞)",
        logits,
    )
}

/// Causal attention of the one query row `pos` against the keys 0 … pos, every head: the
/// causal block ([`causal_block_forward`]) of one row, read from `qkv`, the \[Q K V\] rows of one
/// sequence (3d columns, column-major with leading dimension `ld` > pos). Writes the heads'
/// outputs side by side into `att` (length d = H·d_k, H = `heads` dividing d); `weights` (length
/// at least pos + 1) and `stats` (at least 2) are scratch. The cached step runs it on its cache
/// with [`Products::OneRow`]; generation's last row with [`Products::Blocked`], the training
/// step's products, so that the row is the full pass's to the bit. The weights are rounded as
/// the `Rounder` says before A·V reads them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn one_row_attention<T: Float>(
    qkv: &[T],
    ld: usize,
    pos: usize,
    heads: usize,
    weights: &mut [T],
    stats: &mut [T],
    att: &mut [T],
    (how, rounder): (Products, &mut Rounder),
) -> Result<()> {
    let d = att.len();
    let d_k = d / heads;
    let rows = |col0: usize, (i0, i1): (usize, usize)| {
        MatRef::new(&qkv[col0 * ld + i0..], i1 - i0, d_k, ld)
    };
    for (h, out) in att.chunks_exact_mut(d_k).enumerate() {
        let (q, k, v) = (h * d_k, d + h * d_k, 2 * d + h * d_k);
        causal_block_forward(
            (rows(q, (pos, pos + 1))?, rows(k, (0, pos + 1))?, rows(v, (0, pos + 1))?),
            pos,
            MatMut::new(&mut weights[..pos + 1], 1, pos + 1, 1)?,
            MatMut::new(out, 1, d_k, 1)?,
            stats,
            (how, &mut *rounder),
        )?;
    }
    Ok(())
}

/// L_s = Σ over scored rows of logsumexp(z_r) − z_r\[target\] (returned, in f64), each row's
/// term in `nll` (0 for an unscored row), and in place of the logits z (N×V)
/// ∂L/∂z = k_r·(softmax(z_r) − onehot(target)) on scored rows, 0 elsewhere, with one factor k_r
/// per row (`factors`, length N): k_r = 1/S on every row for the mean over S scored rows (the
/// training step), w_r for a weighted sum Σ w_r·(−ln p_r) (chapter 13's preference and reward
/// losses), 0 for a forward pass that only reads `nll`.
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
pub(crate) fn cross_entropy_by_columns<T: Float>(
    logits: &mut DMatrix<T>,
    targets: &[Option<u32>],
    factors: &[T],
    nll: &mut Vec<f64>,
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
    nll.clear();
    nll.resize(n, 0.0);
    for &(r, zt) in &shifted_targets {
        nll[r] = sum[r].as_f64().ln() - zt; //                          −ln p_r(target_r)
    }
    let loss = shifted_targets.iter().map(|&(r, _)| nll[r]).sum();
    let factor: Vec<T> = targets
        .iter()
        .zip(sum.iter())
        .zip(factors)
        .map(|((t, &s), &k)| if t.is_some() { k / s } else { T::zero() })
        .collect();
    for column in z.chunks_exact_mut(n) {
        for (e, &k) in column.iter_mut().zip(&factor) {
            *e *= k; //                                                       k_r·softmax(z)
        }
    }
    for ((r, target), &k) in targets.iter().enumerate().zip(factors) {
        if let Some(u) = target {
            z[*u as usize * n + r] -= k; //                                   − k_r·onehot
        }
    }
    loss
}

/// m\[r, :\] += b for every row r (b is 1×C): chapter 6's `add_row` in place, so the step
/// allocates nothing (the reference allocates a new matrix per bias). A test holds the two equal.
pub(crate) fn add_row<T: Float>(m: &mut DMatrix<T>, b: &DMatrix<T>) {
    let n = m.nrows();
    for (column, &bias) in m.as_mut_slice().chunks_exact_mut(n).zip(b.iter()) {
        column.iter_mut().for_each(|v| *v += bias);
    }
}

/// Causal self-attention of every head of every sequence, read straight from \[Q K V\] (N×3d) as
/// views and written straight into the concatenated output `att` (N×d). For sequence s and head
/// h, with A stored column-major (A\[i + jT\]), block by block of query rows r0 … r1 − 1, which
/// see only the keys 0 … r1 − 1 ([`causal_block_forward`], the code the cached step runs too):
///
/// ```text
/// S[r0..r1, ..r1] = (1/√d_k) Q[r0..r1] K[..r1]ᵀ        one product per block
/// A[i, j] = exp(S[i, j] − max_{j′ ≤ i} S[i, j′]) / Σ_{j′ ≤ i} exp(…)   for j ≤ i,
///           0 for j > i (the mask)
/// O[r0..r1] = A[r0..r1, ..r1] V[..r1]                  one product per block
/// ```
///
/// Chapter 6's [`attention_forward`](crate::ch06_attention::attention_forward) with the causal
/// mask is the specification; it copies each head out of the projections and computes all T²
/// scores before masking half. This version was kept for what the step as a whole measured
/// (chapter 9 §9: the fused step 1.35× the reference on one thread, 2.77× on two; at T = 64 the
/// blocks do 3/4 of the T² work). A test holds it, and its backward, to chapter 6's. The
/// weights A are rounded as `rounder` says before A·V reads them.
pub(super) fn causal_attention_forward<T: Float>(
    qkv: &DMatrix<T>,
    heads: usize,
    t: usize,
    weights: &mut [T],
    att: &mut DMatrix<T>,
    rounder: &mut Rounder,
) -> Result<()> {
    let n = qkv.nrows();
    let d = att.ncols();
    let d_k = d / heads;
    let buf = qkv.as_slice();
    let out = att.as_mut_slice();
    let mut stats = vec![T::zero(); 2 * t];
    for (s, per_seq) in weights.chunks_exact_mut(heads * t * t).enumerate() {
        for (h, a) in per_seq.chunks_exact_mut(t * t).enumerate() {
            // Rows i0 … i1 − 1 of this sequence in the d_k columns from col0, where they are.
            let rows = |col0: usize, (i0, i1): (usize, usize)| {
                MatRef::new(&buf[col0 * n + s * t + i0..], i1 - i0, d_k, n)
            };
            let (q, k, v) = (h * d_k, d + h * d_k, 2 * d + h * d_k);
            for (r0, r1) in causal_blocks(t) {
                causal_block_forward(
                    (rows(q, (r0, r1))?, rows(k, (0, r1))?, rows(v, (0, r1))?),
                    r0,
                    MatMut::new(&mut a[r0..], r1 - r0, r1, t)?,
                    MatMut::new(&mut out[h * d_k * n + s * t + r0..], r1 - r0, d_k, n)?,
                    &mut stats,
                    (Products::Blocked, &mut *rounder),
                )?;
                // The keys this block never sees are masked too: weight 0.
                for column in a.chunks_exact_mut(t).skip(r1) {
                    column[r0..r1].fill(T::zero());
                }
            }
        }
    }
    Ok(())
}

/// One head of causal attention for the query rows r0 … r1 − 1 of one sequence against its keys
/// 0 … r1 − 1: the block the training step runs ([`causal_attention_forward`], up to
/// [`CAUSAL_BLOCK`](super::CAUSAL_BLOCK) rows) and the cached step runs with one row (r1 = r0 + 1,
/// the new token at position r0 = pos, over every cached key).
///
/// `q` is (r1 − r0)×d_k, `k` and `v` are r1×d_k; the weights `a` ((r1 − r0)×r1) and the output
/// `out` ((r1 − r0)×d_k) are written where they are; `stats` is scratch of at least 2(r1 − r0).
///
/// ```text
/// S = (1/√d_k) Q Kᵀ                                        one product
/// A[i, j] = exp(S[i, j] − max_{j′ ≤ i} S[i, j′]) / Σ_{j′ ≤ i} exp(…)  for j ≤ i, 0 for j > i
/// O = A V                                                  one product
/// ```
///
/// The row statistics of the softmax are gathered column by column for all rows at once. The two
/// products go through the blocked product ([`Products::Blocked`]) or, for one row,
/// `matmul`'s [`row_product`] ([`Products::OneRow`], see there for what was measured). A is
/// rounded as the `Rounder` says before A·V reads it (not at all with f32 inputs).
pub(crate) fn causal_block_forward<T: Float>(
    (q, k, v): (MatRef<T>, MatRef<T>, MatRef<T>),
    r0: usize,
    mut a: MatMut<T>,
    out: MatMut<T>,
    stats: &mut [T],
    (how, rounder): (Products, &mut Rounder),
) -> Result<()> {
    let (m, r1, lda) = (a.rows(), a.cols(), a.ld());
    if stats.len() < 2 * m || r1 != r0 + m || q.rows() != m || k.rows() != r1 || v.rows() != r1 {
        return Err(shape_error(
            "causal_block_forward",
            "q, k, v and the weights",
            format!("rows {r0} … {} against keys 0 … {}", r0 + m, r0 + m),
            format!("q {}×{}, k {}×{}, weights {m}×{r1}", q.rows(), q.cols(), k.rows(), k.cols()),
        ));
    }
    let scale = T::of(1.0 / (q.cols() as f64).sqrt());
    product((how, rounder), scale, q, k, Op::T, T::zero(), a.reborrow())?; //        S = s·QKᵀ
    if m == 1 && lda == 1 {
        // One query row stored contiguously (the cached step): the same operations as the
        // columns below, on one slice.
        let row = &mut a.as_mut_slice()[..r1];
        let mx = row.iter().fold(T::neg_infinity(), |mx, &s| mx.max(s));
        let mut total = T::zero();
        for e in row.iter_mut() {
            *e = (*e - mx).exp(); //     exp(S − max)
            total += *e;
        }
        let inv = T::one() / total;
        row.iter_mut().for_each(|e| *e *= inv); //  A = softmax(S)
        rounder.round(row, false); //               A as A V reads it (chapter 11)
        return product((how, rounder), T::one(), a.as_ref(), v, Op::N, T::zero(), out); // O = A V
    }
    let (max, sum) = stats[..2 * m].split_at_mut(m);
    max.fill(T::neg_infinity());
    // Column j holds the scores of key j; rows i < j (local rows below j − r0) are masked.
    for (j, column) in a.as_mut_slice().chunks_mut(lda).take(r1).enumerate() {
        let first = j.saturating_sub(r0);
        for (mx, &s) in max[first..].iter_mut().zip(&column[first..m]) {
            *mx = mx.max(s);
        }
    }
    sum.fill(T::zero());
    for (j, column) in a.as_mut_slice().chunks_mut(lda).take(r1).enumerate() {
        let first = j.saturating_sub(r0);
        column[..first].fill(T::zero()); // M: j > i masked, weight 0
        for ((e, total), &mx) in
            column[first..m].iter_mut().zip(&mut sum[first..]).zip(&max[first..])
        {
            *e = (*e - mx).exp(); //     exp(S − max)
            *total += *e;
        }
    }
    sum.iter_mut().for_each(|s| *s = T::one() / *s);
    for (j, column) in a.as_mut_slice().chunks_mut(lda).take(r1).enumerate() {
        let first = j.saturating_sub(r0);
        for (e, &inv) in column[first..m].iter_mut().zip(&sum[first..]) {
            *e *= inv; //               A = softmax(S)
        }
    }
    for column in a.as_mut_slice().chunks_mut(lda).take(r1) {
        rounder.round(&mut column[..m], false); // A as A V reads it (chapter 11)
    }
    product((how, rounder), T::one(), a.as_ref(), v, Op::N, T::zero(), out) //               O = A V
}

/// How [`causal_block_forward`] computes its two products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Products {
    /// Through the blocked product (chapter 10's [`crate::matmul::gemm_with`], with the shard's
    /// settings: the training step's blocks of query rows).
    Blocked,
    /// By `matmul`'s [`row_product`], for a block of one query row (the cached step), with the
    /// process's kernel (the cached step has no settings of its own).
    OneRow,
}

/// C ← α·A·op(B) + β·C by `how` (the blocked product with the `Rounder`'s settings, or the
/// one-row product with the process's kernel).
pub(super) fn product<T: Float>(
    (how, rounder): (Products, &Rounder),
    alpha: T,
    a: MatRef<T>,
    b: MatRef<T>,
    tb: Op,
    beta: T,
    c: MatMut<T>,
) -> Result<()> {
    match how {
        Products::Blocked => rounder.view_gemm(alpha, a, Op::N, b, tb, beta, c),
        Products::OneRow => row_product(alpha, a, b, tb, beta, c),
    }
}
