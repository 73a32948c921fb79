//! Grouped-query attention (GQA), causal, with optional rotary positions and QK-norm.
//!
//! H query heads share H_kv key/value heads (H_kv divides H): query head h reads key/value head
//! g(h) = ⌊h / (H/H_kv)⌋, so each key/value head serves a group of H/H_kv query heads. H_kv = H
//! is multi-head attention (MHA, GPT-2, Llama 2 7B); H_kv = 1 is multi-query attention (MQA).
//!
//! ```text
//! Q = X W_Q (N×H·d_h)   K = X W_K, V = X W_V (N×H_kv·d_h)     (+ b_Q, b_K, b_V: optional)
//! q_h = rope(rmsnorm_q(Q_h)),  k_g = rope(rmsnorm_k(K_g))    QK-norm and rope optional
//! O_h = softmax(q_h k_{g(h)}ᵀ/√d_h + M) V_{g(h)}             chapter 6's causal attention
//! Y = Concat(O_1 … O_H) W_O                                  (+ b_O: optional)
//! ```
//!
//! QK-norm is an RMSNorm over each head's d_h columns, one γ for all query heads and one for all
//! key heads (as in Qwen 3), applied before the rotation. In the backward a key/value head
//! receives a gradient from every query head of its group: they are summed.
//!
//! The biases are off in the models of this chapter and on in GPT-2 (and on Q, K, V in Qwen 2);
//! with them, each projection is chapter 3's dense layer. One token at a time, [`gqa_step`] reads
//! the keys and values of the earlier positions from a [`GqaKv`] cache that holds H_kv heads, not
//! H: the saving [`KvCacheShape`](super::KvCacheShape) counts.

use super::rms_norm::{RmsCache, RmsNorm, rms_norm_backward, rms_norm_forward};
use super::rope::{Pairing, Positions, RopeTable, rope_backward, rope_forward};
use crate::ch03_mlp::{dense_backward, dense_forward};
use crate::ch06_attention::{
    AttnSpec, attention_backward, attention_forward, concat_heads, split_heads,
};
use crate::error::{Result, invalid, shape_error, shape_of};
use crate::float::{Float, ensure_finite};
use crate::matmul::matmul;
use nalgebra::DMatrix;

/// Rotary positions for the queries and keys: the table and the pairing.
#[derive(Clone, Debug, PartialEq)]
pub struct Rotary<T: Float> {
    /// cos and sin of tθ_i, computed once per context.
    pub table: RopeTable<T>,
    /// Which columns pair up.
    pub pairing: Pairing,
}

/// The weights of grouped-query attention over a model width C with heads of width d_h.
#[derive(Clone, Debug, PartialEq)]
pub struct Gqa<T: Float> {
    /// H, the query heads.
    pub n_heads: usize,
    /// H_kv, the key/value heads; divides H.
    pub n_kv_heads: usize,
    /// W_Q, C×(H·d_h).
    pub w_q: DMatrix<T>,
    /// W_K, C×(H_kv·d_h).
    pub w_k: DMatrix<T>,
    /// W_V, C×(H_kv·d_h).
    pub w_v: DMatrix<T>,
    /// W_O, (H·d_h)×C.
    pub w_o: DMatrix<T>,
    /// QK-norm: RMSNorms of width d_h for the queries and for the keys, or none.
    pub qk_norm: Option<(RmsNorm<T>, RmsNorm<T>)>,
    /// Rotary positions, or none (then positions must come from elsewhere, or a model passes
    /// its one table to [`gqa_forward_with`]).
    pub rope: Option<Rotary<T>>,
    /// b_Q, b_K, b_V, b_O, or none (the models of this chapter).
    pub biases: Option<GqaBiases<T>>,
}

/// The biases of the four projections (or their gradients): b_Q 1×(H·d_h), b_K and b_V
/// 1×(H_kv·d_h), b_O 1×C.
#[derive(Clone, Debug, PartialEq)]
pub struct GqaBiases<T: Float> {
    /// b_Q.
    pub b_q: DMatrix<T>,
    /// b_K.
    pub b_k: DMatrix<T>,
    /// b_V.
    pub b_v: DMatrix<T>,
    /// b_O.
    pub b_o: DMatrix<T>,
}

impl<T: Float> Gqa<T> {
    /// d_h = (columns of W_Q)/H.
    pub fn head_dim(&self) -> usize {
        self.w_q.ncols() / self.n_heads.max(1)
    }

    /// H/H_kv, the query heads per key/value head.
    pub fn group_size(&self) -> usize {
        self.n_heads / self.n_kv_heads.max(1)
    }

    /// The key/value head query head h reads: ⌊h/(H/H_kv)⌋.
    pub fn kv_head_of(&self, h: usize) -> usize {
        h / self.group_size().max(1)
    }

    /// Checks the head counts (H_kv ≥ 1 divides H) and every shape and value.
    pub fn validate(&self, op: &'static str) -> Result<()> {
        let (h, h_kv) = (self.n_heads, self.n_kv_heads);
        if h == 0 || h_kv == 0 || !h.is_multiple_of(h_kv) {
            return Err(invalid(
                op,
                "n_heads, n_kv_heads",
                format!("n_kv_heads must be ≥ 1 and divide n_heads; got {h}, {h_kv}"),
            ));
        }
        let c = self.w_q.nrows();
        if c == 0 || self.w_q.ncols() == 0 || !self.w_q.ncols().is_multiple_of(h) {
            return Err(shape_error(op, "w_q", format!("C×({h}·d_h)"), shape_of(&self.w_q)));
        }
        let d_h = self.head_dim();
        let want = |m: &DMatrix<T>, r: usize, k: usize| m.shape() == (r, k);
        if !want(&self.w_k, c, h_kv * d_h) {
            return Err(shape_error(op, "w_k", format!("{c}×{}", h_kv * d_h), shape_of(&self.w_k)));
        }
        if !want(&self.w_v, c, h_kv * d_h) {
            return Err(shape_error(op, "w_v", format!("{c}×{}", h_kv * d_h), shape_of(&self.w_v)));
        }
        if !want(&self.w_o, h * d_h, c) {
            return Err(shape_error(op, "w_o", format!("{}×{c}", h * d_h), shape_of(&self.w_o)));
        }
        if let Some((qn, kn)) = &self.qk_norm {
            for (norm, arg) in [(qn, "qk_norm (queries)"), (kn, "qk_norm (keys)")] {
                norm.validate(op)?;
                if norm.gamma.ncols() != d_h {
                    return Err(shape_error(op, arg, format!("1×{d_h}"), shape_of(&norm.gamma)));
                }
            }
        }
        check_rope(op, self.rope.as_ref(), d_h)?;
        if let Some(b) = &self.biases {
            for (m, arg, k) in [
                (&b.b_q, "b_q", h * d_h),
                (&b.b_k, "b_k", h_kv * d_h),
                (&b.b_v, "b_v", h_kv * d_h),
                (&b.b_o, "b_o", c),
            ] {
                if m.shape() != (1, k) {
                    return Err(shape_error(op, arg, format!("1×{k}"), shape_of(m)));
                }
                ensure_finite(op, arg, m)?;
            }
        }
        ensure_finite(op, "w_q", &self.w_q)?;
        ensure_finite(op, "w_k", &self.w_k)?;
        ensure_finite(op, "w_v", &self.w_v)?;
        ensure_finite(op, "w_o", &self.w_o)
    }
}

/// Errors when a rotary table serves heads of another width than d_h.
fn check_rope<T: Float>(op: &'static str, rope: Option<&Rotary<T>>, d_h: usize) -> Result<()> {
    match rope {
        Some(r) if r.table.head_dim() != d_h => Err(invalid(
            op,
            "rope",
            format!("its table is for heads of {}, not {d_h}", r.table.head_dim()),
        )),
        _ => Ok(()),
    }
}

/// x W + b, or x W without a bias: chapter 3's dense layer or the bare product.
fn project<T: Float>(x: &DMatrix<T>, w: &DMatrix<T>, b: Option<&DMatrix<T>>) -> Result<DMatrix<T>> {
    match b {
        Some(b) => dense_forward(x, w, b),
        None => matmul(x, w),
    }
}

/// One head's way from the projection to the attention: QK-norm's cache (if on) and the rotated
/// block that enters the scores.
#[derive(Clone, Debug, PartialEq)]
pub struct HeadCache<T: Float> {
    /// RMSNorm's cache of this head's block, when QK-norm is on.
    pub norm: Option<RmsCache<T>>,
    /// The block after QK-norm and the rotation: what the scores read, N×d_h.
    pub rotated: DMatrix<T>,
}

/// What [`gqa_backward`] needs.
#[derive(Clone, Debug, PartialEq)]
pub struct GqaCache<T: Float> {
    /// X, N×C.
    pub x: DMatrix<T>,
    /// T, the length of each of the B sequences stacked in X.
    pub seq_len: usize,
    /// Every query head's way, H of them.
    pub q: Vec<HeadCache<T>>,
    /// Every key head's way, H_kv of them.
    pub k: Vec<HeadCache<T>>,
    /// V split by key/value head, H_kv blocks of N×d_h.
    pub v: Vec<DMatrix<T>>,
    /// The attention weights of every query head, (B·T)×T each.
    pub weights: Vec<DMatrix<T>>,
    /// Concat(O_1 … O_H), N×(H·d_h).
    pub concat: DMatrix<T>,
}

/// Gradients of grouped-query attention.
#[derive(Clone, Debug, PartialEq)]
pub struct GqaGrads<T: Float> {
    /// ∂L/∂X, N×C.
    pub d_x: DMatrix<T>,
    /// ∂L/∂W_Q.
    pub d_w_q: DMatrix<T>,
    /// ∂L/∂W_K.
    pub d_w_k: DMatrix<T>,
    /// ∂L/∂W_V.
    pub d_w_v: DMatrix<T>,
    /// ∂L/∂W_O.
    pub d_w_o: DMatrix<T>,
    /// ∂L/∂γ of the query and of the key RMSNorm, 1×d_h each, when QK-norm is on.
    pub d_qk_gamma: Option<(DMatrix<T>, DMatrix<T>)>,
    /// ∂L/∂b_Q, ∂L/∂b_K, ∂L/∂b_V, ∂L/∂b_O, when the biases are on.
    pub d_biases: Option<GqaBiases<T>>,
}

/// QK-norm then the rotation of one head's block.
fn head_forward<T: Float>(
    norm: Option<&RmsNorm<T>>,
    rope: Option<&Rotary<T>>,
    block: DMatrix<T>,
    at: Positions,
) -> Result<HeadCache<T>> {
    let (normed, norm) = match norm {
        Some(n) => {
            let (y, cache) = rms_norm_forward(n, &block)?; //           rmsnorm(Q_h)
            (y, Some(cache))
        }
        None => (block, None),
    };
    let rotated = match rope {
        Some(r) => rope_forward(&r.table, r.pairing, &normed, at)?,
        None => normed, //                                              rope(·)
    };
    Ok(HeadCache { norm, rotated })
}

/// Backward of [`head_forward`]: the transposed rotation, then RMSNorm's backward. Returns
/// ∂L/∂(the head's projected block) and ∂L/∂γ of the norm (if on).
fn head_backward<T: Float>(
    norm: Option<&RmsNorm<T>>,
    rope: Option<&Rotary<T>>,
    cache: &HeadCache<T>,
    d_rotated: &DMatrix<T>,
    at: Positions,
) -> Result<(DMatrix<T>, Option<DMatrix<T>>)> {
    // rotated = rope(normed)
    let d_normed = match rope {
        Some(r) => rope_backward(&r.table, r.pairing, d_rotated, at)?,
        None => d_rotated.clone(),
    };
    // normed = rmsnorm(block)
    match (norm, &cache.norm) {
        (Some(n), Some(c)) => {
            let g = rms_norm_backward(n, c, &d_normed)?;
            Ok((g.d_x, Some(g.d_gamma)))
        }
        _ => Ok((d_normed, None)),
    }
}

/// Causal grouped-query self-attention of B sequences of `seq_len` tokens stacked in x
/// ((B·T)×C → (B·T)×C). Errors on bad head counts or shapes, rows that are not whole sequences,
/// sequences longer than the rotary table, non-finite input.
pub fn gqa_forward<T: Float>(
    p: &Gqa<T>,
    x: &DMatrix<T>,
    seq_len: usize,
) -> Result<(DMatrix<T>, GqaCache<T>)> {
    gqa_forward_with(p, p.rope.as_ref(), x, seq_len)
}

/// [`gqa_forward`] with the rotation `rope` in place of the layer's own: a model keeps one table
/// for all its layers (computed once per context) and passes it here.
pub fn gqa_forward_with<T: Float>(
    p: &Gqa<T>,
    rope: Option<&Rotary<T>>,
    x: &DMatrix<T>,
    seq_len: usize,
) -> Result<(DMatrix<T>, GqaCache<T>)> {
    const OP: &str = "gqa_forward";
    p.validate(OP)?;
    check_rope(OP, rope, p.head_dim())?;
    if x.ncols() != p.w_q.nrows() {
        return Err(shape_error(
            OP,
            "x and w_q",
            format!("x with {} columns", p.w_q.nrows()),
            shape_of(x),
        ));
    }
    if seq_len == 0 || x.nrows() == 0 || !x.nrows().is_multiple_of(seq_len) {
        return Err(invalid(
            OP,
            "seq_len",
            format!("{} rows are not whole sequences of {seq_len}", x.nrows()),
        ));
    }
    ensure_finite(OP, "x", x)?;
    let (q_norm, k_norm) = match &p.qk_norm {
        Some((qn, kn)) => (Some(qn), Some(kn)),
        None => (None, None),
    };
    let b = p.biases.as_ref();
    let at = Positions::from_zero(seq_len);
    let q_all = project(x, &p.w_q, b.map(|b| &b.b_q))?; //           Q = X W_Q (+ b_Q)
    let k_all = project(x, &p.w_k, b.map(|b| &b.b_k))?; //           K = X W_K (+ b_K)
    let v_all = project(x, &p.w_v, b.map(|b| &b.b_v))?; //           V = X W_V (+ b_V)
    let q = split_heads(&q_all, p.n_heads)?
        .into_iter()
        .map(|b| head_forward(q_norm, rope, b, at)) //               q_h = rope(norm(Q_h))
        .collect::<Result<Vec<_>>>()?;
    let k = split_heads(&k_all, p.n_kv_heads)?
        .into_iter()
        .map(|b| head_forward(k_norm, rope, b, at)) //               k_g = rope(norm(K_g))
        .collect::<Result<Vec<_>>>()?;
    let v = split_heads(&v_all, p.n_kv_heads)?;
    let spec = AttnSpec::causal(seq_len);
    let mut outs = Vec::with_capacity(p.n_heads);
    let mut weights = Vec::with_capacity(p.n_heads);
    for (h, qh) in q.iter().enumerate() {
        let g = p.kv_head_of(h);
        let att = attention_forward(&qh.rotated, &k[g].rotated, &v[g], &spec)?; // O_h
        outs.push(att.out);
        weights.push(att.weights);
    }
    let concat = concat_heads(&outs)?; //                            Concat(O_1 … O_H)
    let y = project(&concat, &p.w_o, b.map(|b| &b.b_o))?; //         Y = Concat W_O (+ b_O)
    Ok((y, GqaCache { x: x.clone(), seq_len, q, k, v, weights, concat }))
}

/// Backward of [`gqa_forward`]:
///
/// ```text
/// Y = Concat W_O            ⇒ ∂L/∂W_O = Concatᵀ ∂L/∂Y,  ∂L/∂O_h = (∂L/∂Y W_Oᵀ)_h
/// O_h = attn(q_h, k_g, v_g) ⇒ chapter 6's backward per query head; then, per key/value head,
///                             ∂L/∂k_g = Σ_{h: g(h)=g} ∂k from head h   (summed over the group)
///                             ∂L/∂v_g = Σ_{h: g(h)=g} ∂v from head h
/// q = rope(norm(Q_h))       ⇒ the transposed rotation, then RMSNorm's backward; the γ of the
///                             query (key) norm sums its gradient over all query (key) heads
/// Q = X W_Q (K, V alike)    ⇒ ∂L/∂W_Q = Xᵀ ∂L/∂Q,  ∂L/∂X = Σ ∂L/∂Q W_Qᵀ + ∂L/∂K W_Kᵀ + ∂L/∂V W_Vᵀ
/// ```
///
/// With biases, each ∂L/∂b is the column sums of the gradient of its projection (chapter 3).
pub fn gqa_backward<T: Float>(
    p: &Gqa<T>,
    cache: &GqaCache<T>,
    d_y: &DMatrix<T>,
) -> Result<GqaGrads<T>> {
    gqa_backward_with(p, p.rope.as_ref(), cache, d_y)
}

/// Backward of [`gqa_forward_with`], with the same `rope`.
pub fn gqa_backward_with<T: Float>(
    p: &Gqa<T>,
    rope: Option<&Rotary<T>>,
    cache: &GqaCache<T>,
    d_y: &DMatrix<T>,
) -> Result<GqaGrads<T>> {
    const OP: &str = "gqa_backward";
    p.validate(OP)?;
    check_rope(OP, rope, p.head_dim())?;
    let want = (cache.x.nrows(), p.w_o.ncols());
    if d_y.shape() != want {
        return Err(shape_error(OP, "d_y", format!("{}×{}", want.0, want.1), shape_of(d_y)));
    }
    if cache.q.len() != p.n_heads || cache.k.len() != p.n_kv_heads {
        return Err(invalid(OP, "cache", "was made with other head counts"));
    }
    ensure_finite(OP, "d_y", d_y)?;
    let (n, d_h, t) = (cache.x.nrows(), p.head_dim(), cache.seq_len);
    let at = Positions::from_zero(t);
    // Y = Concat W_O (+ b_O)
    let out = dense_backward(&cache.concat, &p.w_o, d_y)?;
    let d_outs = split_heads(&out.d_x, p.n_heads)?;
    // O_h = attention(q_h, k_g(h), v_g(h)): the key/value heads sum over their group
    let spec = AttnSpec::causal(t);
    let mut d_q_rot = Vec::with_capacity(p.n_heads);
    let mut d_k_rot = vec![DMatrix::zeros(n, d_h); p.n_kv_heads];
    let mut d_v = vec![DMatrix::zeros(n, d_h); p.n_kv_heads];
    for (h, d_o) in d_outs.iter().enumerate() {
        let g = p.kv_head_of(h);
        let (qh, kg) = (&cache.q[h].rotated, &cache.k[g].rotated);
        let grads = attention_backward(qh, kg, &cache.v[g], &cache.weights[h], d_o, &spec)?;
        d_q_rot.push(grads.d_q);
        d_k_rot[g] += grads.d_k;
        d_v[g] += grads.d_v;
    }
    // q_h = rope(norm(Q_h)), k_g = rope(norm(K_g))
    let (q_norm, k_norm) = match &p.qk_norm {
        Some((qn, kn)) => (Some(qn), Some(kn)),
        None => (None, None),
    };
    let mut d_gamma_q = DMatrix::zeros(1, d_h);
    let mut d_gamma_k = DMatrix::zeros(1, d_h);
    let mut d_q_heads = Vec::with_capacity(p.n_heads);
    for (hc, d) in cache.q.iter().zip(&d_q_rot) {
        let (d_block, d_gamma) = head_backward(q_norm, rope, hc, d, at)?;
        d_q_heads.push(d_block);
        if let Some(dg) = d_gamma {
            d_gamma_q += dg;
        }
    }
    let mut d_k_heads = Vec::with_capacity(p.n_kv_heads);
    for (hc, d) in cache.k.iter().zip(&d_k_rot) {
        let (d_block, d_gamma) = head_backward(k_norm, rope, hc, d, at)?;
        d_k_heads.push(d_block);
        if let Some(dg) = d_gamma {
            d_gamma_k += dg;
        }
    }
    let (d_q, d_k, d_v) =
        (concat_heads(&d_q_heads)?, concat_heads(&d_k_heads)?, concat_heads(&d_v)?);
    // Q = X W_Q (+ b_Q), K = X W_K (+ b_K), V = X W_V (+ b_V)
    let gq = dense_backward(&cache.x, &p.w_q, &d_q)?;
    let gk = dense_backward(&cache.x, &p.w_k, &d_k)?;
    let gv = dense_backward(&cache.x, &p.w_v, &d_v)?;
    let d_x = gq.d_x + gk.d_x + gv.d_x;
    let d_qk_gamma = p.qk_norm.as_ref().map(|_| (d_gamma_q, d_gamma_k));
    let d_biases = p.biases.as_ref().map(|_| GqaBiases {
        b_q: gq.d_b,
        b_k: gk.d_b,
        b_v: gv.d_b,
        b_o: out.d_b,
    });
    Ok(GqaGrads {
        d_x,
        d_w_q: gq.d_w,
        d_w_k: gk.d_w,
        d_w_v: gv.d_w,
        d_w_o: out.d_w,
        d_qk_gamma,
        d_biases,
    })
}

/// The key/value cache of one GQA layer: the keys (after QK-norm and the rotation, as the scores
/// read them) and the values of every position fed so far, H_kv heads side by side.
#[derive(Clone, Debug, PartialEq)]
pub struct GqaKv<T: Float> {
    /// context×(H_kv·d_h): row t holds position t's keys.
    pub keys: DMatrix<T>,
    /// context×(H_kv·d_h): row t holds position t's values.
    pub values: DMatrix<T>,
}

impl<T: Float> GqaKv<T> {
    /// An empty cache for `context` positions of `p`'s key/value heads.
    pub fn new(p: &Gqa<T>, context: usize) -> Self {
        let width = p.n_kv_heads * p.head_dim();
        GqaKv { keys: DMatrix::zeros(context, width), values: DMatrix::zeros(context, width) }
    }
}

/// One token at position `pos` (x 1×C): its query, key and value (QK-norm and the rotation at
/// `pos`), its key and value written into row `pos` of `kv`, and its attention over the rows
/// 0 … pos of the cache, each query head reading its group's key/value head:
///
/// ```text
/// q_h = rope_pos(norm(x W_Q)_h),   kv.keys[pos]_g = rope_pos(norm(x W_K)_g)
/// kv.values[pos] = x W_V
/// o_h = softmax(q_h K_g(h)[0..=pos]ᵀ/√d_h) V_g(h)[0..=pos],   y = Concat(o) W_O   (1×C)
/// ```
///
/// Errors on a `pos` beyond the cache or the rotary table, a cache of another width, bad shapes.
pub fn gqa_step<T: Float>(
    p: &Gqa<T>,
    rope: Option<&Rotary<T>>,
    x: &DMatrix<T>,
    kv: &mut GqaKv<T>,
    pos: usize,
) -> Result<DMatrix<T>> {
    const OP: &str = "gqa_step";
    p.validate(OP)?;
    if x.shape() != (1, p.w_q.nrows()) {
        return Err(shape_error(OP, "x", format!("1×{}", p.w_q.nrows()), shape_of(x)));
    }
    gqa_step_with(p.heads(), rope, x, kv, pos, |which, x| p.product(which, x))
}

/// One of attention's four weight products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttnProduct {
    /// x W_Q (+ b_Q).
    Q,
    /// x W_K (+ b_K).
    K,
    /// x W_V (+ b_V).
    V,
    /// Concat(o) W_O (+ b_O).
    O,
}

/// What [`gqa_step_with`] reads of a layer besides its four products: the head counts and
/// width, and QK-norm's γs if on.
#[derive(Clone, Copy, Debug)]
pub struct GqaHeads<'a, T: Float> {
    /// H.
    pub n_heads: usize,
    /// H_kv (divides H).
    pub n_kv_heads: usize,
    /// d_h.
    pub head_dim: usize,
    /// QK-norm's RMSNorms (queries, keys), or none.
    pub qk_norm: Option<&'a (RmsNorm<T>, RmsNorm<T>)>,
}

impl<T: Float> Gqa<T> {
    /// x·W (+ b) for the product `which`, chapter 3's dense layer or the bare product.
    pub fn product(&self, which: AttnProduct, x: &DMatrix<T>) -> Result<DMatrix<T>> {
        let b = self.biases.as_ref();
        match which {
            AttnProduct::Q => project(x, &self.w_q, b.map(|b| &b.b_q)),
            AttnProduct::K => project(x, &self.w_k, b.map(|b| &b.b_k)),
            AttnProduct::V => project(x, &self.w_v, b.map(|b| &b.b_v)),
            AttnProduct::O => project(x, &self.w_o, b.map(|b| &b.b_o)),
        }
    }

    /// Its heads as [`gqa_step_with`] reads them.
    pub fn heads(&self) -> GqaHeads<'_, T> {
        GqaHeads {
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim(),
            qk_norm: self.qk_norm.as_ref(),
        }
    }
}

/// [`gqa_step`] with its four weight products asked of `product` (given which one and its
/// input row, it returns the row x·W, with the bias if any): the seam through which a step
/// reads weights kept otherwise than as f32 matrices (chapter 11's int8, 4-bit or bf16 blocks).
/// [`gqa_step`] is this with chapter 3's products on the layer's own matrices. Errors on a `pos`
/// beyond the cache or the rotary table, a cache of another width, head counts that do not
/// divide, products of the wrong width, and as `product` does.
pub fn gqa_step_with<T: Float>(
    heads: GqaHeads<'_, T>,
    rope: Option<&Rotary<T>>,
    x: &DMatrix<T>,
    kv: &mut GqaKv<T>,
    pos: usize,
    mut product: impl FnMut(AttnProduct, &DMatrix<T>) -> Result<DMatrix<T>>,
) -> Result<DMatrix<T>> {
    const OP: &str = "gqa_step";
    let (n_heads, n_kv_heads, d_h) = (heads.n_heads, heads.n_kv_heads, heads.head_dim);
    if n_kv_heads == 0 || d_h == 0 || !n_heads.is_multiple_of(n_kv_heads) {
        let why = format!("n_kv_heads must be ≥ 1 and divide n_heads; got {n_heads}, {n_kv_heads}");
        return Err(invalid(OP, "heads", why));
    }
    check_rope(OP, rope, d_h)?;
    let width = n_kv_heads * d_h;
    if kv.keys.ncols() != width || kv.values.shape() != kv.keys.shape() {
        return Err(invalid(OP, "kv", "was made for another layer"));
    }
    if pos >= kv.keys.nrows() {
        return Err(invalid(OP, "pos", format!("{pos} is beyond the cache's {}", kv.keys.nrows())));
    }
    let (q_norm, k_norm) = match heads.qk_norm {
        Some((qn, kn)) => (Some(qn), Some(kn)),
        None => (None, None),
    };
    let at = Positions { seq_len: 1, start: pos };
    let q_all = product(AttnProduct::Q, x)?;
    let k_all = product(AttnProduct::K, x)?;
    let v_all = product(AttnProduct::V, x)?;
    let widths = [(&q_all, "Q", n_heads * d_h), (&k_all, "K", width), (&v_all, "V", width)];
    for (m, name, k) in widths {
        if m.shape() != (1, k) {
            return Err(shape_error(OP, name, format!("1×{k}"), shape_of(m)));
        }
    }
    for (g, block) in split_heads(&k_all, n_kv_heads)?.into_iter().enumerate() {
        let k = head_forward(k_norm, rope, block, at)?.rotated;
        kv.keys.view_mut((pos, g * d_h), (1, d_h)).copy_from(&k);
    }
    kv.values.rows_mut(pos, 1).copy_from(&v_all);
    let spec = AttnSpec { q_len: 1, kv_len: pos + 1, causal: true, mask: None, scale: None };
    let mut outs = Vec::with_capacity(n_heads);
    let group = n_heads / n_kv_heads;
    for (h, block) in split_heads(&q_all, n_heads)?.into_iter().enumerate() {
        let q = head_forward(q_norm, rope, block, at)?.rotated;
        let g = h / group;
        let keys = kv.keys.view((0, g * d_h), (pos + 1, d_h)).into_owned();
        let values = kv.values.view((0, g * d_h), (pos + 1, d_h)).into_owned();
        outs.push(attention_forward(&q, &keys, &values, &spec)?.out);
    }
    product(AttnProduct::O, &concat_heads(&outs)?)
}
