//! Multi-head attention: project, split into heads, attend in each, concatenate, project.
//!
//! ```text
//! Q = X_q W_Q + b_Q,   K = X_kv W_K + b_K,   V = X_kv W_V + b_V
//! head_h = Attention(Q_h, K_h, V_h)        Q_h: columns h·d_k … (h+1)·d_k − 1 of Q
//! out = Concat(head_1 … head_H) W_O + b_O
//! ```
//!
//! Self-attention passes the same X as X_q and X_kv; cross-attention (chapter 7) passes the
//! decoder's stream as X_q and the encoder's output as X_kv.

use super::attention::{AttnSpec, attention_backward, attention_forward};
use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::Float;
use crate::matmul::{matmul, matmul_nt, matmul_tn};
use nalgebra::DMatrix;

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

// ───────────────────────────── multi-head attention ─────────────────────────────

/// Splits the columns of m into `heads` equal blocks: m is N×(H·w), head h gets the N×w block of
/// columns h·w … (h+1)·w − 1.
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

/// Concatenates per-head outputs side by side (the inverse of [`split_heads`]): H matrices with N
/// rows each give one N×(Σ widths) matrix.
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
/// w_q C_q×(H·d_k), w_k C_kv×(H·d_k), w_v C_kv×(H·d_v), w_o (H·d_v)×C_out, each bias
/// 1×(its columns).
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

/// Backward of [`mha_forward`] given ∂L/∂out ((B·T_q)×C_out). With C the concatenated heads:
///
/// ```text
/// out = C W_O + b_O        ⇒ ∂W_O = Cᵀ ∂out,   ∂b_O = Σ_rows ∂out,   ∂C = ∂out W_Oᵀ
/// C = Concat(head_h)       ⇒ ∂head_h = columns h·d_v … of ∂C, back through [`attention_backward`]
/// Q = X_q W_Q + b_Q        ⇒ ∂X_q = ∂Q W_Qᵀ,   ∂W_Q = X_qᵀ ∂Q,   ∂b_Q = Σ_rows ∂Q
/// K, V = X_kv W_{K,V} + b  ⇒ ∂X_kv = ∂K W_Kᵀ + ∂V W_Vᵀ,   ∂W_K = X_kvᵀ ∂K,   ∂W_V = X_kvᵀ ∂V
/// ```
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
    let (mut d_q_heads, mut d_k_heads, mut d_v_heads) = (Vec::new(), Vec::new(), Vec::new());
    for h in 0..p.heads {
        let g = attention_backward(
            &qs[h],
            &ks[h],
            &vs[h],
            &cache.weights[h],
            &d_heads[h],
            &cache.spec,
        )?;
        d_q_heads.push(g.d_q);
        d_k_heads.push(g.d_k);
        d_v_heads.push(g.d_v);
    }
    let d_q = concat_heads(&d_q_heads)?; // Q = Concat(Q_h)
    let d_k = concat_heads(&d_k_heads)?; // K = Concat(K_h)
    let d_v = concat_heads(&d_v_heads)?; // V = Concat(V_h)
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

// ───────────────────────────── sizes ─────────────────────────────

/// Parameters of one attention head with a low-rank value map, as D0 and D1 count
/// them: W_Q and W_K (d_model×d_head each), value-down (d_model×d_head) and value-up
/// (d_head×d_model), no biases: 4·d_model·d_head.
pub fn head_parameter_count(d_model: usize, d_head: usize) -> usize {
    4 * d_model * d_head
}
