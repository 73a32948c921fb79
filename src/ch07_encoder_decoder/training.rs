//! The task and the training: reversing digit strings, teacher forcing, training with Adam under a
//! warm-up and cosine schedule, the held-out exact match, and the chapter's trained model.

use super::model::{EncoderDecoder, ModelConfig};
use crate::error::{Error, Result, invalid};
use crate::float::Float;
use crate::optim::{Adam, AdamConfig};
use crate::rng::Rng;
use nalgebra::DMatrix;
use std::collections::HashSet;
use std::sync::OnceLock;

// ───────────────────────────── the task: reversing digit strings ─────────────────────────────

/// Token ids 0–9 are the digits.
pub const DIGITS: usize = 10;
/// The padding token (never fed to a real position; padded rows are masked).
pub const PAD: usize = 10;
/// The start token the decoder input begins with.
pub const START: usize = 11;
/// The end token the decoder must emit after the last digit.
pub const END: usize = 12;
/// The vocabulary: ten digits, pad, start, end.
pub const VOCAB: usize = 13;

/// Reverse a string of decimal digits whose length is drawn uniformly from `min_len..=max_len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReversalTask {
    /// The shortest source.
    pub min_len: usize,
    /// The longest source.
    pub max_len: usize,
}

impl ReversalTask {
    /// How many different sources exist: Σ_{L=min}^{max} 10^L.
    pub fn possible_sequences(&self) -> f64 {
        (self.min_len..=self.max_len).map(|l| 10f64.powi(l as i32)).sum()
    }

    /// One source: a length, then that many digits. (A task with `min_len > max_len` always
    /// draws `min_len` digits; [`train`] refuses such a task.)
    pub fn sample(&self, rng: &mut Rng) -> Vec<usize> {
        let len = self.min_len + rng.below(self.max_len.saturating_sub(self.min_len) + 1);
        (0..len).map(|_| rng.below(DIGITS)).collect()
    }

    /// The correct output for a source: its digits in reverse order.
    pub fn target(source: &[usize]) -> Vec<usize> {
        source.iter().rev().copied().collect()
    }

    /// `count` distinct sources from `seed`: the held-out set.
    pub fn held_out(&self, count: usize, seed: u64) -> Result<Vec<Vec<usize>>> {
        if (count as f64) > self.possible_sequences() / 2.0 {
            return Err(invalid(
                "ReversalTask::held_out",
                "count",
                format!(
                    "{count} is more than half of the {} possible sources",
                    self.possible_sequences()
                ),
            ));
        }
        let mut rng = Rng::new(seed);
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            let s = self.sample(&mut rng);
            if seen.insert(s.clone()) {
                out.push(s);
            }
        }
        Ok(out)
    }

    /// A training batch of sources, none of them in `exclude` (the held-out set), so training and
    /// evaluation are disjoint by construction.
    pub fn training_batch(
        &self,
        rng: &mut Rng,
        size: usize,
        exclude: &HashSet<Vec<usize>>,
    ) -> Vec<Vec<usize>> {
        let mut out = Vec::with_capacity(size);
        while out.len() < size {
            let s = self.sample(rng);
            if !exclude.contains(&s) {
                out.push(s);
            }
        }
        out
    }
}

/// Teacher forcing for a batch of sources: decoder inputs [start, reversed…] and labels
/// [reversed…, end], each one longer than its source.
pub fn teacher_forcing(sources: &[Vec<usize>]) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    sources
        .iter()
        .map(|s| {
            let t = ReversalTask::target(s);
            let mut input = vec![START];
            input.extend(&t);
            let mut labels = t;
            labels.push(END);
            (input, labels)
        })
        .unzip()
}

/// Everything that defines a training run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainConfig {
    /// The model's shape (its vocabulary must be [`VOCAB`]).
    pub model: ModelConfig,
    /// The task.
    pub task: ReversalTask,
    /// Adam steps.
    pub steps: usize,
    /// Sources per step.
    pub batch_size: usize,
    /// The peak learning rate.
    pub learning_rate: f64,
    /// Steps of linear warm-up to the peak; afterwards the rate falls along a half cosine to 10 %
    /// of the peak at the last step.
    pub warmup: usize,
    /// Seeds the weights and the training stream.
    pub seed: u64,
    /// Size of the held-out set.
    pub held_out: usize,
    /// Seeds the held-out set.
    pub held_out_seed: u64,
}

/// The chapter's configuration: 2 encoder and 1 decoder layers of width 32 with 4 heads,
/// sources of 3 to 8 digits (111,111,000 possible), 1,000 held out.
pub const CHAPTER_CONFIG: TrainConfig = TrainConfig {
    model: ModelConfig {
        vocab: VOCAB,
        width: 32,
        heads: 4,
        hidden: 64,
        encoder_layers: 2,
        decoder_layers: 1,
        max_len: 9,
    },
    task: ReversalTask { min_len: 3, max_len: 8 },
    steps: 1000,
    batch_size: 48,
    learning_rate: 3e-3,
    warmup: 100,
    seed: 7,
    held_out: 1000,
    held_out_seed: 2024,
};

/// The learning rate at `step` (0-based) of a run.
pub fn learning_rate_at(config: &TrainConfig, step: usize) -> f64 {
    let peak = config.learning_rate;
    if step < config.warmup {
        return peak * (step + 1) as f64 / config.warmup as f64;
    }
    let span = config.steps.saturating_sub(config.warmup).max(1) as f64;
    let progress = ((step - config.warmup) as f64 / span).min(1.0);
    peak * (0.1 + 0.9 * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()))
}

/// A trained model and its record.
#[derive(Clone, Debug)]
pub struct Trained {
    /// The model (f32, the fast type).
    pub model: EncoderDecoder<f32>,
    /// The mean training loss of every step.
    pub losses: Vec<f64>,
    /// The held-out sources, never trained on.
    pub held_out: Vec<Vec<usize>>,
    /// The configuration that produced it.
    pub config: TrainConfig,
}

/// Trains an encoder–decoder on the reversal task with Adam and teacher forcing.
pub fn train(config: &TrainConfig) -> Result<Trained> {
    const OP: &str = "train";
    if config.model.vocab != VOCAB {
        return Err(invalid(
            OP,
            "model.vocab",
            format!("the reversal task needs {VOCAB} tokens, got {}", config.model.vocab),
        ));
    }
    if config.task.min_len == 0 || config.task.min_len > config.task.max_len {
        return Err(invalid(
            OP,
            "task",
            format!(
                "lengths must satisfy 1 ≤ min ≤ max, got {}..={}",
                config.task.min_len, config.task.max_len
            ),
        ));
    }
    if config.task.max_len + 1 > config.model.max_len {
        return Err(invalid(
            OP,
            "task.max_len",
            format!(
                "a target of {} digits needs {} decoder positions, the model has {}",
                config.task.max_len,
                config.task.max_len + 1,
                config.model.max_len
            ),
        ));
    }
    if config.batch_size == 0 || config.steps == 0 || config.warmup == 0 || config.held_out == 0 {
        return Err(invalid(OP, "batch_size, steps, warmup, held_out", "must all be positive"));
    }
    let held_out = config.task.held_out(config.held_out, config.held_out_seed)?;
    let exclude: HashSet<Vec<usize>> = held_out.iter().cloned().collect();
    let mut model = EncoderDecoder::<f32>::new(config.model, config.seed)?;
    let mut adam = Adam::<f32>::new(AdamConfig {
        learning_rate: config.learning_rate,
        ..AdamConfig::default()
    })?;
    let mut rng = Rng::new(config.seed ^ 0x5EED_DA7A);
    let mut losses = Vec::with_capacity(config.steps);
    for step in 0..config.steps {
        let sources = config.task.training_batch(&mut rng, config.batch_size, &exclude);
        let (inputs, labels) = teacher_forcing(&sources);
        let g = model.loss_and_gradients(&sources, &inputs, &labels)?;
        losses.push(g.loss.as_f64());
        adam.config.learning_rate = learning_rate_at(config, step);
        let grads = g.grads.tensors();
        adam.step(&mut model.tensors_mut(), &grads)?;
    }
    Ok(Trained { model, losses, held_out, config: *config })
}

impl Trained {
    /// Greedy outputs for the held-out sources.
    pub fn held_out_outputs(&self) -> Result<Vec<Vec<usize>>> {
        self.model.greedy_decode(&self.held_out, START, END)
    }

    /// The fraction of held-out sources whose greedy output is exactly their reverse (every digit,
    /// and the end token in the right place).
    pub fn exact_match(&self) -> Result<f64> {
        let outputs = self.held_out_outputs()?;
        let right = outputs
            .iter()
            .zip(&self.held_out)
            .filter(|(o, s)| **o == ReversalTask::target(s))
            .count();
        Ok(right as f64 / self.held_out.len() as f64)
    }

    /// The last decoder layer's cross-attention for one source, averaged over the heads: one row
    /// per decoder input position (start, then the greedy output), one column per source digit.
    pub fn cross_attention_map(&self, source: &[usize]) -> Result<DMatrix<f64>> {
        let src = vec![source.to_vec()];
        let out = self.model.greedy_decode(&src, START, END)?;
        let mut input = vec![START];
        input.extend(&out[0]);
        input.truncate(self.model.config.max_len);
        let (_, cache) = self.model.forward(&src, &[input])?;
        let last = cache
            .decoder
            .last()
            .ok_or(Error::Empty { op: "cross_attention_map", arg: "decoder layers" })?;
        let maps = &last.cross_attention.weights;
        let mut mean = DMatrix::<f64>::zeros(maps[0].nrows(), maps[0].ncols());
        for m in maps {
            mean += crate::float::cast::<f32, f64>(m);
        }
        Ok(mean / maps.len() as f64)
    }
}

static CHAPTER_MODEL: OnceLock<Trained> = OnceLock::new();
static TRAINING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The chapter's trained model ([`CHAPTER_CONFIG`]), trained once per process on the process's
/// kernel (the main job's is the portable one, [`crate::book::compute_on_the_portable_kernel`]:
/// its loss curve and cross-attention map are committed figures).
pub fn chapter_model() -> Result<&'static Trained> {
    if let Some(t) = CHAPTER_MODEL.get() {
        return Ok(t);
    }
    let _guard = TRAINING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(t) = CHAPTER_MODEL.get() {
        return Ok(t);
    }
    let trained = train(&CHAPTER_CONFIG)?;
    Ok(CHAPTER_MODEL.get_or_init(|| trained))
}
