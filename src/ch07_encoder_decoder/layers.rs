//! The two kinds of layer: the encoder layer (chapter 6's post-LN block over a padded batch) and
//! the decoder layer (causal self-attention, cross-attention, feed-forward net, each followed by a
//! LayerNorm), with the decoder layer's backward pass; and every layer's tensors as a list in a
//! fixed order, so parameters and gradients pair up by position.

use super::cross_attention::{
    Batch, attention_spec, cross_attention_backward, cross_attention_forward,
};
use crate::ch03_mlp::Activation;
use crate::ch06_attention::{
    Block, BlockCache, BlockGrads, Ffn, FfnCache, FfnGrads, LAYER_NORM_EPS, LayerNorm, LnCache,
    LnGrads, MhaCache, MhaGrads, MultiHead, NormOrder, block_forward, ffn_backward, ffn_forward,
    layer_norm_backward, layer_norm_forward, mha_backward, mha_forward,
};
use crate::error::{Result, invalid};
use crate::float::Float;
use crate::rng::Rng;
use nalgebra::DMatrix;

// ───────────────────── parameters and gradients as parallel lists ─────────────────────

fn mha_tensors<T: Float>(p: &MultiHead<T>) -> [&DMatrix<T>; 8] {
    [&p.w_q, &p.b_q, &p.w_k, &p.b_k, &p.w_v, &p.b_v, &p.w_o, &p.b_o]
}

fn mha_tensors_mut<T: Float>(p: &mut MultiHead<T>) -> [&mut DMatrix<T>; 8] {
    [&mut p.w_q, &mut p.b_q, &mut p.w_k, &mut p.b_k, &mut p.w_v, &mut p.b_v, &mut p.w_o, &mut p.b_o]
}

/// Multi-head gradients laid out as a [`MultiHead`] (∂W_Q in `w_q` …), so gradients and
/// parameters list their tensors in the same order.
fn mha_as_params<T: Float>(heads: usize, g: MhaGrads<T>) -> MultiHead<T> {
    MultiHead {
        heads,
        w_q: g.d_w_q,
        b_q: g.d_b_q,
        w_k: g.d_w_k,
        b_k: g.d_b_k,
        w_v: g.d_w_v,
        b_v: g.d_b_v,
        w_o: g.d_w_o,
        b_o: g.d_b_o,
    }
}

fn ln_as_params<T: Float>(like: &LayerNorm<T>, g: LnGrads<T>) -> LayerNorm<T> {
    LayerNorm { gamma: g.d_gamma, beta: g.d_beta, ..like.clone() }
}

fn ffn_as_params<T: Float>(like: &Ffn<T>, g: FfnGrads<T>) -> Ffn<T> {
    Ffn { w1: g.d_w1, b1: g.d_b1, w2: g.d_w2, b2: g.d_b2, act: like.act }
}

fn ffn_tensors<T: Float>(f: &Ffn<T>) -> [&DMatrix<T>; 4] {
    [&f.w1, &f.b1, &f.w2, &f.b2]
}

fn ffn_tensors_mut<T: Float>(f: &mut Ffn<T>) -> [&mut DMatrix<T>; 4] {
    [&mut f.w1, &mut f.b1, &mut f.w2, &mut f.b2]
}

/// Every tensor of an encoder layer (chapter 6's [`Block`]) in a fixed order.
pub fn block_tensors<T: Float>(b: &Block<T>) -> Vec<&DMatrix<T>> {
    let mut v: Vec<&DMatrix<T>> = mha_tensors(&b.attn).into();
    v.extend([&b.ln1.gamma, &b.ln1.beta]);
    v.extend(ffn_tensors(&b.ffn));
    v.extend([&b.ln2.gamma, &b.ln2.beta]);
    v
}

/// Every tensor of an encoder layer, mutable, in the order of [`block_tensors`].
pub fn block_tensors_mut<T: Float>(b: &mut Block<T>) -> Vec<&mut DMatrix<T>> {
    let mut v: Vec<&mut DMatrix<T>> = mha_tensors_mut(&mut b.attn).into();
    v.extend([&mut b.ln1.gamma, &mut b.ln1.beta]);
    v.extend(ffn_tensors_mut(&mut b.ffn));
    v.extend([&mut b.ln2.gamma, &mut b.ln2.beta]);
    v
}

pub(super) fn block_grads_as_params<T: Float>(like: &Block<T>, g: BlockGrads<T>) -> Block<T> {
    Block {
        attn: mha_as_params(like.attn.heads, g.attn),
        ln1: ln_as_params(&like.ln1, g.ln1),
        ffn: ffn_as_params(&like.ffn, g.ffn),
        ln2: ln_as_params(&like.ln2, g.ln2),
        order: like.order,
    }
}

/// An encoder layer: chapter 6's block in the post-LN order of D3's figure,
/// X₁ = LN₁(X + SelfAttention(X)), out = LN₂(X₁ + FFN(X₁)), with a ReLU feed-forward net.
/// Attention weights N(0, 1/C), W₁ N(0, 2/C) (it feeds a ReLU), W₂ N(0, 1/F), biases 0, γ = 1,
/// β = 0.
pub fn encoder_block<T: Float>(
    width: usize,
    heads: usize,
    hidden: usize,
    rng: &mut Rng,
) -> Result<Block<T>> {
    if heads == 0 || !width.is_multiple_of(heads) {
        return Err(invalid(
            "encoder_block",
            "heads",
            format!("the width {width} must split into {heads} equal heads"),
        ));
    }
    Ok(Block {
        attn: MultiHead::random(
            heads,
            width,
            width,
            width / heads,
            width,
            1.0 / (width as f64).sqrt(),
            rng,
        )?,
        ln1: LayerNorm::new(width, LAYER_NORM_EPS)?,
        ffn: relu_ffn(width, hidden, rng),
        ln2: LayerNorm::new(width, LAYER_NORM_EPS)?,
        order: NormOrder::Post,
    })
}

fn relu_ffn<T: Float>(width: usize, hidden: usize, rng: &mut Rng) -> Ffn<T> {
    Ffn {
        w1: rng.normal_matrix(width, hidden, (2.0 / width as f64).sqrt()),
        b1: DMatrix::zeros(1, hidden),
        w2: rng.normal_matrix(hidden, width, (1.0 / hidden as f64).sqrt()),
        b2: DMatrix::zeros(1, width),
        act: Activation::Relu,
    }
}

/// Forward pass of an encoder layer over a padded batch (the padded keys masked).
/// Shapes: x (B·T)×C, result (B·T)×C.
pub fn encoder_block_forward<T: Float>(
    x: &DMatrix<T>,
    batch: &Batch,
    block: &Block<T>,
) -> Result<(DMatrix<T>, BlockCache<T>)> {
    batch.check_rows("encoder_block_forward", "x", x)?;
    block_forward(block, x, &attention_spec(batch, batch, false)?)
}

// ───────────────────────────── the decoder block ─────────────────────────────

/// One decoder layer, post-LN: Y₁ = LN₁(Y + CausalSelfAttention(Y)),
/// Y₂ = LN₂(Y₁ + CrossAttention(Y₁, E)), out = LN₃(Y₂ + FFN(Y₂)). Every part is chapter 6's.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderBlock<T: Float> {
    /// The causal self-attention.
    pub self_attention: MultiHead<T>,
    /// LayerNorm after the self-attention.
    pub norm1: LayerNorm<T>,
    /// The cross-attention (queries from the decoder, keys and values from the encoder output):
    /// its weights belong to the decoder layer, not to the encoder.
    pub cross_attention: MultiHead<T>,
    /// LayerNorm after the cross-attention.
    pub norm2: LayerNorm<T>,
    /// The feed-forward net.
    pub ffn: Ffn<T>,
    /// LayerNorm after the feed-forward net.
    pub norm3: LayerNorm<T>,
}

impl<T: Float> DecoderBlock<T> {
    /// Attention weights N(0, 1/C), a ReLU feed-forward net as in [`encoder_block`], γ = 1, β = 0.
    pub fn random(width: usize, heads: usize, hidden: usize, rng: &mut Rng) -> Result<Self> {
        if heads == 0 || !width.is_multiple_of(heads) {
            return Err(invalid(
                "DecoderBlock::random",
                "heads",
                format!("the width {width} must split into {heads} equal heads"),
            ));
        }
        let std = 1.0 / (width as f64).sqrt();
        Ok(DecoderBlock {
            self_attention: MultiHead::random(heads, width, width, width / heads, width, std, rng)?,
            norm1: LayerNorm::new(width, LAYER_NORM_EPS)?,
            cross_attention: MultiHead::random(
                heads,
                width,
                width,
                width / heads,
                width,
                std,
                rng,
            )?,
            norm2: LayerNorm::new(width, LAYER_NORM_EPS)?,
            ffn: relu_ffn(width, hidden, rng),
            norm3: LayerNorm::new(width, LAYER_NORM_EPS)?,
        })
    }

    /// Every tensor, in a fixed order (the order of [`DecoderBlock::tensors_mut`]).
    pub fn tensors(&self) -> Vec<&DMatrix<T>> {
        let mut v: Vec<&DMatrix<T>> = mha_tensors(&self.self_attention).into();
        v.extend([&self.norm1.gamma, &self.norm1.beta]);
        v.extend(mha_tensors(&self.cross_attention));
        v.extend([&self.norm2.gamma, &self.norm2.beta]);
        v.extend(ffn_tensors(&self.ffn));
        v.extend([&self.norm3.gamma, &self.norm3.beta]);
        v
    }

    /// Every tensor, mutable, in the order of [`DecoderBlock::tensors`].
    pub fn tensors_mut(&mut self) -> Vec<&mut DMatrix<T>> {
        let mut v: Vec<&mut DMatrix<T>> = mha_tensors_mut(&mut self.self_attention).into();
        v.extend([&mut self.norm1.gamma, &mut self.norm1.beta]);
        v.extend(mha_tensors_mut(&mut self.cross_attention));
        v.extend([&mut self.norm2.gamma, &mut self.norm2.beta]);
        v.extend(ffn_tensors_mut(&mut self.ffn));
        v.extend([&mut self.norm3.gamma, &mut self.norm3.beta]);
        v
    }
}

/// What the decoder block's backward pass needs.
#[derive(Clone, Debug)]
pub struct DecoderBlockCache<T: Float> {
    /// The masked self-attention's cache (queries and keys/values both from y).
    pub self_attention: MhaCache<T>,
    /// LN₁'s cache: Y₁ = LN₁(y + Attn(y, y)).
    pub norm1: LnCache<T>,
    /// The cross-attention's cache; its `weights` (one (B·T_t)×T_s matrix per head) are the
    /// cross-attention maps.
    pub cross_attention: MhaCache<T>,
    /// LN₂'s cache: Y₂ = LN₂(Y₁ + Cross(Y₁, E)).
    pub norm2: LnCache<T>,
    /// The feed-forward network's cache, applied to Y₂.
    pub ffn: FfnCache<T>,
    /// LN₃'s cache: out = LN₃(Y₂ + FFN(Y₂)).
    pub norm3: LnCache<T>,
}

/// Forward pass of a [`DecoderBlock`]: y (B·T_t)×C the decoder stream, e (B·T_s)×C the encoder
/// output. Result (B·T_t)×C.
pub fn decoder_block_forward<T: Float>(
    y: &DMatrix<T>,
    y_batch: &Batch,
    e: &DMatrix<T>,
    e_batch: &Batch,
    block: &DecoderBlock<T>,
) -> Result<(DMatrix<T>, DecoderBlockCache<T>)> {
    y_batch.check_rows("decoder_block_forward", "y", y)?;
    let (a, self_attention) =
        mha_forward(&block.self_attention, y, y, &attention_spec(y_batch, y_batch, true)?)?;
    let (y1, norm1) = layer_norm_forward(&block.norm1, &(y + a))?;
    let (c, cross_attention) =
        cross_attention_forward(&y1, y_batch, e, e_batch, &block.cross_attention)?;
    let (y2, norm2) = layer_norm_forward(&block.norm2, &(&y1 + c))?;
    let (f, ffn) = ffn_forward(&block.ffn, &y2)?;
    let (out, norm3) = layer_norm_forward(&block.norm3, &(&y2 + f))?;
    Ok((out, DecoderBlockCache { self_attention, norm1, cross_attention, norm2, ffn, norm3 }))
}

/// Backward of [`decoder_block_forward`]: (∂L/∂y, ∂L/∂e, the weights' gradients laid out as a
/// [`DecoderBlock`]). ∂L/∂e is the gradient the cross-attention sends into the encoder output.
pub fn decoder_block_backward<T: Float>(
    block: &DecoderBlock<T>,
    cache: &DecoderBlockCache<T>,
    d_out: &DMatrix<T>,
) -> Result<(DMatrix<T>, DMatrix<T>, DecoderBlock<T>)> {
    let norm3 = layer_norm_backward(&block.norm3, &cache.norm3, d_out)?; //      out = LN₃(s₃)
    let ffn = ffn_backward(&block.ffn, &cache.ffn, &norm3.d_x)?; //               s₃ = Y₂ + FFN(Y₂)
    let d_y2 = &norm3.d_x + &ffn.d_x;
    let norm2 = layer_norm_backward(&block.norm2, &cache.norm2, &d_y2)?; //      Y₂ = LN₂(s₂)
    // s₂ = Y₁ + Cross(Y₁, E):
    let cross =
        cross_attention_backward(&block.cross_attention, &cache.cross_attention, &norm2.d_x)?;
    let d_y1 = &norm2.d_x + &cross.d_x_q;
    let d_e = cross.d_x_kv.clone();
    let norm1 = layer_norm_backward(&block.norm1, &cache.norm1, &d_y1)?; //      Y₁ = LN₁(s₁)
    // s₁ = Y + Attn(Y, Y):
    let selfa = mha_backward(&block.self_attention, &cache.self_attention, &norm1.d_x)?;
    let d_y = &norm1.d_x + &selfa.d_x_q + &selfa.d_x_kv;
    let heads = block.self_attention.heads;
    let grads = DecoderBlock {
        self_attention: mha_as_params(heads, selfa),
        norm1: ln_as_params(&block.norm1, norm1),
        cross_attention: mha_as_params(block.cross_attention.heads, cross),
        norm2: ln_as_params(&block.norm2, norm2),
        ffn: ffn_as_params(&block.ffn, ffn),
        norm3: ln_as_params(&block.norm3, norm3),
    };
    Ok((d_y, d_e, grads))
}
