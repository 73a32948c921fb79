//! The workshop: chapter 9's GPT trained on a learner's own text, kept in a checkpoint folder,
//! resumed and sampled. These are the pieces of `llm-workbook gpt train | resume | sample`
//! (whose flags and printing live in the binary, `src/cli/gpt.rs`) beyond the lesson, as
//! functions a test or another program can call.
//!
//! It builds on the chapter ([`crate::ch09_gpt`]: the model, the trainer, the checkpoint files,
//! sampling) and on chapter 8's tokenizers; the chapter's lesson never imports it (a test holds
//! that), only the chapter's `book.rs` does, for the loss plot's file name.
//!
//! - [`run`]: training and resuming a run, its closing sample;
//! - [`arch`]: the two architectures a run trains, GPT-2 and chapter 12's Llama decoder;
//! - [`settings`]: a run's settings, `train.json`;
//! - [`run_files`]: the tokenizer's files in a folder, and loading a folder for sampling;
//! - [`validation`]: the validation loss, on a seeded sample of windows or on every token;
//! - [`folder`]: a checkpoint folder saved as one unit (generations and a pointer);
//! - [`finetune`], [`finetune_run`]: `gpt finetune`, a checkpoint fine-tuned on a reader's JSON
//!   Lines file of prompts and answers;
//! - [`quantize`]: a checkpoint's f32 model stored as bf16, int8 or 4-bit blocks, for sampling;
//! - [`budget`]: what a model costs in memory, checked before anything is allocated.

pub mod arch;
pub mod budget;
pub mod finetune;
pub mod finetune_run;
pub mod folder;
pub mod quantize;
pub mod run;
pub mod run_files;
pub mod settings;
pub mod validation;
