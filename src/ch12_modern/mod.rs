//! Chapter 12: from GPT-2's block to today's decoder — RMSNorm, rotary positions, gated MLPs,
//! grouped-query attention and QK-norm.
//!
//! Each part replaces one piece of chapter 9's GPT-2 block, and each has its own forward and
//! backward, side by side, gradient-checked in `tests/ch12_modern.rs`:
//!
//! - [`rms_norm`]: y = γ ⊙ x/√(mean(x²) + ε), LayerNorm without the mean and without β;
//! - [`rope`]: every pair of a query's or key's columns turned by tθ_i, θ_i = base^{−2i/d_h},
//!   so that q_t·k_s depends on t − s only; the adjacent and the halves pairing and the column
//!   permutation between them;
//! - [`glu`]: SwiGLU and GeGLU, (φ(XW_gate) ⊙ XW_up)W_down, and the hidden width 8C/3 that keeps
//!   the 4× MLP's parameter count;
//! - [`gqa`]: causal attention whose H query heads share H_kv key/value heads (MHA when H_kv = H,
//!   MQA when H_kv = 1), with QK-norm and the rotation as options;
//! - [`KvCacheShape`]: what a key/value cache costs per token, the reason for GQA;
//! - [`decoder`]: the parts composed into one decoder whose configuration switches each of them
//!   between GPT-2's choice and today's, with its loss on chapter 9's batches, its backward pass
//!   and its cached step;
//! - [`llama`]: the decoder in Hugging Face's Llama file layout, and as chapter 9's trainer and
//!   checkpoint code take it (chapter 9's [`Trainable`](crate::ch09_gpt::trainable::Trainable));
//! - [`quant_decoder`]: the decoder's cached step reading its projections as chapter 11 stores
//!   them (int8 or 4-bit blocks, bf16), never widened to f32.
//!
//! All products go through [`crate::matmul`]; attention itself is chapter 6's.

pub mod book;
pub mod compare;
pub mod decoder;
pub mod glu;
pub mod gqa;
pub mod llama;
pub mod quant_decoder;
pub mod rms_norm;
pub mod rope;

pub use decoder::{
    Decoder, DecoderConfig, DecoderKv, DecoderLayer, DecoderLoss, Mlp, MlpKind, Norm, NormKind,
    PositionKind,
};
pub use glu::{
    Gate, GatedMlp, GluCache, GluGrads, LLAMA_HIDDEN_MULTIPLE, gated_hidden_width, glu_backward,
    glu_forward,
};
pub use gqa::{
    Gqa, GqaBiases, GqaCache, GqaGrads, GqaKv, HeadCache, Rotary, gqa_backward, gqa_backward_with,
    gqa_forward, gqa_forward_with, gqa_step,
};
pub use rms_norm::{
    RMS_NORM_EPS, RmsCache, RmsGrads, RmsNorm, rms_norm_backward, rms_norm_forward,
};
pub use rope::{
    Pairing, Positions, ROPE_BASE, RopeTable, halves_from_adjacent, permute_head_columns,
    rope_backward, rope_forward, rope_frequencies, rope_wavelengths, rotate_half,
};

use crate::error::{Result, invalid};

/// Bytes of one 16-bit value (bf16 or fp16), how caches are usually kept.
pub const BYTES_PER_HALF: usize = 2;

/// The attention shape of a decoder, as far as its key/value cache is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvCacheShape {
    /// Decoder layers (blocks).
    pub layers: usize,
    /// H, query heads per layer.
    pub n_heads: usize,
    /// H_kv, key/value heads per layer (H for MHA, 1 for MQA).
    pub n_kv_heads: usize,
    /// d_h, the width of one head.
    pub head_dim: usize,
}

impl KvCacheShape {
    /// Bytes the cache holds for each token: every layer keeps one key and one value of width
    /// d_h for each key/value head, layers · 2 · H_kv · d_h · (bytes per value). Errors on a zero
    /// count, an H_kv that does not divide H, or a product too large for a `u64`.
    pub fn bytes_per_token(&self, bytes_per_value: usize) -> Result<u64> {
        const OP: &str = "KvCacheShape::bytes_per_token";
        let KvCacheShape { layers, n_heads, n_kv_heads, head_dim } = *self;
        if [layers, n_heads, n_kv_heads, head_dim, bytes_per_value].contains(&0) {
            return Err(invalid(OP, "shape", format!("every count must be ≥ 1; got {self:?}")));
        }
        if !n_heads.is_multiple_of(n_kv_heads) {
            return Err(invalid(
                OP,
                "n_kv_heads",
                format!("{n_kv_heads} does not divide n_heads {n_heads}"),
            ));
        }
        const KEY_AND_VALUE: u64 = 2;
        [layers, n_kv_heads, head_dim, bytes_per_value]
            .iter()
            .try_fold(KEY_AND_VALUE, |acc, &f| acc.checked_mul(f as u64))
            .ok_or_else(|| invalid(OP, "shape", "the byte count overflows a u64"))
    }

    /// The same cache if every query head kept its own keys and values (MHA): bytes per token
    /// divided by this shape's are H/H_kv, the saving of grouping.
    pub fn as_mha(&self) -> Self {
        KvCacheShape { n_kv_heads: self.n_heads, ..*self }
    }
}
