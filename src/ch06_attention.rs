//! Chapter 6: the encoder block, attention, multi-head attention, LayerNorm, the feed-forward net.
//!
//! Scaled dot-product attention for queries Q (T_q×d_k), keys K (T_k×d_k) and values V (T_k×d_v):
//!
//! ```text
//! S = s·QKᵀ + M          s = 1/√d_k by default; M additive: 0 where allowed, −∞ where masked
//! A = row-softmax(S)     each row a probability distribution over the keys
//! O = A V
//! ```
//!
//! Multi-head attention projects X into H heads (Q = X W_Q + b_Q split by columns), attends in each
//! head, concatenates the outputs and applies W_O. LayerNorm standardises every row and rescales it
//! with γ and β. The feed-forward net is max(0, xW₁ + b₁)W₂ + b₂ (chapter 3's dense layer and
//! activation). A block puts them together with residual connections, in the pre-LN order of
//! document 002 (x + Attn(LN(x)), then + FFN(LN(·))) or the post-LN order of document 003 and the
//! original transformer (LN(x + Attn(x)), then LN(· + FFN(·))).
//!
//! Every function takes a batch of B sequences stacked as a (B·T)×C matrix and the sequence
//! length(s) in an [`AttnSpec`]; queries and keys/values may come from different sequences of
//! different lengths (cross-attention). Every forward has a backward, gradient-checked in
//! `tests/ch06_attention.rs`. All products go through [`crate::matmul`].
//!
//! The second half of the module reproduces document 003's "You are welcome" walk-through
//! ([`walkthrough`]) and its supplemental Python cells; the prose is `chapters/ch06_attention.md`.

use crate::ch02_softmax::{softmax_rows_backward, softmax_rows_forward};
use crate::ch03_mlp::{
    Activation, activation_backward, activation_forward, dense_backward, dense_forward,
};
use crate::ch05_positions::{self as ch05, PRINTED_X_PLUS_PE, PRINTED_Y_PLUS_PE, Reading};
use crate::errata::Erratum;
use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::{Float, ensure_finite, lane_dot, lane_sum};
use crate::matmul::{matmul, matmul_nt, matmul_tn};
use crate::plot::{Figure, Heatmap};
use crate::report::{Chapter, Walk, Worked, matrix_like};
use crate::sources::{D0, D1, D2, D3, THIS_CRATE};
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};

// ───────────────────────────── small helpers ─────────────────────────────

/// x + b with the 1×C row b added to every row of x.
fn add_row<T: Float>(
    op: &'static str,
    arg: &'static str,
    x: &DMatrix<T>,
    b: &DMatrix<T>,
) -> Result<DMatrix<T>> {
    if b.nrows() != 1 || b.ncols() != x.ncols() {
        return Err(shape_error(op, arg, format!("1×{}", x.ncols()), shape_of(b)));
    }
    Ok(DMatrix::from_fn(x.nrows(), x.ncols(), |r, c| x[(r, c)] + b[(0, c)]))
}

/// The 1×C row of column sums (the gradient of a broadcast bias).
fn column_sums<T: Float>(m: &DMatrix<T>) -> DMatrix<T> {
    DMatrix::from_fn(1, m.ncols(), |_, c| m.column(c).iter().copied().sum())
}

/// y = xW + b through the crate's matmul; b is 1×out.
fn affine<T: Float>(
    op: &'static str,
    x: &DMatrix<T>,
    w: &DMatrix<T>,
    b: &DMatrix<T>,
) -> Result<DMatrix<T>> {
    if x.ncols() != w.nrows() {
        return Err(shape_error(
            op,
            "x and W",
            format!("W with {} rows", x.ncols()),
            format!("x {}, W {}", shape_of(x), shape_of(w)),
        ));
    }
    add_row(op, "bias", &matmul(x, w)?, b)
}

fn same_shape<T: Float>(
    op: &'static str,
    arg: &'static str,
    want: &DMatrix<T>,
    got: &DMatrix<T>,
) -> Result<()> {
    if want.shape() != got.shape() {
        return Err(shape_error(op, arg, shape_of(want), shape_of(got)));
    }
    Ok(())
}

/// The residual connection x + f(x); shapes must agree. Its backward passes the incoming gradient
/// unchanged to both x and f(x).
pub fn residual_add<T: Float>(x: &DMatrix<T>, fx: &DMatrix<T>) -> Result<DMatrix<T>> {
    same_shape("residual_add", "x and f(x)", x, fx)?;
    Ok(x + fx)
}

// ───────────────────────────── masks ─────────────────────────────

/// The causal mask as an additive T_q×T_k matrix: 0 where query i may see key j, −∞ elsewhere.
///
/// Query i sits at position i + (T_k − T_q) of the key sequence (the queries are the last T_q
/// positions, as with a key/value cache), so it sees keys j ≤ i + T_k − T_q. For self-attention
/// (T_q = T_k) that is the lower triangle, diagonal included. Requires T_k ≥ T_q ≥ 1.
pub fn causal_mask<T: Float>(q_len: usize, kv_len: usize) -> Result<DMatrix<T>> {
    if q_len == 0 || kv_len == 0 {
        return Err(invalid(
            "causal_mask",
            "q_len, kv_len",
            format!("both must be at least 1; got {q_len}, {kv_len}"),
        ));
    }
    if kv_len < q_len {
        return Err(invalid(
            "causal_mask",
            "q_len, kv_len",
            format!(
                "a causal mask needs at least as many keys as queries; got {q_len} queries, {kv_len} keys"
            ),
        ));
    }
    let offset = kv_len - q_len;
    Ok(DMatrix::from_fn(
        q_len,
        kv_len,
        |i, j| if j <= i + offset { T::zero() } else { T::neg_infinity() },
    ))
}

/// A padding mask for a batch: sequence b has `kv_lengths[b]` real keys followed by padding. The
/// result is (B·T_q)×T_k with −∞ in the padded key columns of sequence b's rows.
pub fn padding_mask<T: Float>(
    kv_lengths: &[usize],
    q_len: usize,
    kv_len: usize,
) -> Result<DMatrix<T>> {
    if kv_lengths.is_empty() {
        return Err(Error::Empty { op: "padding_mask", arg: "kv_lengths" });
    }
    if q_len == 0 || kv_len == 0 {
        return Err(invalid(
            "padding_mask",
            "q_len, kv_len",
            format!("both must be at least 1; got {q_len}, {kv_len}"),
        ));
    }
    if let Some((b, &l)) = kv_lengths.iter().enumerate().find(|&(_, &l)| l == 0 || l > kv_len) {
        return Err(invalid(
            "padding_mask",
            "kv_lengths",
            format!("sequence {b} has length {l}; each must lie in 1..={kv_len}"),
        ));
    }
    Ok(DMatrix::from_fn(kv_lengths.len() * q_len, kv_len, |r, j| {
        if j < kv_lengths[r / q_len] { T::zero() } else { T::neg_infinity() }
    }))
}

/// How to attend: sequence lengths, masking and the score scale.
#[derive(Clone, Debug, PartialEq)]
pub struct AttnSpec<T: Float> {
    /// T_q: the length of each query sequence (rows of Q per batch element).
    pub q_len: usize,
    /// T_k: the length of each key/value sequence.
    pub kv_len: usize,
    /// Apply the causal mask ([`causal_mask`]).
    pub causal: bool,
    /// An additive mask, T_q×T_k (shared by the batch) or (B·T_q)×T_k (one block per sequence),
    /// entries finite or −∞, added to the scores after scaling (and after the causal mask).
    pub mask: Option<DMatrix<T>>,
    /// The factor s in S = s·QKᵀ; `None` means 1/√d_k.
    pub scale: Option<f64>,
}

impl<T: Float> AttnSpec<T> {
    /// Bidirectional self-attention over sequences of length `seq_len` (an encoder).
    pub fn bidirectional(seq_len: usize) -> Self {
        AttnSpec { q_len: seq_len, kv_len: seq_len, causal: false, mask: None, scale: None }
    }
    /// Causal self-attention (a decoder, a GPT).
    pub fn causal(seq_len: usize) -> Self {
        AttnSpec { causal: true, ..Self::bidirectional(seq_len) }
    }
    /// Cross-attention: queries from sequences of length `q_len`, keys and values from sequences
    /// of length `kv_len`, no mask.
    pub fn cross(q_len: usize, kv_len: usize) -> Self {
        AttnSpec { q_len, kv_len, causal: false, mask: None, scale: None }
    }
    /// The same, with an additive mask (see [`AttnSpec::mask`]).
    pub fn with_mask(mut self, mask: DMatrix<T>) -> Self {
        self.mask = Some(mask);
        self
    }
    /// The same, with the score scale s instead of 1/√d_k.
    pub fn with_scale(mut self, scale: f64) -> Self {
        self.scale = Some(scale);
        self
    }

    fn validate(&self, op: &'static str) -> Result<()> {
        if self.q_len == 0 || self.kv_len == 0 {
            return Err(invalid(
                op,
                "spec",
                format!(
                    "sequence lengths must be at least 1; got q_len {}, kv_len {}",
                    self.q_len, self.kv_len
                ),
            ));
        }
        if self.causal && self.kv_len < self.q_len {
            return Err(invalid(
                op,
                "spec",
                format!(
                    "causal attention needs kv_len ≥ q_len; got {} < {}",
                    self.kv_len, self.q_len
                ),
            ));
        }
        if let Some(s) = self.scale
            && !(s.is_finite() && s > 0.0)
        {
            return Err(invalid(op, "scale", format!("must be finite and positive; got {s}")));
        }
        if let Some(m) = &self.mask {
            if m.ncols() != self.kv_len || m.nrows() == 0 || !m.nrows().is_multiple_of(self.q_len) {
                return Err(shape_error(
                    op,
                    "mask",
                    format!("{}×{} or (B·{})×{}", self.q_len, self.kv_len, self.q_len, self.kv_len),
                    shape_of(m),
                ));
            }
            if let Some((i, v)) =
                m.iter().enumerate().find(|(_, v)| v.is_nan() || **v == T::infinity())
            {
                return Err(invalid(
                    op,
                    "mask",
                    format!("entries must be finite or −∞; found {v} at flat index {i}"),
                ));
            }
        }
        Ok(())
    }
}

// ───────────────────────────── scaled dot-product attention ─────────────────────────────

/// Checks shapes and returns the batch size B.
fn attention_batch<T: Float>(
    op: &'static str,
    q: &DMatrix<T>,
    k: &DMatrix<T>,
    v: &DMatrix<T>,
    spec: &AttnSpec<T>,
) -> Result<usize> {
    spec.validate(op)?;
    if q.nrows() == 0 || q.ncols() == 0 {
        return Err(Error::Empty { op, arg: "q" });
    }
    if v.ncols() == 0 {
        return Err(Error::Empty { op, arg: "v" });
    }
    if !q.nrows().is_multiple_of(spec.q_len) {
        return Err(shape_error(
            op,
            "q and q_len",
            format!("a multiple of {} rows", spec.q_len),
            shape_of(q),
        ));
    }
    let b = q.nrows() / spec.q_len;
    if k.nrows() != b * spec.kv_len {
        return Err(shape_error(
            op,
            "k (rows: batch × kv_len)",
            format!("{} rows ({} sequences of {})", b * spec.kv_len, b, spec.kv_len),
            format!("k {}, q {}", shape_of(k), shape_of(q)),
        ));
    }
    if k.ncols() != q.ncols() {
        return Err(shape_error(
            op,
            "q and k (key width d_k)",
            format!("k with {} columns", q.ncols()),
            format!("q {}, k {}", shape_of(q), shape_of(k)),
        ));
    }
    if v.nrows() != k.nrows() {
        return Err(shape_error(
            op,
            "k and v (one value per key)",
            format!("v with {} rows", k.nrows()),
            format!("k {}, v {}", shape_of(k), shape_of(v)),
        ));
    }
    if let Some(m) = &spec.mask
        && m.nrows() != spec.q_len
        && m.nrows() != q.nrows()
    {
        return Err(shape_error(
            op,
            "mask",
            format!("{}×{} or {}×{}", spec.q_len, spec.kv_len, q.nrows(), spec.kv_len),
            shape_of(m),
        ));
    }
    ensure_finite(op, "q", q)?;
    ensure_finite(op, "k", k)?;
    ensure_finite(op, "v", v)?;
    Ok(b)
}

fn scale_of<T: Float>(spec: &AttnSpec<T>, d_k: usize) -> T {
    T::of(spec.scale.unwrap_or(1.0 / (d_k as f64).sqrt()))
}

/// Scaled and masked scores of sequence b: s·Q_b K_bᵀ + masks (T_q×T_k).
fn block_scores<T: Float>(
    q_b: &DMatrix<T>,
    k_b: &DMatrix<T>,
    spec: &AttnSpec<T>,
    b: usize,
    scale: T,
) -> Result<DMatrix<T>> {
    let mut s = matmul_nt(q_b, k_b)? * scale;
    if spec.causal {
        let offset = spec.kv_len - spec.q_len;
        for i in 0..spec.q_len {
            for j in (i + offset + 1)..spec.kv_len {
                s[(i, j)] = T::neg_infinity();
            }
        }
    }
    if let Some(m) = &spec.mask {
        let first = if m.nrows() == spec.q_len { 0 } else { b * spec.q_len };
        for i in 0..spec.q_len {
            for j in 0..spec.kv_len {
                s[(i, j)] += m[(first + i, j)];
            }
        }
    }
    Ok(s)
}

/// Row-wise softmax of the masked scores, by chapter 2's [`softmax_rows_forward`] (max-subtracted,
/// −∞ entries get exactly 0). A query row whose every key is masked has no distribution to give:
/// it is reported here, naming the row of the whole batch and the mask, never turned into NaN.
fn masked_softmax_rows<T: Float>(
    op: &'static str,
    s: &DMatrix<T>,
    row_offset: usize,
) -> Result<DMatrix<T>> {
    for r in 0..s.nrows() {
        if s.row(r).iter().all(|&v| v == T::neg_infinity()) {
            return Err(invalid(
                op,
                "mask",
                format!(
                    "query row {} masks every key, so its attention weights are undefined",
                    r + row_offset
                ),
            ));
        }
    }
    softmax_rows_forward(s)
}

/// The scaled, masked scores S = s·QKᵀ + M of every sequence, stacked as (B·T_q)×T_k (masked
/// entries are −∞). For display and tests; [`attention_forward`] computes them on the way.
pub fn attention_scores<T: Float>(
    q: &DMatrix<T>,
    k: &DMatrix<T>,
    spec: &AttnSpec<T>,
) -> Result<DMatrix<T>> {
    const OP: &str = "attention_scores";
    let v = DMatrix::zeros(k.nrows(), 1);
    let batch = attention_batch(OP, q, k, &v, spec)?;
    let scale = scale_of(spec, q.ncols());
    let mut out = DMatrix::zeros(q.nrows(), spec.kv_len);
    for b in 0..batch {
        let q_b = q.rows(b * spec.q_len, spec.q_len).into_owned();
        let k_b = k.rows(b * spec.kv_len, spec.kv_len).into_owned();
        out.rows_mut(b * spec.q_len, spec.q_len)
            .copy_from(&block_scores(&q_b, &k_b, spec, b, scale)?);
    }
    Ok(out)
}

/// The output of attention and the weights that produced it.
#[derive(Clone, Debug, PartialEq)]
pub struct Attention<T: Float> {
    /// O = A V, (B·T_q)×d_v.
    pub out: DMatrix<T>,
    /// A = row-softmax(S), (B·T_q)×T_k: row r holds the weights of query r over its sequence's keys.
    pub weights: DMatrix<T>,
}

/// Scaled dot-product attention, batched: O = softmax(s·QKᵀ + M)·V per sequence.
///
/// Shapes: q (B·T_q)×d_k, k (B·T_k)×d_k, v (B·T_k)×d_v with T_q, T_k from `spec`. Errors on
/// mismatched shapes, non-finite input, a mask of the wrong shape, or a query row whose keys are
/// all masked.
pub fn attention_forward<T: Float>(
    q: &DMatrix<T>,
    k: &DMatrix<T>,
    v: &DMatrix<T>,
    spec: &AttnSpec<T>,
) -> Result<Attention<T>> {
    const OP: &str = "attention_forward";
    let batch = attention_batch(OP, q, k, v, spec)?;
    let scale = scale_of(spec, q.ncols());
    let mut out = DMatrix::zeros(q.nrows(), v.ncols());
    let mut weights = DMatrix::zeros(q.nrows(), spec.kv_len);
    for b in 0..batch {
        let q_b = q.rows(b * spec.q_len, spec.q_len).into_owned();
        let k_b = k.rows(b * spec.kv_len, spec.kv_len).into_owned();
        let v_b = v.rows(b * spec.kv_len, spec.kv_len).into_owned();
        let s = block_scores(&q_b, &k_b, spec, b, scale)?; //   S = s·QKᵀ + M
        let a = masked_softmax_rows(OP, &s, b * spec.q_len)?; // A = softmax(S)
        let o = matmul(&a, &v_b)?; //                            O = A V
        out.rows_mut(b * spec.q_len, spec.q_len).copy_from(&o);
        weights.rows_mut(b * spec.q_len, spec.q_len).copy_from(&a);
    }
    Ok(Attention { out, weights })
}

/// Gradients of attention with respect to its three inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionGrads<T: Float> {
    /// ∂L/∂Q.
    pub d_q: DMatrix<T>,
    /// ∂L/∂K.
    pub d_k: DMatrix<T>,
    /// ∂L/∂V.
    pub d_v: DMatrix<T>,
}

/// Backward of [`attention_forward`], given its inputs, its weights and ∂L/∂O.
///
/// ```text
/// O = A V            ⇒ ∂L/∂V = Aᵀ ∂L/∂O,   ∂L/∂A = ∂L/∂O Vᵀ
/// A = softmax(S)     ⇒ ∂L/∂S = A ⊙ (∂L/∂A − rowsum(∂L/∂A ⊙ A))     (0 where masked, since A = 0)
/// S = s·QKᵀ + M      ⇒ ∂L/∂Q = s ∂L/∂S K,   ∂L/∂K = s (∂L/∂S)ᵀ Q    (M is a constant)
/// ```
pub fn attention_backward<T: Float>(
    q: &DMatrix<T>,
    k: &DMatrix<T>,
    v: &DMatrix<T>,
    weights: &DMatrix<T>,
    d_out: &DMatrix<T>,
    spec: &AttnSpec<T>,
) -> Result<AttentionGrads<T>> {
    const OP: &str = "attention_backward";
    let batch = attention_batch(OP, q, k, v, spec)?;
    if weights.nrows() != q.nrows() || weights.ncols() != spec.kv_len {
        return Err(shape_error(
            OP,
            "weights",
            format!("{}×{}", q.nrows(), spec.kv_len),
            shape_of(weights),
        ));
    }
    if d_out.nrows() != q.nrows() || d_out.ncols() != v.ncols() {
        return Err(shape_error(
            OP,
            "d_out",
            format!("{}×{}", q.nrows(), v.ncols()),
            shape_of(d_out),
        ));
    }
    ensure_finite(OP, "d_out", d_out)?;
    let scale = scale_of(spec, q.ncols());
    let mut d_q = DMatrix::zeros(q.nrows(), q.ncols());
    let mut d_k = DMatrix::zeros(k.nrows(), k.ncols());
    let mut d_v = DMatrix::zeros(v.nrows(), v.ncols());
    for b in 0..batch {
        let (rq, rk) = (b * spec.q_len, b * spec.kv_len);
        let q_b = q.rows(rq, spec.q_len).into_owned();
        let k_b = k.rows(rk, spec.kv_len).into_owned();
        let v_b = v.rows(rk, spec.kv_len).into_owned();
        let a = weights.rows(rq, spec.q_len).into_owned();
        let d_o = d_out.rows(rq, spec.q_len).into_owned();
        d_v.rows_mut(rk, spec.kv_len).copy_from(&matmul_tn(&a, &d_o)?); // O = AV ⇒ ∂V = Aᵀ ∂O
        let d_a = matmul_nt(&d_o, &v_b)?; //                                O = AV ⇒ ∂A = ∂O Vᵀ
        let d_s = softmax_rows_backward(&a, &d_a)?; //                      A = softmax(S) ⇒ ∂S = A ⊙ (∂A − rowsum(∂A ⊙ A))
        d_q.rows_mut(rq, spec.q_len).copy_from(&(matmul(&d_s, &k_b)? * scale)); // S = sQKᵀ ⇒ ∂Q = s ∂S K
        d_k.rows_mut(rk, spec.kv_len).copy_from(&(matmul_tn(&d_s, &q_b)? * scale)); //       ∂K = s ∂Sᵀ Q
    }
    Ok(AttentionGrads { d_q, d_k, d_v })
}

// ───────────────────────────── multi-head attention ─────────────────────────────

/// Splits the columns of m into `heads` equal blocks: head h gets columns h·w … (h+1)·w − 1.
pub fn split_heads<T: Float>(m: &DMatrix<T>, heads: usize) -> Result<Vec<DMatrix<T>>> {
    if heads == 0 || !m.ncols().is_multiple_of(heads) {
        return Err(invalid(
            "split_heads",
            "heads",
            format!("the width {} is not divisible by {heads} heads", m.ncols()),
        ));
    }
    let w = m.ncols() / heads;
    Ok((0..heads).map(|h| m.columns(h * w, w).into_owned()).collect())
}

/// Concatenates per-head outputs side by side (the inverse of [`split_heads`]).
pub fn concat_heads<T: Float>(parts: &[DMatrix<T>]) -> Result<DMatrix<T>> {
    let first = parts.first().ok_or(Error::Empty { op: "concat_heads", arg: "parts" })?;
    if let Some(p) = parts.iter().find(|p| p.nrows() != first.nrows()) {
        return Err(shape_error(
            "concat_heads",
            "parts (rows)",
            format!("{} rows", first.nrows()),
            shape_of(p),
        ));
    }
    let width: usize = parts.iter().map(|p| p.ncols()).sum();
    let mut out = DMatrix::zeros(first.nrows(), width);
    let mut c = 0;
    for p in parts {
        out.columns_mut(c, p.ncols()).copy_from(p);
        c += p.ncols();
    }
    Ok(out)
}

/// The weights of multi-head attention. Queries come from an input of width C_q, keys and values
/// from one of width C_kv (the same input for self-attention):
/// w_q C_q×(H·d_k), w_k C_kv×(H·d_k), w_v C_kv×(H·d_v), w_o (H·d_v)×C_out, each bias 1×(its columns).
#[derive(Clone, Debug, PartialEq)]
pub struct MultiHead<T: Float> {
    /// H, the number of heads.
    pub heads: usize,
    /// W_Q.
    pub w_q: DMatrix<T>,
    /// b_Q.
    pub b_q: DMatrix<T>,
    /// W_K.
    pub w_k: DMatrix<T>,
    /// b_K.
    pub b_k: DMatrix<T>,
    /// W_V.
    pub w_v: DMatrix<T>,
    /// b_V.
    pub b_v: DMatrix<T>,
    /// W_O.
    pub w_o: DMatrix<T>,
    /// b_O.
    pub b_o: DMatrix<T>,
}

impl<T: Float> MultiHead<T> {
    /// Multi-head attention without biases (all zero), validated.
    pub fn new(
        heads: usize,
        w_q: DMatrix<T>,
        w_k: DMatrix<T>,
        w_v: DMatrix<T>,
        w_o: DMatrix<T>,
    ) -> Result<Self> {
        let z = |m: &DMatrix<T>| DMatrix::zeros(1, m.ncols());
        let p = MultiHead {
            heads,
            b_q: z(&w_q),
            b_k: z(&w_k),
            b_v: z(&w_v),
            b_o: z(&w_o),
            w_q,
            w_k,
            w_v,
            w_o,
        };
        p.validate()?;
        Ok(p)
    }

    /// Random weights N(0, std²) from `rng`, zero biases: queries of width `c_q`, keys/values of
    /// width `c_kv`, `heads` heads of width `d_head`, output width `c_out`.
    pub fn random(
        heads: usize,
        c_q: usize,
        c_kv: usize,
        d_head: usize,
        c_out: usize,
        std: f64,
        rng: &mut crate::rng::Rng,
    ) -> Result<Self> {
        let inner = heads * d_head;
        Self::new(
            heads,
            rng.normal_matrix(c_q, inner, std),
            rng.normal_matrix(c_kv, inner, std),
            rng.normal_matrix(c_kv, inner, std),
            rng.normal_matrix(inner, c_out, std),
        )
    }

    /// Checks every shape: the number of heads divides the query/key width and the value width,
    /// W_K and W_V read the same input width, W_O reads the concatenated heads, biases are rows.
    pub fn validate(&self) -> Result<()> {
        const OP: &str = "MultiHead";
        if self.heads == 0 {
            return Err(invalid(OP, "heads", "at least one head is needed"));
        }
        for (arg, w) in
            [("w_q", &self.w_q), ("w_k", &self.w_k), ("w_v", &self.w_v), ("w_o", &self.w_o)]
        {
            if w.is_empty() {
                return Err(Error::Empty { op: OP, arg });
            }
        }
        if self.w_q.ncols() != self.w_k.ncols() {
            return Err(shape_error(
                OP,
                "w_q and w_k (query/key width)",
                format!("w_k with {} columns", self.w_q.ncols()),
                shape_of(&self.w_k),
            ));
        }
        for (arg, w) in [("w_q (d_model)", &self.w_q), ("w_v (d_model)", &self.w_v)] {
            if !w.ncols().is_multiple_of(self.heads) {
                return Err(invalid(
                    OP,
                    arg,
                    format!("{} columns are not divisible by {} heads", w.ncols(), self.heads),
                ));
            }
        }
        if self.w_k.nrows() != self.w_v.nrows() {
            return Err(shape_error(
                OP,
                "w_k and w_v (key/value input width)",
                format!("w_v with {} rows", self.w_k.nrows()),
                shape_of(&self.w_v),
            ));
        }
        if self.w_o.nrows() != self.w_v.ncols() {
            return Err(shape_error(
                OP,
                "w_o (reads the concatenated heads)",
                format!("{} rows", self.w_v.ncols()),
                shape_of(&self.w_o),
            ));
        }
        for (arg, b, w) in [
            ("b_q", &self.b_q, &self.w_q),
            ("b_k", &self.b_k, &self.w_k),
            ("b_v", &self.b_v, &self.w_v),
            ("b_o", &self.b_o, &self.w_o),
        ] {
            if b.nrows() != 1 || b.ncols() != w.ncols() {
                return Err(shape_error(OP, arg, format!("1×{}", w.ncols()), shape_of(b)));
            }
        }
        Ok(())
    }

    /// d_k, the width of one head's queries and keys.
    pub fn head_dim(&self) -> usize {
        self.w_q.ncols() / self.heads.max(1)
    }
}

/// What [`mha_backward`] needs from the forward pass.
#[derive(Clone, Debug, PartialEq)]
pub struct MhaCache<T: Float> {
    /// The query input.
    pub x_q: DMatrix<T>,
    /// The key/value input.
    pub x_kv: DMatrix<T>,
    /// Q = x_q W_Q + b_Q (all heads side by side).
    pub q: DMatrix<T>,
    /// K = x_kv W_K + b_K.
    pub k: DMatrix<T>,
    /// V = x_kv W_V + b_V.
    pub v: DMatrix<T>,
    /// Each head's attention weights, (B·T_q)×T_k.
    pub weights: Vec<DMatrix<T>>,
    /// The concatenated head outputs, before W_O.
    pub concat: DMatrix<T>,
    /// The lengths and masks used.
    pub spec: AttnSpec<T>,
}

/// Multi-head attention: Q, K, V projections, H heads of [`attention_forward`], concatenation,
/// W_O. `x_q` is (B·T_q)×C_q; `x_kv` is (B·T_k)×C_kv (pass the same matrix twice for
/// self-attention). Returns the (B·T_q)×C_out output and the cache for the backward pass.
pub fn mha_forward<T: Float>(
    p: &MultiHead<T>,
    x_q: &DMatrix<T>,
    x_kv: &DMatrix<T>,
    spec: &AttnSpec<T>,
) -> Result<(DMatrix<T>, MhaCache<T>)> {
    const OP: &str = "mha_forward";
    p.validate()?;
    if x_q.ncols() != p.w_q.nrows() {
        return Err(shape_error(
            OP,
            "x_q and w_q",
            format!("x_q with {} columns", p.w_q.nrows()),
            format!("x_q {}, w_q {}", shape_of(x_q), shape_of(&p.w_q)),
        ));
    }
    if x_kv.ncols() != p.w_k.nrows() {
        return Err(shape_error(
            OP,
            "x_kv and w_k",
            format!("x_kv with {} columns", p.w_k.nrows()),
            format!("x_kv {}, w_k {}", shape_of(x_kv), shape_of(&p.w_k)),
        ));
    }
    let q = affine(OP, x_q, &p.w_q, &p.b_q)?; //  Q = X_q W_Q + b_Q
    let k = affine(OP, x_kv, &p.w_k, &p.b_k)?; // K = X_kv W_K + b_K
    let v = affine(OP, x_kv, &p.w_v, &p.b_v)?; // V = X_kv W_V + b_V
    let (qs, ks, vs) =
        (split_heads(&q, p.heads)?, split_heads(&k, p.heads)?, split_heads(&v, p.heads)?);
    let mut outs = Vec::with_capacity(p.heads);
    let mut weights = Vec::with_capacity(p.heads);
    for h in 0..p.heads {
        let att = attention_forward(&qs[h], &ks[h], &vs[h], spec)?; // head h
        outs.push(att.out);
        weights.push(att.weights);
    }
    let concat = concat_heads(&outs)?; //                Concat(head₁ … head_H)
    let out = affine(OP, &concat, &p.w_o, &p.b_o)?; //   · W_O + b_O
    let cache = MhaCache {
        x_q: x_q.clone(),
        x_kv: x_kv.clone(),
        q,
        k,
        v,
        weights,
        concat,
        spec: spec.clone(),
    };
    Ok((out, cache))
}

/// Gradients of multi-head attention: both inputs and all eight weights.
#[derive(Clone, Debug, PartialEq)]
pub struct MhaGrads<T: Float> {
    /// ∂L/∂x_q.
    pub d_x_q: DMatrix<T>,
    /// ∂L/∂x_kv (for self-attention, add it to d_x_q).
    pub d_x_kv: DMatrix<T>,
    /// ∂L/∂W_Q.
    pub d_w_q: DMatrix<T>,
    /// ∂L/∂b_Q.
    pub d_b_q: DMatrix<T>,
    /// ∂L/∂W_K.
    pub d_w_k: DMatrix<T>,
    /// ∂L/∂b_K.
    pub d_b_k: DMatrix<T>,
    /// ∂L/∂W_V.
    pub d_w_v: DMatrix<T>,
    /// ∂L/∂b_V.
    pub d_b_v: DMatrix<T>,
    /// ∂L/∂W_O.
    pub d_w_o: DMatrix<T>,
    /// ∂L/∂b_O.
    pub d_b_o: DMatrix<T>,
}

/// Backward of [`mha_forward`] given ∂L/∂out.
pub fn mha_backward<T: Float>(
    p: &MultiHead<T>,
    cache: &MhaCache<T>,
    d_out: &DMatrix<T>,
) -> Result<MhaGrads<T>> {
    const OP: &str = "mha_backward";
    p.validate()?;
    if d_out.nrows() != cache.concat.nrows() || d_out.ncols() != p.w_o.ncols() {
        return Err(shape_error(
            OP,
            "d_out",
            format!("{}×{}", cache.concat.nrows(), p.w_o.ncols()),
            shape_of(d_out),
        ));
    }
    let d_w_o = matmul_tn(&cache.concat, d_out)?; //  out = C W_O + b_O ⇒ ∂W_O = Cᵀ ∂out
    let d_b_o = column_sums(d_out); //                                   ∂b_O = Σ_rows ∂out
    let d_concat = matmul_nt(d_out, &p.w_o)?; //                          ∂C = ∂out W_Oᵀ
    let d_heads = split_heads(&d_concat, p.heads)?; //                    C = Concat(heads)
    let (qs, ks, vs) = (
        split_heads(&cache.q, p.heads)?,
        split_heads(&cache.k, p.heads)?,
        split_heads(&cache.v, p.heads)?,
    );
    let (mut dq, mut dk, mut dv) = (Vec::new(), Vec::new(), Vec::new());
    for h in 0..p.heads {
        let g = attention_backward(
            &qs[h],
            &ks[h],
            &vs[h],
            &cache.weights[h],
            &d_heads[h],
            &cache.spec,
        )?;
        dq.push(g.d_q);
        dk.push(g.d_k);
        dv.push(g.d_v);
    }
    let (d_q, d_k, d_v) = (concat_heads(&dq)?, concat_heads(&dk)?, concat_heads(&dv)?);
    // Q = X_q W_Q + b_Q, K = X_kv W_K + b_K, V = X_kv W_V + b_V.
    Ok(MhaGrads {
        d_x_q: matmul_nt(&d_q, &p.w_q)?,
        d_x_kv: matmul_nt(&d_k, &p.w_k)? + matmul_nt(&d_v, &p.w_v)?,
        d_w_q: matmul_tn(&cache.x_q, &d_q)?,
        d_b_q: column_sums(&d_q),
        d_w_k: matmul_tn(&cache.x_kv, &d_k)?,
        d_b_k: column_sums(&d_k),
        d_w_v: matmul_tn(&cache.x_kv, &d_v)?,
        d_b_v: column_sums(&d_v),
        d_w_o,
        d_b_o,
    })
}

// ───────────────────────────── LayerNorm ─────────────────────────────

/// Where the stability constant ε enters LayerNorm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epsilon {
    /// (x − μ)/√(σ² + ε): the formula of documents 002 and 003 and of PyTorch and GPT-2.
    InsideSqrt,
    /// (x − μ)/(σ + ε): what document 003's first printed LayerNorm (and its decoder cell) computes.
    AddedToStd,
}

/// LayerNorm over the columns of each row: y = γ ⊙ (x − μ)/s + β with μ and σ² the mean and
/// population variance (divide by C) of the row, and s = √(σ² + ε) or σ + ε.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNorm<T: Float> {
    /// γ, 1×C.
    pub gamma: DMatrix<T>,
    /// β, 1×C.
    pub beta: DMatrix<T>,
    /// ε > 0.
    pub eps: f64,
    /// Where ε enters.
    pub placement: Epsilon,
}

/// The ε document 003 uses, and a common default.
pub const LAYER_NORM_EPS: f64 = 1e-6;

impl<T: Float> LayerNorm<T> {
    /// γ = 1, β = 0, ε inside the square root.
    pub fn new(width: usize, eps: f64) -> Result<Self> {
        let ln = LayerNorm {
            gamma: DMatrix::from_element(1, width, T::one()),
            beta: DMatrix::zeros(1, width),
            eps,
            placement: Epsilon::InsideSqrt,
        };
        ln.validate("LayerNorm::new")?;
        Ok(ln)
    }

    /// The same with ε placed as given.
    pub fn with_placement(mut self, placement: Epsilon) -> Self {
        self.placement = placement;
        self
    }

    fn validate(&self, op: &'static str) -> Result<()> {
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err(invalid(op, "eps", format!("ε must be finite and > 0; got {}", self.eps)));
        }
        if self.gamma.ncols() == 0 {
            return Err(Error::Empty { op, arg: "gamma" });
        }
        if self.gamma.nrows() != 1 {
            return Err(shape_error(
                op,
                "gamma",
                format!("1×{}", self.gamma.ncols()),
                shape_of(&self.gamma),
            ));
        }
        if self.beta.shape() != self.gamma.shape() {
            return Err(shape_error(
                op,
                "beta (same shape as gamma)",
                shape_of(&self.gamma),
                shape_of(&self.beta),
            ));
        }
        ensure_finite(op, "gamma", &self.gamma)?;
        ensure_finite(op, "beta", &self.beta)
    }
}

/// What [`layer_norm_backward`] needs.
#[derive(Clone, Debug, PartialEq)]
pub struct LnCache<T: Float> {
    /// x̂ = (x − μ)/s, the normalised rows.
    pub x_hat: DMatrix<T>,
    /// s per row: √(σ² + ε) or σ + ε.
    pub denom: Vec<T>,
    /// σ per row (population standard deviation).
    pub sigma: Vec<T>,
}

/// LayerNorm of every row of x (N×C). Errors on a width that differs from γ's, ε ≤ 0, non-finite
/// input. A constant row has σ = 0 and comes out as β, finite.
pub fn layer_norm_forward<T: Float>(
    ln: &LayerNorm<T>,
    x: &DMatrix<T>,
) -> Result<(DMatrix<T>, LnCache<T>)> {
    const OP: &str = "layer_norm_forward";
    ln.validate(OP)?;
    if x.ncols() != ln.gamma.ncols() {
        return Err(shape_error(
            OP,
            "x and gamma (row width)",
            format!("x with {} columns", ln.gamma.ncols()),
            shape_of(x),
        ));
    }
    if x.nrows() == 0 {
        return Err(Error::Empty { op: OP, arg: "x" });
    }
    ensure_finite(OP, "x", x)?;
    let (n, cols) = x.shape();
    let mut cache = LnCache {
        x_hat: DMatrix::zeros(n, cols),
        denom: vec![T::zero(); n],
        sigma: vec![T::zero(); n],
    };
    let mut y = DMatrix::zeros(n, cols);
    layer_norm_forward_into(ln, x, &mut cache, &mut y);
    Ok((y, cache))
}

/// [`layer_norm_forward`] into buffers the caller keeps (chapter 9's training step reuses them
/// from step to step): writes x̂, s and σ into `cache` (x̂ N×C, s and σ one per row) and y into `y`
/// (N×C). Nothing is checked here: the shapes must agree and γ, β, ε be valid
/// ([`layer_norm_forward`] checks them all and then calls this).
pub fn layer_norm_forward_into<T: Float>(
    ln: &LayerNorm<T>,
    x: &DMatrix<T>,
    cache: &mut LnCache<T>,
    y: &mut DMatrix<T>,
) {
    // Column-major storage keeps a row's entries one column apart, so every row statistic is
    // accumulated column by column for all rows at once: the same sums in the same order as
    // walking each row on its own, read contiguously.
    let (n, cols) = x.shape();
    let c = T::of(cols as f64);
    let eps = T::of(ln.eps);
    let columns = || x.as_slice().chunks_exact(n);
    let mut mu = vec![T::neg_zero(); n];
    for column in columns() {
        for (m, &v) in mu.iter_mut().zip(column) {
            *m += v;
        }
    }
    mu.iter_mut().for_each(|m| *m /= c); //                                  μ = (1/C) Σ x
    let mut var = vec![T::neg_zero(); n];
    for column in columns() {
        for ((s, &v), &m) in var.iter_mut().zip(column).zip(&mu) {
            *s += (v - m) * (v - m);
        }
    }
    var.iter_mut().for_each(|s| *s /= c); //                                 σ² = (1/C) Σ (x − μ)²
    for ((sd, den), &v) in cache.sigma.iter_mut().zip(cache.denom.iter_mut()).zip(&var) {
        *sd = v.sqrt();
        *den = match ln.placement {
            Epsilon::InsideSqrt => (v + eps).sqrt(),
            Epsilon::AddedToStd => *sd + eps,
        };
    }
    let (x_hat, denom) = (&mut cache.x_hat, &cache.denom);
    for (j, ((column, hat), out)) in columns()
        .zip(x_hat.as_mut_slice().chunks_exact_mut(n))
        .zip(y.as_mut_slice().chunks_exact_mut(n))
        .enumerate()
    {
        let (g, b) = (ln.gamma[(0, j)], ln.beta[(0, j)]);
        for r in 0..n {
            hat[r] = (column[r] - mu[r]) / denom[r]; //                       x̂ = (x − μ)/s
            out[r] = g * hat[r] + b; //                                       y = γx̂ + β
        }
    }
}

/// Gradients of LayerNorm.
#[derive(Clone, Debug, PartialEq)]
pub struct LnGrads<T: Float> {
    /// ∂L/∂x.
    pub d_x: DMatrix<T>,
    /// ∂L/∂γ.
    pub d_gamma: DMatrix<T>,
    /// ∂L/∂β.
    pub d_beta: DMatrix<T>,
}

/// Backward of [`layer_norm_forward`]. With g = γ ⊙ ∂L/∂y, per row:
///
/// ```text
/// ε inside:  ∂L/∂x = (g − mean(g) − x̂ · mean(g ⊙ x̂)) / s
/// σ + ε:     ∂L/∂x = (g − mean(g) − x̂ · (s/σ) · mean(g ⊙ x̂)) / s      ((x − μ)/σ taken as 0 when σ = 0)
/// ∂L/∂γ = Σ_rows ∂L/∂y ⊙ x̂,   ∂L/∂β = Σ_rows ∂L/∂y
/// ```
pub fn layer_norm_backward<T: Float>(
    ln: &LayerNorm<T>,
    cache: &LnCache<T>,
    d_y: &DMatrix<T>,
) -> Result<LnGrads<T>> {
    const OP: &str = "layer_norm_backward";
    ln.validate(OP)?;
    same_shape(OP, "d_y (shape of the forward output)", &cache.x_hat, d_y)?;
    ensure_finite(OP, "d_y", d_y)?;
    let (n, cols) = d_y.shape();
    if cache.denom.len() != n || cache.sigma.len() != n {
        return Err(shape_error(
            OP,
            "cache (one s and one σ per row)",
            format!("{n} of each"),
            format!("{} and {}", cache.denom.len(), cache.sigma.len()),
        ));
    }
    let mut grads = LnGrads {
        d_x: DMatrix::zeros(n, cols),
        d_gamma: DMatrix::zeros(1, cols),
        d_beta: DMatrix::zeros(1, cols),
    };
    let LnGrads { d_x, d_gamma, d_beta } = &mut grads;
    layer_norm_backward_into(ln, cache, d_y, Store::Overwrite, d_x, d_gamma, d_beta);
    Ok(grads)
}

/// What [`layer_norm_backward_into`] does with the input gradient it computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    /// Write it (what [`layer_norm_backward`] does into fresh zeros).
    Overwrite,
    /// Add it to what is there: the residual stream's gradient arrives twice, directly and
    /// through the LayerNorm, and chapter 9's training step keeps both in one buffer.
    Accumulate,
}

/// [`layer_norm_backward`] into buffers the caller keeps: ∂L/∂γ and ∂L/∂β into `d_gamma` and
/// `d_beta` (1×C, overwritten), ∂L/∂x into `d_x` (N×C), written or added as `store` says.
/// Nothing is checked here ([`layer_norm_backward`] checks and then calls this). The sums over
/// rows for ∂L/∂γ and ∂L/∂β run in [`crate::float::SUM_LANES`] lanes ([`lane_sum`] and its dot
/// product).
pub fn layer_norm_backward_into<T: Float>(
    ln: &LayerNorm<T>,
    cache: &LnCache<T>,
    d_y: &DMatrix<T>,
    store: Store,
    d_x: &mut DMatrix<T>,
    d_gamma: &mut DMatrix<T>,
    d_beta: &mut DMatrix<T>,
) {
    let (n, cols) = d_y.shape();
    let c = T::of(cols as f64);
    let x_hat_columns = || cache.x_hat.as_slice().chunks_exact(n);
    let d_y_columns = || d_y.as_slice().chunks_exact(n);
    for (j, (dy, xh)) in d_y_columns().zip(x_hat_columns()).enumerate() {
        d_beta[(0, j)] = lane_sum(dy); //                                      y = … + β
        d_gamma[(0, j)] = lane_dot(dy, xh); //                                 y = γ x̂ + …
    }
    // Row by row in the formula, column by column in memory (see the forward pass): the same
    // sums in the same order.
    let (mut sum_g, mut sum_gx) = (vec![T::neg_zero(); n], vec![T::neg_zero(); n]);
    for (j, (dy, xh)) in d_y_columns().zip(x_hat_columns()).enumerate() {
        let gamma = ln.gamma[(0, j)];
        for r in 0..n {
            let g = gamma * dy[r]; //                                         ∂L/∂x̂ = γ ⊙ ∂L/∂y
            sum_g[r] += g;
            sum_gx[r] += g * xh[r];
        }
    }
    let mean_g: Vec<T> = sum_g.iter().map(|&v| v / c).collect();
    let mean_gx: Vec<T> = sum_gx.iter().map(|&v| v / c).collect();
    let factor: Vec<T> = (0..n)
        .map(|r| match ln.placement {
            Epsilon::InsideSqrt => T::one(),
            Epsilon::AddedToStd if cache.sigma[r] > T::zero() => cache.denom[r] / cache.sigma[r],
            Epsilon::AddedToStd => T::zero(),
        })
        .collect();
    for (j, ((dy, xh), out)) in
        d_y_columns().zip(x_hat_columns()).zip(d_x.as_mut_slice().chunks_exact_mut(n)).enumerate()
    {
        let gamma = ln.gamma[(0, j)];
        for r in 0..n {
            let d = (gamma * dy[r] - mean_g[r] - xh[r] * factor[r] * mean_gx[r]) / cache.denom[r]; // x̂ = (x − μ)/s
            match store {
                Store::Overwrite => out[r] = d,
                Store::Accumulate => out[r] += d,
            }
        }
    }
}

// ───────────────────────────── the feed-forward net ─────────────────────────────

/// FFN(x) = f(xW₁ + b₁)W₂ + b₂, applied to every row alone: w1 C×F, b1 1×F, w2 F×C_out, b2 1×C_out.
/// Document 003 uses f = ReLU, i.e. max(0, xW₁ + b₁)W₂ + b₂; GPT-2 uses GELU (tanh form).
#[derive(Clone, Debug, PartialEq)]
pub struct Ffn<T: Float> {
    /// W₁.
    pub w1: DMatrix<T>,
    /// b₁.
    pub b1: DMatrix<T>,
    /// W₂.
    pub w2: DMatrix<T>,
    /// b₂.
    pub b2: DMatrix<T>,
    /// The activation between the two layers.
    pub act: Activation,
}

impl<T: Float> Ffn<T> {
    /// Random weights N(0, std²), zero biases: width `c` → hidden `f` → `c`.
    pub fn random(
        c: usize,
        f: usize,
        act: Activation,
        std: f64,
        rng: &mut crate::rng::Rng,
    ) -> Self {
        Ffn {
            w1: rng.normal_matrix(c, f, std),
            b1: DMatrix::zeros(1, f),
            w2: rng.normal_matrix(f, c, std),
            b2: DMatrix::zeros(1, c),
            act,
        }
    }
}

/// What [`ffn_backward`] needs.
#[derive(Clone, Debug, PartialEq)]
pub struct FfnCache<T: Float> {
    /// The input.
    pub x: DMatrix<T>,
    /// z₁ = xW₁ + b₁.
    pub z1: DMatrix<T>,
    /// a₁ = f(z₁).
    pub a1: DMatrix<T>,
}

/// The feed-forward net on every row of x, through chapter 3's dense layer and activation.
pub fn ffn_forward<T: Float>(f: &Ffn<T>, x: &DMatrix<T>) -> Result<(DMatrix<T>, FfnCache<T>)> {
    ensure_finite("ffn_forward", "x", x)?;
    let z1 = dense_forward(x, &f.w1, &f.b1)?; //       z₁ = xW₁ + b₁
    let a1 = activation_forward(f.act, &z1); //         a₁ = f(z₁)
    let y = dense_forward(&a1, &f.w2, &f.b2)?; //       y = a₁W₂ + b₂
    Ok((y, FfnCache { x: x.clone(), z1, a1 }))
}

/// Gradients of the feed-forward net.
#[derive(Clone, Debug, PartialEq)]
pub struct FfnGrads<T: Float> {
    /// ∂L/∂x.
    pub d_x: DMatrix<T>,
    /// ∂L/∂W₁.
    pub d_w1: DMatrix<T>,
    /// ∂L/∂b₁.
    pub d_b1: DMatrix<T>,
    /// ∂L/∂W₂.
    pub d_w2: DMatrix<T>,
    /// ∂L/∂b₂.
    pub d_b2: DMatrix<T>,
}

/// Backward of [`ffn_forward`] given ∂L/∂y.
pub fn ffn_backward<T: Float>(
    f: &Ffn<T>,
    cache: &FfnCache<T>,
    d_y: &DMatrix<T>,
) -> Result<FfnGrads<T>> {
    let second = dense_backward(&cache.a1, &f.w2, d_y)?; //              y = a₁W₂ + b₂
    let d_z1 = activation_backward(f.act, &cache.z1, &second.d_x)?; //    a₁ = f(z₁)
    let first = dense_backward(&cache.x, &f.w1, &d_z1)?; //              z₁ = xW₁ + b₁
    Ok(FfnGrads {
        d_x: first.d_x,
        d_w1: first.d_w,
        d_b1: first.d_b,
        d_w2: second.d_w,
        d_b2: second.d_b,
    })
}

// ───────────────────────────── the block ─────────────────────────────

/// Where the LayerNorms sit relative to the residual connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormOrder {
    /// h = x + MHA(LN₁(x)), y = h + FFN(LN₂(h)): document 002, GPT-2. The residual stream itself is
    /// never normalised inside the block.
    Pre,
    /// h = LN₁(x + MHA(x)), y = LN₂(h + FFN(h)): the original transformer and document 003's order.
    Post,
}

/// One transformer block: self-attention and a feed-forward net, each with a residual connection
/// and a LayerNorm.
#[derive(Clone, Debug, PartialEq)]
pub struct Block<T: Float> {
    /// The self-attention.
    pub attn: MultiHead<T>,
    /// The LayerNorm around attention.
    pub ln1: LayerNorm<T>,
    /// The feed-forward net.
    pub ffn: Ffn<T>,
    /// The LayerNorm around the feed-forward net.
    pub ln2: LayerNorm<T>,
    /// Pre-LN or post-LN.
    pub order: NormOrder,
}

impl<T: Float> Block<T> {
    /// A block of width `c` with `heads` heads and hidden width `hidden`, random N(0, std²) weights,
    /// zero biases, γ = 1, β = 0, ε = 1e-6 inside the square root.
    pub fn random(
        c: usize,
        heads: usize,
        hidden: usize,
        act: Activation,
        order: NormOrder,
        std: f64,
        rng: &mut crate::rng::Rng,
    ) -> Result<Self> {
        if heads == 0 || !c.is_multiple_of(heads) {
            return Err(invalid(
                "Block::random",
                "heads",
                format!("d_model = {c} is not divisible by {heads} heads"),
            ));
        }
        Ok(Block {
            attn: MultiHead::random(heads, c, c, c / heads, c, std, rng)?,
            ln1: LayerNorm::new(c, LAYER_NORM_EPS)?,
            ffn: Ffn::random(c, hidden, act, std, rng),
            ln2: LayerNorm::new(c, LAYER_NORM_EPS)?,
            order,
        })
    }
}

/// What [`block_backward`] needs.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockCache<T: Float> {
    /// LayerNorm 1's cache.
    pub ln1: LnCache<T>,
    /// The attention's cache.
    pub attn: MhaCache<T>,
    /// LayerNorm 2's cache.
    pub ln2: LnCache<T>,
    /// The feed-forward net's cache.
    pub ffn: FfnCache<T>,
}

/// Gradients of a block: its input and every weight of its four parts.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockGrads<T: Float> {
    /// ∂L/∂x.
    pub d_x: DMatrix<T>,
    /// The attention's weight gradients (its d_x_q and d_x_kv are the parts of d_x that flowed through it).
    pub attn: MhaGrads<T>,
    /// LayerNorm 1's gradients.
    pub ln1: LnGrads<T>,
    /// The feed-forward net's gradients.
    pub ffn: FfnGrads<T>,
    /// LayerNorm 2's gradients.
    pub ln2: LnGrads<T>,
}

fn check_self_attention<T: Float>(op: &'static str, spec: &AttnSpec<T>) -> Result<()> {
    if spec.q_len != spec.kv_len {
        return Err(invalid(
            op,
            "spec",
            format!(
                "a block attends to itself, so q_len must equal kv_len; got {} and {}",
                spec.q_len, spec.kv_len
            ),
        ));
    }
    Ok(())
}

/// One block on x ((B·T)×C) with self-attention as `spec` says (T, causal, masks).
pub fn block_forward<T: Float>(
    blk: &Block<T>,
    x: &DMatrix<T>,
    spec: &AttnSpec<T>,
) -> Result<(DMatrix<T>, BlockCache<T>)> {
    const OP: &str = "block_forward";
    check_self_attention(OP, spec)?;
    match blk.order {
        NormOrder::Pre => {
            let (n1, ln1) = layer_norm_forward(&blk.ln1, x)?; //          n₁ = LN₁(x)
            let (a, attn) = mha_forward(&blk.attn, &n1, &n1, spec)?; //   a = MHA(n₁)
            let h = residual_add(x, &a)?; //                              h = x + a
            let (n2, ln2) = layer_norm_forward(&blk.ln2, &h)?; //         n₂ = LN₂(h)
            let (f, ffn) = ffn_forward(&blk.ffn, &n2)?; //                f = FFN(n₂)
            Ok((residual_add(&h, &f)?, BlockCache { ln1, attn, ln2, ffn })) // y = h + f
        }
        NormOrder::Post => {
            let (a, attn) = mha_forward(&blk.attn, x, x, spec)?; //       a = MHA(x)
            let (h, ln1) = layer_norm_forward(&blk.ln1, &residual_add(x, &a)?)?; // h = LN₁(x + a)
            let (f, ffn) = ffn_forward(&blk.ffn, &h)?; //                 f = FFN(h)
            let (y, ln2) = layer_norm_forward(&blk.ln2, &residual_add(&h, &f)?)?; // y = LN₂(h + f)
            Ok((y, BlockCache { ln1, attn, ln2, ffn }))
        }
    }
}

/// Backward of [`block_forward`] given ∂L/∂y.
pub fn block_backward<T: Float>(
    blk: &Block<T>,
    cache: &BlockCache<T>,
    d_y: &DMatrix<T>,
) -> Result<BlockGrads<T>> {
    match blk.order {
        NormOrder::Pre => {
            // y = h + f: ∂h gets ∂y directly and through f = FFN(LN₂(h)).
            let ffn = ffn_backward(&blk.ffn, &cache.ffn, d_y)?;
            let ln2 = layer_norm_backward(&blk.ln2, &cache.ln2, &ffn.d_x)?;
            let d_h = d_y + &ln2.d_x;
            // h = x + MHA(LN₁(x)): ∂x gets ∂h directly and through both attention inputs.
            let attn = mha_backward(&blk.attn, &cache.attn, &d_h)?;
            let ln1 = layer_norm_backward(&blk.ln1, &cache.ln1, &(&attn.d_x_q + &attn.d_x_kv))?;
            Ok(BlockGrads { d_x: d_h + &ln1.d_x, attn, ln1, ffn, ln2 })
        }
        NormOrder::Post => {
            // y = LN₂(h + f), f = FFN(h).
            let ln2 = layer_norm_backward(&blk.ln2, &cache.ln2, d_y)?;
            let ffn = ffn_backward(&blk.ffn, &cache.ffn, &ln2.d_x)?;
            let d_h = &ln2.d_x + &ffn.d_x;
            // h = LN₁(x + a), a = MHA(x, x).
            let ln1 = layer_norm_backward(&blk.ln1, &cache.ln1, &d_h)?;
            let attn = mha_backward(&blk.attn, &cache.attn, &ln1.d_x)?;
            let d_x = &ln1.d_x + &attn.d_x_q + &attn.d_x_kv;
            Ok(BlockGrads { d_x, attn, ln1, ffn, ln2 })
        }
    }
}

// ───────────────────────────── sizes ─────────────────────────────

/// Parameters of one attention head with a low-rank value map, as documents 000 and 001 count
/// them: W_Q and W_K (d_model×d_head each), value-down (d_model×d_head) and value-up
/// (d_head×d_model), no biases: 4·d_model·d_head.
pub fn head_parameter_count(d_model: usize, d_head: usize) -> usize {
    4 * d_model * d_head
}

/// GPT-3's embedding width.
pub const GPT3_D_MODEL: usize = 12_288;
/// GPT-3's query/key width per head.
pub const GPT3_D_HEAD: usize = 128;
/// GPT-3's heads per layer.
pub const GPT3_HEADS: usize = 96;
/// GPT-3's layers.
pub const GPT3_LAYERS: usize = 96;

/// Entries of the attention-weight matrices of one head for a sequence of n tokens: n² (n
/// queries, each with a weight for each of n keys). The work of QKᵀ and A·V grows with it.
pub fn attention_weight_entries(n_tokens: usize) -> usize {
    n_tokens * n_tokens
}

// ───────────────────────── document 003's walk-through ─────────────────────────

/// The walk-through's W_Q.
pub const W_Q: [[f64; 4]; 4] =
    [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]];
/// The walk-through's W_K.
pub const W_K: [[f64; 4]; 4] =
    [[0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]];
/// The walk-through's W_V as first defined (and as every printed V uses).
pub const W_V: [[f64; 4]; 4] =
    [[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0]];
/// The different W_V the document displays beside the printed V.
pub const W_V_DISPLAYED: [[f64; 4]; 4] =
    [[0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]];
/// The made-up output of head 2.
pub const HEAD_2: &str = "1.5 0.8 1.2 2.0; 1.6 0.9 1.1 2.1; 1.4 0.7 1.3 1.9";
/// The 8×4 W_O the document prints (and uses).
pub const W_O: &str = "0.37738326 0.83274845 0.37280978 0.14584743; 0.28706851 0.29072609 0.69116998 0.20106682; \
0.26764653 0.12058646 0.82634382 0.60818759; 0.44329703 0.4425581 0.89811744 0.24551412; \
0.9186323 0.40029736 0.17636762 0.06896409; 0.41921272 0.0495383 0.77792527 0.4354529; \
0.14791365 0.66822966 0.48313699 0.94127396; 0.11604641 0.51794357 0.62942357 0.76420883";
/// W₁ of the feed-forward example (4×6).
pub const W_1: &str = "0.1 0.2 0.3 0.4 0.5 0.6; 0.7 0.8 0.9 1.0 1.1 1.2; 1.3 1.4 1.5 1.6 1.7 1.8; 1.9 2.0 2.1 2.2 2.3 2.4";
/// b₁.
pub const B_1: &str = "0.01 0.02 0.03 0.04 0.05 0.06";
/// W₂ (6×4).
pub const W_2: &str = "0.1 0.7 1.3 1.9; 0.2 0.8 1.4 2.0; 0.3 0.9 1.5 2.1; 0.4 1.0 1.6 2.2; 0.5 1.1 1.7 2.3; 0.6 1.2 1.8 2.4";
/// b₂.
pub const B_2: &str = "0.01 0.02 0.03 0.04";

/// Printed: Q in the main text, "printed nicely out to four decimal places".
pub const PRINTED_Q_MAIN: &str =
    "1.5 1.1 2.6 0; 1.3415 1.6 2.3 0.6415; 2.4093 0.8998 1.7998 1.5093";
/// Printed: the first supplemental cell's Q (X + PE written with the symbolic exponents).
pub const PRINTED_Q_CELL_SYMBOLIC: &str = "1.5 1.1 2.6 0.; 1.34147098 1.59995001 2.29995 0.64147099; 2.40929743 0.89980003 1.79980001 1.50929745";
/// Printed: Q of the cell computing all three from the printed X + PE.
pub const PRINTED_Q: &str =
    "1.5 1.1 2.6 0.; 1.3415 1.60005 2.29995 0.6416; 2.4093 0.9 1.7998 1.5095";
/// Printed: K of that cell.
pub const PRINTED_K: &str =
    "1.1 1.5 0. 2.6; 1.60005 1.3415 0.6416 2.29995; 0.9 2.4093 1.5095 1.7998";
/// Printed: V of that cell.
pub const PRINTED_V: &str =
    "1.5 0. 1.1 2.6; 1.3415 0.6416 1.60005 2.29995; 2.4093 1.5095 0.9 1.7998";
/// Printed: V in the main text, beside the displayed W_V.
pub const PRINTED_V_MAIN: &str =
    "1.5 0 1.1 2.6; 1.3415 0.6416 1.6001 2.3; 2.4093 1.5095 0.9 1.7998";
/// Printed: the matrix under the K heading of the main text (equal to Q).
pub const PRINTED_UNDER_K_HEADING: &str = PRINTED_Q_MAIN;
/// Printed: Q, K, V for Y (cell).
pub const PRINTED_Q_Y: &str =
    "1. 1. 2. 0.; 1.7415 1.70005 2.49995 0.9416; 2.7093 0.5 2.1998 1.0095";
/// Printed: K for Y (cell).
pub const PRINTED_K_Y: &str =
    "1. 1. 0. 2.; 1.70005 1.7415 0.9416 2.49995; 0.5 2.7093 1.0095 2.1998";
/// Printed: V for Y (cell).
pub const PRINTED_V_Y: &str =
    "1. 0. 1. 2.; 1.7415 0.9416 1.70005 2.49995; 2.7093 1.0095 0.5 2.1998";
/// Printed: Q for Y, main text (4 decimals).
pub const PRINTED_Q_Y_MAIN: &str = "1 1 2 0; 1.7415 1.7001 2.5 0.9416; 2.7093 0.5 2.1998 1.0095";
/// Printed: K for Y, main text.
pub const PRINTED_K_Y_MAIN: &str = "1 1 0 2; 1.7001 1.7415 0.9416 2.5; 0.5 2.7093 1.0095 2.1998";
/// Printed: V for Y, main text.
pub const PRINTED_V_Y_MAIN: &str = "1 0 1 2; 1.7415 0.9416 1.7001 2.5; 2.7093 1.0095 0.5 2.1998";
/// Printed: softmax(QKᵀ/√d_k).
pub const PRINTED_WEIGHTS: &str = "0.07057112 0.21671075 0.71271813; 0.08861574 0.2073653 0.70401897; 0.16858447 0.40724309 0.42417243";
/// Printed: Attention(Q, K, V).
pub const PRINTED_ATTENTION: &str = "2.11372594 1.21488963 1.06582258 1.96465889; 2.10729705 1.1957622 1.06288922 1.97442407; \
1.82115196 0.90157546 1.21880742 2.13838393";
/// Printed: Concat(Attention₁, Attention₂).
pub const PRINTED_CONCAT: &str = "2.11372594 1.21488963 1.06582258 1.96465889 1.5 0.8 1.2 2.0; \
2.10729705 1.1957622 1.06288922 1.97442407 1.6 0.9 1.1 2.1; 1.82115196 0.90157546 1.21880742 2.13838393 1.4 0.7 1.3 1.9";
/// Printed: Concat · W_O (the multi-head cell's output, called M in the LayerNorm section).
pub const PRINTED_MULTIHEAD: &str = "4.42554033 5.589241 6.99844643 4.79288192; 4.55176485 5.6122494 7.09923364 4.82144704; \
4.21254506 5.31988824 6.84520426 4.79017392";
/// Printed: LN(M).
pub const PRINTED_LN1: &str = "-1.03927142 0.13949668 1.56694829 -0.66717355; -0.97825977 0.09190721 1.59246789 -0.70611533; \
-1.10306273 0.02854757 1.58729045 -0.51277529";
/// Printed: FFN(LN(M)).
pub const PRINTED_FFN: &str = "1.70355949 4.58680433 7.47004916 10.353294; 1.56070622 4.19905974 6.83741326 9.47576678; \
2.19865128 5.93062489 9.66259851 13.39457212";
/// Printed: the final LayerNorm.
pub const PRINTED_LN2: &str = "-1.34164072 -0.44721357 0.44721357 1.34164072; -1.34164071 -0.44721357 0.44721357 1.34164071; \
-1.34164075 -0.44721358 0.44721358 1.34164075";

/// A constant 4×4 matrix.
pub fn m4(rows: &[[f64; 4]; 4]) -> DMatrix<f64> {
    DMatrix::from_fn(4, 4, |r, c| rows[r][c])
}

/// A printed matrix as numbers (the module's constants always parse).
pub fn printed(text: &str) -> Result<DMatrix<f64>> {
    ch05::printed_matrix(text)
}

/// Every matrix of document 003's encoder walk-through, each computed the way the document's
/// printed numbers were: from the printed inputs of its step.
#[derive(Clone, Debug, PartialEq)]
pub struct Walkthrough {
    /// X + PE as printed (chapter 5).
    pub x_pe: DMatrix<f64>,
    /// Y + PE as printed.
    pub y_pe: DMatrix<f64>,
    /// Q = (X + PE) W_Q.
    pub q: DMatrix<f64>,
    /// K = (X + PE) W_K.
    pub k: DMatrix<f64>,
    /// V = (X + PE) W_V.
    pub v: DMatrix<f64>,
    /// Q, K, V of Y + PE with the same weights.
    pub qkv_y: [DMatrix<f64>; 3],
    /// QKᵀ/√d_k (not printed by the document).
    pub scores: DMatrix<f64>,
    /// softmax(QKᵀ/√d_k).
    pub weights: DMatrix<f64>,
    /// Attention(Q, K, V), head 1.
    pub attention: DMatrix<f64>,
    /// Concat(head 1 as printed, head 2 as given).
    pub concat: DMatrix<f64>,
    /// Concat · W_O (= M).
    pub multihead: DMatrix<f64>,
    /// LN(M as printed) with (x − μ)/(σ + ε): the printed numbers.
    pub ln1: DMatrix<f64>,
    /// LN(M as printed) with the stated (x − μ)/√(σ² + ε).
    pub ln1_stated: DMatrix<f64>,
    /// FFN(LN₁ as printed).
    pub ffn: DMatrix<f64>,
    /// LN(FFN as printed), ε inside the square root.
    pub ln2: DMatrix<f64>,
}

/// The document's feed-forward net with ReLU.
pub fn doc_ffn() -> Result<Ffn<f64>> {
    Ok(Ffn {
        w1: printed(W_1)?,
        b1: printed(B_1)?,
        w2: printed(W_2)?,
        b2: printed(B_2)?,
        act: Activation::Relu,
    })
}

/// γ = 1, β = 0, ε = 1e-6, ε placed as given.
pub fn doc_layer_norm(placement: Epsilon) -> Result<LayerNorm<f64>> {
    Ok(LayerNorm::new(4, LAYER_NORM_EPS)?.with_placement(placement))
}

/// Recomputes the walk-through. Each step starts from the document's printed input for it, as
/// its Python cells do, so every printed matrix can be compared at the printed precision.
pub fn walkthrough() -> Result<Walkthrough> {
    let x_pe = printed(PRINTED_X_PLUS_PE)?;
    let y_pe = printed(PRINTED_Y_PLUS_PE)?;
    let (wq, wk, wv) = (m4(&W_Q), m4(&W_K), m4(&W_V));
    let q = matmul(&x_pe, &wq)?;
    let k = matmul(&x_pe, &wk)?;
    let v = matmul(&x_pe, &wv)?;
    let qkv_y = [matmul(&y_pe, &wq)?, matmul(&y_pe, &wk)?, matmul(&y_pe, &wv)?];
    let spec = AttnSpec::bidirectional(3);
    let scores = attention_scores(&q, &k, &spec)?;
    let att = attention_forward(&q, &k, &v, &spec)?;
    let concat = concat_heads(&[printed(PRINTED_ATTENTION)?, printed(HEAD_2)?])?;
    let multihead = matmul(&concat, &printed(W_O)?)?;
    let m = printed(PRINTED_MULTIHEAD)?;
    let ln1 = layer_norm_forward(&doc_layer_norm(Epsilon::AddedToStd)?, &m)?.0;
    let ln1_stated = layer_norm_forward(&doc_layer_norm(Epsilon::InsideSqrt)?, &m)?.0;
    let ffn = ffn_forward(&doc_ffn()?, &printed(PRINTED_LN1)?)?.0;
    let ln2 = layer_norm_forward(&doc_layer_norm(Epsilon::InsideSqrt)?, &printed(PRINTED_FFN)?)?.0;
    Ok(Walkthrough {
        x_pe,
        y_pe,
        q,
        k,
        v,
        qkv_y,
        scores,
        weights: att.weights,
        attention: att.out,
        concat,
        multihead,
        ln1,
        ln1_stated,
        ffn,
        ln2,
    })
}

/// The same chain from the embeddings with nothing rounded in between and the document's choices
/// replaced by the standard ones: the standard PE, LN with ε inside the square root, and the
/// residual connections of the post-LN block (h = LN(X + PE + M), out = LN(h + FFN(h))).
#[derive(Clone, Debug, PartialEq)]
pub struct StandardChain {
    /// X + PE, standard PE.
    pub x_pe: DMatrix<f64>,
    /// softmax(QKᵀ/2) with the document's W_Q, W_K.
    pub weights: DMatrix<f64>,
    /// Head 1's output.
    pub attention: DMatrix<f64>,
    /// Concat(head 1, head 2 as given) · W_O.
    pub multihead: DMatrix<f64>,
    /// LN(X + PE + M).
    pub h: DMatrix<f64>,
    /// LN(h + FFN(h)).
    pub out: DMatrix<f64>,
}

/// Computes [`StandardChain`].
pub fn standard_chain() -> Result<StandardChain> {
    let x_pe = ch05::matrix3x4(&ch05::X_EMBEDDINGS) + ch05::walkthrough_pe(Reading::Standard)?;
    let (q, k, v) =
        (matmul(&x_pe, &m4(&W_Q))?, matmul(&x_pe, &m4(&W_K))?, matmul(&x_pe, &m4(&W_V))?);
    let att = attention_forward(&q, &k, &v, &AttnSpec::bidirectional(3))?;
    let multihead = matmul(&concat_heads(&[att.out.clone(), printed(HEAD_2)?])?, &printed(W_O)?)?;
    let ln = doc_layer_norm(Epsilon::InsideSqrt)?;
    let h = layer_norm_forward(&ln, &residual_add(&x_pe, &multihead)?)?.0;
    let f = ffn_forward(&doc_ffn()?, &h)?.0;
    let out = layer_norm_forward(&ln, &residual_add(&h, &f)?)?.0;
    Ok(StandardChain { x_pe, weights: att.weights, attention: att.out, multihead, h, out })
}

/// The hand multiplication of Q's first row as the document writes it out: each entry is
/// Σⱼ x₁ⱼ (W_Q)ⱼc over the four products.
pub fn first_row_by_hand() -> Result<[f64; 4]> {
    let x = printed(PRINTED_X_PLUS_PE)?;
    let w = m4(&W_Q);
    Ok(std::array::from_fn(|c| (0..4).map(|j| x[(0, j)] * w[(j, c)]).sum()))
}

/// Whether every row of m is an arithmetic progression: all steps between neighbours within
/// `tolerance` of the first step. This is the reason the document's final LayerNorm has identical
/// rows. (Numbers printed to 8 decimals need a tolerance of 2e-8.)
pub fn rows_are_arithmetic(m: &DMatrix<f64>, tolerance: f64) -> bool {
    (0..m.nrows()).all(|r| {
        let step = m[(r, 1)] - m[(r, 0)];
        (2..m.ncols()).all(|c| ((m[(r, c)] - m[(r, c - 1)]) - step).abs() <= tolerance)
    })
}

// ───────────────────────────── errata ─────────────────────────────

/// This chapter's rows of the errata register.
pub const ERRATA: &[Erratum] = &[
    Erratum {
        document: D3,
        section: "Supplemental: Matrix Multiplication, first row of Q",
        printed: "Q[1,3] = (0.1×0) + (1.2×1) + (−0.1×0) + (1.4×1) = 0 + 1.2 + 0 + 0 = 1.2",
        correct: "Q[1,3] = 0 + 1.2 + 0 + 1.4 = 2.6",
        why: "The last product 1.4 × 1 was written as 0 in the sum. The printed Q matrix has the right 2.6.",
        test: "tests/ch06_attention.rs::q_first_row_by_hand_is_1_5_1_1_2_6_0",
    },
    Erratum {
        document: D3,
        section: "A Concrete Example, Q (main text)",
        printed: "Q row 3 = (2.4093, 0.8998, 1.7998, 1.5093)",
        correct: "from the printed X + PE: (2.4093, 0.9, 1.7998, 1.5095), as the supplement's Q, K, V cell prints",
        why: "The main-text Q was computed from the symbolic X + PE written beside it, whose third column uses sin(pos/10000²) ≈ 0 instead of the printed 0.0001/0.0002; the K, V and attention that follow use the printed X + PE, so Q and V of the main text come from different inputs.",
        test: "tests/ch06_attention.rs::main_text_q_follows_the_symbolic_pe",
    },
    Erratum {
        document: D3,
        section: "A Concrete Example, K (main text)",
        printed: "K = (X + PE) W_K, then W_Q displayed and Q = (1.5 1.1 2.6 0; …) printed",
        correct: "K = (1.1 1.5 0 2.6; 1.60005 1.3415 0.6416 2.29995; 0.9 2.4093 1.5095 1.7998)",
        why: "The K paragraph repeats the Q paragraph: it shows W_Q and prints Q again. K with the W_K defined above is printed only in the supplement's cell, and the attention output uses that K.",
        test: "tests/ch06_attention.rs::k_heading_shows_q_again",
    },
    Erratum {
        document: D3,
        section: "A Concrete Example, V (main text)",
        printed: "W_V = (0 0 1 1; 1 1 0 0; 0 1 0 1; 1 0 1 0) beside V = (1.5 0 1.1 2.6; …)",
        correct: "V = (X + PE)(1 1 0 0; 0 0 1 1; 0 1 1 0; 1 0 0 1), the W_V defined first; the displayed W_V gives (2.6 1.1 1.5 0; …)",
        why: "The printed V follows the W_V defined at the start of the example, not the different matrix displayed beside it.",
        test: "tests/ch06_attention.rs::v_follows_the_first_w_v_not_the_displayed_one",
    },
    Erratum {
        document: D3,
        section: "Attention Heads and Multi Attention Heads, Final Linear Projection",
        printed: "let's assume W_O is an 8x4 matrix filled with 0.5",
        correct: "the printed product uses the random W_O printed next; with every entry 0.5 all four output columns would equal half the row sum (5.92954852, 6.02018627, 5.68995939)",
        why: "The sentence was left from a draft; the numbers downstream (M, LN(M), the FFN) all follow the random W_O.",
        test: "tests/ch06_attention.rs::w_o_filled_with_0_5_is_not_what_was_used",
    },
    Erratum {
        document: D3,
        section: "Attention Heads and Multi Attention Heads, the final multi-head output",
        printed: "\"The final multi-head attention output will be:\" followed by the 3×8 Concat matrix",
        correct: "Concat · W_O = (4.42554033 5.589241 6.99844643 4.79288192; …), 3×4",
        why: "The concatenation is printed a second time in place of its product with W_O; the product appears only as the output of the supplement's multi-head cell (and as M in the LayerNorm section).",
        test: "tests/ch06_attention.rs::multihead_output_is_concat_times_w_o",
    },
    Erratum {
        document: D3,
        section: "Layer Normalization, LN(x_i) and the Calculate Layer Normalization cell",
        printed: "LN row 1 = (−1.03927142, 0.13949668, 1.56694829, −0.66717355) beside (x − μ)/√(σ² + ε), ε = 1e−6",
        correct: "(x − μ)/√(σ² + ε): (−1.03927194, 0.13949675, 1.56694907, −0.66717388)",
        why: "The printed numbers follow (x − μ)/(σ + ε), ε added to the standard deviation (as the document's decoder cell does), not the formula beside them nor the code of the cell (np.sqrt(variance + epsilon)). Both use the population variance (divide by C); the sample variance (divide by C − 1) would scale every entry by √(3/4), giving −0.90004 for the first.",
        test: "tests/ch06_attention.rs::layer_norm_printed_follows_std_plus_eps",
    },
    Erratum {
        document: D3,
        section: "Feed Forward Neural Net, after the final LayerNorm",
        printed: "the columns are the same because the FNN values are scalar multiples (×3)",
        correct: "each FFN row is an arithmetic progression (equal steps 2.88324484, 2.63835352, 3.73197362); the ratios between columns are 2.69, 1.63, 1.39",
        why: "W₂'s columns differ by a constant column (0.6 per step) and b₂ by 0.01 per step, so every output row is a + c·j. LayerNorm maps any 4-term arithmetic progression to (−1.3416, −0.4472, 0.4472, 1.3416), which is why all rows agree.",
        test: "tests/ch06_attention.rs::ffn_rows_are_arithmetic_not_scalar_multiples",
    },
    Erratum {
        document: D3,
        section: "Encoder Stack Processing (the order Self-Attention → Layer Norm → Feed-forward → Layer Norm)",
        printed: "LN(MultiHead(X)) = (−1.03927142, 0.13949668, 1.56694829, −0.66717355; …), then LN(FFN(·))",
        correct: "with the residual connections of the post-LN transformer: LN(X + PE + MultiHead) row 1 = (−1.66120976, 0.72490220, 0.84001300, 0.09629456)",
        why: "The walk-through normalises each sub-layer's output alone; the transformer it describes adds the sub-layer's input first (Add & Norm). The printed numbers are reproduced as computed; `StandardChain` computes the block with residuals.",
        test: "tests/ch06_attention.rs::walkthrough_omits_the_residual_connections",
    },
    Erratum {
        document: D3,
        section: "Attention Heads and Multi Attention Heads, after the projection",
        printed: "the calculation is independent of input length: 1000 words or 500 run at the same speed",
        correct: "each head forms an n×n weight matrix: 1,000,000 entries for 1000 tokens, 250,000 for 500; QKᵀ and A·V cost grows as n²·d",
        why: "Attention compares every token with every token, so its work grows quadratically with the length (the document's own GPT section gives O(l·n²·d)).",
        test: "tests/ch06_attention.rs::attention_weights_grow_quadratically_with_length",
    },
    Erratum {
        document: D2,
        section: "Matrix Representation of One-Head Attention",
        printed: "A = row-softmax(Z ⊙ M), M_ij = 1 if i ≥ j and −∞ otherwise",
        correct: "A = row-softmax(Z + M), M_ij = 0 if i ≥ j and −∞ otherwise",
        why: "Multiplying by −∞ sends a negative score to +∞ and a zero score to NaN, so the softmax of a masked row is NaN or puts all weight on a future token; the mask must be added.",
        test: "tests/ch06_attention.rs::multiplicative_mask_breaks_softmax",
    },
    Erratum {
        document: D2,
        section: "Expressivity of Multi-Head Attention",
        printed: "W_o mixes together the results of A₁V₁ and A₂V₁",
        correct: "A₁V₁ and A₂V₂",
        why: "Head 2 applies its own weights A₂ to its own values V₂ = E W_{v,2}, as the line above it writes.",
        test: "tests/ch06_attention.rs::two_heads_are_a_sum_of_per_head_terms",
    },
    Erratum {
        document: D2,
        section: "Matrix Representation of One-Head Attention",
        printed: "LayerNorm E ← LN(E); … Ê = E + AVW_o; LayerNorm Ê ← LN(Ê); … E ← Ê + Ẽ",
        correct: "pre-LN keeps the residual stream unnormalised: Ê = E + A V W_o with A, V from LN(E); E ← Ê + FFN(LN(Ê))",
        why: "Read literally, the assignments overwrite E and Ê with their normalised versions, so the residual adds the normalised input and every block renormalises the stream; in the pre-LN transformer (GPT-2) only the sub-layer's input is normalised. The two give different outputs.",
        test: "tests/ch06_attention.rs::literal_reading_of_002_normalises_the_residual_stream",
    },
    Erratum {
        document: D0,
        section: "Attention, the value matrix",
        printed: "In GPT-3, n-embed = 12,388 and n-query-key = 128",
        correct: "n-embed = 12,288 (96 heads × 128)",
        why: "A transposed digit: document 001 gives 12,288, which is 96 × 128 and makes the per-head count 4 × 12,288 × 128 = 6,291,456 ≈ 6.3 million.",
        test: "tests/ch06_attention.rs::gpt3_head_has_6_3_million_parameters",
    },
];

// ───────────────────────────── worked numbers ─────────────────────────────

/// The chapter's worked numbers, recomputed.
pub fn worked() -> Result<Vec<Worked>> {
    let w = walkthrough()?;
    let hand = first_row_by_hand()?;
    let x_sym: DMatrix<f64> = ch05::matrix3x4(&ch05::X_EMBEDDINGS)
        + ch05::with_exponents(&[0.0, 1.0, 2.0], &ch05::DOC_SYMBOLIC_EXPONENTS)?;
    let q_sym = matmul(&x_sym, &m4(&W_Q))?;
    let v_displayed = matmul(&w.x_pe, &m4(&W_V_DISPLAYED))?;
    let half = matmul(&w.concat, &DMatrix::from_element(8, 4, 0.5))?;
    let residual_ln = layer_norm_forward(
        &doc_layer_norm(Epsilon::InsideSqrt)?,
        &residual_add(&w.x_pe, &printed(PRINTED_MULTIHEAD)?)?,
    )?
    .0;
    let ffn = printed(PRINTED_FFN)?;
    let ratio = |r: usize, c: usize| ffn[(r, c + 1)] / ffn[(r, c)];
    let row = |m: &DMatrix<f64>, r: usize, d: usize| {
        (0..m.ncols()).map(|c| crate::snapshot::fixed(m[(r, c)], d)).collect::<Vec<_>>().join(" ")
    };
    let (d, c) = (D3, THIS_CRATE);
    Ok(vec![
        Worked::text(
            "q_first_row_by_hand_is_1_5_1_1_2_6_0",
            d,
            "Q[1,1], Q[1,2], Q[1,4] by hand",
            "1.5 1.1 0",
            format!(
                "{} {} {}",
                crate::snapshot::fixed(hand[0], 1),
                crate::snapshot::fixed(hand[1], 1),
                crate::snapshot::fixed(hand[3], 0)
            ),
        ),
        Worked::erratum(
            "q_first_row_by_hand_is_1_5_1_1_2_6_0",
            d,
            "Q[1,3] by hand",
            "1.2",
            crate::snapshot::fixed(hand[2], 1),
        ),
        Worked::matrix(
            "main_text_q_follows_the_symbolic_pe",
            d,
            "Q, main text, from the symbolic X + PE",
            PRINTED_Q_MAIN,
            4,
            &q_sym,
        ),
        Worked::erratum(
            "main_text_q_follows_the_symbolic_pe",
            d,
            "Q, main text, vs Q from the printed X + PE",
            PRINTED_Q_MAIN,
            matrix_like(PRINTED_Q_MAIN, 4, &w.q),
        ),
        Worked::matrix(
            "python_cell_q_uses_the_symbolic_pe",
            d,
            "Q, first Python cell (symbolic PE)",
            PRINTED_Q_CELL_SYMBOLIC,
            8,
            &q_sym,
        ),
        Worked::matrix("qkv_cell_is_reproduced", d, "Q = (X + PE) W_Q (cell)", PRINTED_Q, 5, &w.q),
        Worked::matrix("qkv_cell_is_reproduced", d, "K = (X + PE) W_K (cell)", PRINTED_K, 5, &w.k),
        Worked::matrix("qkv_cell_is_reproduced", d, "V = (X + PE) W_V (cell)", PRINTED_V, 5, &w.v),
        Worked::erratum(
            "k_heading_shows_q_again",
            d,
            "the matrix under the K heading vs K",
            PRINTED_UNDER_K_HEADING,
            matrix_like(PRINTED_UNDER_K_HEADING, 4, &w.k),
        ),
        Worked::matrix(
            "v_follows_the_first_w_v_not_the_displayed_one",
            d,
            "V, main text (first W_V)",
            PRINTED_V_MAIN,
            4,
            &w.v,
        ),
        Worked::erratum(
            "v_follows_the_first_w_v_not_the_displayed_one",
            d,
            "V, main text, with the W_V displayed beside it",
            PRINTED_V_MAIN,
            matrix_like(PRINTED_V_MAIN, 4, &v_displayed),
        ),
        Worked::matrix("y_qkv_are_reproduced", d, "Q for Y (cell)", PRINTED_Q_Y, 5, &w.qkv_y[0]),
        Worked::matrix("y_qkv_are_reproduced", d, "K for Y (cell)", PRINTED_K_Y, 5, &w.qkv_y[1]),
        Worked::matrix("y_qkv_are_reproduced", d, "V for Y (cell)", PRINTED_V_Y, 5, &w.qkv_y[2]),
        Worked::matrix(
            "y_qkv_are_reproduced",
            d,
            "Q for Y (main text)",
            PRINTED_Q_Y_MAIN,
            4,
            &w.qkv_y[0],
        ),
        Worked::matrix(
            "y_qkv_are_reproduced",
            d,
            "K for Y (main text)",
            PRINTED_K_Y_MAIN,
            4,
            &w.qkv_y[1],
        ),
        Worked::matrix(
            "y_qkv_are_reproduced",
            d,
            "V for Y (main text)",
            PRINTED_V_Y_MAIN,
            4,
            &w.qkv_y[2],
        ),
        Worked::number(
            "scale_is_one_over_sqrt_d_k",
            d,
            "1/√d_k for d_k = 4",
            "0.5",
            1.0 / 4f64.sqrt(),
        ),
        Worked::matrix(
            "attention_weights_are_reproduced",
            d,
            "softmax(QKᵀ/√d_k)",
            PRINTED_WEIGHTS,
            8,
            &w.weights,
        ),
        Worked::matrix(
            "attention_output_is_reproduced",
            d,
            "Attention(Q, K, V)",
            PRINTED_ATTENTION,
            8,
            &w.attention,
        ),
        Worked::matrix(
            "concatenation_is_reproduced",
            d,
            "Concat(head 1, head 2)",
            PRINTED_CONCAT,
            8,
            &w.concat,
        ),
        Worked::matrix(
            "multihead_output_is_concat_times_w_o",
            d,
            "Concat · W_O (multi-head cell)",
            PRINTED_MULTIHEAD,
            8,
            &w.multihead,
        ),
        Worked::erratum(
            "multihead_output_is_concat_times_w_o",
            d,
            "what follows \"the final multi-head attention output will be\"",
            "the 3×8 Concat again",
            format!("3×4: {}; …", row(&w.multihead, 0, 8)),
        ),
        Worked::erratum(
            "w_o_filled_with_0_5_is_not_what_was_used",
            d,
            "Concat · W_O with W_O all 0.5, row 1",
            "4.42554033 5.589241 6.99844643 4.79288192",
            row(&half, 0, 8),
        ),
        Worked::matrix(
            "layer_norm_printed_follows_std_plus_eps",
            d,
            "LN(M), (x − μ)/(σ + ε)",
            PRINTED_LN1,
            8,
            &w.ln1,
        ),
        Worked::erratum(
            "layer_norm_printed_follows_std_plus_eps",
            d,
            "LN(M), the stated (x − μ)/√(σ² + ε)",
            PRINTED_LN1,
            matrix_like(PRINTED_LN1, 8, &w.ln1_stated),
        ),
        Worked::matrix(
            "ffn_is_reproduced",
            d,
            "FFN = max(0, LN·W₁ + b₁)W₂ + b₂",
            PRINTED_FFN,
            8,
            &w.ffn,
        ),
        Worked::matrix(
            "final_layer_norm_is_reproduced",
            d,
            "LN(FFN), ε inside √",
            PRINTED_LN2,
            8,
            &w.ln2,
        ),
        Worked::erratum(
            "ffn_rows_are_arithmetic_not_scalar_multiples",
            d,
            "FFN row 1: ratio of neighbouring columns (claimed ×3)",
            "3 3 3",
            format!("{:.2} {:.2} {:.2}", ratio(0, 0), ratio(0, 1), ratio(0, 2)),
        ),
        Worked::text(
            "ffn_rows_are_arithmetic_not_scalar_multiples",
            c,
            "every FFN row is an arithmetic progression",
            "yes",
            if rows_are_arithmetic(&ffn, 2e-8) { "yes" } else { "no" },
        ),
        Worked::erratum(
            "walkthrough_omits_the_residual_connections",
            d,
            "row 1 after the first Add & Norm: LN(M) as printed vs LN(X + PE + M)",
            "-1.03927142 0.13949668 1.56694829 -0.66717355",
            row(&residual_ln, 0, 8),
        ),
        Worked::erratum(
            "attention_weights_grow_quadratically_with_length",
            d,
            "attention weights per head for 1000 vs 500 tokens",
            "same",
            format!("{} vs {}", attention_weight_entries(1000), attention_weight_entries(500)),
        ),
        Worked::number(
            "gpt3_head_has_6_3_million_parameters",
            D1,
            "parameters of one GPT-3 head (million)",
            "6.3",
            head_parameter_count(GPT3_D_MODEL, GPT3_D_HEAD) as f64 / 1e6,
        ),
        Worked::text(
            "gpt3_head_has_6_3_million_parameters",
            D1,
            "parameters of one GPT-3 multi-head layer, to two significant figures",
            "600 million",
            format!(
                "{} million",
                round_to_two_figures(
                    (GPT3_HEADS * head_parameter_count(GPT3_D_MODEL, GPT3_D_HEAD)) as f64 / 1e6
                )
            ),
        ),
        Worked::erratum(
            "gpt3_head_has_6_3_million_parameters",
            D0,
            "GPT-3's embedding width",
            "12,388",
            format!("{},{:03}", GPT3_HEADS * GPT3_D_HEAD / 1000, GPT3_HEADS * GPT3_D_HEAD % 1000),
        ),
        Worked::erratum(
            "multiplicative_mask_breaks_softmax",
            D2,
            "row 2 of softmax(Z ⊙ M) for Z row (0.5, 1, −2)",
            "a distribution over keys 1, 2",
            multiplicative_mask_row_text(),
        ),
    ])
}

/// Softmax of one row under document 002's multiplicative mask, as text: Z row (0.5, 1, −2) for
/// query 2 of 3, mask (1, 1, −∞) multiplied in. The masked score is negative, so Z ⊙ M puts +∞
/// there and every weight of the row becomes NaN.
pub fn multiplicative_mask_row_text() -> String {
    let z = [0.5f64, 1.0, -2.0];
    let m = [1.0, 1.0, f64::NEG_INFINITY];
    let zm: Vec<f64> = z.iter().zip(m).map(|(a, b)| a * b).collect();
    let top = zm.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = zm.iter().map(|v| (v - top).exp()).collect();
    let total: f64 = e.iter().sum();
    e.iter().map(|v| format!("{}", v / total)).collect::<Vec<_>>().join(" ")
}

/// x rounded to two significant figures (603.98 → 600), for the documents' round figures.
pub fn round_to_two_figures(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let unit = 10f64.powi(x.abs().log10().floor() as i32 - 1);
    (x / unit).round() * unit
}

// ───────────────────────────── walk-through and plots ─────────────────────────────

/// The tokens of the walk-through.
pub const TOKENS_X: [&str; 3] = ["You", "are", "welcome"];

/// The chapter in the order the document derives it.
pub fn walk(out: &mut Walk) -> Result<()> {
    let w = walkthrough()?;
    out.decimals = 5;
    out.step("1. Input: X + PE as printed (chapter 5)")?;
    out.matrix("X + PE", &w.x_pe)?;
    out.step("2. Projections Q = (X + PE)W_Q, K = (X + PE)W_K, V = (X + PE)W_V")?;
    out.matrix("W_Q", &m4(&W_Q))?;
    out.matrix("W_K", &m4(&W_K))?;
    out.matrix("W_V", &m4(&W_V))?;
    out.matrix("Q", &w.q)?;
    out.matrix("K", &w.k)?;
    out.matrix("V", &w.v)?;
    out.step("3. Scores QKᵀ/√d_k with d_k = 4")?;
    out.decimals = 8;
    out.matrix("S", &w.scores)?;
    out.step("4. Row softmax: the attention weights (each row sums to 1)")?;
    out.matrix("A", &w.weights)?;
    let causal = attention_forward(&w.q, &w.k, &w.v, &AttnSpec::causal(3))?;
    out.matrix("A with the causal mask", &causal.weights)?;
    out.step("5. Attention output A·V")?;
    out.matrix("A·V", &w.attention)?;
    out.step("6. Concatenate with head 2 and multiply by W_O")?;
    out.matrix("Concat", &w.concat)?;
    out.matrix("M = Concat · W_O", &w.multihead)?;
    out.step("7. LayerNorm of M (the document divides by σ + ε)")?;
    out.matrix("LN(M), (x − μ)/(σ + ε)  [printed]", &w.ln1)?;
    out.matrix("LN(M), (x − μ)/√(σ² + ε)  [stated]", &w.ln1_stated)?;
    out.step("8. Feed-forward net max(0, xW₁ + b₁)W₂ + b₂")?;
    out.matrix("FFN", &w.ffn)?;
    out.step("9. Final LayerNorm")?;
    out.matrix("LN(FFN)", &w.ln2)?;
    out.step("10. The same chain with standard PE and the residual connections of post-LN")?;
    let s = standard_chain()?;
    out.matrix("h = LN(X + PE + M)", &s.h)?;
    out.matrix("out = LN(h + FFN(h))", &s.out)?;
    Ok(())
}

/// The small two-head example of the per-head plots.
#[derive(Clone, Debug, PartialEq)]
pub struct TwoHeads {
    /// The attention: two heads of width 8 on inputs of width 16, identity W_V and W_O.
    pub mha: MultiHead<f64>,
    /// The input: the standard PE of six positions, width 16.
    pub x: DMatrix<f64>,
    /// Each head's causal attention weights, 6×6.
    pub weights: Vec<DMatrix<f64>>,
}

/// Builds [`TwoHeads`]: head 0 looks one token back (its queries are the encodings shifted by −1
/// with chapter 5's rotation), head 1 looks at the token itself. Causal.
pub fn two_head_example() -> Result<TwoHeads> {
    let (t, d, dh) = (6, 16, 8);
    let sharp = 8.0;
    let x = ch05::sinusoidal::<f64>(t, d)?;
    let back = ch05::shift_operator::<f64>(-1.0, d)?;
    let eye = DMatrix::<f64>::identity(d, d);
    let mut w_q = DMatrix::zeros(d, 2 * dh);
    let mut w_k = DMatrix::zeros(d, 2 * dh);
    // Head 0: q = sharp · PE(pos − 1) restricted to the 8 fastest columns; k = PE(pos) there.
    w_q.columns_mut(0, dh).copy_from(&(back.columns(0, dh) * sharp));
    w_k.columns_mut(0, dh).copy_from(&eye.columns(0, dh));
    // Head 1: q = sharp · PE(pos), k = PE(pos).
    w_q.columns_mut(dh, dh).copy_from(&(eye.columns(0, dh) * sharp));
    w_k.columns_mut(dh, dh).copy_from(&eye.columns(0, dh));
    let w_v = DMatrix::<f64>::identity(d, 2 * dh);
    let w_o = DMatrix::<f64>::identity(2 * dh, d);
    let mha = MultiHead::new(2, w_q, w_k, w_v, w_o)?;
    let (_, cache) = mha_forward(&mha, &x, &x, &AttnSpec::causal(t))?;
    Ok(TwoHeads { mha, x, weights: cache.weights })
}

fn heat(title: &str, m: &DMatrix<f64>, rows: Vec<String>, cols: Vec<String>) -> Figure {
    Figure::Heatmap(Heatmap {
        title: title.into(),
        x_label: "key (attended to)".into(),
        y_label: "query (attending)".into(),
        values: (0..m.nrows()).map(|r| (0..m.ncols()).map(|c| m[(r, c)]).collect()).collect(),
        col_names: cols,
        row_names: rows,
        annotate: true,
    })
}

/// The chapter's figures as data: (file stem, figure).
pub fn figures() -> Result<Vec<(String, Figure)>> {
    let w = walkthrough()?;
    let causal = attention_forward(&w.q, &w.k, &w.v, &AttnSpec::causal(3))?;
    let names: Vec<String> = TOKENS_X.iter().map(|s| s.to_string()).collect();
    let heads = two_head_example()?.weights;
    let pos: Vec<String> = (0..6).map(|p| format!("pos {p}")).collect();
    Ok(vec![
        (
            "ch06_weights".into(),
            heat(
                "Attention weights of the walk-through, no mask",
                &w.weights,
                names.clone(),
                names.clone(),
            ),
        ),
        (
            "ch06_weights_causal".into(),
            heat("The same with the causal mask", &causal.weights, names.clone(), names),
        ),
        (
            "ch06_head0".into(),
            heat("Head 0: queries shifted back one position", &heads[0], pos.clone(), pos.clone()),
        ),
        (
            "ch06_head1".into(),
            heat("Head 1: queries at their own position", &heads[1], pos.clone(), pos),
        ),
    ])
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    crate::plot::save_all(&figures()?, dir)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter = Chapter {
    number: 6,
    stem: "ch06_attention",
    title: "Attention, multi-head attention, LayerNorm and the encoder block",
    worked,
    walk,
    plots,
    errata: ERRATA,
};
