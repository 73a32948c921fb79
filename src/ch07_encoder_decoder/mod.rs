//! Chapter 7: the encoder–decoder transformer and cross-attention, worked and trained.
//!
//! The encoder reads the source sequence with unmasked self-attention. The decoder reads the
//! target shifted right behind a start token with causal self-attention, then asks the encoder
//! output with **cross-attention**: queries Q = Y W_Q from the decoder, keys K = E W_K and values
//! V = E W_V from the encoder output E, weights softmax(QKᵀ/√d_k) without a causal mask (a target
//! position may look at every source position; the two lengths may differ). An output projection
//! turns each decoder row into logits over the vocabulary; training minimises the cross-entropy of
//! the next target token (teacher forcing) and decoding picks the argmax token by token until the
//! end token.
//!
//! The prose is [`chapters/ch07_encoder_decoder.md`](../../chapters/ch07_encoder_decoder.md); the
//! tests are `tests/ch07_encoder_decoder.rs`.
//!
//! Layout, in the order of the forward pass:
//! - [`cells`]: the worked cells of D3 (decoder self-attention drawn from numpy's
//!   generator, the encoder–decoder attention with its uniform weights);
//! - [`cross_attention`]: padded batches and their masks, cross-attention forward and backward,
//!   built on chapter 6's multi-head attention;
//! - [`layers`]: the encoder layer (chapter 6's post-LN block) and the decoder layer, forward and
//!   backward;
//! - [`model`]: the padded cross-entropy, the model (embeddings plus chapter 5's sinusoidal
//!   positions, the two stacks, the output projection), its backward pass and greedy decoding;
//! - [`training`]: the digit-reversal task, teacher forcing, training with Adam;
//! - [`book`]: the errata, the worked numbers, the walk-through, the figures, `CHAPTER`.
//!
//! Conventions: a batch of B sequences padded to a common length T is a (B·T)×C matrix, sequence
//! b in rows b·T … b·T + T − 1, its real tokens first; a [`Batch`] says how long each one really
//! is.

pub mod book;
pub mod cells;
pub mod cross_attention;
pub mod layers;
pub mod model;
pub mod training;

pub use cells::{
    CELL_SCORE_DIVISOR, CROSS_W_K, CROSS_W_Q, CROSS_W_V, CrossCell, CrossReading, DECODER_OUTPUT,
    DecoderCell, DecoderReading, ENCODER_OUTPUT, NUMPY_SEED, Orientation, Spread,
    TEXT_SCORE_DIVISOR, WORKED_EPSILON, WORKED_WIDTH, Y_PLUS_PE, cross_cell, cross_cell_on,
    decoder_cell, decoder_cell_weights, masked_softmax_rows, normalise_rows, table,
};
pub use cross_attention::{
    Batch, attention_spec, cross_attention_backward, cross_attention_forward,
};
pub use layers::{
    DecoderBlock, DecoderBlockCache, block_tensors, block_tensors_mut, decoder_block_backward,
    decoder_block_forward, encoder_block, encoder_block_forward,
};
pub use model::{EncoderDecoder, ForwardCache, Gradients, ModelConfig, padded_cross_entropy};
pub use training::{
    CHAPTER_CONFIG, DIGITS, END, PAD, ReversalTask, START, TrainConfig, Trained, VOCAB,
    chapter_model, learning_rate_at, teacher_forcing, train,
};
