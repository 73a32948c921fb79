//! The validation loss of a run: on a seeded sample of windows by default, or over every
//! held-out token ([`Evaluation`]). Part of [`super::run`], which re-exports every item.

use crate::ch09_gpt::data::{Token, covering_starts, sample_windows, windows_at};
use crate::ch09_gpt::train::Progress;
use crate::ch09_gpt::trainable::Trainable;
use crate::error::{Error, Result};

// ───────────────────────────── validation ─────────────────────────────

/// By default the validation loss is measured on at most this many windows of the held-out
/// tokens (all of them when there are fewer)…
pub const VALIDATION_WINDOWS: usize = 256;
/// … drawn without replacement by a generator with this seed, so every evaluation of a run
/// scores the same windows.
pub const VALIDATION_SEED: u64 = 2021;
/// Windows per forward pass of the evaluation.
pub const VALIDATION_BATCH: usize = 32;

/// How many windows [`crate::ch09_gpt::data::covering_starts`] cuts `len` tokens into.
pub fn covering_windows_count(len: usize, context: usize) -> usize {
    if len < 2 || context == 0 { 0 } else { (len - 1).div_ceil(context) }
}

/// How the validation loss is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evaluation {
    /// On at most this many non-overlapping windows, drawn with [`VALIDATION_SEED`]: an
    /// estimate whose cost does not grow with the text.
    Sample(usize),
    /// On every window covering the held-out tokens: each token after the first is a target
    /// exactly once (`gpt train --exact-validation`).
    Exact,
}

/// A measured validation loss.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Validation {
    /// The mean loss over the scored tokens, in nats per token.
    pub loss: f64,
    /// The windows scored…
    pub windows: usize,
    /// … of the windows covering the held-out tokens.
    pub of: usize,
    /// The tokens scored.
    pub tokens: usize,
}

/// The mean loss L = −(1/S) Σ ln p(u_s | u_<s) of `model` over the windows `how` chooses from
/// `tokens` (windows of `context` tokens, see [`crate::ch09_gpt::data::covering_starts`]), computed
/// [`VALIDATION_BATCH`] windows at a time: only one batch of ids is ever copied. `progress` sees
/// (windows done, running mean) after each batch.
pub fn validation_loss<M: Trainable<f32>>(
    model: &M,
    tokens: &[Token],
    context: usize,
    how: Evaluation,
    progress: &mut dyn Progress,
) -> Result<Validation> {
    let all = covering_starts(tokens.len(), context);
    let of = all.len();
    let chosen = match how {
        Evaluation::Exact => all,
        Evaluation::Sample(limit) => sample_windows(all, limit.max(1), VALIDATION_SEED),
    };
    let (mut total, mut scored, mut done) = (0.0, 0usize, 0usize);
    for group in chosen.chunk_by(|a, b| a.1 == b.1) {
        for chunk in group.chunks(VALIDATION_BATCH) {
            let starts: Vec<usize> = chunk.iter().map(|w| w.0).collect();
            let batch = windows_at(tokens, chunk[0].1, &starts);
            let n = batch.scored();
            total += model.batch_loss(&batch)? * n as f64;
            scored += n;
            done += chunk.len();
            progress.step(done, total / scored.max(1) as f64, None);
        }
    }
    progress.finish();
    if scored == 0 {
        return Err(Error::Empty { op: "validation_loss", arg: "tokens" });
    }
    Ok(Validation { loss: total / scored as f64, windows: chosen.len(), of, tokens: scored })
}
