//! Chapter 13: after pretraining — supervised fine-tuning on answers, low-rank adapters (LoRA),
//! preferences (DPO) and verifiable rewards (GRPO).
//!
//! Each stage is a loss and its derivative, side by side, gradient-checked in
//! `tests/ch13_finetune.rs`:
//!
//! - [`sft`]: the cross-entropy on the answer's tokens only,
//!   −(1/|M|) Σ_t m_t ln softmax(z_t)_{y_t}, and the sequence log-probability
//!   ln π(y) = Σ_t m_t ln softmax(z_t)_{y_t} the others build on;
//! - [`lora`]: y = x(W + (α/r)AᵀBᵀ) with W frozen, A random and B zero at the start; merging;
//!   the trainable parameters and optimizer state against full fine-tuning;
//! - [`dpo`]: −ln σ(β[(ln π(y_w) − ln π_ref(y_w)) − (ln π(y_l) − ln π_ref(y_l))]);
//! - [`grpo`]: group-normalised advantages, the clipped ratio surrogate and the k3 estimate of
//!   the KL to the reference.
//!
//! Everything is in f64: these are losses on a handful of numbers per token, and the checks
//! compare them with finite differences.
//!
//! Then the stages run on a task a rule can check:
//!
//! - [`task`]: addition written as text (`07+58=065` and a newline), its split, exact-match
//!   accuracy by greedy decoding;
//! - [`stages`]: chapter 9's GPT pretrained on the raw lines, then fine-tuned on answers with
//!   the prompt masked or not, in full or through LoRA adapters, each stage measured.
//!
//! [`book`] holds what the book shows about the chapter: worked numbers, walk-through, figure.

pub mod book;
pub mod dpo;
pub mod feedback;
pub mod grpo;
pub mod lora;
pub mod sft;
pub mod stages;
pub mod task;

pub use dpo::{
    DpoCache, DpoGrads, DpoPair, dpo_backward, dpo_forward, neg_log_sigmoid, reward_margin, sigmoid,
};
pub use grpo::{
    ADVANTAGE_EPS, GrpoCache, GrpoSample, GrpoSpec, GrpoTerms, GrpoTokens, clipped_surrogate,
    group_advantages, grpo_backward, grpo_forward, grpo_log_prob_gradient, grpo_tokens_forward, k3,
};
pub use lora::{
    ADAMW_MOMENTS, BYTES_PER_F32, FineTuneCost, Lora, LoraCache, LoraGrads, fine_tuning_cost,
    lora_backward, lora_forward, lora_weight_backward,
};
pub use sft::{
    TokenCache, masked_cross_entropy_backward, masked_cross_entropy_forward,
    sequence_log_prob_backward, sequence_log_prob_forward, token_log_probs_backward,
    token_log_probs_forward,
};
