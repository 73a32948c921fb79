//! Chapter 6: the encoder block: attention, multi-head attention, LayerNorm, the feed-forward net.
//!
//! Scaled dot-product attention for queries Q (T_q×d_k), keys K (T_k×d_k) and values V (T_k×d_v)
//! ([`attention`]):
//!
//! ```text
//! S = s·QKᵀ + M          s = 1/√d_k by default; M additive: 0 where allowed, −∞ where masked
//! A = row-softmax(S)     each row a probability distribution over the keys
//! O = A V
//! ```
//!
//! Multi-head attention ([`multihead`]) projects X into H heads (Q = X W_Q + b_Q split by
//! columns), attends in each head, concatenates the outputs and applies W_O. LayerNorm
//! ([`layer_norm`]) standardises every row and rescales it with γ and β. The feed-forward net is
//! max(0, xW₁ + b₁)W₂ + b₂ (chapter 3's dense layer and activation). A block ([`block`]) puts them
//! together with residual connections, in the pre-LN order of D2 (x + Attn(LN(x)),
//! then · + FFN(LN(·))) or the post-LN order of D3 and the original transformer
//! (LN(x + Attn(x)), then LN(· + FFN(·))).
//!
//! Every function takes a batch of B sequences stacked as a (B·T)×C matrix and the sequence
//! length(s) in an [`AttnSpec`]; queries and keys/values may come from different sequences of
//! different lengths (cross-attention). Every forward has a backward, gradient-checked in
//! `tests/ch06_attention.rs`. All products go through [`crate::matmul`].
//!
//! [`book`] reproduces D3's "You are welcome" walk-through ([`book::walkthrough`]) and
//! its supplemental Python cells, with the worked numbers, errata and figures; the prose is
//! `chapters/ch06_attention.md`.

pub mod attention;
pub mod block;
pub mod book;
pub mod layer_norm;
pub mod multihead;

pub use attention::{
    Attention, AttentionGrads, AttnSpec, attention_backward, attention_forward, attention_scores,
    attention_weight_entries, causal_mask, padding_mask,
};
pub use block::{
    Block, BlockCache, BlockGrads, Ffn, FfnCache, FfnGrads, NormOrder, block_backward,
    block_forward, ffn_backward, ffn_forward, residual_add,
};
pub use layer_norm::{
    Epsilon, LAYER_NORM_EPS, LayerNorm, LnCache, LnGrads, LnView, Store, layer_norm_backward,
    layer_norm_backward_into, layer_norm_backward_view, layer_norm_forward,
    layer_norm_forward_into, layer_norm_forward_view,
};
pub use multihead::{
    MhaCache, MhaGrads, MultiHead, concat_heads, head_parameter_count, mha_backward, mha_forward,
    split_heads,
};

use crate::error::{Result, shape_error, shape_of};
use crate::float::Float;
use nalgebra::DMatrix;

/// An error naming `arg` unless `got` has the shape of `want`.
fn same_shape<T: Float>(
    op: &'static str,
    arg: &'static str,
    want: &DMatrix<T>,
    got: &DMatrix<T>,
) -> Result<()> {
    if want.shape() != got.shape() {
        return Err(shape_error(op, arg, shape_of(want), shape_of(got)));
    }
    Ok(())
}
