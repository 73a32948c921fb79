//! `llm-workbook gpt train | resume | sample`: the GPT on a learner's own text.
//!
//! `train` reads a UTF-8 text file, builds a tokenizer (characters, or a byte-level BPE trained on
//! the text), holds out the last 10 % for validation, trains with a progress bar (running loss and
//! tokens per second), saves a checkpoint folder (GPT-2 `config.json` and `model.safetensors`, the
//! training state, the tokenizer, the run's settings) every `--save-every` steps and at the end,
//! and draws the loss curves into the folder. `resume` continues a folder's run to a new step
//! count exactly where it stopped. `sample` continues a prompt from a folder, ours or Hugging
//! Face's GPT-2 (with its `vocab.json` and `merges.txt` beside the weights).
//!
//! This module holds the flags and what is printed; the run itself is the library's
//! `ch09_gpt::run`.

#![deny(clippy::unwrap_used, clippy::expect_used)]

use super::{Bar, say};
use clap::{Args, Subcommand, ValueEnum};
use llm_workbook::ch08_tokens::Tokenizer;
use llm_workbook::ch09_gpt::budget;
use llm_workbook::ch09_gpt::config::{Config, Positions};
use llm_workbook::ch09_gpt::data::TokenSplit;
use llm_workbook::ch09_gpt::folder::{self, Resolved};
use llm_workbook::ch09_gpt::model::Gpt;
use llm_workbook::ch09_gpt::run::{self, DEFAULT_CORPUS};
use llm_workbook::ch09_gpt::sample::{Decoding, generate};
use llm_workbook::ch09_gpt::train::{StepPath, TrainConfig, Trainer};
use llm_workbook::error::{Result, invalid};
use llm_workbook::rng::Rng;
use std::path::{Path, PathBuf};

/// The three things the `gpt` command does.
#[derive(Subcommand, Debug)]
pub enum GptCommand {
    /// Train a GPT on a text file and save it as a checkpoint folder.
    Train(TrainArgs),
    /// Continue a checkpoint folder's training run to more steps, exactly where it stopped.
    Resume(ResumeArgs),
    /// Continue a prompt with a trained model (ours, or GPT-2's files from Hugging Face).
    Sample(SampleArgs),
}

/// How text becomes tokens.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKind {
    /// One token per character of the text.
    Char,
    /// Byte-level BPE trained on the text (vocabulary size from --bpe-vocab).
    Bpe,
}

impl From<TokenizerKind> for run::TokenizerKind {
    fn from(kind: TokenizerKind) -> run::TokenizerKind {
        match kind {
            TokenizerKind::Char => run::TokenizerKind::Char,
            TokenizerKind::Bpe => run::TokenizerKind::Bpe,
        }
    }
}

/// `gpt train`.
#[derive(Args, Debug)]
pub struct TrainArgs {
    /// The UTF-8 text to learn (the default corpus of chapter 8 when omitted).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// The tokenizer.
    #[arg(long, value_enum, default_value_t = TokenizerKind::Char)]
    pub tokenizer: TokenizerKind,
    /// The BPE vocabulary size (256 bytes plus merges), with --tokenizer bpe.
    #[arg(long, default_value_t = 512)]
    pub bpe_vocab: usize,
    /// Transformer blocks.
    #[arg(long, default_value_t = 3)]
    pub layers: usize,
    /// Attention heads per block (must divide --width).
    #[arg(long, default_value_t = 4)]
    pub heads: usize,
    /// The width of the residual stream.
    #[arg(long, default_value_t = 96)]
    pub width: usize,
    /// The context length in tokens.
    #[arg(long, default_value_t = 64)]
    pub context: usize,
    /// Sequences per batch.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Training steps.
    #[arg(long, default_value_t = 2000)]
    pub steps: usize,
    /// The peak learning rate.
    #[arg(long, default_value_t = 3e-3)]
    pub lr: f64,
    /// The seed of the initial weights and of the batches.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The checkpoint folder (the default, under the current folder, is ignored by git).
    #[arg(long, default_value = "checkpoints/gpt")]
    pub out: PathBuf,
    /// Save a checkpoint every this many steps (0: only at the end).
    #[arg(long, default_value_t = 500)]
    pub save_every: usize,
    /// Train into a folder that already holds a checkpoint (it is replaced once the new run's
    /// first checkpoint is saved).
    #[arg(long)]
    pub force: bool,
    /// The memory this run may use, in bytes (default: the variable
    /// LLM_WORKBOOK_MEMORY_BUDGET, else the available memory); a larger model is refused.
    #[arg(long)]
    pub memory_budget: Option<u64>,
}

/// `gpt resume`.
#[derive(Args, Debug)]
pub struct ResumeArgs {
    /// The checkpoint folder `gpt train` wrote.
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// The step count to continue to (more than the folder holds).
    #[arg(long)]
    pub steps: usize,
    /// The memory this run may use, in bytes (default: the variable
    /// LLM_WORKBOOK_MEMORY_BUDGET, else the available memory); a larger model is refused.
    #[arg(long)]
    pub memory_budget: Option<u64>,
}

/// `gpt sample`.
#[derive(Args, Debug)]
pub struct SampleArgs {
    /// A checkpoint folder: ours, or one with GPT-2's config.json, model.safetensors, vocab.json
    /// and merges.txt.
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// The text to continue.
    #[arg(long, default_value = "\n")]
    pub prompt: String,
    /// How many tokens to add.
    #[arg(long, default_value_t = 200)]
    pub tokens: usize,
    /// Sampling temperature T > 0 (ignored with --greedy).
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f64,
    /// Keep only the k most likely tokens (k ≥ 1).
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Keep the most likely tokens up to total probability p ∈ (0, 1].
    #[arg(long)]
    pub top_p: Option<f64>,
    /// Always take the most likely token.
    #[arg(long)]
    pub greedy: bool,
    /// The seed of the draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The memory this run may use, in bytes (default: the variable
    /// LLM_WORKBOOK_MEMORY_BUDGET, else the available memory); a larger model is refused.
    #[arg(long)]
    pub memory_budget: Option<u64>,
}

/// Runs a `gpt` command; the error is one line for the terminal.
pub fn run(command: GptCommand) -> Result<()> {
    match command {
        GptCommand::Train(a) => train(a),
        GptCommand::Resume(a) => resume(a),
        GptCommand::Sample(a) => sample(a),
    }
}

// ───────────────────────────── train and resume ─────────────────────────────

fn train(a: TrainArgs) -> Result<()> {
    if a.steps == 0 || a.batch == 0 {
        let arg = if a.steps == 0 { "--steps" } else { "--batch" };
        return Err(invalid("gpt train", arg, "must be at least 1, got 0"));
    }
    if !a.force && folder::holds_checkpoint(&a.out) {
        return Err(invalid(
            "gpt train",
            "--out",
            format!(
                "{} already holds a checkpoint; give --force to replace it, or another --out",
                a.out.display()
            ),
        ));
    }
    let data = a.data.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_CORPUS));
    let text = run::read_text(&data)?;
    say!("{}: {} bytes", data.display(), text.len());
    // Everything is built and checked in memory first; nothing is written before the first
    // save, so bad settings, short data or a diverging first step leave the folder as it was.
    let (tok, tokenizer_files) = run::build_tokenizer(a.tokenizer.into(), &text, a.bpe_vocab)?;
    let config = Config {
        positions: Positions::Learned,
        ..Config::new(tok.vocab_size(), a.context, a.layers, a.heads, a.width)
    };
    config.validate()?;
    budget::check(
        &config,
        a.batch,
        a.context,
        budget::budget(a.memory_budget)?,
        "--memory-budget",
    )?;
    let tc = run::train_config(a.batch, a.lr, a.steps)?;
    let split = run::split_text(tok.as_ref(), &text, a.context)?;
    let model = Gpt::<f32>::new(config, a.seed)?;
    say!(
        "model: {} layers, {} heads, width {}, context {}, vocabulary {}: {} parameters",
        a.layers,
        a.heads,
        a.width,
        a.context,
        config.vocab_size,
        config.parameter_count()
    );
    let trainer = Trainer::new(model, &tc, a.seed.wrapping_add(1))?;
    let path = trainer.path();
    let files = run::run_files(&tokenizer_files, &data, &tc, a.context, a.steps, a.seed, path);
    let tok = tok.as_ref();
    continue_run(trainer, &tc, &split, tok, a.context, a.steps, a.save_every, &a.out, &files)
}

/// The one-line note for a folder read without a pointer.
fn note_flat(dir: &Path, resolved: &Resolved) {
    if resolved.flat {
        eprintln!(
            "note: {} has no {} pointer; reading its files directly (a checkpoint written before \
             generation folders, or Hugging Face's)",
            dir.display(),
            folder::POINTER_FILE
        );
    }
}

fn resume(a: ResumeArgs) -> Result<()> {
    let open = run::open_run(&a.checkpoint, budget::budget(a.memory_budget)?)?;
    note_flat(&a.checkpoint, &open.resolved);
    let (settings, trainer) = (open.settings, open.trainer);
    if a.steps <= trainer.step {
        return Err(invalid(
            "gpt resume",
            "--steps",
            format!("the checkpoint is already at step {}; ask for more", trainer.step),
        ));
    }
    say!("resuming {} at step {} of {}", a.checkpoint.display(), trainer.step, a.steps);
    // The schedule's decay stays where the run planned it; past it the floor rate holds.
    let (tc, context) = (settings.tc, settings.context);
    let tok = open.tokenizer.as_ref();
    let split = run::split_text(tok, &open.text, context)?;
    let files = &open.run_files;
    continue_run(trainer, &tc, &split, tok, context, a.steps, 0, &a.checkpoint, files)
}

/// Trains to `steps` with a progress bar, then prints the losses, the plot's files and a sample.
#[allow(clippy::too_many_arguments)]
fn continue_run(
    mut trainer: Trainer<f32>,
    tc: &TrainConfig,
    split: &TokenSplit,
    tok: &dyn Tokenizer,
    context: usize,
    steps: usize,
    save_every: usize,
    out: &Path,
    run_files: &[(String, Vec<u8>)],
) -> Result<()> {
    say!(
        "training step: the {} path ({})",
        trainer.path().name(),
        match trainer.path() {
            StepPath::Fused => "fused::FusedStep",
            StepPath::Reference => "Gpt::loss_and_grads; the fused step does not cover this model",
        }
    );
    let mut bar = Bar::run(trainer.step, steps)
        .map_err(|e| invalid("progress", "template", e.to_string()))?;
    let end = run::continue_run(
        &mut trainer,
        tc,
        split,
        context,
        steps,
        save_every,
        out,
        run_files,
        &mut bar,
    )?;
    say!(
        "step {}: training loss {:.4}, validation loss {:.4} nats per token",
        trainer.step,
        end.running_loss,
        end.validation_loss
    );
    let files = llm_workbook::ch09_gpt::book::save_loss_plot(&trainer, &end.generation)?;
    say!(
        "checkpoint and loss plot in {} ({})",
        end.generation.display(),
        files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ")
    );
    let (prompt, g) = run::closing_sample(&trainer.model, &split.validation, context)?;
    say!(
        "sample (T = {}) after {:?}:\n{}",
        run::SAMPLE_TEMPERATURE,
        tok.decode_lossy(&prompt)?,
        tok.decode_lossy(g.new_tokens())?
    );
    Ok(())
}

// ───────────────────────────── sample ─────────────────────────────

fn sample(a: SampleArgs) -> Result<()> {
    let (tok, model, resolved) =
        run::load_for_sampling(&a.checkpoint, budget::budget(a.memory_budget)?)?;
    note_flat(&a.checkpoint, &resolved);
    let decoding = if a.greedy {
        Decoding::Greedy
    } else {
        Decoding::Sample { temperature: a.temperature, top_k: a.top_k, top_p: a.top_p }
    };
    decoding.validate()?;
    let prompt = tok.encode(&a.prompt)?;
    let g = generate(&model, &prompt, a.tokens, &decoding, &mut Rng::new(a.seed), true)?;
    if g.cropped > 0 {
        eprintln!(
            "note: the prompt holds {} tokens, more than the context of {}; its first {} tokens \
             were dropped",
            prompt.len(),
            model.config.context,
            g.cropped
        );
    }
    say!("{}{}", a.prompt, tok.decode_lossy(g.new_tokens())?);
    Ok(())
}
