//! The measured runs: chapter 9's GPT trained on the default corpus from one seed with f32
//! products, with bf16 inputs, with f16 inputs, and with f16 inputs and loss scaling.
//!
//! Every run uses the process's micro-kernel (the main job's is the portable one,
//! [`crate::book::compute_on_the_portable_kernel`]) and the fused step's fixed shards, so the
//! book's losses are the same bits on every machine and with any number of threads. The
//! validation loss is the f32 forward pass of the master weights over every held-out token.

use super::mixed::{Precision, ProductInputs, StepRounding};
use crate::ch09_gpt::config::Config;
use crate::ch09_gpt::experiments::{CORPUS_PEAK_RATE, CorpusTokens};
use crate::ch09_gpt::{data, model, schedule, train};
use crate::error::Result;

/// The model of the runs: chapter 9's corpus model made smaller so that four runs fit in
/// seconds: 2 layers, 4 heads, width 64, context 32 tokens (chapter 9's: 3 layers, width 96,
/// context 64).
pub fn run_config(vocab_size: usize) -> Config {
    Config::new(vocab_size, RUN_CONTEXT, 2, 4, 64)
}
/// The runs' context, in tokens.
pub const RUN_CONTEXT: usize = 32;
/// Windows per batch: 8 windows of 32 tokens, 256 tokens a step.
pub const RUN_BATCH: usize = 8;
/// Training steps of each run.
pub const RUN_STEPS: usize = 150;
/// The static loss scale of the scaled f16 run, 2^{10}.
pub const F16_LOSS_SCALE: f64 = 1024.0;
/// Seeds of the model's initial weights and of the batches, the same for every run.
pub const RUN_SEEDS: (u64, u64) = (1, 2);

/// The four runs, in the order the chapter shows them.
pub fn run_precisions() -> [Precision; 4] {
    [
        Precision::F32,
        Precision { inputs: ProductInputs::Bf16, loss_scale: 1.0 },
        Precision { inputs: ProductInputs::F16, loss_scale: 1.0 },
        Precision { inputs: ProductInputs::F16, loss_scale: F16_LOSS_SCALE },
    ]
}

/// What one run measured.
#[derive(Clone, Debug)]
pub struct MixedRun {
    /// How its products rounded.
    pub precision: Precision,
    /// One record per step.
    pub history: Vec<train::StepRecord>,
    /// What each step's roundings did.
    pub rounding: Vec<StepRounding>,
    /// The validation loss after the last step, nats per token.
    pub validation: f64,
    /// Wall-clock seconds of the training steps alone (validation excluded).
    pub train_seconds: f64,
}

impl MixedRun {
    /// The gradient inputs that underflowed to zero, summed over the steps.
    pub fn gradient_underflows(&self) -> u64 {
        self.rounding.iter().map(|r| r.gradients.underflows).sum()
    }

    /// Inputs (gradients or not) that overflowed to ±∞, summed over the steps.
    pub fn overflows(&self) -> u64 {
        self.rounding.iter().map(|r| r.gradients.overflows + r.others.overflows).sum()
    }
}

/// Trains [`run_config`] for `steps` steps (α = 3·10⁻³ after a 5 % warm-up, cosine to
/// 3·10⁻⁴, AdamW λ = 0.1, clipping at 1, as chapter 9) with `precision`, on the portable kernel,
/// then measures the validation loss; `on_step` sees each step's record. Errors when `steps` is 0
/// or the tokens are too few for one window.
pub fn train_mixed(
    tokens: &CorpusTokens,
    steps: usize,
    precision: Precision,
    mut on_step: impl FnMut(&train::StepRecord),
) -> Result<MixedRun> {
    use crate::ch08_tokens::Tokenizer;
    if steps == 0 {
        return Err(crate::error::invalid("train_mixed", "steps", "must be at least 1"));
    }
    let config = run_config(tokens.tokenizer.vocab_size());
    let schedule =
        schedule::Schedule::new(CORPUS_PEAK_RATE, CORPUS_PEAK_RATE / 10.0, steps / 20, steps)?;
    let tc = train::TrainConfig::new(RUN_BATCH, schedule);
    let model = model::Gpt::<f32>::new(config, RUN_SEEDS.0)?;
    let mut trainer = train::Trainer::new(model, &tc, RUN_SEEDS.1)?;
    trainer.set_precision(precision)?;
    let data = train::Data::Stream { tokens: &tokens.train, seq_len: RUN_CONTEXT };
    let val_batches = data::covering_windows(&tokens.validation, RUN_CONTEXT, 32);
    let mut run = MixedRun {
        precision,
        history: Vec::new(),
        rounding: Vec::new(),
        validation: f64::NAN,
        train_seconds: 0.0,
    };
    while trainer.step < steps {
        let t = std::time::Instant::now();
        let record = trainer.step(&data, &tc)?;
        run.train_seconds += t.elapsed().as_secs_f64();
        on_step(&record);
        run.rounding.push(trainer.rounding());
    }
    run.validation = train::mean_loss(&trainer.model, &val_batches)?;
    run.history = trainer.history;
    Ok(run)
}

/// The example of small gradients: one step of a tiny GPT (vocabulary 65, context 32, 2 layers,
/// 4 heads, width 64, seed 3) on 6 windows of 32 tokens drawn uniformly (seed 4), 192 scored
/// positions, so that ∂L/∂z = (softmax − onehot)/192 starts near 10⁻⁴ and the gradients flowing
/// back are smaller still. Returns the loss, the gradients (in
/// [`Gpt::tensors`](crate::ch09_gpt::model::Gpt::tensors) order, as f64) and what the roundings
/// did.
pub fn small_gradient_step(
    precision: Precision,
) -> Result<(f64, Vec<nalgebra::DMatrix<f64>>, StepRounding)> {
    let model = model::Gpt::<f32>::new(Config::new(SMALL_VOCAB, 32, 2, 4, 64), 3)?;
    let batch = small_gradient_batch()?;
    let mut step = crate::ch09_gpt::fast::FusedStep::new();
    step.set_precision(precision);
    let (loss, grads) = step.loss_and_grads(&model, &batch)?;
    let grads = grads.iter().map(|g| g.map(f64::from)).collect();
    Ok((loss, grads, step.rounding()))
}

/// The tiny model's vocabulary.
pub const SMALL_VOCAB: usize = 65;

/// The batch of [`small_gradient_step`]: 6 windows of 32 tokens from 5,000 tokens drawn
/// uniformly below [`SMALL_VOCAB`] (seed 4).
pub fn small_gradient_batch() -> Result<data::Batch> {
    let mut rng = crate::rng::Rng::new(4);
    let tokens: Vec<u32> = (0..5_000).map(|_| rng.below(SMALL_VOCAB) as u32).collect();
    data::random_windows(&tokens, 32, 6, &mut rng)
}
