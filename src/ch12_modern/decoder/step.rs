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
//!
//! Its weight products (attention's q, k, v, o, the gated MLP's gate, up and down, and the
//! unembedding) are asked of a [`DecoderWeights`]: [`Decoder::step`] is [`Decoder::step_with`]
//! on the decoder's own f32 matrices, and a decoder whose matrices are stored otherwise (int8,
//! 4-bit or bf16, [`QuantDecoder`]) changes only those products.
//!
//! [`QuantDecoder`]: crate::ch12_modern::quant_decoder::QuantDecoder

use super::pass::{mlp_forward, norm_forward};
use super::{Decoder, Mlp};
use crate::ch09_gpt::data::{Token, check_ids};
use crate::ch09_gpt::sample::Generator;
use crate::ch12_modern::gqa::{AttnProduct, GqaHeads, GqaKv, gqa_step_with};
use crate::error::{Result, invalid, shape_error, shape_of};
use crate::float::Float;
use crate::matmul::{matmul, matmul_nt};
use nalgebra::DMatrix;

/// One weight product of a block in the cached step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepProduct {
    /// One of attention's four: x W_Q, x W_K, x W_V, Concat(o) W_O (each + b if biased).
    Attn(AttnProduct),
    /// The gated MLP's x W_gate.
    Gate,
    /// The gated MLP's x W_up.
    Up,
    /// The gated MLP's h W_down.
    Down,
}

/// How the decoder's cached step ([`Decoder::step_with`]) multiplies a row by a block's weights
/// and by the unembedding. The decoder's own tensors ([`Decoder`]'s implementation) are
/// [`Decoder::step`]; another storage of the same weights changes only these products.
/// Everything else the step reads (W_E, W_P, the norms, QK-norm, the rotation, a GELU MLP) is
/// the decoder's own.
pub trait DecoderWeights<T: Float> {
    /// y = x·W (+ b) for the product `which` of block `layer`, x one row (1×d_in, y 1×d_out).
    /// Errors on shapes that do not chain or a product the block does not have.
    fn product(&self, which: (StepProduct, usize), x: &DMatrix<T>) -> Result<DMatrix<T>>;

    /// z = h·W_Uᵀ, the logits (h 1×C, z of length V). Errors on shapes that do not chain.
    fn unembed(&self, h: &DMatrix<T>) -> Result<Vec<T>>;
}

/// The decoder's own matrices: chapter 3's products as [`gqa_step`] and [`glu_forward`] compute
/// them, and the unembedding's `matmul_nt`.
///
/// [`gqa_step`]: crate::ch12_modern::gqa::gqa_step
/// [`glu_forward`]: crate::ch12_modern::glu::glu_forward
impl<T: Float> DecoderWeights<T> for Decoder<T> {
    fn product(&self, (which, layer): (StepProduct, usize), x: &DMatrix<T>) -> Result<DMatrix<T>> {
        const OP: &str = "Decoder::product";
        let Some(l) = self.layers.get(layer) else {
            return Err(invalid(
                OP,
                "layer",
                format!("{layer} is beyond the {} blocks", self.layers.len()),
            ));
        };
        match (which, &l.mlp) {
            (StepProduct::Attn(w), _) => l.attn.product(w, x),
            (StepProduct::Gate, Mlp::Gated(g)) => matmul(x, &g.w_gate),
            (StepProduct::Up, Mlp::Gated(g)) => matmul(x, &g.w_up),
            (StepProduct::Down, Mlp::Gated(g)) => matmul(x, &g.w_down),
            (_, Mlp::Gelu(_)) => Err(invalid(OP, "which", "a GELU MLP has no gate, up or down")),
        }
    }

    fn unembed(&self, h: &DMatrix<T>) -> Result<Vec<T>> {
        Ok(matmul_nt(h, self.unembedding())?.iter().copied().collect())
    }
}

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
    /// An empty cache for [`Decoder::step`]: n_ctx rows of H_kv·d_h keys and values for every
    /// block (read from the configuration, not from the matrices).
    pub fn new_kv(&self) -> DecoderKv<T> {
        let c = &self.config;
        let width = c.n_kv_heads * c.head_dim();
        let empty = || GqaKv {
            keys: DMatrix::zeros(c.context, width),
            values: DMatrix::zeros(c.context, width),
        };
        DecoderKv { layers: self.layers.iter().map(|_| empty()).collect(), len: 0 }
    }

    /// Feeds one token at the next position of the cache and returns its logits (length V):
    /// [`Decoder::step_with`] on the decoder's own matrices. Errors when the token is not below
    /// V, the cache is full or was made for another model.
    pub fn step(&self, kv: &mut DecoderKv<T>, token: Token) -> Result<Vec<T>> {
        self.step_with(kv, token, self)
    }

    /// [`Decoder::step`] with every weight product asked of `weights` (q, k, v, o, gate, up,
    /// down of each block and the unembedding); the embeddings, norms, QK-norm, rotation and a
    /// GELU MLP are this decoder's. Errors as [`Decoder::step`] does, and as `weights` does.
    pub fn step_with(
        &self,
        kv: &mut DecoderKv<T>,
        token: Token,
        weights: &impl DecoderWeights<T>,
    ) -> Result<Vec<T>> {
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
        let c = &self.config;
        for (l, (layer, cache)) in self.layers.iter().zip(&mut kv.layers).enumerate() {
            let heads = GqaHeads {
                n_heads: c.n_heads,
                n_kv_heads: c.n_kv_heads,
                head_dim: c.head_dim(),
                qk_norm: layer.attn.qk_norm.as_ref(),
            };
            let product = |w, x: &DMatrix<T>| weights.product((StepProduct::Attn(w), l), x);
            let (n1, _) = norm_forward(&layer.norm1, &x)?; //              n₁ = Norm₁(x)
            let h = &x + gqa_step_with(heads, rope, &n1, cache, pos, product)?; // h = x + Attn(n₁)
            let (n2, _) = norm_forward(&layer.norm2, &h)?; //              n₂ = Norm₂(h)
            let y = match &layer.mlp {
                Mlp::Gelu(_) => mlp_forward(&layer.mlp, &n2)?,
                Mlp::Gated(g) => {
                    let a = weights.product((StepProduct::Gate, l), &n2)?; //  a = n₂ W_gate
                    let b = weights.product((StepProduct::Up, l), &n2)?; //    b = n₂ W_up
                    if a.shape() != b.shape() {
                        return Err(shape_error(OP, "up", shape_of(&a), shape_of(&b)));
                    }
                    let hidden = a.zip_map(&b, |a, b| T::of(g.gate.apply(a.as_f64())) * b);
                    weights.product((StepProduct::Down, l), &hidden)? //       (φ(a) ⊙ b) W_down
                }
            };
            x = &h + y; //                                                 x' = h + Mlp(n₂)
        }
        kv.len = pos + 1;
        let (h_f, _) = norm_forward(&self.norm_f, &x)?; //                 h_f = Norm_f(x_L)
        weights.unembed(&h_f) //                                           z = h_f W_Uᵀ
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
