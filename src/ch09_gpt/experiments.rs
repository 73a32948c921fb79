//! The two models this chapter trains on the CPU: minGPT's digit-sorting task, and the default
//! corpus of chapter 8 cut into BPE tokens, measured against chapter 8's best n-gram model on
//! the same tokens and the same held-out text.
//!
//! Each is a setup (the model's [`Config`], the batch, the learning-rate [`Schedule`]) and, for
//! the corpus, a run that records the training loss of every step and the validation loss
//! L = −(1/S) Σ ln p(u_s | u_<s) over every held-out token every [`CORPUS_EVAL_EVERY`] steps.
//! The walk-through (`book.rs`) trains both and reports them; `tests/ch09_gpt.rs` trains the
//! same setups.
//!
//! [`Schedule`]: schedule::Schedule

use super::config::Config;
use super::{data, model, schedule, train};
use crate::error::Result;

/// The sorting model: 2 layers, 2 heads, width 32 (26k parameters) on the 14,625 training
/// strings; 400 steps of 32 strings, α = 3·10⁻³ with a 20-step warm-up and cosine decay to
/// 3·10⁻⁴, no weight decay (the task has no noise to overfit). The test trains exactly this.
pub fn sort_setup() -> Result<(data::SortTask, Config, train::TrainConfig)> {
    let task = data::SortTask::standard(SORT_SEED)?;
    let config = Config::new(data::SORT_DIGITS, task.seq_len(), 2, 2, 32);
    let tc = train::TrainConfig {
        weight_decay: 0.0,
        ..train::TrainConfig::new(32, schedule::Schedule::new(3e-3, 3e-4, 20, SORT_STEPS)?)
    };
    Ok((task, config, tc))
}
/// The sorting task's split seed.
pub const SORT_SEED: u64 = 1;
/// The sorting model's training steps.
pub const SORT_STEPS: usize = 400;

/// The default corpus as the corpus model reads it: chapter 8's 90/10 split, cut into tokens by
/// chapter 8's byte-level BPE ([`CHAPTER_BPE_VOCAB`](crate::ch08_tokens::CHAPTER_BPE_VOCAB)
/// tokens, GPT-2's pre-tokenization) trained on the training part only.
#[derive(Clone, Debug)]
pub struct CorpusTokens {
    /// The tokenizer.
    pub tokenizer: crate::ch08_tokens::bpe::Bpe,
    /// The training part's ids: the only tokens the model and the n-gram models are fitted on.
    pub train: Vec<data::Token>,
    /// The validation part's ids (the corpus's last tenth, from a piece boundary on).
    pub validation: Vec<data::Token>,
}

/// Trains chapter 8's BPE on the training part of the default corpus and encodes both parts.
pub fn corpus_tokens() -> Result<CorpusTokens> {
    use crate::ch08_tokens::{CHAPTER_BPE_VOCAB, Tokenizer, bpe, corpus};
    let (train_text, validation_text) = corpus::split(corpus::default_corpus());
    let config =
        bpe::BpeConfig { vocab_size: CHAPTER_BPE_VOCAB, pre_tokenizer: bpe::PreTokenizer::Gpt2 };
    let tokenizer = bpe::train(train_text, config)?.bpe;
    Ok(CorpusTokens {
        train: tokenizer.encode(train_text)?,
        validation: tokenizer.encode(validation_text)?,
        tokenizer,
    })
}

/// The largest n of the n-gram baseline on the corpus tokens. Chapter 8's character table stops
/// at n = 5; on BPE tokens the backoff models are measured as best at n = 6 and worse from n = 7
/// on, so n ≤ 8 holds the best of the family, not merely of a short table.
pub const CORPUS_BASELINE_MAX_N: usize = 8;

/// Chapter 8's n-gram table on the corpus tokens: n = 1 … [`CORPUS_BASELINE_MAX_N`], add-k with
/// k = [`ADD_K`](crate::ch08_tokens::ADD_K) and backoff with d =
/// [`DEFAULT_DISCOUNT`](crate::ch08_tokens::ngram::DEFAULT_DISCOUNT), fitted on the training part
/// and measured on the validation part, in nats per token.
pub fn corpus_baseline_rows(
    tokens: &CorpusTokens,
) -> Result<Vec<crate::ch08_tokens::ngram::BaselineRow>> {
    use crate::ch08_tokens::{ADD_K, Tokenizer, ngram};
    ngram::baseline(
        &tokens.train,
        &tokens.validation,
        tokens.tokenizer.vocab_size(),
        CORPUS_BASELINE_MAX_N,
        ADD_K,
        ngram::DEFAULT_DISCOUNT,
    )
}

/// The lowest validation loss of a baseline table, over every n and both smoothings:
/// (label such as "6-gram, backoff", nats per token).
pub fn best_baseline(rows: &[crate::ch08_tokens::ngram::BaselineRow]) -> Result<(String, f64)> {
    rows.iter()
        .flat_map(|r| {
            [
                (format!("{}-gram, add-k", r.n), r.add_k),
                (format!("{}-gram, backoff", r.n), r.backoff),
            ]
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .ok_or(crate::error::Error::Empty { op: "best_baseline", arg: "rows" })
}

/// One corpus training run: the model's shape, the optimiser's settings and the number of steps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CorpusSetup {
    /// The model.
    pub config: Config,
    /// Batch, schedule, AdamW.
    pub train: train::TrainConfig,
    /// Training steps.
    pub steps: usize,
    /// Validation is measured after every this many steps (and after the last).
    pub eval_every: usize,
    /// The model's initialisation seed.
    pub model_seed: u64,
    /// The seed of the batches.
    pub data_seed: u64,
}

/// The corpus model of the main job: 3 layers, 4 heads, width 96, context 64 BPE tokens (about
/// 146 characters); [`CORPUS_STEPS`] steps of [`CORPUS_BATCH`] windows, α = 3·10⁻³ after a 5 %
/// warm-up, cosine to 3·10⁻⁴, AdamW λ = 0.1, clipping at 1. `steps` other than [`CORPUS_STEPS`]
/// gives the same run with its schedule squeezed or stretched to that length.
pub fn corpus_setup(vocab_size: usize, steps: usize) -> Result<CorpusSetup> {
    let config = Config::new(vocab_size, CORPUS_CONTEXT, 3, 4, 96);
    let schedule =
        schedule::Schedule::new(CORPUS_PEAK_RATE, CORPUS_PEAK_RATE / 10.0, steps / 20, steps)?;
    let train = train::TrainConfig::new(CORPUS_BATCH, schedule);
    Ok(CorpusSetup {
        config,
        train,
        steps,
        eval_every: CORPUS_EVAL_EVERY,
        model_seed: 1,
        data_seed: 2,
    })
}
/// The corpus model's context, in tokens.
pub const CORPUS_CONTEXT: usize = 64;
/// The corpus model's windows per batch: 8 windows of 64 tokens, 512 tokens a step. Measured on
/// this corpus with 614,400 tokens and the same schedule shape: 1,200 steps of 8 windows ended at
/// 0.7938 nats per token, 600 steps of 16 at 0.8959.
pub const CORPUS_BATCH: usize = 8;
/// The corpus model's training steps: 819,200 tokens, about 8 passes over the training part.
pub const CORPUS_STEPS: usize = 1_600;
/// The corpus model's peak learning rate, the sorting model's too.
pub const CORPUS_PEAK_RATE: f64 = 3e-3;
/// Validation is measured this often during the corpus run.
pub const CORPUS_EVAL_EVERY: usize = 100;

/// What a corpus run produced.
#[derive(Clone, Debug)]
pub struct CorpusRun {
    /// The trained model.
    pub model: model::Gpt<f32>,
    /// One record per step.
    pub history: Vec<train::StepRecord>,
    /// (steps taken, validation nats per token), every `eval_every` steps and after the last.
    pub validation: Vec<(usize, f64)>,
    /// Tokens the model was trained on (B·T per step, summed).
    pub tokens_seen: usize,
    /// Wall-clock seconds of the training steps alone (validation excluded).
    pub train_seconds: f64,
}

impl CorpusRun {
    /// The validation loss after the last step.
    pub fn final_validation(&self) -> f64 {
        self.validation.last().map_or(f64::NAN, |v| v.1)
    }

    /// The first measured step whose validation loss is below `baseline`, if any.
    pub fn crossing(&self, baseline: f64) -> Option<usize> {
        self.validation.iter().find(|v| v.1 < baseline).map(|v| v.0)
    }
}

/// Trains `setup` on the training tokens, measuring the mean loss over every validation token
/// (non-overlapping windows of the model's context) as it goes. `on_step` sees each step's record.
pub fn train_corpus(
    tokens: &CorpusTokens,
    setup: &CorpusSetup,
    mut on_step: impl FnMut(&train::StepRecord, &train::Throughput),
) -> Result<CorpusRun> {
    let context = setup.config.context;
    let mut trainer = train::Trainer::new(
        model::Gpt::<f32>::new(setup.config, setup.model_seed)?,
        &setup.train,
        setup.data_seed,
    )?;
    let data = train::Data::Stream { tokens: &tokens.train, seq_len: context };
    let val_batches = data::covering_windows(&tokens.validation, context, 32);
    let (mut validation, mut speed) = (Vec::new(), train::Throughput::default());
    while trainer.step < setup.steps {
        let t = std::time::Instant::now();
        let r = trainer.step(&data, &setup.train)?;
        speed.add(r.tokens, t.elapsed().as_secs_f64());
        on_step(&r, &speed);
        if trainer.step % setup.eval_every.max(1) == 0 || trainer.step == setup.steps {
            validation.push((trainer.step, train::mean_loss(&trainer.model, &val_batches)?));
        }
    }
    Ok(CorpusRun {
        model: trainer.model,
        history: trainer.history,
        validation,
        tokens_seen: speed.tokens,
        train_seconds: speed.seconds,
    })
}
