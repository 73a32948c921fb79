//! Chapter 7: the encoder–decoder —
//! [chapters/ch07_encoder_decoder.md](../../chapters/ch07_encoder_decoder.md).
//!
//! Replace each `todo!()` with your answer, then run
//! `cargo test -p llm-workbook-exercises --test ch07_encoder_decoder`. Chapter 6's functions
//! (`llm_workbook::ch06_attention`) are yours to use.
//!
//! Where a doc comment asks for an error, return one of `llm_workbook::Error`'s variants, whose
//! message is one line naming the argument: `Err(llm_workbook::error::invalid("op", "arg",
//! "why"))` for a bad value, `Err(llm_workbook::Error::Empty { op: "op", arg: "arg" })` for an
//! empty input and `Err(llm_workbook::error::shape_error("op", "arg", expected, got))` for shapes
//! that disagree (`llm_workbook::error::shape_of(&m)` writes a matrix's shape as `rows×cols`).

use llm_workbook::Result;
use llm_workbook::ch06_attention::{MhaGrads, MultiHead};
use llm_workbook::ch07_encoder_decoder::{
    Batch, DecoderBlock, DecoderBlockCache, EncoderDecoder, Gradients,
};
use nalgebra::DMatrix;

/// **The padding mask of a batch**: sequence b has `kv_lengths[b]` real keys followed by
/// padding. Return the additive (B·T_q)×T_k matrix with −∞ in the padded key columns of sequence
/// b's rows (rows b·T_q … (b+1)·T_q − 1) and 0 elsewhere. Error on no sequences, a zero length
/// or a length above T_k.
///
/// Chapter: [Batches and padding](../../chapters/ch07_encoder_decoder.md#batches-and-padding).
pub fn padding_mask(kv_lengths: &[usize], q_len: usize, kv_len: usize) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch06_attention::padding_mask(kv_lengths, q_len, kv_len);
    todo!()
}

/// **Cross-attention, forward**: queries from the decoder rows y ((B·T_t)×C), keys and values
/// from the encoder output e ((B·T_s)×C): Q = Y W_Q + b_Q, K = E W_K + b_K, V = E W_V + b_V;
/// per sequence and head A = softmax(QKᵀ/√d_k + padding mask of e), O = A V; heads concatenated,
/// · W_O + b_O. No causal mask. Returns (B·T_t)×C.
///
/// Chapter: [1. Two stacks, three kinds of attention][ch].
///
/// [ch]: ../../chapters/ch07_encoder_decoder.md#1-two-stacks-three-kinds-of-attention
pub fn cross_attention_forward(
    y: &DMatrix<f64>,
    y_batch: &Batch,
    e: &DMatrix<f64>,
    e_batch: &Batch,
    w: &MultiHead<f64>,
) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch07_encoder_decoder::cross_attention_forward(y, y_batch, e, e_batch, w)
        .map(|(out, _)| out);
    todo!()
}

/// **Cross-attention, backward**: for the forward above and ∂L/∂out, every gradient in an
/// `MhaGrads`: ∂L/∂Y (`d_x_q`, through the queries only), ∂L/∂E (`d_x_kv`, through the keys and
/// the values: the two paths add), and each W and b. Recompute A with each row's maximum
/// subtracted before exponentiating: scores in the thousands must not overflow.
///
/// Chapter: [3. Backward through cross-attention][ch].
///
/// [ch]: ../../chapters/ch07_encoder_decoder.md#3-backward-through-cross-attention
pub fn cross_attention_backward(
    y: &DMatrix<f64>,
    y_batch: &Batch,
    e: &DMatrix<f64>,
    e_batch: &Batch,
    w: &MultiHead<f64>,
    d_out: &DMatrix<f64>,
) -> Result<MhaGrads<f64>> {
    #[cfg(feature = "solutions")]
    return solution::cross_attention_backward(y, y_batch, e, e_batch, w, d_out);
    todo!()
}

/// **The decoder block, backward**: the forward (`llm_workbook::ch07_encoder_decoder::
/// decoder_block_forward`, post-LN) is Y₁ = LN₁(y + Attn(y, y)) (causal self-attention),
/// Y₂ = LN₂(Y₁ + Cross(Y₁, E)) (queries from Y₁, keys and values from the encoder output E),
/// out = LN₃(Y₂ + FFN(Y₂)); y is (B·T_t)×C, E is (B·T_s)×C. From ∂L/∂out ((B·T_t)×C) return
/// (∂L/∂y, ∂L/∂E, the weights' gradients laid out as a `DecoderBlock`: each field holds the
/// gradient of the same field, e.g. `norm1.gamma` holds ∂L/∂γ₁), through chapter 6's
/// `layer_norm_backward`, `ffn_backward`, `mha_backward` and this chapter's
/// `cross_attention_backward`, with the caches in `cache`. The paths: each residual sends its
/// gradient both directly and through its sub-layer (the two add); ∂L/∂E comes only from the
/// cross-attention's keys and values (`d_x_kv`); the self-attention reads y as queries and as
/// keys/values, so y's gradient through it is d_x_q + d_x_kv. The fields that are not matrices
/// hold `block`'s own values: the heads' count, the FFN's activation, each norm's ε and its
/// placement (start from `block.clone()` and overwrite every matrix).
///
/// Chapter: [3. Backward through cross-attention][ch].
///
/// [ch]: ../../chapters/ch07_encoder_decoder.md#3-backward-through-cross-attention
pub fn decoder_block_backward(
    block: &DecoderBlock<f64>,
    cache: &DecoderBlockCache<f64>,
    d_out: &DMatrix<f64>,
) -> Result<(DMatrix<f64>, DMatrix<f64>, DecoderBlock<f64>)> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch07_encoder_decoder::decoder_block_backward(block, cache, d_out);
    todo!()
}

/// **The whole encoder–decoder, loss and backward**: `model.loss_and_gradients(source,
/// target_in, labels)` written by you. B sequences on each side: `source[b]` (T_s positions at
/// most), the decoder input `target_in[b]` and its `labels[b]` (teacher forcing: the two have
/// equal lengths; T_t, the longest, need not equal T_s). Forward, as `model.forward` runs it:
/// X = E_src\[token\] + PE\[position\] on real rows, 0 on padding rows ((B·T_s)×C), through the
/// encoder layers (`model.encode` does this part and returns the layers' caches); likewise
/// Y = E_tgt\[token\] + PE\[position\] ((B·T_t)×C, `llm_workbook::ch05_positions::sinusoidal`)
/// through each decoder layer (`decoder_block_forward`, every layer reading the same encoder
/// output E); logits = Y W_out + b_out ((B·T_t)×V); the loss is the mean cross-entropy over the
/// real target positions only (`padded_cross_entropy`, padding rows labelled `None`), so
/// ∂L/∂logits = (softmax − one-hot)/N_real on real rows and 0 on padding rows.
///
/// Backward: ∂W_out = Yᵀ ∂logits, ∂b_out = Σ_rows ∂logits, ∂Y = ∂logits W_outᵀ; each decoder
/// layer, last first, through `decoder_block_backward`, its ∂L/∂E added to a running sum (every
/// layer cross-attends to E); the target embedding's row of token t gathers ∂Y's real rows that
/// hold t; the summed ∂L/∂E then runs back through the encoder layers, last first
/// (`llm_workbook::ch06_attention::block_backward`), and into the source embedding the same way.
/// The positions are constants: no gradient.
///
/// Return a `Gradients`: `loss`, and `grads`, an `EncoderDecoder` whose every matrix holds the
/// gradient of the same matrix of `model` (`grads.w_out` holds ∂L/∂W_out, and
/// `grads.encoder[0].ln1.gamma` ∂L/∂γ of the first encoder layer's LN₁). Its fields that are
/// not matrices hold `model`'s own: the `config`, each layer's head counts, activation, norm
/// order, ε and its placement (start from `model.zeros_like()` and overwrite every matrix).
/// Errors: no sequences, source and target batches of different sizes, `labels[b]` not as long
/// as `target_in[b]`, an empty sequence or one longer than `model.config.max_len`, a token
/// outside the vocabulary.
///
/// Chapter: [2. Output layer, loss, teacher forcing][ch]
/// and [3. Backward through cross-attention][ch2].
///
/// [ch]: ../../chapters/ch07_encoder_decoder.md#2-output-layer-loss-teacher-forcing-greedy-decoding
/// [ch2]: ../../chapters/ch07_encoder_decoder.md#3-backward-through-cross-attention
pub fn loss_and_gradients(
    model: &EncoderDecoder<f64>,
    source: &[Vec<usize>],
    target_in: &[Vec<usize>],
    labels: &[Vec<usize>],
) -> Result<Gradients<f64>> {
    #[cfg(feature = "solutions")]
    return solution::loss_and_gradients(model, source, target_in, labels);
    todo!()
}

// The `solutions` feature's adapters (src/solutions.rs).
#[cfg(feature = "solutions")]
use llm_workbook_exercises::solutions::ch07_encoder_decoder as solution;
