//! Chapter 9: a small GPT, written out op by op with its backward pass, that learns on the CPU.
//!
//! GPT-2's architecture: token plus position embeddings, pre-LayerNorm blocks of causal
//! multi-head self-attention and a 4× GELU MLP with residual connections, a final LayerNorm and an
//! unembedding tied to the token embedding. For B sequences of T tokens (N = B·T rows, width d,
//! vocabulary V, S scored positions):
//!
//! ```text
//! x₀ = W_E[u] + W_P[t]                             N×d   token row plus position row
//! h = x + MHA(LN₁(x)),  x' = h + MLP(LN₂(h))       N×d   each of the l blocks (chapter 6)
//! z = LN_f(x_L) W_Uᵀ                               S×V   W_U = W_E when tied
//! L = −(1/S) Σ_s ln softmax(z_s)[u_{s+1}]                D3's L₁, as a mean
//! ```
//!
//! trained by AdamW on a warm-up-then-cosine learning rate with the gradient's norm clipped, and
//! sampled one token at a time with a key/value cache. The prose is
//! [`chapters/ch09_gpt.md`](../../chapters/ch09_gpt.md); the tests are `tests/ch09_gpt.rs`.
//!
//! The parts, in the order of the lesson:
//! - [`config`]: the hyper-parameters, their validation, and parameter accounting (GPT-2 124M
//!   exactly, GPT-3 the way D1 counts it);
//! - [`walkthrough`]: D3's "I love AI" example recomputed;
//! - [`model`]: the GPT, its forward and backward pass, and one token at a time with the cache;
//! - [`fast`]: the engine: the same training step made fast (no per-step allocation, one
//!   product for Q, K, V) and the fast cached step, each held to the lesson's reference;
//! - [`data`]: the sorting task and token-stream windows;
//! - [`schedule`]: warm-up plus cosine learning rate, gradient-norm clipping;
//! - [`train`]: the trainer (one step: batch, loss and gradients, clipping, AdamW);
//! - [`trainable`]: what the trainer and the checkpoint code ask of a model (chapter 9's GPT,
//!   or a later chapter's model);
//! - [`experiments`]: the two models the chapter trains (sorting digits, the default corpus);
//! - [`sample`]: greedy, temperature, top-k and top-p decoding, and generation;
//! - [`safetensors`] and [`checkpoint`]: GPT-2's file format (the container by hand, its JSON
//!   header and `config.json` with serde).
//!
//! A run on the learner's own text (`gpt train | resume | sample`: checkpoint folders, the memory
//! budget, the validation loss) is not part of the lesson: it is [`crate::workshop`].
//!
//! [`book`] holds what the book shows about the chapter: errata, worked numbers, walk-through,
//! figures.

pub mod book;
pub mod checkpoint;
pub mod config;
pub mod data;
pub mod experiments;
pub mod fast;
pub mod model;
pub mod safetensors;
pub mod sample;
pub mod schedule;
pub mod train;
pub mod trainable;
pub mod walkthrough;

pub use config::gpt1_parameters;
pub use experiments::{
    CORPUS_BASELINE_MAX_N, CORPUS_BATCH, CORPUS_CONTEXT, CORPUS_EVAL_EVERY, CORPUS_PEAK_RATE,
    CORPUS_STEPS, CorpusRun, CorpusSetup, CorpusTokens, SORT_SEED, SORT_STEPS, best_baseline,
    corpus_baseline_rows, corpus_setup, corpus_tokens, sort_setup, train_corpus,
};
