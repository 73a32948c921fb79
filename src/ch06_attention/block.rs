//! The encoder block: the feed-forward net, the residual connections and the block that puts
//! attention, LayerNorm and the feed-forward net together, in pre-LN or post-LN order.
//!
//! ```text
//! FFN(x) = f(xW₁ + b₁)W₂ + b₂                        f = ReLU (D3) or GELU (GPT-2)
//! pre-LN:  h = x + MHA(LN₁(x)),   y = h + FFN(LN₂(h))      D2, GPT-2
//! post-LN: h = LN₁(x + MHA(x)),   y = LN₂(h + FFN(h))      D3, the original transformer
//! ```

use super::attention::AttnSpec;
use super::layer_norm::{
    LAYER_NORM_EPS, LayerNorm, LnCache, LnGrads, layer_norm_backward, layer_norm_forward,
};
use super::multihead::{MhaCache, MhaGrads, MultiHead, mha_backward, mha_forward};
use super::same_shape;
use crate::ch03_mlp::{
    Activation, activation_backward, activation_forward, dense_backward, dense_forward,
};
use crate::error::{Result, invalid};
use crate::float::{Float, ensure_finite};
use nalgebra::DMatrix;

// ───────────────────────────── the residual connection ─────────────────────────────

/// The residual connection x + f(x), x and f(x) both N×C. Its backward passes the incoming
/// gradient unchanged to both x and f(x).
pub fn residual_add<T: Float>(x: &DMatrix<T>, fx: &DMatrix<T>) -> Result<DMatrix<T>> {
    same_shape("residual_add", "x and f(x)", x, fx)?;
    Ok(x + fx)
}

// ───────────────────────────── the feed-forward net ─────────────────────────────

/// FFN(x) = f(xW₁ + b₁)W₂ + b₂, applied to every row alone: w1 C×F, b1 1×F, w2 F×C_out, b2 1×C_out.
/// D3 uses f = ReLU, i.e. max(0, xW₁ + b₁)W₂ + b₂; GPT-2 uses GELU (tanh form).
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

/// The feed-forward net on every row of x (N×C, giving N×C_out), through chapter 3's dense layer
/// and activation: z₁ = xW₁ + b₁, a₁ = f(z₁), y = a₁W₂ + b₂.
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

/// Backward of [`ffn_forward`] given ∂L/∂y (N×C_out), one dense backward per dense forward:
///
/// ```text
/// y = a₁W₂ + b₂   ⇒ ∂W₂ = a₁ᵀ ∂y,   ∂b₂ = Σ_rows ∂y,   ∂a₁ = ∂y W₂ᵀ
/// a₁ = f(z₁)      ⇒ ∂z₁ = f′(z₁) ⊙ ∂a₁
/// z₁ = xW₁ + b₁   ⇒ ∂W₁ = xᵀ ∂z₁,   ∂b₁ = Σ_rows ∂z₁,   ∂x = ∂z₁ W₁ᵀ
/// ```
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
    /// h = x + MHA(LN₁(x)), y = h + FFN(LN₂(h)): D2, GPT-2. The residual stream itself is
    /// never normalised inside the block.
    Pre,
    /// h = LN₁(x + MHA(x)), y = LN₂(h + FFN(h)): the original transformer and D3's order.
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
    /// A block of width `c` with `heads` heads and hidden width `hidden`, random N(0, std²)
    /// weights, zero biases, γ = 1, β = 0, ε = 1e-6 inside the square root.
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
    /// The attention's weight gradients (its d_x_q and d_x_kv are the parts of d_x that flowed
    /// through it).
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

/// One block on x ((B·T)×C, giving (B·T)×C) with self-attention as `spec` says (T, causal,
/// masks): h = x + MHA(LN₁(x)), y = h + FFN(LN₂(h)) (pre-LN) or h = LN₁(x + MHA(x)),
/// y = LN₂(h + FFN(h)) (post-LN).
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

/// Backward of [`block_forward`] given ∂L/∂y ((B·T)×C). A residual x + f(x) sends ∂L/∂(x + f(x))
/// to x directly and to f's input through f's backward; the two add.
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
