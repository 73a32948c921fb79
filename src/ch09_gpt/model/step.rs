//! Generation one token at a time, the lesson's way: the key/value cache, and the reference
//! cached step written with chapter 6's functions. The fast step that generation runs
//! ([`Gpt::step`], in the engine: `fast::cached`) computes the same numbers; a test holds the
//! two together.
//!
//! For the new token u at position p, each block l reads the keys and values of positions
//! 0 … p − 1 from the cache instead of recomputing them:
//!
//! ```text
//! x = W_E[u] + W_P[p]                                   1×d
//! n₁ = LN₁(x);  [q k v] = n₁ W_QKV + b_QKV              row p of the block's [Q K V] cache
//! o_h = softmax(q_h K_h[0..p]ᵀ/√d_k) V_h[0..p]          every head h, over the cached rows
//! h = x + o W_O + b_O;  x' = h + GELU(LN₂(h) W₁ + b₁) W₂ + b₂
//! z = LN_f(x_L) W_Uᵀ                                    1×V, the logits
//! ```

use super::{Gpt, Param, layer_norm_of};
use crate::ch03_mlp::activation_forward;
use crate::ch06_attention::{AttnSpec, attention_forward, layer_norm_forward};
use crate::ch09_gpt::data::{Token, check_ids};
use crate::error::{Result, invalid};
use crate::float::Float;
use crate::matmul::matmul;
use nalgebra::DMatrix;

/// Every block's \[Q K V\] rows for the tokens fed so far (rows 0 … len − 1 in use).
#[derive(Clone, Debug, PartialEq)]
pub struct KvCache<T: Float> {
    /// One n_ctx×3d matrix per block: row p holds position p's query, key and value side by side
    /// (columns 0 … d − 1, d … 2d − 1, 2d … 3d − 1), the layout of the training step's \[Q K V\]
    /// rows. Later steps read the keys and values; the queries are kept so that the cache reads
    /// as that buffer does.
    pub qkv: Vec<DMatrix<T>>,
    /// Tokens cached.
    pub len: usize,
}

impl<T: Float> KvCache<T> {
    /// The cached keys of block `l` (len×d), or `None` past the last block.
    pub fn keys(&self, l: usize) -> Option<DMatrix<T>> {
        self.part(l, 1)
    }

    /// The cached values of block `l` (len×d), or `None` past the last block.
    pub fn values(&self, l: usize) -> Option<DMatrix<T>> {
        self.part(l, 2)
    }

    fn part(&self, l: usize, part: usize) -> Option<DMatrix<T>> {
        let m = self.qkv.get(l)?;
        let d = m.ncols() / 3;
        Some(m.view((0, part * d), (self.len.min(m.nrows()), d)).into_owned())
    }
}

impl<T: Float> Gpt<T> {
    /// An empty key/value cache for [`Gpt::step`] and [`Gpt::reference_step`].
    pub fn new_kv_cache(&self) -> KvCache<T> {
        let c = &self.config;
        KvCache { qkv: vec![DMatrix::zeros(c.context, 3 * c.width); self.blocks.len()], len: 0 }
    }

    /// Feeds one token at the next position of the cache and returns its logits (length V), by
    /// chapter 6's functions, one block after another as the module notes write it. Errors when
    /// the cache is full or was made for another model.
    pub fn reference_step(&self, cache: &mut KvCache<T>, token: Token) -> Result<Vec<T>> {
        const OP: &str = "Gpt::reference_step";
        check_ids(OP, "token", &[token], self.config.vocab_size)?;
        let (d, heads, pos) = (self.config.width, self.config.heads, cache.len);
        let fits = |m: &DMatrix<T>| m.shape() == (self.config.context, 3 * d);
        if pos >= self.config.context || cache.qkv.len() != self.blocks.len() {
            return Err(invalid(OP, "cache", "is full or was made for another model"));
        }
        let row = |m: &DMatrix<T>, r: usize| m.rows(r, 1).into_owned();
        let mut x = row(self.wte(), token as usize) + row(self.wpe(), pos); // x = W_E[u] + W_P[p]
        let spec = AttnSpec { q_len: 1, kv_len: pos + 1, causal: true, mask: None, scale: None };
        for (l, qkv) in cache.qkv.iter_mut().enumerate() {
            if !fits(qkv) {
                return Err(invalid(OP, "cache", "was made for another model"));
            }
            let p = |param: Param| self.params.of(param, l);
            let (n1, _) = layer_norm_forward(&layer_norm_of(self.ln1(l)), &x)?; // n₁ = LN₁(x)
            let new = matmul(&n1, p(Param::WQkv))? + p(Param::BQkv); //    [q k v] = n₁W_QKV + b
            qkv.rows_mut(pos, 1).copy_from(&new);
            let mut o = DMatrix::zeros(1, d);
            let d_k = d / heads;
            for h in 0..heads {
                // Head h: its query against the keys and values of positions 0 … p.
                let cols = |part: usize| qkv.view((0, part * d + h * d_k), (pos + 1, d_k));
                let q_h = cols(0).rows(pos, 1).into_owned();
                let a =
                    attention_forward(&q_h, &cols(1).into_owned(), &cols(2).into_owned(), &spec)?;
                o.columns_mut(h * d_k, d_k).copy_from(&a.out);
            }
            let h = x + matmul(&o, p(Param::WO))? + p(Param::BO); //     h = x + o W_O + b_O
            let (n2, _) = layer_norm_forward(&layer_norm_of(self.ln2(l)), &h)?; // n₂ = LN₂(h)
            let a1 =
                activation_forward(self.form(l).act, &(matmul(&n2, p(Param::W1))? + p(Param::B1)));
            x = h + matmul(&a1, p(Param::W2))? + p(Param::B2); //        x' = h + a₁W₂ + b₂
        }
        cache.len = pos + 1;
        let (h_f, _) = layer_norm_forward(&layer_norm_of(self.ln_f()), &x)?; //    h_f = LN_f(x_L)
        Ok(self.logits_of(&h_f)?.iter().copied().collect()) //                     z = h_f W_Uᵀ
    }
}
