//! Generation one token at a time with a grouped-query key/value cache.
//!
//! For the new token u at position p, each block reads the keys and values of positions
//! 0 … p − 1 from its [`GqaKv`] (H_kv heads, rotated keys) instead of recomputing them:
//!
//! ```text
//! x = W_E[u] (+ W_P[p])                                          1×C
//! h = x + gqa_step(Norm₁(x), p);  x' = h + Mlp(Norm₂(h))         each block
//! z = Norm_f(x_L) W_Uᵀ                                           1×V, the logits
//! ```

use super::Decoder;
use super::pass::{mlp_forward, norm_forward};
use crate::ch09_gpt::data::{Token, check_ids};
use crate::ch09_gpt::sample::Generator;
use crate::ch12_modern::gqa::{GqaKv, gqa_step};
use crate::error::{Result, invalid};
use crate::float::Float;
use crate::matmul::matmul_nt;

/// Every block's key/value cache and the tokens fed so far.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderKv<T: Float> {
    /// One cache per block, context rows each.
    pub layers: Vec<GqaKv<T>>,
    /// Tokens cached.
    pub len: usize,
}

impl<T: Float> DecoderKv<T> {
    /// The bytes the cache holds per token: over the blocks, the widths of the keys and the
    /// values (2·H_kv·d_h each block) times the bytes of one value.
    pub fn bytes_per_token(&self) -> usize {
        let values: usize = self.layers.iter().map(|c| c.keys.ncols() + c.values.ncols()).sum();
        values * std::mem::size_of::<T>()
    }
}

impl<T: Float> Decoder<T> {
    /// An empty cache for [`Decoder::step`]: n_ctx rows for every block.
    pub fn new_kv(&self) -> DecoderKv<T> {
        let context = self.config.context;
        DecoderKv {
            layers: self.layers.iter().map(|l| GqaKv::new(&l.attn, context)).collect(),
            len: 0,
        }
    }

    /// Feeds one token at the next position of the cache and returns its logits (length V).
    /// Errors when the token is not below V, the cache is full or was made for another model.
    pub fn step(&self, kv: &mut DecoderKv<T>, token: Token) -> Result<Vec<T>> {
        const OP: &str = "Decoder::step";
        check_ids(OP, "token", &[token], self.config.vocab_size)?;
        let pos = kv.len;
        if pos >= self.config.context || kv.layers.len() != self.layers.len() {
            return Err(invalid(OP, "kv", "is full or was made for another model"));
        }
        let mut x = self.wte.rows(token as usize, 1).into_owned(); //      x = W_E[u]
        if let Some(wpe) = &self.wpe {
            x += wpe.rows(pos, 1); //                                      + W_P[p]
        }
        let rope = self.rope.as_ref();
        for (layer, cache) in self.layers.iter().zip(&mut kv.layers) {
            let (n1, _) = norm_forward(&layer.norm1, &x)?; //              n₁ = Norm₁(x)
            let h = &x + gqa_step(&layer.attn, rope, &n1, cache, pos)?; // h = x + Attn(n₁)
            let (n2, _) = norm_forward(&layer.norm2, &h)?; //              n₂ = Norm₂(h)
            x = &h + mlp_forward(&layer.mlp, &n2)?; //                     x' = h + Mlp(n₂)
        }
        kv.len = pos + 1;
        let (h_f, _) = norm_forward(&self.norm_f, &x)?; //                 h_f = Norm_f(x_L)
        Ok(matmul_nt(&h_f, self.unembedding())?.iter().copied().collect()) // z = h_f W_Uᵀ
    }
}

/// The decoder as chapter 9's sampler takes it: [`generate_with`] runs it with its own cache,
/// the GQA cache of [`Decoder::step`]. The prompt fills the cache one step a token.
///
/// [`generate_with`]: crate::ch09_gpt::sample::generate_with
impl<T: Float> Generator<T> for &Decoder<T> {
    type Cache = DecoderKv<T>;

    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn context(&self) -> usize {
        self.config.context
    }

    fn cache_len(cache: &DecoderKv<T>) -> usize {
        cache.len
    }

    fn prefill(&mut self, tokens: &[Token]) -> Result<(DecoderKv<T>, Vec<T>)> {
        if tokens.is_empty() {
            return Err(crate::error::Error::Empty { op: "Decoder::prefill", arg: "tokens" });
        }
        let mut kv = self.new_kv();
        let mut logits = Vec::new();
        for &u in tokens {
            logits = self.step(&mut kv, u)?;
        }
        Ok((kv, logits))
    }

    fn last_logits(&mut self, tokens: &[Token]) -> Result<Vec<T>> {
        let cache = self.forward(tokens, tokens.len())?;
        let last = cache.hidden.rows(tokens.len() - 1, 1).into_owned();
        Ok(matmul_nt(&last, self.unembedding())?.iter().copied().collect())
    }

    fn step(&mut self, cache: &mut DecoderKv<T>, token: Token) -> Result<Vec<T>> {
        Decoder::step(self, cache, token)
    }
}
