//! Generation one token at a time: the key/value cache, and the step that feeds one token through
//! every block as a row, reading each weight once.

use super::Gpt;
use crate::ch03_mlp::activation_forward;
use crate::ch06_attention::layer_norm_forward;
use crate::ch09_gpt::data::{Token, check_ids};
use crate::error::{Result, invalid, shape_error, shape_of};
use crate::float::Float;
use nalgebra::DMatrix;

/// The keys and values of every block for the tokens fed so far (rows 0 … len − 1 in use).
#[derive(Clone, Debug)]
pub struct KvCache<T: Float> {
    /// One n_ctx×d matrix of keys per block.
    pub keys: Vec<DMatrix<T>>,
    /// One n_ctx×d matrix of values per block.
    pub values: Vec<DMatrix<T>>,
    /// Tokens cached.
    pub len: usize,
}

impl<T: Float> Gpt<T> {
    // ───────────────────────────── one token at a time, with a cache ─────────────────────────────

    /// An empty key/value cache for [`Gpt::step`].
    pub fn new_kv_cache(&self) -> KvCache<T> {
        let d = self.config.width;
        KvCache {
            keys: vec![DMatrix::zeros(self.config.context, d); self.blocks.len()],
            values: vec![DMatrix::zeros(self.config.context, d); self.blocks.len()],
            len: 0,
        }
    }

    /// Feeds one token at the next position of the cache and returns its logits (length V).
    ///
    /// Each block computes the new token's query, key and value; the key and value join the
    /// cache; the query attends over every cached position (all earlier, so no mask is needed);
    /// the rest of the block acts on the one row. The result equals the last row of the full
    /// forward pass over the cached tokens (a test checks it to 10⁻⁹ in f64). Errors when the
    /// cache is full (the caller slides the window, see
    /// [`generate`](crate::ch09_gpt::sample::generate)).
    ///
    /// One row at a time, every product is a row times a matrix, and the work is reading each
    /// weight once (O(parameters + T·d) per token). So this path does not go through the blocked
    /// product, which would first copy each weight matrix into packed panels: [`row_affine`]
    /// takes each output as a dot product with a column of the weight, which column-major
    /// storage keeps contiguous, and [`attend_one`] reads the cached keys and values the same
    /// way. LayerNorm, GELU and the softmax are chapter 6's, 3's and 2's own functions.
    pub fn step(&self, cache: &mut KvCache<T>, token: Token) -> Result<Vec<T>> {
        const OP: &str = "Gpt::step";
        check_ids(OP, "token", &[token], self.config.vocab_size)?;
        if cache.len >= self.config.context {
            return Err(invalid(
                OP,
                "cache",
                format!(
                    "holds {} tokens, the whole context; slide the window and rebuild it",
                    cache.len
                ),
            ));
        }
        let (d, n_ctx) = (self.config.width, self.config.context);
        if cache.keys.len() != self.blocks.len()
            || cache.values.len() != self.blocks.len()
            || cache.keys.iter().chain(&cache.values).any(|m| m.shape() != (n_ctx, d))
        {
            return Err(invalid(
                OP,
                "cache",
                format!(
                    "was made for another model (expected {} blocks of {n_ctx}×{d} keys and \
                        values)",
                    self.blocks.len()
                ),
            ));
        }
        let pos = cache.len;
        let n = pos + 1;
        let mut x =
            DMatrix::from_fn(1, d, |_, c| self.wte[(token as usize, c)] + self.wpe[(pos, c)]);
        for (l, b) in self.blocks.iter().enumerate() {
            let (n1, _) = layer_norm_forward(&b.ln1, &x)?; //                    n₁ = LN₁(x)
            let q = row_affine(OP, n1.as_slice(), &b.attn.w_q, &b.attn.b_q)?; // q = n₁W_Q + b_Q
            let k = row_affine(OP, n1.as_slice(), &b.attn.w_k, &b.attn.b_k)?; // k = n₁W_K + b_K
            let v = row_affine(OP, n1.as_slice(), &b.attn.w_v, &b.attn.b_v)?; // v = n₁W_V + b_V
            if k.len() != d || v.len() != d {
                return Err(shape_error(
                    OP,
                    "w_k and w_v (columns: the cache's width)",
                    format!("{d}"),
                    format!("{} and {}", k.len(), v.len()),
                ));
            }
            for c in 0..d {
                cache.keys[l][(pos, c)] = k[c];
                cache.values[l][(pos, c)] = v[c];
            }
            // every head over positions 0 … pos
            let heads = attend_one(OP, &q, &cache.keys[l], &cache.values[l], n, b.attn.heads)?;
            let a = row_affine(OP, &heads, &b.attn.w_o, &b.attn.b_o)?; //     a = concat · W_O + b_O
            if a.len() != d {
                return Err(shape_error(
                    OP,
                    "w_o (columns)",
                    format!("{d}"),
                    format!("{}", a.len()),
                ));
            }
            let h = x + DMatrix::from_vec(1, d, a); //                           h = x + a
            let (n2, _) = layer_norm_forward(&b.ln2, &h)?; //                    n₂ = LN₂(h)
            let z1 = row_affine(OP, n2.as_slice(), &b.ffn.w1, &b.ffn.b1)?; //    z₁ = n₂W₁ + b₁
            // a₁ = GELU(z₁)
            let a1 = activation_forward(b.ffn.act, &DMatrix::from_vec(1, z1.len(), z1));
            let f = row_affine(OP, a1.as_slice(), &b.ffn.w2, &b.ffn.b2)?; //     f = a₁W₂ + b₂
            if f.len() != d {
                return Err(shape_error(
                    OP,
                    "w2 (columns)",
                    format!("{d}"),
                    format!("{}", f.len()),
                ));
            }
            x = h + DMatrix::from_vec(1, d, f); //                               x' = h + f
        }
        cache.len = n;
        let (h, _) = layer_norm_forward(&self.ln_f, &x)?;
        let logits: Vec<T> = self.logits_of(&h)?.iter().copied().collect();
        crate::float::ensure_finite_slice(OP, "logits (a weight holds NaN or ∞)", &logits)?;
        Ok(logits)
    }
}

/// y = x·W + b for one row x (length `in`), W in×out, b 1×out: y_j = b_j + x · W\[:, j\], each a
/// dot product with one column of W (contiguous in column-major storage). Errors on shapes that
/// do not chain.
pub fn row_affine<T: Float>(
    op: &'static str,
    x: &[T],
    w: &DMatrix<T>,
    b: &DMatrix<T>,
) -> Result<Vec<T>> {
    if x.len() != w.nrows() {
        return Err(shape_error(
            op,
            "x and W (x's length must equal W's rows)",
            format!("x of length {}", w.nrows()),
            format!("{}, W {}", x.len(), shape_of(w)),
        ));
    }
    if b.nrows() != 1 || b.ncols() != w.ncols() {
        return Err(shape_error(
            op,
            "b",
            format!("1×{} (one bias per output)", w.ncols()),
            shape_of(b),
        ));
    }
    if w.nrows() == 0 {
        return Ok(b.iter().copied().collect());
    }
    Ok(w.as_slice()
        .chunks_exact(w.nrows())
        .zip(b.iter())
        .map(|(column, &bias)| bias + dot(x, column))
        .collect())
}

/// Lanes of independent partial sums in [`dot`]: enough for the compiler to keep a vector
/// register's worth of multiply-adds in flight (the order of the additions is then fixed by this
/// number, not by the hardware, so results are reproducible).
pub const DOT_LANES: usize = 16;

/// Σᵢ aᵢbᵢ over equal-length slices, summed in [`DOT_LANES`] interleaved partial sums.
pub fn dot<T: Float>(a: &[T], b: &[T]) -> T {
    let mut lanes = [T::zero(); DOT_LANES];
    let (ca, cb) = (a.chunks_exact(DOT_LANES), b.chunks_exact(DOT_LANES));
    let tail: T = ca.remainder().iter().zip(cb.remainder()).map(|(&x, &y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..DOT_LANES {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().copied().sum::<T>() + tail
}

/// Causal attention of one new query row q (all heads side by side, length H·d_k) over the first
/// `n` rows of the cached keys and values (n_ctx×(H·d_k) each, column-major): for each head h,
/// s_p = q_h · K_h\[p\] / √d_k for p < n, a = softmax(s) (chapter 2, one row per head), and
/// o_h = Σ_p a_p V_h\[p\]. Returns the heads' outputs side by side. A column of the cache holds one
/// channel of every position, contiguous, so scores are built channel by channel (s += q_c K[:, c])
/// and outputs are dot products of a with a column of V.
pub fn attend_one<T: Float>(
    op: &'static str,
    q: &[T],
    keys: &DMatrix<T>,
    values: &DMatrix<T>,
    n: usize,
    heads: usize,
) -> Result<Vec<T>> {
    let width = keys.ncols();
    if heads == 0 || q.len() != width || values.ncols() != width || !width.is_multiple_of(heads) {
        return Err(shape_error(
            op,
            "q and the cache (width H·d_k)",
            format!("{width}, divisible by {heads} heads"),
            format!("q of length {}", q.len()),
        ));
    }
    if n == 0 || n > keys.nrows() || values.nrows() != keys.nrows() {
        return Err(invalid(
            op,
            "n",
            format!("{n} positions; the cache holds {} rows", keys.nrows()),
        ));
    }
    let d_k = width / heads;
    let scale = T::of(1.0 / (d_k as f64).sqrt());
    let rows = keys.nrows();
    let mut scores = DMatrix::zeros(heads, n);
    for h in 0..heads {
        let mut s = vec![T::zero(); n];
        let head = h * d_k..(h + 1) * d_k;
        for (&qc, key_column) in
            q[head.clone()].iter().zip(keys.as_slice().chunks_exact(rows).skip(head.start))
        {
            for (sp, &kp) in s.iter_mut().zip(&key_column[..n]) {
                *sp += qc * kp;
            }
        }
        for (p, sp) in s.into_iter().enumerate() {
            scores[(h, p)] = sp * scale;
        }
    }
    let weights = crate::ch02_softmax::softmax_rows_forward(&scores)?; // one distribution per head
    let mut out = vec![T::zero(); width];
    for h in 0..heads {
        let a: Vec<T> = weights.row(h).iter().copied().collect();
        let head = h * d_k..(h + 1) * d_k;
        for (o, value_column) in
            out[head.clone()].iter_mut().zip(values.as_slice().chunks_exact(rows).skip(head.start))
        {
            *o = dot(&a, &value_column[..n]);
        }
    }
    Ok(out)
}
