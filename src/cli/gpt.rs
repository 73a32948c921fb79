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
//! `workshop::run`.

#![deny(clippy::unwrap_used, clippy::expect_used)]

use super::{Bar, say};
use clap::{Args, Subcommand, ValueEnum};
use llm_workbook::ch08_tokens::Tokenizer;
use llm_workbook::ch09_gpt::config::{Config, Positions};
use llm_workbook::ch09_gpt::data::TokenSplit;
use llm_workbook::ch09_gpt::model::Gpt;
use llm_workbook::ch09_gpt::sample::Decoding;
use llm_workbook::ch09_gpt::train::{TrainConfig, Trainer};
use llm_workbook::ch11_precision::quant::Storage;
use llm_workbook::ch11_precision::quant_step::SamplingModel;
use llm_workbook::ch11_precision::runs::F16_LOSS_SCALE;
use llm_workbook::ch12_modern::decoder::{Decoder, DecoderConfig, MlpKind, NormKind, PositionKind};
use llm_workbook::ch12_modern::glu::{Gate, gated_hidden_width};
use llm_workbook::ch12_modern::quant_decoder::SamplingDecoder;
use llm_workbook::ch12_modern::rope::Pairing;
use llm_workbook::error::{Result, invalid};
use llm_workbook::matmul::inputs::{Precision, ProductInputs};
use llm_workbook::report::{TERMINAL_WIDTH, wrap};
use llm_workbook::rng::Rng;
use llm_workbook::workshop::budget;
use llm_workbook::workshop::folder::{self, Resolved};
use llm_workbook::workshop::quantize;
use llm_workbook::workshop::run::{self, DEFAULT_CORPUS, OpenRun, RunModel};
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
    /// Store a checkpoint's weight matrices in bf16, int8 or 4-bit blocks, as a new checkpoint
    /// folder for `gpt sample` (chapter 11). A Llama folder's output is this crate's own
    /// layout: `transformers` no longer loads it.
    Quantize(QuantizeArgs),
    /// Fine-tune a checkpoint on a JSON Lines file of prompts and answers, in full or with LoRA
    /// (chapter 13), as a new checkpoint folder for `gpt sample`.
    Finetune(super::finetune::FinetuneArgs),
}

/// How `gpt quantize` stores the block matrices.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantizeTo {
    /// Each weight rounded to the nearest bf16.
    Bf16,
    /// Blocks of 32 one-byte codes −127 … 127 and an f32 scale.
    Int8,
    /// Blocks of 32 four-bit codes −7 … 7 and an f32 scale.
    Q4,
}

/// `gpt quantize`.
#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// The checkpoint folder to read (f32, as `gpt train` writes it, GPT-2 or Llama). GPT-2's
    /// block matrices are stored, or a Llama's projections (q, k, v, o, gate, up, down);
    /// embeddings, norms and the unembedding stay f32. `gpt sample` runs either as stored:
    /// each step reads the stored matrices, which are never widened to f32.
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// The storage of the block matrices.
    #[arg(long, value_enum)]
    pub to: QuantizeTo,
    /// The new checkpoint folder (it must not hold a checkpoint yet).
    #[arg(long)]
    pub out: PathBuf,
    /// The memory this run may use, in bytes (default: the variable
    /// LLM_WORKBOOK_MEMORY_BUDGET, else the available memory); a larger model is refused.
    #[arg(long)]
    pub memory_budget: Option<u64>,
}

/// The format of the training step's product inputs (chapter 11's mixed precision).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrecisionKind {
    /// f32 products: chapter 9's step, bit for bit.
    F32,
    /// Every product's inputs rounded to bf16 (f32's range, 7 fraction bits).
    Bf16,
    /// Every product's inputs rounded to f16 (10 fraction bits, largest 65504), with a loss scale.
    F16,
}

impl From<PrecisionKind> for ProductInputs {
    fn from(kind: PrecisionKind) -> ProductInputs {
        match kind {
            PrecisionKind::F32 => ProductInputs::F32,
            PrecisionKind::Bf16 => ProductInputs::Bf16,
            PrecisionKind::F16 => ProductInputs::F16,
        }
    }
}

/// Which model `gpt train` builds.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Chapter 9's GPT-2: learned positions, LayerNorm, the 4× GELU MLP (GPT-2's files).
    Gpt2,
    /// Chapter 12's decoder in Llama's choices: rotary positions (halves pairing), RMSNorm,
    /// SwiGLU, grouped-query attention, no biases (Hugging Face's Llama files).
    Llama,
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
    /// The model: chapter 9's GPT-2, or chapter 12's decoder saved in Hugging Face's Llama
    /// layout.
    #[arg(long, value_enum, default_value_t = Arch::Gpt2)]
    pub arch: Arch,
    /// With --arch llama: the key/value heads, dividing --heads (default: --heads).
    #[arg(long)]
    pub kv_heads: Option<usize>,
    /// With --arch llama: the rotation's base (rope_theta; default 10000).
    #[arg(long, allow_negative_numbers = true)]
    pub rope_base: Option<f64>,
    /// With --arch llama: an unembedding of its own (lm_head.weight), not W_E's transpose.
    #[arg(long)]
    pub untied: bool,
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
    #[arg(long, allow_negative_numbers = true, default_value_t = 3e-3)]
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
    /// Measure the final validation loss over every held-out token, not on a seeded sample of
    /// at most 256 windows (slow on a large text; a progress bar shows it).
    #[arg(long)]
    pub exact_validation: bool,
    /// The format every product's inputs are rounded to in the training step (chapter 11's
    /// mixed precision: the weights, sums and AdamW stay f32).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = PrecisionKind::F32)]
    pub precision: PrecisionKind,
    /// With --precision f16: the loss scale S the run starts with, a power of two from 1 to
    /// 2^24 (default 2^10). A step whose scaled gradient overflows f16 is skipped and S halved.
    #[arg(long, allow_negative_numbers = true)]
    pub loss_scale: Option<f64>,
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
    /// The run's text, when it is no longer where train.json says (it must be the same bytes:
    /// its fingerprint is checked).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// The memory this run may use, in bytes (default: the variable
    /// LLM_WORKBOOK_MEMORY_BUDGET, else the available memory); a larger model is refused.
    #[arg(long)]
    pub memory_budget: Option<u64>,
    /// Save a checkpoint every this many steps (0: only at the end), as gpt train does.
    #[arg(long, default_value_t = 500)]
    pub save_every: usize,
    /// Measure the final validation loss over every held-out token, not on a seeded sample of
    /// at most 256 windows.
    #[arg(long)]
    pub exact_validation: bool,
}

/// `gpt sample`.
#[derive(Args, Debug)]
pub struct SampleArgs {
    /// A checkpoint folder: ours, or one with GPT-2's config.json, model.safetensors, vocab.json
    /// and merges.txt.
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// The text to continue (default: a newline, or the vocabulary's first token when the text
    /// had no newline).
    #[arg(long)]
    pub prompt: Option<String>,
    /// How many tokens to add.
    #[arg(long, default_value_t = 200)]
    pub tokens: usize,
    /// Sampling temperature T > 0 (ignored with --greedy).
    #[arg(long, allow_negative_numbers = true, default_value_t = 0.8)]
    pub temperature: f64,
    /// Keep only the k most likely tokens (k ≥ 1; checked, then unused, with --greedy).
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Keep the most likely tokens up to total probability p ∈ (0, 1] (checked, then unused, with
    /// --greedy).
    #[arg(long, allow_negative_numbers = true)]
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
    /// Print on stderr the tokens per second, the bytes of weights each token reads, the
    /// weights' bytes as held and the process's peak resident memory.
    #[arg(long)]
    pub stats: bool,
    /// Print the new text only up to the first TEXT (`\n` a newline): the end marker
    /// `gpt finetune` appends to every answer.
    #[arg(long, value_name = "TEXT")]
    pub stop: Option<String>,
    /// Write to this JSON file the prompt's ids, the logits of every prompt position (one full
    /// forward pass) and the new tokens' ids, for a comparison with another implementation
    /// (Llama folders; see benches/ch12_llama_transformers.py).
    #[arg(long, value_name = "FILE")]
    pub logits_out: Option<PathBuf>,
}

/// Runs a `gpt` command; the error is one line for the terminal.
pub fn run(command: GptCommand) -> Result<()> {
    match command {
        GptCommand::Train(a) => train(a),
        GptCommand::Resume(a) => resume(a),
        GptCommand::Sample(a) => sample(a),
        GptCommand::Quantize(a) => quantize(a),
        GptCommand::Finetune(a) => super::finetune::run(a),
    }
}

// ───────────────────────────── train and resume ─────────────────────────────

/// The precision `--precision` and `--loss-scale` ask for: S only with f16 (default
/// [`F16_LOSS_SCALE`]), a power of two from 1 to 2^24.
fn precision_of(kind: PrecisionKind, loss_scale: Option<f64>) -> Result<Precision> {
    let inputs = ProductInputs::from(kind);
    if inputs != ProductInputs::F16 {
        if loss_scale.is_some() {
            let why = format!("is for --precision f16 only; {} has f32's range", inputs.name());
            return Err(invalid("gpt train", "--loss-scale", why));
        }
        return Precision::new(inputs, 1.0);
    }
    let scale = loss_scale.unwrap_or(F16_LOSS_SCALE);
    Precision::new(inputs, scale).map_err(|_| {
        invalid(
            "gpt train",
            "--loss-scale",
            format!("must be a power of two from 1 to 2^24, got {scale}"),
        )
    })
}

fn train(a: TrainArgs) -> Result<()> {
    if a.steps == 0 || a.batch == 0 {
        let arg = if a.steps == 0 { "--steps" } else { "--batch" };
        return Err(invalid("gpt train", arg, "must be at least 1, got 0"));
    }
    let precision = precision_of(a.precision, a.loss_scale)?;
    if a.arch == Arch::Llama {
        // The decoder's flags checked before the text is read (the vocabulary comes later).
        llama_config(&a, 1)?;
        if precision != Precision::F32 {
            let why = "--arch llama trains with f32 products only";
            return Err(invalid("gpt train", "--precision", why));
        }
    } else {
        let llama_only =
            [("--kv-heads", a.kv_heads.is_some()), ("--rope-base", a.rope_base.is_some())];
        for (flag, given) in llama_only.into_iter().chain([("--untied", a.untied)]) {
            if given {
                return Err(invalid("gpt train", flag, "is for --arch llama only"));
            }
        }
    }
    // One writer a folder, from before the first look at it until the process ends.
    out_folder("gpt train", &a.out)?;
    let _lock = folder::Lock::take(&a.out, "gpt train")?;
    if !a.force && folder::holds_checkpoint(&a.out) {
        return Err(invalid(
            "gpt train",
            "--out",
            format!("{} already holds a checkpoint (--force replaces it)", a.out.display()),
        ));
    }
    let foreign = folder::foreign_entries(&a.out);
    if !a.force && !foreign.is_empty() {
        let reason =
            format!("files this program did not write ({}); --force keeps them", listed(&foreign));
        return Err(llm_workbook::Error::Parse {
            file: a.out.display().to_string(),
            line: None,
            reason,
        });
    }
    let byte_values = llm_workbook::ch08_tokens::bpe::BYTE_VOCAB;
    if a.tokenizer == TokenizerKind::Bpe && a.bpe_vocab < byte_values {
        let why = format!("{} is fewer than the {byte_values} byte values", a.bpe_vocab);
        return Err(invalid("gpt train", "--bpe-vocab", format!("{why} a byte-level BPE holds")));
    }
    // Everything is built and checked in memory first; nothing is written before the first
    // save, so bad settings, short data or a diverging first step leave the folder as it was.
    let budget = budget::budget(a.memory_budget)?;
    let data = a.data.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_CORPUS));
    let kind = a.tokenizer.into();
    let text = run::read_text_within(&data, kind, budget)?;
    say!("{}: {} bytes", data.display(), text.len());
    if a.tokenizer == TokenizerKind::Bpe {
        // The vocabulary asked for is the model's at most: the model must fit before the
        // (slow) BPE training starts.
        let most = Config {
            positions: Positions::Learned,
            ..Config::new(a.bpe_vocab, a.context, a.layers, a.heads, a.width)
        };
        budget::check(&most, a.batch, a.context, budget, "--bpe-vocab")?;
    }
    let (tok, tokenizer_files) = run::build_tokenizer(kind, &text, a.bpe_vocab)?;
    let config = Config {
        positions: Positions::Learned,
        ..Config::new(tok.vocab_size(), a.context, a.layers, a.heads, a.width)
    };
    config.validate()?;
    let bpe = a.tokenizer == TokenizerKind::Bpe;
    budget::check_with_text(&config, a.batch, a.context, text.len(), bpe, budget)?;
    let tc = run::train_config(a.batch, a.lr, a.steps)?;
    let split = run::split_text(tok.as_ref(), &text, a.context)?;
    let tok = tok.as_ref();
    let eval = evaluation(a.exact_validation);
    let (context, steps, every) = (a.context, a.steps, a.save_every);
    if a.arch == Arch::Llama {
        let model = Decoder::<f32>::new(llama_config(&a, config.vocab_size)?, a.seed)?;
        let c = model.config;
        say!(
            "model: llama, {} layers, {} heads ({} key/value), width {}, MLP {}, context {}, \
             vocabulary {}: {} parameters",
            c.layers,
            c.n_heads,
            c.n_kv_heads,
            c.width,
            c.hidden,
            c.context,
            c.vocab_size,
            model.parameter_count()
        );
        let trainer = Trainer::new(model, &tc, a.seed.wrapping_add(1))?;
        let files =
            run::run_files(&tokenizer_files, &data, &text, &tc, context, steps, a.seed, &trainer);
        return continue_run(
            trainer, &tc, &split, tok, context, steps, every, &a.out, &files, eval,
        );
    }
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
    let mut trainer = Trainer::new(model, &tc, a.seed.wrapping_add(1))?;
    trainer.set_precision(precision).map_err(|_| {
        let why = "rounded products need the fused step, which does not cover this model";
        invalid("gpt train", "--precision", why)
    })?;
    let files =
        run::run_files(&tokenizer_files, &data, &text, &tc, context, steps, a.seed, &trainer);
    continue_run(trainer, &tc, &split, tok, context, steps, every, &a.out, &files, eval)
}

/// The decoder `gpt train --arch llama` builds: rotary positions in the halves pairing (base
/// `--rope-base`), RMSNorm, SwiGLU of hidden width F = 8C/3 rounded up to a multiple of
/// [`GATED_HIDDEN_MULTIPLE`], `--kv-heads` key/value heads, no QK-norm, no biases, tied unless
/// `--untied`; ε = [`LLAMA_RMS_EPS`].
fn llama_config(a: &TrainArgs, vocab_size: usize) -> Result<DecoderConfig> {
    let base = a.rope_base.unwrap_or(LLAMA_ROPE_BASE);
    let kv_heads = a.kv_heads.unwrap_or(a.heads);
    if kv_heads == 0 || !a.heads.is_multiple_of(kv_heads) {
        let why = format!("{kv_heads} must divide --heads {}", a.heads);
        return Err(invalid("gpt train", "--kv-heads", why));
    }
    if !(base.is_finite() && base > 1.0) {
        return Err(invalid("gpt train", "--rope-base", format!("must be > 1, got {base}")));
    }
    if a.heads == 0 || !a.width.is_multiple_of(a.heads) || !(a.width / a.heads).is_multiple_of(2) {
        let why = format!("{} over --heads {} must be an even head width", a.width, a.heads);
        return Err(invalid("gpt train", "--width", why));
    }
    let c = DecoderConfig {
        vocab_size,
        context: a.context,
        layers: a.layers,
        n_heads: a.heads,
        n_kv_heads: kv_heads,
        width: a.width,
        hidden: gated_hidden_width(a.width, GATED_HIDDEN_MULTIPLE)?,
        positions: PositionKind::Rotary { base, pairing: Pairing::Halves },
        norm: NormKind::Rms,
        mlp: MlpKind::Gated(Gate::Swish),
        qk_norm: false,
        biases: false,
        tied: !a.untied,
        eps: LLAMA_RMS_EPS,
    };
    c.validate()?;
    Ok(c)
}

/// The gated MLP's hidden width of `gpt train --arch llama` is a multiple of this.
pub const GATED_HIDDEN_MULTIPLE: usize = 8;
/// RMSNorm's ε of `gpt train --arch llama` (Llama 2's and 3's `rms_norm_eps`).
pub const LLAMA_RMS_EPS: f64 = 1e-5;
/// The rotation's base of `gpt train --arch llama` unless `--rope-base` is given (the paper's).
pub const LLAMA_ROPE_BASE: f64 = 10_000.0;

/// The first few of `names`, for a one-line message.
fn listed(names: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut text = names.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > SHOWN {
        text.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    text
}

/// The validation `--exact-validation` asks for.
fn evaluation(exact: bool) -> run::Evaluation {
    if exact { run::Evaluation::Exact } else { run::Evaluation::Sample(run::VALIDATION_WINDOWS) }
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
    if resolved.recovered {
        eprintln!(
            "note: {} has no {} pointer; reading its newest complete generation {}",
            dir.display(),
            folder::POINTER_FILE,
            resolved.path.display()
        );
    }
}

/// Refuses a `--checkpoint` that is not a folder, naming the flag and what was found there (the
/// loaders would answer with the operating system's words alone, and `gpt resume`'s lock would
/// create the folder).
fn checkpoint_folder(op: &'static str, dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let found = if dir.exists() { "is a file; give a checkpoint folder" } else { "does not exist" };
    Err(invalid(op, "--checkpoint", format!("{} {found}", dir.display())))
}

/// Refuses an `--out` that names a file (the folder cannot be made there), or a folder inside
/// another checkpoint folder's generations (that folder's next save would remove it).
fn out_folder(op: &'static str, dir: &Path) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        return Err(invalid(
            op,
            "--out",
            format!("{} is a file, not a folder; give a folder to write into", dir.display()),
        ));
    }
    if folder::owning_checkpoint(dir).is_some() {
        let why = format!("{}: a checkpoint's next save removes it", dir.display());
        return Err(invalid(op, "--out", why));
    }
    Ok(())
}

fn resume(a: ResumeArgs) -> Result<()> {
    let budget = budget::budget(a.memory_budget)?;
    checkpoint_folder("gpt resume", &a.checkpoint)?;
    let _lock = folder::Lock::take(&a.checkpoint, "gpt resume")?;
    refuse_stored(&a.checkpoint, budget)?;
    if is_llama_folder(&a.checkpoint, budget) {
        resume_open(&a, run::open_run_of::<Decoder<f32>>(&a.checkpoint, budget, a.data.as_deref())?)
    } else {
        resume_open(&a, run::open_run_with(&a.checkpoint, budget, a.data.as_deref())?)
    }
}

/// Whether `dir` resolves to a Llama folder; any other answer (not a checkpoint, no config)
/// leaves the error to the GPT-2 path, which names it.
fn is_llama_folder(dir: &Path, budget: u64) -> bool {
    folder::resolve(dir).is_ok_and(|r| run::holds_llama(&r.path, budget).unwrap_or(false))
}

/// `gpt resume` once the run is read back.
fn resume_open<M: RunModel>(a: &ResumeArgs, open: OpenRun<M>) -> Result<()> {
    note_flat(&a.checkpoint, &open.resolved);
    if let Some(note) = &open.kernel_note {
        eprintln!("{note}");
    }
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
    let eval = evaluation(a.exact_validation);
    let (steps, every) = (a.steps, a.save_every);
    continue_run(trainer, &tc, &split, tok, context, steps, every, &a.checkpoint, files, eval)
}

/// Trains to `steps` with a progress bar, then prints the losses, the plot's files and a sample.
#[allow(clippy::too_many_arguments)]
fn continue_run<M: RunModel>(
    mut trainer: Trainer<f32, M>,
    tc: &TrainConfig,
    split: &TokenSplit,
    tok: &dyn Tokenizer,
    context: usize,
    steps: usize,
    save_every: usize,
    out: &Path,
    run_files: &[(String, Vec<u8>)],
    eval: run::Evaluation,
) -> Result<()> {
    say!("training step: the {} path ({})", trainer.path().name(), trainer.model.step_name());
    say!("{}", precision_line(&trainer));
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
        &mut |t, dir| llm_workbook::ch09_gpt::book::save_loss_plot(t, dir).map(|_| ()),
    )?;
    let validation = split.validation();
    let windows = run::covering_windows_count(validation.len(), context);
    let v = if eval == run::Evaluation::Exact && windows > run::VALIDATION_WINDOWS {
        let mut bar =
            Bar::evaluation(windows).map_err(|e| invalid("progress", "template", e.to_string()))?;
        run::validation_loss(&trainer.model, validation, context, eval, &mut bar)?
    } else {
        run::validation_loss(&trainer.model, validation, context, eval, &mut ())?
    };
    let how = if v.windows < v.of {
        format!(
            "on {} of the {} held-out windows of {context} tokens, drawn with seed {}; \
             --exact-validation scores all",
            v.windows,
            v.of,
            run::VALIDATION_SEED
        )
    } else {
        format!("on all {} held-out tokens", v.tokens)
    };
    say_wrapped(&format!(
        "step {}: training loss {:.4}, validation loss {:.4} nats per token ({how})",
        trainer.step, end.running_loss, v.loss
    ));
    if trainer.precision().loss_scale > 1.0 || trainer.skipped_steps() > 0 {
        say!(
            "loss scale now S = {}; {} of the {} steps skipped for an overflowing gradient",
            power_of_two(trainer.precision().loss_scale),
            trainer.skipped_steps(),
            trainer.step
        );
    }
    let plot = ["png", "svg"].map(|ext| format!("{}.{ext}", run::LOSS_PLOT));
    say!("checkpoint and loss plot ({}) in {}", plot.join(", "), end.generation.display());
    let (prompt, g) = run::closing_sample(&trainer.model, validation, context)?;
    let heading =
        format!("sample (T = {}) after {:?}:", run::SAMPLE_TEMPERATURE, tok.decode_lossy(&prompt)?);
    // The terminal's width holds every line: the heading and the sample wrapped at spaces.
    say_wrapped(&heading);
    say_wrapped(&tok.decode_lossy(g.new_tokens())?);
    Ok(())
}

/// The header's line for the training step's precision: the products' input format and, with
/// f16, the current loss scale and the steps skipped so far.
fn precision_line<M: RunModel>(trainer: &Trainer<f32, M>) -> String {
    let p = trainer.precision();
    match p.inputs {
        ProductInputs::F32 => "precision: f32 products".to_string(),
        ProductInputs::Bf16 => {
            "precision: bf16 products (inputs rounded to bf16; weights, sums and AdamW in f32)"
                .to_string()
        }
        ProductInputs::F16 => {
            let mut line = format!(
                "precision: f16 products, loss scale S = {} (an overflow halves S and skips \
                 its step)",
                power_of_two(p.loss_scale)
            );
            if trainer.skipped_steps() > 0 {
                line.push_str(&format!(
                    "\nsteps skipped so far for an overflow: {}",
                    trainer.skipped_steps()
                ));
            }
            line
        }
    }
}

/// A power of two as `2^k`.
fn power_of_two(x: f64) -> String {
    format!("2^{}", x.log2() as i32)
}

/// Prints `text` on standard output wrapped at spaces to the terminal's 100 columns.
fn say_wrapped(text: &str) {
    for line in wrap(text, TERMINAL_WIDTH) {
        say!("{line}");
    }
}

// ───────────────────────────── sample ─────────────────────────────

/// The prompt `gpt sample` continues when none is given, if the vocabulary holds it.
pub const DEFAULT_PROMPT: &str = "\n";

fn sample(a: SampleArgs) -> Result<()> {
    // One rule for --top-k and --top-p: checked with --greedy or without (greedy decoding has no
    // temperature, so --temperature alone is unused there).
    let temperature = if a.greedy { 1.0 } else { a.temperature };
    let sampling = Decoding::Sample { temperature, top_k: a.top_k, top_p: a.top_p };
    sampling.validate()?;
    let decoding = if a.greedy { Decoding::Greedy } else { sampling };
    checkpoint_folder("gpt sample", &a.checkpoint)?;
    let budget = budget::budget(a.memory_budget)?;
    if is_llama_folder(&a.checkpoint, budget) {
        return sample_llama(&a, &decoding, budget);
    }
    if a.logits_out.is_some() {
        return Err(invalid("gpt sample", "--logits-out", "is for Llama folders only"));
    }
    let (tok, model, resolved) = run::load_for_sampling(&a.checkpoint, budget)?;
    note_flat(&a.checkpoint, &resolved);
    let (text, prompt) = prompt_of(&a, tok.as_ref())?;
    let started = std::time::Instant::now();
    let g = model.generate(&prompt, a.tokens, &decoding, &mut Rng::new(a.seed)).map_err(
        |e| match e {
            llm_workbook::Error::NonFinite { .. } => overflowing(&resolved, &model),
            other => other,
        },
    )?;
    let seconds = started.elapsed().as_secs_f64();
    if g.cropped > 0 {
        eprintln!(
            "note: the prompt holds {} tokens, more than the context of {}; its first {} tokens \
             were dropped",
            prompt.len(),
            model.config().context,
            g.cropped
        );
    }
    if a.stats {
        print_stats(&model, g.new_tokens().len(), seconds);
    }
    let mut new = tok.decode_lossy(g.new_tokens())?;
    if let Some(stop) = &a.stop {
        new = llm_workbook::workshop::finetune::cut_at(
            &new,
            &llm_workbook::workshop::finetune::unescape(stop),
        );
    }
    say!("{}{}", text, new);
    Ok(())
}

/// The prompt `gpt sample` continues: `--prompt`, else [`DEFAULT_PROMPT`], else (a vocabulary
/// without a newline) the first token, with a note. Returns (text, ids).
fn prompt_of(a: &SampleArgs, tok: &dyn Tokenizer) -> Result<(String, Vec<u32>)> {
    Ok(match &a.prompt {
        Some(p) => (p.clone(), tok.encode(p).map_err(|e| prompt_error(tok, p, e))?),
        None => match tok.encode(DEFAULT_PROMPT) {
            Ok(ids) => (DEFAULT_PROMPT.to_string(), ids),
            Err(_) => {
                // A text without a newline gives a vocabulary without one: its first token.
                let first = tok.decode_lossy(&[0])?;
                eprintln!(
                    "note: this model's vocabulary has no newline, the default prompt; starting \
                     from its first token {first:?} (give --prompt TEXT to choose)"
                );
                (first, vec![0])
            }
        },
    })
}

/// `gpt sample` on a Llama folder (`gpt train --arch llama`, or its `gpt quantize` output, read
/// as stored): chapter 9's sampler on the decoder's grouped-query cache, the f32 step or the
/// stored one ([`QuantDecoder`](llm_workbook::ch12_modern::quant_decoder::QuantDecoder)).
fn sample_llama(a: &SampleArgs, decoding: &Decoding, budget: u64) -> Result<()> {
    let (tok, model, storage, resolved) = run::load_llama_for_sampling(&a.checkpoint, budget)?;
    note_flat(&a.checkpoint, &resolved);
    let weights = match &model {
        SamplingDecoder::F32(_) => "f32 weights".to_string(),
        SamplingDecoder::Stored(q) => {
            let s = storage.name();
            eprintln!(
                "note: {s} Llama weights, sampled as stored ({} bytes of weights held, {} in f32)",
                q.resident_bytes(),
                q.f32_bytes()
            );
            format!("{s} weights as stored")
        }
    };
    let (text, prompt) = prompt_of(a, tok.as_ref())?;
    let started = std::time::Instant::now();
    let g = model.generate(&prompt, a.tokens, decoding, &mut Rng::new(a.seed))?;
    let seconds = started.elapsed().as_secs_f64();
    if g.cropped > 0 {
        eprintln!(
            "note: the prompt holds {} tokens, more than the context of {}; its first {} tokens \
             were dropped",
            prompt.len(),
            model.config().context,
            g.cropped
        );
    }
    if a.stats {
        let n = g.new_tokens().len();
        let rate = if seconds > 0.0 { n as f64 / seconds } else { f64::INFINITY };
        eprintln!("stats: {n} tokens in {seconds:.3} s, {rate:.1} tokens/s ({weights}, llama)");
        eprintln!("stats: weights held {} bytes", model.resident_bytes());
    }
    if let Some(path) = &a.logits_out {
        write_logits(path, &model, &g.tokens[..g.prompt_len], g.new_tokens())?;
    }
    let mut new = tok.decode_lossy(g.new_tokens())?;
    if let Some(stop) = &a.stop {
        new = llm_workbook::workshop::finetune::cut_at(
            &new,
            &llm_workbook::workshop::finetune::unescape(stop),
        );
    }
    say!("{}{}", text, new);
    Ok(())
}

/// `gpt sample --logits-out`: `{"prompt": ids, "logits": [[V numbers] per prompt position],
/// "new_tokens": ids}`, the logits z = Norm_f(x_L) W_Uᵀ over the (cropped) prompt: one full
/// forward pass of an f32 decoder, one stored step a token of a stored one.
fn write_logits(path: &Path, model: &SamplingDecoder, prompt: &[u32], new: &[u32]) -> Result<()> {
    let z = model.prompt_logits(prompt)?;
    let rows: Vec<Vec<f32>> = z.row_iter().map(|r| r.iter().copied().collect()).collect();
    let json = serde_json::json!({ "prompt": prompt, "logits": rows, "new_tokens": new });
    std::fs::write(path, json.to_string())
        .map_err(|source| llm_workbook::Error::Io { path: path.display().to_string(), source })
}

/// The error for a `--prompt` the tokenizer cannot encode (`e`): its first character outside the
/// vocabulary, named in one short line (the tokenizer's own message names its function).
fn prompt_error(tok: &dyn Tokenizer, prompt: &str, e: llm_workbook::Error) -> llm_workbook::Error {
    let mut buf = [0u8; 4];
    let outside =
        prompt.chars().enumerate().find(|(_, c)| tok.encode(c.encode_utf8(&mut buf)).is_err());
    match outside {
        Some((i, c)) => invalid(
            "gpt sample",
            "--prompt",
            format!(
                "its character {i}, {c:?} (U+{:04X}), is not in the model's vocabulary",
                c as u32
            ),
        ),
        None => e,
    }
}

/// The error for a model whose finite weights compute NaN or ±∞ (a damaged file: a weight or a
/// stored scale of 10³⁰): it names the model's file and the tensor of the largest |w|.
fn overflowing(resolved: &Resolved, model: &SamplingModel) -> llm_workbook::Error {
    let (name, size) = model.largest_weight().unwrap_or((String::new(), 0.0));
    let file = resolved.path.join(llm_workbook::ch09_gpt::checkpoint::MODEL_FILE);
    let reason = format!("|w| = {size:.1e} in {name} gives NaN or ±∞");
    llm_workbook::Error::Parse { file: file.display().to_string(), line: None, reason }
}

/// `gpt sample --stats`: on stderr, one line each, the tokens per second of the whole
/// generation (prompt included), the bytes of weights one cached step reads, the weights'
/// bytes as the model holds them and, where the system reports it, the peak resident memory.
fn print_stats(model: &SamplingModel, tokens: usize, seconds: f64) {
    const MB: f64 = 1e6;
    let storage = model.storage().name();
    let rate = if seconds > 0.0 { tokens as f64 / seconds } else { f64::INFINITY };
    eprintln!("stats: {tokens} tokens in {seconds:.3} s, {rate:.1} tokens/s ({storage} weights)");
    eprintln!(
        "stats: weight bytes read per token {} ({:.2} MB); weights held {} bytes",
        model.weight_bytes_per_token(),
        model.weight_bytes_per_token() as f64 / MB,
        model.resident_bytes()
    );
    if let Some(peak) = peak_resident_bytes() {
        eprintln!("stats: peak resident memory {peak} bytes ({:.1} MB)", peak as f64 / MB);
    }
}

/// The process's peak resident memory in bytes (`VmHWM` of `/proc/self/status`, Linux), where
/// the system reports it.
fn peak_resident_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = text.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

// ───────────────────────────── quantize ─────────────────────────────

/// Refuses to resume a folder whose `config.json` names a storage (a `gpt quantize` output):
/// its weights are not the trained ones and it has no training state.
fn refuse_stored(dir: &Path, budget: u64) -> Result<()> {
    let here = folder::resolve(dir)?.path;
    match quantize::storage_of(&here, budget)? {
        None | Some(Storage::F32) => Ok(()),
        Some(storage) => Err(invalid(
            "gpt resume",
            "--checkpoint",
            format!(
                "{}: a gpt quantize output ({}), for sampling only",
                dir.display(),
                storage.name()
            ),
        )),
    }
}

fn quantize(a: QuantizeArgs) -> Result<()> {
    let storage = match a.to {
        QuantizeTo::Bf16 => Storage::Bf16,
        QuantizeTo::Int8 => Storage::Int8,
        QuantizeTo::Q4 => Storage::Q4,
    };
    let budget = budget::budget(a.memory_budget)?;
    checkpoint_folder("gpt quantize", &a.checkpoint)?;
    // Both folders checked before the model is read.
    out_folder("gpt quantize", &a.out)?;
    let q = quantize::quantize(&a.checkpoint, storage, &a.out, budget)?;
    say!(
        "{} stored as {} in {} ({} bytes, the f32 weights {} bytes)",
        a.checkpoint.display(),
        storage.name(),
        q.generation.display(),
        q.written,
        q.f32_bytes
    );
    Ok(())
}
