//! D3's 2000-step script, replayed: gradient descent on the four logits of one example.

use super::loss::logit_step;
use super::probabilities::softmax;
use crate::error::{Result, invalid};
use nalgebra::DVector;

/// The script's starting logits (it calls them weights): the four numbers the text uses as
/// *probabilities* of mat, hat, bat, rat.
pub const SCRIPT_START: [f64; 4] = [0.1, 0.1, 0.1, 0.7];
/// The true class of the script: mat.
pub const SCRIPT_TRUE_CLASS: usize = 0;
/// The script's learning rate (the text's hand calculation uses 0.1).
pub const SCRIPT_LEARNING_RATE: f64 = 0.01;
/// The script's number of updates.
pub const SCRIPT_ITERATIONS: usize = 2000;
/// It prints on every iteration i with i mod 10 = 0.
pub const SCRIPT_PRINT_EVERY: usize = 10;
/// The four words, in the order of the logits.
pub const WORDS: [&str; 4] = ["mat", "hat", "bat", "rat"];

/// One pair of printed lines of the script: at iteration i it prints the weights *after* the
/// i-th update next to the probabilities computed *before* it, from the old weights.
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptLine {
    /// i.
    pub iteration: usize,
    /// The logits after update i (i + 1 updates done).
    pub weights_after_update: DVector<f64>,
    /// softmax of the logits before update i (i updates done).
    pub probabilities_before_update: DVector<f64>,
}

/// A replay of the script.
#[derive(Clone, Debug, PartialEq)]
pub struct Replay {
    /// Every line pair it prints (i = 0, 10, …, 1990).
    pub lines: Vec<ScriptLine>,
    /// softmax of the logits after s updates, for s = 0 … iterations.
    pub probabilities: Vec<DVector<f64>>,
    /// What it prints last: softmax of the logits after all updates.
    pub final_probabilities: DVector<f64>,
}

impl Replay {
    /// The printed line pair of iteration i, if the script prints one.
    pub fn line(&self, iteration: usize) -> Option<&ScriptLine> {
        self.lines.iter().find(|l| l.iteration == iteration)
    }
}

/// Replays the gradient-descent script: for i in 0..iterations, P = softmax(z), g = P − y,
/// z ← z − α·g, and on every `print_every`-th i record (z after the update, P before it).
pub fn replay_script(
    start: &[f64],
    target: usize,
    learning_rate: f64,
    iterations: usize,
    print_every: usize,
) -> Result<Replay> {
    if print_every == 0 {
        return Err(invalid("replay_script", "print_every", "must be at least 1"));
    }
    let mut z = DVector::from_column_slice(start);
    let mut lines = Vec::new();
    let mut probabilities = Vec::with_capacity(iterations + 1);
    for i in 0..iterations {
        let p = softmax(&z)?;
        z = logit_step(&z, target, learning_rate)?;
        if i % print_every == 0 {
            lines.push(ScriptLine {
                iteration: i,
                weights_after_update: z.clone(),
                probabilities_before_update: p.clone(),
            });
        }
        probabilities.push(p);
    }
    let final_probabilities = softmax(&z)?;
    probabilities.push(final_probabilities.clone());
    Ok(Replay { lines, probabilities, final_probabilities })
}

/// The replay with the script's own settings.
pub fn document_replay() -> Result<Replay> {
    replay_script(
        &SCRIPT_START,
        SCRIPT_TRUE_CLASS,
        SCRIPT_LEARNING_RATE,
        SCRIPT_ITERATIONS,
        SCRIPT_PRINT_EVERY,
    )
}
