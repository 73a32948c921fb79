//! `llm-workbook gpt train | resume | sample`: the GPT on a learner's own text.
//!
//! `train` reads a UTF-8 text file, builds a tokenizer (characters, or a byte-level BPE trained on
//! the text), holds out the last 10 % for validation, trains with a progress bar (running loss and
//! tokens per second), saves a checkpoint folder (GPT-2 `config.json` and `model.safetensors`, the
//! training state, the tokenizer, the run's settings) every `--save-every` steps and at the end,
//! and draws the loss curves into the folder. `resume` continues a folder's run to a new step
//! count exactly where it stopped. `sample` continues a prompt from a folder, ours or Hugging
//! Face's GPT-2 (with its `vocab.json` and `merges.txt` beside the weights).

#![deny(clippy::unwrap_used, clippy::expect_used)]

use super::checkpoint::{load_model, load_trainer, save_trainer};
use super::config::{Config, Positions};
use super::data::{Token, TokenSplit, covering_windows};
use super::model::Gpt;
use super::sample::{Decoding, generate};
use super::schedule::Schedule;
use super::train::{Data, TrainConfig, Trainer, mean_loss};
use crate::ch08_tokens::bpe::{self, BpeConfig, PreTokenizer};
use crate::ch08_tokens::chars::CharTokenizer;
use crate::ch08_tokens::gpt2::{Gpt2Tokenizer, to_gpt2_files};
use crate::ch08_tokens::{Tokenizer, corpus};
use crate::error::{Error, Result, invalid};
use crate::json::{self, Json};
use crate::plot::{Figure, LineChart, Series};
use crate::rng::Rng;
use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The settings of a run, saved as `train.json` so `resume` can continue it.
pub const RUN_FILE: &str = "train.json";
/// The character tokenizer's vocabulary, saved as one line of text.
pub const CHARS_FILE: &str = "tokenizer_chars.txt";

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
    /// The checkpoint folder.
    #[arg(long, default_value = "checkpoints/gpt")]
    pub out: PathBuf,
    /// Save a checkpoint every this many steps (0: only at the end).
    #[arg(long, default_value_t = 500)]
    pub save_every: usize,
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
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.display().to_string(), source }
}

/// Runs a `gpt` command; the error is one line for the terminal.
pub fn run(command: GptCommand) -> Result<()> {
    match command {
        GptCommand::Train(a) => train(a),
        GptCommand::Resume(a) => resume(a),
        GptCommand::Sample(a) => sample(a),
    }
}

// ───────────────────────────── tokenizers in a folder ─────────────────────────────

/// Whichever tokenizer a checkpoint folder holds.
pub fn load_tokenizer(dir: &Path) -> Result<Box<dyn Tokenizer>> {
    let chars = dir.join(CHARS_FILE);
    if chars.exists() {
        let text = std::fs::read_to_string(&chars).map_err(io(&chars))?;
        return Ok(Box::new(CharTokenizer::from_text(&text)?));
    }
    let (vocab, merges) = (dir.join("vocab.json"), dir.join("merges.txt"));
    if vocab.exists() && merges.exists() {
        return Ok(Box::new(Gpt2Tokenizer::from_files(&vocab, &merges)?));
    }
    Err(invalid(
        "load_tokenizer",
        "checkpoint",
        format!("{} holds neither {CHARS_FILE} nor vocab.json + merges.txt", dir.display()),
    ))
}

/// A tokenizer and the files that hold it (file name, contents), not yet written.
type BuiltTokenizer = (Box<dyn Tokenizer>, Vec<(&'static str, String)>);

/// The tokenizer `kind` builds from `text`, and its files: `train` writes them only once every
/// setting has been checked.
fn build_tokenizer(kind: TokenizerKind, text: &str, bpe_vocab: usize) -> Result<BuiltTokenizer> {
    match kind {
        TokenizerKind::Char => {
            let t = CharTokenizer::from_text(text)?;
            let line = t.chars().iter().collect::<String>();
            Ok((Box::new(t), vec![(CHARS_FILE, line)]))
        }
        TokenizerKind::Bpe => {
            let trained = bpe::train(
                text,
                BpeConfig { vocab_size: bpe_vocab, pre_tokenizer: PreTokenizer::Gpt2 },
            )?;
            let (v, m) = to_gpt2_files(&trained.bpe)?;
            let tok = Gpt2Tokenizer::from_texts("vocab.json", &v, "merges.txt", &m)?;
            Ok((Box::new(tok), vec![("vocab.json", v), ("merges.txt", m)]))
        }
    }
}

// ───────────────────────────── the run's settings ─────────────────────────────

fn run_json(data: &Path, tc: &TrainConfig, context: usize, steps: usize, seed: u64) -> Json {
    let s = &tc.schedule;
    Json::Object(vec![
        ("data".into(), Json::String(data.display().to_string())),
        ("context".into(), Json::int(context as u64)),
        ("batch".into(), Json::int(tc.batch as u64)),
        ("steps".into(), Json::int(steps as u64)),
        ("seed".into(), Json::int(seed)),
        ("max_lr".into(), Json::number(s.max_lr)),
        ("min_lr".into(), Json::number(s.min_lr)),
        ("warmup".into(), Json::int(s.warmup as u64)),
        ("decay_steps".into(), Json::int(s.decay_steps as u64)),
        ("weight_decay".into(), Json::number(tc.weight_decay)),
        ("beta1".into(), Json::number(tc.beta1)),
        ("beta2".into(), Json::number(tc.beta2)),
        ("epsilon".into(), Json::number(tc.epsilon)),
        ("clip".into(), tc.clip.map_or(Json::Null, Json::number)),
    ])
}

struct Run {
    data: PathBuf,
    tc: TrainConfig,
    context: usize,
    seed: u64,
}

fn read_run(dir: &Path) -> Result<Run> {
    let path = dir.join(RUN_FILE);
    let name = path.display().to_string();
    let j = json::parse(&std::fs::read(&path).map_err(io(&path))?, &name)?;
    let bad = |k: &str| Error::Parse {
        file: name.clone(),
        line: None,
        reason: format!("{k} is missing or malformed"),
    };
    let f = |k: &str| j.get(k).and_then(Json::as_f64).ok_or_else(|| bad(k));
    let u = |k: &str| j.get(k).and_then(Json::as_u64).ok_or_else(|| bad(k));
    let schedule = Schedule::new(
        f("max_lr")?,
        f("min_lr")?,
        u("warmup")? as usize,
        u("decay_steps")? as usize,
    )?;
    let clip = match j.get("clip") {
        Some(Json::Null) | None => None,
        Some(v) => Some(v.as_f64().ok_or_else(|| bad("clip"))?),
    };
    let tc = TrainConfig {
        batch: u("batch")? as usize,
        schedule,
        weight_decay: f("weight_decay")?,
        beta1: f("beta1")?,
        beta2: f("beta2")?,
        epsilon: f("epsilon")?,
        clip,
    };
    let data = PathBuf::from(j.get("data").and_then(Json::as_str).ok_or_else(|| bad("data"))?);
    Ok(Run { data, tc, context: u("context")? as usize, seed: u("seed")? })
}

fn read_text(data: &Path) -> Result<String> {
    if data.as_os_str() == "<default corpus>" {
        Ok(corpus::default_corpus().to_string())
    } else {
        corpus::load(data)
    }
}

// ───────────────────────────── train and resume ─────────────────────────────

fn train(a: TrainArgs) -> Result<()> {
    if a.steps == 0 || a.batch == 0 {
        let arg = if a.steps == 0 { "--steps" } else { "--batch" };
        return Err(invalid("gpt train", arg, "must be at least 1, got 0"));
    }
    let data = a.data.clone().unwrap_or_else(|| PathBuf::from("<default corpus>"));
    let text = read_text(&data)?;
    println!("{}: {} bytes", data.display(), text.len());
    // Everything is built and checked in memory first, so bad settings leave no folder behind.
    let (tok, tokenizer_files) = build_tokenizer(a.tokenizer, &text, a.bpe_vocab)?;
    let config = Config {
        positions: Positions::Learned,
        ..Config::new(tok.vocab_size(), a.context, a.layers, a.heads, a.width)
    };
    config.validate()?;
    let schedule = Schedule::new(a.lr, a.lr / 10.0, (a.steps / 20).max(1).min(a.steps), a.steps)?;
    let tc = TrainConfig::new(a.batch, schedule);
    let model = Gpt::<f32>::new(config, a.seed)?;
    std::fs::create_dir_all(&a.out).map_err(io(&a.out))?;
    for (name, contents) in &tokenizer_files {
        super::safetensors::write_atomic(&a.out.join(name), contents.as_bytes())?;
    }
    println!(
        "model: {} layers, {} heads, width {}, context {}, vocabulary {}: {} parameters",
        a.layers,
        a.heads,
        a.width,
        a.context,
        config.vocab_size,
        config.parameter_count()
    );
    let trainer = Trainer::new(model, &tc, a.seed.wrapping_add(1))?;
    super::safetensors::write_atomic(
        &a.out.join(RUN_FILE),
        run_json(&data, &tc, a.context, a.steps, a.seed).to_pretty().as_bytes(),
    )?;
    continue_run(trainer, &tc, &text, tok.as_ref(), a.context, a.steps, a.save_every, &a.out)
}

fn resume(a: ResumeArgs) -> Result<()> {
    let run = read_run(&a.checkpoint)?;
    let text = read_text(&run.data)?;
    let tok = load_tokenizer(&a.checkpoint)?;
    let fresh = Trainer::new(load_model::<f32>(&a.checkpoint)?, &run.tc, run.seed)?;
    let trainer = load_trainer(&a.checkpoint, &fresh)?;
    if a.steps <= trainer.step {
        return Err(invalid(
            "gpt resume",
            "--steps",
            format!("the checkpoint is already at step {}; ask for more", trainer.step),
        ));
    }
    println!("resuming {} at step {} of {}", a.checkpoint.display(), trainer.step, a.steps);
    // The schedule's decay stays where the run planned it; past it the floor rate holds.
    continue_run(trainer, &run.tc, &text, tok.as_ref(), run.context, a.steps, 0, &a.checkpoint)
}

#[allow(clippy::too_many_arguments)]
fn continue_run(
    mut trainer: Trainer<f32>,
    tc: &TrainConfig,
    text: &str,
    tok: &dyn Tokenizer,
    context: usize,
    steps: usize,
    save_every: usize,
    out: &Path,
) -> Result<()> {
    let tokens = tok.encode(text)?;
    let split = TokenSplit::new(&tokens, 0.1, context)?;
    let data = Data::Stream { tokens: &split.train, seq_len: context };
    let bar = ProgressBar::new(steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .map_err(|e| invalid("progress", "template", e.to_string()))?,
    );
    bar.set_position(trainer.step as u64);
    let start = Instant::now();
    let (mut seen, mut running) = (0usize, f64::NAN);
    while trainer.step < steps {
        let r = trainer.step(&data, tc)?;
        seen += r.tokens;
        running = if running.is_nan() { r.loss } else { 0.95 * running + 0.05 * r.loss };
        bar.set_message(format!(
            "loss {running:.4} | {:.0} tokens/s",
            seen as f64 / start.elapsed().as_secs_f64().max(1e-9)
        ));
        bar.inc(1);
        if save_every > 0 && trainer.step.is_multiple_of(save_every) && trainer.step < steps {
            save_trainer(&trainer, out)?;
        }
    }
    bar.finish();
    save_trainer(&trainer, out)?;
    let val = mean_loss(&trainer.model, &covering_windows(&split.validation, context, 32))?;
    println!(
        "step {}: training loss {running:.4}, validation loss {val:.4} nats per token",
        trainer.step
    );
    let files = loss_figure(&trainer).save(out, "loss")?;
    println!(
        "checkpoint and loss plot in {} ({})",
        out.display(),
        files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ")
    );
    let prompt: Vec<Token> = split.validation[..context.min(16)].to_vec();
    let g = generate(
        &trainer.model,
        &prompt,
        200,
        &Decoding::temperature(0.8),
        &mut Rng::new(1),
        true,
    )?;
    println!(
        "sample (T = 0.8) after {:?}:\n{}",
        tok.decode_lossy(&prompt)?,
        tok.decode_lossy(g.new_tokens())?
    );
    Ok(())
}

/// The training loss per step and its running mean, as a figure.
pub fn loss_figure(trainer: &Trainer<f32>) -> Figure {
    let raw: Vec<(f64, f64)> =
        trainer.history.iter().map(|r| (r.step as f64 + 1.0, r.loss)).collect();
    let mut smooth = Vec::with_capacity(raw.len());
    let mut m = f64::NAN;
    for &(x, y) in &raw {
        m = if m.is_nan() { y } else { 0.95 * m + 0.05 * y };
        smooth.push((x, m));
    }
    Figure::Line(LineChart {
        title: "Training loss".into(),
        x_label: "step".into(),
        y_label: "nats per token".into(),
        series: vec![Series::new("batch loss", raw), Series::new("running mean (0.95)", smooth)],
        markers: false,
    })
}

// ───────────────────────────── sample ─────────────────────────────

fn sample(a: SampleArgs) -> Result<()> {
    let tok = load_tokenizer(&a.checkpoint)?;
    let model = load_model::<f32>(&a.checkpoint)?;
    if tok.vocab_size() > model.config.vocab_size {
        return Err(invalid(
            "gpt sample",
            "checkpoint",
            format!(
                "the tokenizer has {} tokens but the model only {}",
                tok.vocab_size(),
                model.config.vocab_size
            ),
        ));
    }
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
            "note: the prompt holds {} tokens, more than the context of {}; its first {} tokens were dropped",
            prompt.len(),
            model.config.context,
            g.cropped
        );
    }
    println!("{}{}", a.prompt, tok.decode_lossy(g.new_tokens())?);
    Ok(())
}
