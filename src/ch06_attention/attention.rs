//! Scaled dot-product attention and its masks.
//!
//! For queries Q (T_q×d_k), keys K (T_k×d_k) and values V (T_k×d_v) of one sequence:
//!
//! ```text
//! S = s·QKᵀ + M          s = 1/√d_k by default; M additive: 0 where allowed, −∞ where masked
//! A = row-softmax(S)     each row a probability distribution over the keys
//! O = A V
//! ```
//!
//! Batches of B sequences are stacked as (B·T_q)×d_k, (B·T_k)×d_k and (B·T_k)×d_v; an
//! [`AttnSpec`] says T_q, T_k, the masks and the scale. Sequence b's queries only meet sequence
//! b's keys. The softmax and its backward are chapter 2's.

use crate::ch02_softmax::{softmax_rows_backward, softmax_rows_forward};
use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::{Float, ensure_finite};
use crate::matmul::{matmul, matmul_nt, matmul_tn};
use nalgebra::DMatrix;

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
                "a causal mask needs at least as many keys as queries; got {q_len} queries, \
                    {kv_len} keys"
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
    /// A = row-softmax(S), (B·T_q)×T_k: row r holds the weights of query r over its sequence's
    /// keys.
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
        // O = AV ⇒ ∂V = Aᵀ ∂O, ∂A = ∂O Vᵀ
        d_v.rows_mut(rk, spec.kv_len).copy_from(&matmul_tn(&a, &d_o)?);
        let d_a = matmul_nt(&d_o, &v_b)?;
        // A = softmax(S) ⇒ ∂S = A ⊙ (∂A − rowsum(∂A ⊙ A))
        let d_s = softmax_rows_backward(&a, &d_a)?;
        // S = sQKᵀ + M ⇒ ∂Q = s ∂S K, ∂K = s ∂Sᵀ Q
        d_q.rows_mut(rq, spec.q_len).copy_from(&(matmul(&d_s, &k_b)? * scale));
        d_k.rows_mut(rk, spec.kv_len).copy_from(&(matmul_tn(&d_s, &q_b)? * scale));
    }
    Ok(AttentionGrads { d_q, d_k, d_v })
}

// ───────────────────────────── the cost ─────────────────────────────

/// Entries of the attention-weight matrices of one head for a sequence of n tokens: n² (n
/// queries, each with a weight for each of n keys). The work of QKᵀ and A·V grows with it.
pub fn attention_weight_entries(n_tokens: usize) -> usize {
    n_tokens * n_tokens
}
