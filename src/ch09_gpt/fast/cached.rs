//! The fast cached step: one token through every block as a row, built from the fused step's
//! pieces (`fast::forward`), its products shared between threads (`fast::RowTeam`). The same
//! numbers as the lesson's [`Gpt::reference_step`] (chapter 6's functions); a test holds them.

use super::precision::Rounder;
use super::{
    Products, ROW_TEAM_WEIGHTS_PER_THREAD, add_row, causal_block_forward, one_row_attention,
    with_row_team,
};
use crate::ch03_mlp::activation_forward_into;
use crate::ch06_attention::{LnCache, layer_norm_forward_view};
use crate::ch09_gpt::data::{Token, check_ids};
use crate::ch09_gpt::model::{BlockForm, Dim, Gpt, KvCache, Param};
use crate::error::{Result, invalid, shape_error, shape_of};
use crate::float::Float;
use crate::matmul::{MatMut, MatRef, Op, row_product};
use nalgebra::DMatrix;

/// The rows one step works in (one token: every activation is a 1×C row).
#[derive(Clone, Debug)]
struct StepRows<T: Float> {
    /// The residual stream x, then h, then x′ (1×d).
    x: DMatrix<T>,
    /// n₁ or n₂ or h_f, a LayerNorm's output (1×d), and its saved values.
    n: DMatrix<T>,
    ln: LnCache<T>,
    /// The heads' outputs side by side (1×d).
    att: DMatrix<T>,
    /// z₁ and a₁ = GELU(z₁) (1×4d).
    z1: DMatrix<T>,
    a1: DMatrix<T>,
    /// One head's attention weights over the cached positions (n_ctx), and softmax scratch.
    weights: Vec<T>,
    stats: Vec<T>,
}

impl<T: Float> StepRows<T> {
    fn new(d: usize, hidden: usize, n_ctx: usize) -> Self {
        StepRows {
            x: DMatrix::zeros(1, d),
            n: DMatrix::zeros(1, d),
            ln: LnCache {
                x_hat: DMatrix::zeros(1, d),
                denom: vec![T::zero()],
                sigma: vec![T::zero()],
            },
            att: DMatrix::zeros(1, d),
            z1: DMatrix::zeros(1, hidden),
            a1: DMatrix::zeros(1, hidden),
            weights: vec![T::zero(); n_ctx],
            stats: vec![T::zero(); 2],
        }
    }
}

/// A 1×C matrix (or a slice) as a one-row view, its entries contiguous.
fn row<T>(m: &[T]) -> Result<MatRef<'_, T>> {
    MatRef::new(m, 1, m.len(), 1)
}

/// A 1×C matrix as a writable row.
fn row_mut<T>(m: &mut DMatrix<T>) -> Result<MatMut<'_, T>> {
    let cols = m.len();
    MatMut::new(m.as_mut_slice(), 1, cols, 1)
}

/// A weight matrix, where it is.
fn whole<T>(m: &DMatrix<T>) -> Result<MatRef<'_, T>> {
    MatRef::new(m.as_slice(), m.nrows(), m.ncols(), m.nrows().max(1))
}

impl<T: Float> Gpt<T> {
    // ───────────────────────────── one token at a time, with a cache ─────────────────────────────

    /// Feeds one token at the next position of the cache and returns its logits (length V).
    ///
    /// The fused training step's forward pass ([`FusedStep`](crate::ch09_gpt::fast::FusedStep))
    /// for one row: each block writes the new token's \[Q K V\] row = n₁\[W_Q W_K W_V\] + b_QKV
    /// into row `pos` of its cache; its attention is the training step's causal block
    /// (`fast::causal_block_forward`) for the one query row pos against the keys 0 … pos
    /// (`fast::one_row_attention`, which generation's last row runs too); LayerNorm and GELU
    /// are chapter 6's and 3's in-place functions, and the residuals accumulate in place. The
    /// result equals the last row of the full forward pass over the cached tokens (a test checks
    /// it to 10⁻⁹ in f64). Errors when the cache is full (the caller slides the window, see
    /// [`generate`](crate::ch09_gpt::sample::generate)), on a cache made for another model, and
    /// on a model whose blocks are not pre-LN.
    ///
    /// One row at a time, every product is a row times a matrix, and the work is reading each
    /// weight once (O(parameters + T·d) per token), so the products are `matmul`'s [`row_product`]
    /// rather than the blocked product (see there for what was measured). A model with enough
    /// weights shares each product's columns between threads (`fast::RowTeam`, on
    /// [`Gpt::step_threads`] threads, the same bits on any number).
    pub fn step(&self, cache: &mut KvCache<T>, token: Token) -> Result<Vec<T>> {
        self.step_with(cache, token, self)
    }

    /// [`Gpt::step`] with its weight products by `weights` ([`StepWeights`]: the model's own
    /// tensors for [`Gpt::step`], or another storage of the same weights, such as quantized
    /// blocks), everything else (embeddings, LayerNorms, biases, attention) from this model.
    /// Errors as [`Gpt::step`], and as `weights`' products do.
    pub fn step_with<W: StepWeights<T>>(
        &self,
        cache: &mut KvCache<T>,
        token: Token,
        weights: &W,
    ) -> Result<Vec<T>> {
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
        let (d, n_ctx, heads) = (self.config.width, self.config.context, self.config.heads);
        if cache.qkv.len() != self.blocks.len()
            || cache.qkv.iter().any(|m| m.shape() != (n_ctx, 3 * d))
        {
            return Err(invalid(
                OP,
                "cache",
                format!(
                    "was made for another model (expected {} blocks of {n_ctx}×{} [Q K V] rows)",
                    self.blocks.len(),
                    3 * d
                ),
            ));
        }
        let c = &self.config;
        // What the step indexes or copies must have the table's shape (every weight's shape is
        // checked by the product that reads it): the rows of the table (biases, LayerNorms).
        let shaped = self
            .params
            .shape()
            .order()
            .into_iter()
            .zip(self.params.iter())
            .all(|((s, _), m)| s.rows != Dim::One || m.shape() == (1, s.cols.of(c)))
            && self.wte().shape() == (c.vocab_size, d)
            && self.unembedding().ncols() == d;
        if !shaped
            || self.wpe().shape() != (n_ctx, d)
            || heads == 0
            || !d.is_multiple_of(heads)
            || self.blocks.len() != c.layers
            || self.blocks.iter().any(|b| b.order != BlockForm::GPT2.order)
        {
            return Err(invalid(
                OP,
                "model",
                "the cached step covers pre-LN blocks shaped as the parameter table says \
                    (generate without the cache)",
            ));
        }
        let pos = cache.len;
        // The step's working rows: a few vectors of the width, allocated per token.
        let r = &mut StepRows::new(d, c.hidden(), n_ctx);
        for (c, x) in r.x.iter_mut().enumerate() {
            *x = self.wte()[(token as usize, c)] + self.wpe()[(pos, c)]; // x₀ = W_E[u] + W_P[pos]
        }
        for (l, qkv) in cache.qkv.iter_mut().enumerate() {
            self.block_step(l, qkv, r, pos, weights)?;
        }
        cache.len = pos + 1;
        layer_norm_forward_view(self.ln_f(), &r.x, &mut r.ln, &mut r.n); //        h_f = LN_f(x_L)
        let mut z = DMatrix::zeros(1, self.unembedding().nrows()); //               z = h_f W_Uᵀ
        weights.unembed(row(r.n.as_slice())?, row_mut(&mut z)?)?;
        let logits: Vec<T> = z.iter().copied().collect();
        crate::float::ensure_finite_slice(OP, "logits (a weight holds NaN or ∞)", &logits)?;
        Ok(logits)
    }

    /// One block of [`Gpt::step`] (block `l`) for the row of position `pos` (in `r.x`), its
    /// \[Q K V\] row written into the block's cache `qkv`, its weight products by `store`.
    fn block_step<W: StepWeights<T>>(
        &self,
        l: usize,
        qkv: &mut DMatrix<T>,
        r: &mut StepRows<T>,
        pos: usize,
        store: &W,
    ) -> Result<()> {
        let (n_ctx, heads) = (self.config.context, self.config.heads);
        let p = |param: Param| self.params.of(param, l);
        layer_norm_forward_view(self.ln1(l), &r.x, &mut r.ln, &mut r.n); //           n₁ = LN₁(x)
        // Row pos of [Q K V] = n₁W_QKV + b_QKV, written into the cache where it belongs: row
        // pos of the n_ctx×3d buffer (one element every n_ctx).
        let b_qkv = p(Param::BQkv);
        let out = &mut qkv.as_mut_slice()[pos..];
        for (o, &bias) in out.iter_mut().step_by(n_ctx).zip(b_qkv.iter()) {
            *o = bias;
        }
        let out = MatMut::new(out, 1, b_qkv.ncols(), n_ctx)?;
        store.add_product((Param::WQkv, l), row(r.n.as_slice())?, out)?;
        // Every head: the causal block of the one query row pos against the keys 0 … pos.
        let att = r.att.as_mut_slice();
        let (weights, stats, how) = (&mut r.weights, &mut r.stats, Products::OneRow);
        let how = (how, &mut Rounder::default()); // f32 inputs: nothing rounded
        one_row_attention(qkv.as_slice(), n_ctx, pos, heads, weights, stats, att, how)?;
        let att = row(r.att.as_slice())?;
        store.add_product((Param::WO, l), att, row_mut(&mut r.x)?)?; //   h = x + att·W_O
        add_row(&mut r.x, p(Param::BO)); //                                              … + b_O
        layer_norm_forward_view(self.ln2(l), &r.x, &mut r.ln, &mut r.n); //           n₂ = LN₂(h)
        r.z1.as_mut_slice().copy_from_slice(p(Param::B1).as_slice());
        let n2 = row(r.n.as_slice())?;
        store.add_product((Param::W1, l), n2, row_mut(&mut r.z1)?)?; //   z₁ = b₁ + n₂W₁
        let act = self.form(l).act;
        activation_forward_into(act, r.z1.as_slice(), r.a1.as_mut_slice()); //       a₁ = σ(z₁)
        let a1 = row(r.a1.as_slice())?;
        store.add_product((Param::W2, l), a1, row_mut(&mut r.x)?)?; //    x' = h + a₁W₂
        add_row(&mut r.x, p(Param::B2)); //                                              … + b₂
        Ok(())
    }

    /// The threads the cached step's row products use for this model: one per
    /// [`ROW_TEAM_WEIGHTS_PER_THREAD`] weights of its blocks (a block reads W_Q, W_K, W_V, W_O,
    /// 4d², and W₁, W₂, 8d²), at most the crate's thread count, at least one.
    pub fn step_threads(&self) -> usize {
        let d = self.config.width;
        let block_weights = self.blocks.len() * 12 * d * d;
        crate::threads::default_threads().min(block_weights / ROW_TEAM_WEIGHTS_PER_THREAD).max(1)
    }
}

/// How the cached step ([`Gpt::step_with`]) multiplies a row by the model's weights: the blocks'
/// matrices and the unembedding, named by the parameter table. The model's own tensors
/// ([`Gpt`]'s implementation) are [`Gpt::step`]; another storage of the same weights (int8 or
/// 4-bit blocks, say) changes only these products.
pub trait StepWeights<T: Float> {
    /// y ← y + x·W for the weight matrix `param` of block `layer` (x 1×d_in, y 1×d_out, each a
    /// row view). Errors on shapes that do not chain.
    fn add_product(&self, param_of_block: (Param, usize), x: MatRef<T>, y: MatMut<T>)
    -> Result<()>;

    /// z = h·W_Uᵀ, the logits (h 1×d, z 1×V). Errors on shapes that do not chain.
    fn unembed(&self, h: MatRef<T>, z: MatMut<T>) -> Result<()>;
}

impl<T: Float> StepWeights<T> for Gpt<T> {
    /// [`row_product`] with β = 1, its columns shared by [`Gpt::step_threads`] threads.
    fn add_product(
        &self,
        (param, layer): (Param, usize),
        x: MatRef<T>,
        y: MatMut<T>,
    ) -> Result<()> {
        let w = whole(self.params.of(param, layer))?;
        with_row_team(self.step_threads(), |team| team.product(T::one(), x, w, T::one(), y))
    }

    /// [`row_product`] with op(W_U) = W_Uᵀ, on the caller's thread.
    fn unembed(&self, h: MatRef<T>, z: MatMut<T>) -> Result<()> {
        row_product(T::one(), h, whole(self.unembedding())?, Op::T, T::zero(), z)
    }
}

/// y = x·W + b for one row x (length `in`), W in×out, b 1×out: y_j = b_j + x · W\[:, j\], each a
/// dot product with one column of W (contiguous in column-major storage): the cached step's
/// weight product (`matmul`'s [`row_product`]) with the bias. Errors on shapes that do not chain.
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
    let mut y = b.clone();
    row_product(T::one(), row(x)?, whole(w)?, Op::N, T::one(), row_mut(&mut y)?)?;
    Ok(y.iter().copied().collect())
}

/// Causal attention of one new query row q (all heads side by side, length H·d_k) over the first
/// `n` rows of the cached keys and values (n_ctx×(H·d_k) each, column-major): for each head h,
/// a = softmax(q_h K_h\[..n\]ᵀ/√d_k) and o_h = a V_h\[..n\]. Returns the heads' outputs side by
/// side. This is the cached step's attention: the fused step's causal block
/// (`fast::causal_block_forward`) of the one query row n − 1 against the keys 0 … n − 1, read
/// from separate key and value matrices.
pub fn attend_one<'a, T: Float>(
    op: &'static str,
    q: &[T],
    keys: &'a DMatrix<T>,
    values: &'a DMatrix<T>,
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
    let (d_k, rows) = (width / heads, keys.nrows());
    let (mut weights, mut stats) = (vec![T::zero(); n], vec![T::zero(); 2]);
    let mut out = vec![T::zero(); width];
    for h in 0..heads {
        let view = |m: &'a DMatrix<T>| MatRef::new(&m.as_slice()[h * d_k * rows..], n, d_k, rows);
        let q_h = MatRef::new(&q[h * d_k..], 1, d_k, 1)?;
        causal_block_forward(
            (q_h, view(keys)?, view(values)?),
            n - 1,
            MatMut::new(&mut weights, 1, n, 1)?,
            MatMut::new(&mut out[h * d_k..], 1, d_k, 1)?,
            &mut stats,
            (Products::OneRow, &mut Rounder::default()),
        )?;
    }
    Ok(out)
}
