//! Chapter 9: a small GPT, written out op by op with its backward pass, that learns on the CPU.
//!
//! GPT-2's architecture: token plus position embeddings, pre-LayerNorm blocks of causal
//! multi-head self-attention and a 4× GELU MLP with residual connections, a final LayerNorm and an
//! unembedding tied to the token embedding. The prose is
//! [`chapters/ch09_gpt.md`](../../chapters/ch09_gpt.md); the tests are `tests/ch09_gpt.rs`.
//!
//! The parts:
//! - [`config`]: the hyper-parameters, their validation, and parameter accounting (GPT-2 124M
//!   exactly, GPT-3 the way document 001 counts it);
//! - [`walkthrough`]: document 003's "I love AI" example recomputed;
//! - [`data`]: the sorting task and token-stream windows;
//! - [`schedule`]: warm-up plus cosine learning rate, gradient-norm clipping;
//! - [`json`] and [`safetensors`]: the checkpoint file format, by hand.

pub mod checkpoint;
pub mod cli;
pub mod config;
pub mod data;
pub mod fused;
pub mod json;
pub mod model;
pub mod safetensors;
pub mod sample;
pub mod schedule;
pub mod train;
pub mod walkthrough;

use crate::errata::Erratum;
use crate::error::Result;
use crate::plot::{Figure, LineChart, Series};
use crate::report::{Chapter, Walk, Worked};
use crate::sources::{D0, D1, D3};
use config::{Config, MatrixAccounting};
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};

/// One billion, for counts printed in billions.
const BILLION: f64 = 1e9;

/// GPT-1's parameters: our count for its configuration less the final LayerNorm, which GPT-1
/// (a post-LN model) does not have.
pub fn gpt1_parameters() -> u64 {
    let c = Config::gpt1();
    c.parameter_count() - 2 * c.width as u64
}

// ───────────────────────────── errata, worked numbers ─────────────────────────────

/// This chapter's rows of the errata register.
pub const ERRATA: &[Erratum] = &[
    Erratum {
        document: D3,
        section: "GPT, Going Through an Example: Masked Self-Attention",
        printed: "h₁(\"love\") = 0.1 × h₀(\"I\") + 0.9 × h₀(\"love\") = [0.155, 0.458]",
        correct: "[0.545, 0.442]",
        why: "With the document's own h₀(\"I\") = [0.14, 0.91] and h₀(\"love\") = [0.59, 0.39]: 0.1·0.14 + 0.9·0.59 = 0.545 and 0.1·0.91 + 0.9·0.39 = 0.442. The printed pair does not follow from any weighting of the h₀ rows shown.",
        test: "tests/ch09_gpt.rs::i_love_ai_h1_love_is_0_545_0_442",
    },
    Erratum {
        document: D3,
        section: "GPT, Going Through an Example: Feed Forward and Layer Norm",
        printed: "h₂(\"love\") = h₁(\"love\") × W = [0.1753, 0.309]",
        correct: "[0.2142, 0.2755] from the printed h₁; [0.2858, 0.3845] from the correct h₁ = [0.545, 0.442]",
        why: "W = [0.2, 0.3, 0.4, 0.5] read as rows (0.2, 0.3), (0.4, 0.5): [0.155, 0.458] × W = [0.155·0.2 + 0.458·0.4, 0.155·0.3 + 0.458·0.5] = [0.2142, 0.2755]. Reading W by columns gives [0.1684, 0.291]; neither reading, nor the correct h₁, gives the printed pair.",
        test: "tests/ch09_gpt.rs::i_love_ai_h2_love_follows_from_h1_times_w",
    },
    Erratum {
        document: D3,
        section: "GPT Time Complexity",
        printed: "GPT3 has 175 layers and d is often set to a value like 1024",
        correct: "GPT-3 175B has 96 layers and d = 12,288",
        why: "175 is GPT-3's parameter count in billions, not its depth; with 96 layers of 96 heads of width 128 (d = 96·128 = 12,288), the count comes to 175 billion (document 001), while 175 layers of width 1,024 would hold about 2.2 billion.",
        test: "tests/ch09_gpt.rs::gpt3_has_96_layers_of_width_12288_not_175_of_1024",
    },
    Erratum {
        document: D3,
        section: "What's so different about GPT models? (quoting Troy Wang)",
        printed: "The original version of GPT comes with 150 million parameters",
        correct: "about 117 million (116,534,784)",
        why: "GPT-1's published configuration (12 layers, d = 768, 12 heads, 4d MLP, vocabulary 40,478, context 512, post-LayerNorm so no final LayerNorm) holds 31,087,104 + 393,216 + 12·7,087,872 = 116,534,784 parameters.",
        test: "tests/ch09_gpt.rs::gpt1_holds_about_117_million_parameters_not_150",
    },
    Erratum {
        document: D0,
        section: "Large Language Models: the sizes of W_k and W_q",
        printed: "In GPT-3, n-embed = 12,388",
        correct: "n-embed = 12,288",
        why: "GPT-3's width is 96 heads × 128 = 12,288, which document 001 gives and its embedding count confirms: 617,558,016 / 50,257 = 12,288.",
        test: "tests/ch09_gpt.rs::gpt3_width_is_12288_from_heads_and_embedding_count",
    },
    Erratum {
        document: D0,
        section: "Embedding (d-embed · d-vocab)",
        printed: "where n = 13,288",
        correct: "n = 12,288",
        why: "The embedding vectors of GPT-3 have d-embed = 12,288 entries (96 · 128; 617,558,016 / 50,257).",
        test: "tests/ch09_gpt.rs::gpt3_width_is_12288_from_heads_and_embedding_count",
    },
];

fn pair(m: &DMatrix<f64>, decimals: usize) -> String {
    format!("[{:.*}, {:.*}]", decimals, m[(0, 0)], decimals, m[(0, 1)])
}

/// The chapter's worked numbers, recomputed.
pub fn worked() -> Result<Vec<Worked>> {
    let gpt3 = MatrixAccounting::of(&Config::gpt3_175b())?;
    let mut rows = vec![
        Worked::number(
            "gpt3_embedding_holds_617558016_weights",
            D1,
            "GPT-3 embedding 50,257 × 12,288",
            "617558016",
            gpt3.embedding as f64,
        ),
        Worked::number(
            "gpt3_embedding_holds_617558016_weights",
            D1,
            "GPT-3 unembedding 50,257 × 12,288",
            "617558016",
            gpt3.unembedding as f64,
        ),
        Worked::number(
            "gpt3_embedding_holds_617558016_weights",
            D1,
            "embedding + unembedding, billions (\"a little over a billion\")",
            "1",
            (gpt3.embedding + gpt3.unembedding) as f64 / BILLION,
        ),
        Worked::number(
            "gpt3_one_head_holds_6_3_million_weights",
            D1,
            "one attention head (Q, K, value-down, value-up), millions",
            "6.3",
            gpt3.per_head as f64 / 1e6,
        ),
        Worked::number(
            "gpt3_one_attention_layer_holds_600_million_weights",
            D1,
            "one multi-head attention layer, billions (printed as 600 million)",
            "0.6",
            gpt3.per_attention_layer as f64 / BILLION,
        ),
        Worked::number(
            "gpt3_attention_holds_58_billion_weights",
            D1,
            "all 96 attention layers, billions",
            "58",
            gpt3.attention as f64 / BILLION,
        ),
        Worked::number(
            "gpt3_attention_holds_58_billion_weights",
            D1,
            "attention's share of all weights (printed as 1/3)",
            "0.33",
            gpt3.attention as f64 / gpt3.total as f64,
        ),
        Worked::number(
            "gpt3_one_mlp_holds_1_2_billion_weights",
            D1,
            "one MLP (up- and down-projection), billions",
            "1.2",
            gpt3.per_mlp as f64 / BILLION,
        ),
        Worked::number(
            "gpt3_one_mlp_holds_1_2_billion_weights",
            D1,
            "the MLPs' share of all weights (printed as 2/3)",
            "0.67",
            gpt3.mlp as f64 / gpt3.total as f64,
        ),
        Worked::number(
            "gpt3_holds_175_billion_weights_in_27938_matrices",
            D1,
            "all weights, billions",
            "175",
            gpt3.total as f64 / BILLION,
        ),
        Worked::number(
            "gpt3_holds_175_billion_weights_in_27938_matrices",
            D1,
            "weight matrices",
            "27938",
            gpt3.matrices as f64,
        ),
        Worked::number(
            "gpt3_holds_175_billion_weights_in_27938_matrices",
            D0,
            "all weights, billions (~175B)",
            "175",
            gpt3.total as f64 / BILLION,
        ),
        Worked::number(
            "gpt3_holds_175_billion_weights_in_27938_matrices",
            D0,
            "weight matrices",
            "27938",
            gpt3.matrices as f64,
        ),
        Worked::erratum(
            "gpt3_width_is_12288_from_heads_and_embedding_count",
            D0,
            "GPT-3 n-embed (96 heads × 128; 617,558,016 / 50,257)",
            "12388",
            (Config::gpt3_175b().heads * Config::gpt3_175b().head_width()).to_string(),
        ),
        Worked::erratum(
            "gpt3_width_is_12288_from_heads_and_embedding_count",
            D0,
            "GPT-3 embedding length n",
            "13288",
            (gpt3.embedding / Config::gpt3_175b().vocab_size as u64).to_string(),
        ),
        Worked::number(
            "gpt3_holds_175_billion_weights_in_27938_matrices",
            D3,
            "GPT-3 weights, billions",
            "175",
            gpt3.total as f64 / BILLION,
        ),
        Worked::erratum(
            "gpt3_has_96_layers_of_width_12288_not_175_of_1024",
            D3,
            "GPT-3 layers l and width d",
            "175 layers, d = 1024",
            format!("{} layers, d = {}", Config::gpt3_175b().layers, Config::gpt3_175b().width),
        ),
        Worked::number(
            "gpt2_xl_holds_1_56_billion_parameters",
            D3,
            "GPT-2 (XL) parameters, billions",
            "1.5",
            Config::gpt2_xl().parameter_count() as f64 / BILLION,
        ),
        Worked::erratum(
            "gpt1_holds_about_117_million_parameters_not_150",
            D3,
            "GPT-1 parameters, millions",
            "150",
            format!("{:.1}", gpt1_parameters() as f64 / 1e6),
        ),
    ];
    let h0 = walkthrough::h0();
    for (r, token) in walkthrough::TOKENS.iter().enumerate() {
        for c in 0..2 {
            rows.push(Worked::number(
                "i_love_ai_h0_is_u_plus_wp",
                D3,
                format!("h₀(\"{token}\")[{c}] = U + W_p"),
                &format!("{:.2}", walkthrough::PRINTED_H0[r][c]),
                h0[(r, c)],
            ));
        }
    }
    let h1 = walkthrough::h1_love()?;
    rows.push(Worked::erratum(
        "i_love_ai_h1_love_is_0_545_0_442",
        D3,
        "h₁(\"love\") = 0.1·h₀(\"I\") + 0.9·h₀(\"love\")",
        "[0.155, 0.458]",
        pair(&h1, 3),
    ));
    let h2_printed = walkthrough::h2_of(&walkthrough::printed_h1_love())?;
    rows.push(Worked::erratum(
        "i_love_ai_h2_love_follows_from_h1_times_w",
        D3,
        "h₂(\"love\") = h₁ × W, from the printed h₁",
        "[0.1753, 0.309]",
        pair(&h2_printed, 4),
    ));
    Ok(rows)
}

// ───────────────────────────── walk-through and plots ─────────────────────────────

/// The chapter in the order the documents derive it.
pub fn walk(out: &mut Walk) -> Result<()> {
    out.step("1. GPT-3, counted the way document 001 counts it")?;
    let c = Config::gpt3_175b();
    let a = MatrixAccounting::of(&c)?;
    out.say(&format!(
        "V = {}, d = {}, {} layers of {} heads of width {}",
        c.vocab_size,
        c.width,
        c.layers,
        c.heads,
        c.head_width()
    ))?;
    for (name, v) in [
        ("embedding V·d", a.embedding),
        ("unembedding V·d", a.unembedding),
        ("one head 4·d·d_k", a.per_head),
        ("one attention layer", a.per_attention_layer),
        ("all attention", a.attention),
        ("one MLP 2·4d·d", a.per_mlp),
        ("all MLPs", a.mlp),
        ("total", a.total),
        ("matrices", a.matrices),
    ] {
        out.say(&format!("{name:<22} {v:>18}"))?;
    }
    out.step("2. GPT-2 124M, every tensor counted")?;
    let g = Config::gpt2_124m();
    out.say(&format!("per block 12d² + 13d = {}", g.block_parameters()))?;
    out.say(&format!("total (tied unembedding) = {}", g.parameter_count()))?;
    out.step("3. \"I love AI\": h₀ = U + W_p")?;
    out.matrix("U", &walkthrough::embeddings())?;
    out.matrix("W_p", &walkthrough::position_table())?;
    out.matrix("h₀", &walkthrough::h0())?;
    out.step("4. The masked mix for \"love\": weights (0.1, 0.9, 0)")?;
    let h1 = walkthrough::h1_love()?;
    out.matrix("h₁(\"love\")", &h1)?;
    out.step("5. The feed-forward step h₂ = h₁ × W")?;
    out.matrix("W", &walkthrough::feed_forward_weight())?;
    out.matrix("h₂(\"love\") from our h₁", &walkthrough::h2_of(&h1)?)?;
    out.matrix(
        "h₂(\"love\") from the printed h₁",
        &walkthrough::h2_of(&walkthrough::printed_h1_love())?,
    )?;
    out.step("6. Two models trained on the CPU (sorting digits; the default corpus)")?;
    print_results(results()?);
    Ok(())
}

// ───────────────────────────── the two trained models ─────────────────────────────

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
    mut on_step: impl FnMut(&train::StepRecord),
) -> Result<CorpusRun> {
    let context = setup.config.context;
    let mut trainer = train::Trainer::new(
        model::Gpt::<f32>::new(setup.config, setup.model_seed)?,
        &setup.train,
        setup.data_seed,
    )?;
    let data = train::Data::Stream { tokens: &tokens.train, seq_len: context };
    let val_batches = data::covering_windows(&tokens.validation, context, 32);
    let (mut validation, mut tokens_seen, mut train_seconds) = (Vec::new(), 0usize, 0.0);
    while trainer.step < setup.steps {
        let t = std::time::Instant::now();
        let r = trainer.step(&data, &setup.train)?;
        train_seconds += t.elapsed().as_secs_f64();
        tokens_seen += r.tokens;
        on_step(&r);
        if trainer.step % setup.eval_every.max(1) == 0 || trainer.step == setup.steps {
            validation.push((trainer.step, train::mean_loss(&trainer.model, &val_batches)?));
        }
    }
    Ok(CorpusRun {
        model: trainer.model,
        history: trainer.history,
        validation,
        tokens_seen,
        train_seconds,
    })
}

/// What the main job trains and reports.
#[derive(Clone, Debug)]
pub struct Results {
    /// The sorting run's per-step records.
    pub sort_history: Vec<train::StepRecord>,
    /// Exact-match accuracy on the 1,000 held-out strings.
    pub sort_accuracy: f64,
    /// A few held-out strings and what the model wrote after them.
    pub sort_examples: Vec<(Vec<data::Token>, Vec<data::Token>)>,
    /// The corpus run.
    pub corpus: CorpusRun,
    /// Validation characters per validation token (how much text one BPE token stands for).
    pub chars_per_token: f64,
    /// The best smoothed n-gram baseline on the same tokens and split: (label, nats per token).
    pub baseline: (String, f64),
    /// A sample continuation of a validation prompt: (prompt, continuation).
    pub corpus_sample: (String, String),
    /// Wall-clock seconds of the sorting run (all of it) and of the corpus run's training steps.
    pub seconds: (f64, f64),
}

fn compute_results() -> Result<Results> {
    use crate::ch08_tokens::Tokenizer;
    let bar = |n: usize, what: &str| {
        let b = indicatif::ProgressBar::new(n as u64);
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("  {prefix} {bar:30} {pos}/{len} {msg}")
        {
            b.set_style(style);
        }
        b.set_prefix(what.to_string());
        b
    };
    // The sorting task.
    let t0 = std::time::Instant::now();
    let (task, config, tc) = sort_setup()?;
    let mut trainer = train::Trainer::new(model::Gpt::<f32>::new(config, 1)?, &tc, 2)?;
    let pb = bar(SORT_STEPS, "sort  ");
    trainer.run(&train::Data::Sort(&task), &tc, SORT_STEPS, |r| {
        pb.set_message(format!("loss {:.4}", r.loss));
        pb.inc(1);
    })?;
    pb.finish_and_clear();
    let sort_accuracy = train::sort_accuracy(&trainer.model, &task.held_out)?;
    let mut sort_examples = Vec::new();
    for s in task.held_out.iter().take(4) {
        let g = sample::generate(
            &trainer.model,
            s,
            s.len(),
            &sample::Decoding::Greedy,
            &mut crate::rng::Rng::new(0),
            true,
        )?;
        sort_examples.push((s.clone(), g.new_tokens().to_vec()));
    }
    let sort_history = trainer.history;
    let sort_seconds = t0.elapsed().as_secs_f64();
    // The corpus.
    let tokens = corpus_tokens()?;
    let baseline = best_baseline(&corpus_baseline_rows(&tokens)?)?;
    let setup = corpus_setup(tokens.tokenizer.vocab_size(), CORPUS_STEPS)?;
    let pb = bar(setup.steps, "corpus");
    let (mut seen, mut started) = (0usize, None);
    let corpus = train_corpus(&tokens, &setup, |r| {
        let t = *started.get_or_insert_with(std::time::Instant::now);
        seen += r.tokens;
        pb.set_message(format!(
            "loss {:.4} | {:.0} tokens/s",
            r.loss,
            seen as f64 / t.elapsed().as_secs_f64().max(1e-9)
        ));
        pb.inc(1);
    })?;
    pb.finish_and_clear();
    let prompt: Vec<data::Token> = tokens.validation[..CORPUS_PROMPT_TOKENS].to_vec();
    let g = sample::generate(
        &corpus.model,
        &prompt,
        CORPUS_SAMPLE_TOKENS,
        &sample::Decoding::temperature(0.8),
        &mut crate::rng::Rng::new(1),
        true,
    )?;
    let corpus_sample =
        (tokens.tokenizer.decode_lossy(&prompt)?, tokens.tokenizer.decode_lossy(g.new_tokens())?);
    let validation_chars =
        crate::ch08_tokens::corpus::split(crate::ch08_tokens::corpus::default_corpus())
            .1
            .chars()
            .count();
    let seconds = (sort_seconds, corpus.train_seconds);
    Ok(Results {
        sort_history,
        sort_accuracy,
        sort_examples,
        chars_per_token: validation_chars as f64 / tokens.validation.len() as f64,
        corpus,
        baseline,
        corpus_sample,
        seconds,
    })
}

/// Tokens of validation text the corpus sample starts from.
pub const CORPUS_PROMPT_TOKENS: usize = 20;
/// Tokens the corpus sample adds.
pub const CORPUS_SAMPLE_TOKENS: usize = 100;

/// Trains both models once per process (the walk and the plots share the result).
pub fn results() -> Result<&'static Results> {
    static CELL: std::sync::OnceLock<std::result::Result<Results, String>> =
        std::sync::OnceLock::new();
    CELL.get_or_init(|| compute_results().map_err(|e| e.to_string())).as_ref().map_err(|e| {
        crate::error::Error::InvalidValue {
            op: "ch09_gpt::results",
            arg: "training",
            reason: e.clone(),
        }
    })
}

fn print_results(r: &Results) {
    println!(
        "   sorting: exact match on 1,000 held-out strings {:.1} % ({:.0} s of training)",
        100.0 * r.sort_accuracy,
        r.seconds.0
    );
    for (s, out) in &r.sort_examples {
        println!("     {s:?} → {out:?}");
    }
    let c = &r.corpus;
    let (last, base) = (c.final_validation(), r.baseline.1);
    println!(
        "   corpus (chapter 8's BPE, {:.2} characters per token): validation {last:.4} nats per token after {} steps, against the best n-gram {base:.4} ({}); margin {:.4}",
        r.chars_per_token,
        c.history.len(),
        r.baseline.0,
        base - last
    );
    let crossed = c.crossing(base).map_or("never".to_string(), |s| format!("after {s} steps"));
    println!(
        "   corpus: below the baseline {crossed}; {} tokens in {:.0} s of training ({:.0} tokens/s); {:.4} nats per character",
        crate::report::with_commas(c.tokens_seen as u64),
        r.seconds.1,
        c.tokens_seen as f64 / r.seconds.1.max(1e-9),
        last / r.chars_per_token
    );
    println!("   sample after {:?}:\n{}", r.corpus_sample.0, r.corpus_sample.1);
}

/// Measured forward time of a fixed model (2 layers, width 64, 4 heads, batch 1) against the
/// sequence length n, in milliseconds: (n, time). Each point is the fastest of a few runs.
pub fn forward_times(lengths: &[usize]) -> Result<Vec<(usize, f64)>> {
    let max = lengths.iter().copied().max().unwrap_or(1);
    let m = model::Gpt::<f32>::new(Config::new(64, max, 2, 4, 64), 1)?;
    let mut rng = crate::rng::Rng::new(3);
    let mut out = Vec::new();
    for &n in lengths {
        let ids: Vec<data::Token> = (0..n).map(|_| rng.below(64) as data::Token).collect();
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let t = std::time::Instant::now();
            std::hint::black_box(m.forward(&ids, n)?);
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
        }
        out.push((n, best));
    }
    Ok(out)
}

/// Least-squares fit t ≈ a·n + b·n² (no constant) in relative terms (each point weighted by
/// 1/t², so the short sequences count as much as the long ones): the linear part (projections,
/// MLP) and the quadratic part (the n×n attention scores) of the forward pass. A negative
/// coefficient, which no cost can have, is set to 0 and the other refitted.
pub fn fit_linear_quadratic(points: &[(usize, f64)]) -> (f64, f64) {
    let pts: Vec<(f64, f64, f64)> =
        points.iter().filter(|p| p.1 > 0.0).map(|&(n, t)| (n as f64, t, 1.0 / (t * t))).collect();
    let (mut s11, mut s12, mut s22, mut y1, mut y2) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(n, t, w) in &pts {
        s11 += w * n * n;
        s12 += w * n * n * n;
        s22 += w * n * n * n * n;
        y1 += w * n * t;
        y2 += w * n * n * t;
    }
    let det = s11 * s22 - s12 * s12;
    if pts.is_empty() || det.abs() < 1e-300 {
        return (0.0, 0.0);
    }
    let (a, b) = ((y1 * s22 - y2 * s12) / det, (s11 * y2 - s12 * y1) / det);
    if a < 0.0 {
        (0.0, y2 / s22)
    } else if b < 0.0 {
        (y1 / s11, 0.0)
    } else {
        (a, b)
    }
}

/// The sequence lengths of the attention-cost plot.
pub const COST_LENGTHS: [usize; 7] = [16, 32, 64, 128, 256, 512, 1024];

/// The chapter's figures as data: (file stem, figure). Trains both models (see [`results`]).
pub fn figures() -> Result<Vec<(String, Figure)>> {
    let r = results()?;
    let steps = |h: &[train::StepRecord]| {
        h.iter().map(|s| (s.step as f64 + 1.0, s.loss)).collect::<Vec<_>>()
    };
    let sort = Figure::Line(LineChart {
        title: "Sorting digits: training loss".into(),
        x_label: "step".into(),
        y_label: "nats per scored token".into(),
        series: vec![Series::new("batch loss", steps(&r.sort_history))],
        markers: false,
    });
    let c = &r.corpus;
    let corpus_steps = c.history.len().max(1) as f64;
    let corpus = Figure::Line(LineChart {
        title: "Default corpus, chapter 8's BPE: loss against the n-gram baseline".into(),
        x_label: "step".into(),
        y_label: "nats per token".into(),
        series: vec![
            Series::new("training batch loss", steps(&c.history)),
            Series::new(
                "validation loss",
                c.validation.iter().map(|&(s, v)| (s as f64, v)).collect(),
            ),
            Series::new(
                format!("best n-gram ({})", r.baseline.0),
                vec![(1.0, r.baseline.1), (corpus_steps, r.baseline.1)],
            ),
        ],
        markers: false,
    });
    let times = forward_times(&COST_LENGTHS)?;
    let (a, b) = fit_linear_quadratic(&times);
    let cost = Figure::Line(LineChart {
        title: "Forward pass time against sequence length (2 layers, d = 64)".into(),
        x_label: "sequence length n".into(),
        y_label: "milliseconds".into(),
        series: vec![
            Series::new("measured", times.iter().map(|&(n, t)| (n as f64, t)).collect()),
            Series::new(
                format!("fit {a:.2e}·n + {b:.2e}·n²"),
                times.iter().map(|&(n, _)| (n as f64, a * n as f64 + b * (n * n) as f64)).collect(),
            ),
            Series::new(
                "its n² part (attention scores)",
                times.iter().map(|&(n, _)| (n as f64, b * (n * n) as f64)).collect(),
            ),
        ],
        markers: true,
    });
    Ok(vec![
        ("ch09_sort_loss".into(), sort),
        ("ch09_corpus_loss".into(), corpus),
        ("ch09_attention_cost".into(), cost),
    ])
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    print_results(results()?);
    crate::plot::save_all(&figures()?, dir)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter = Chapter {
    number: 9,
    stem: "ch09_gpt",
    title: "A small GPT that learns on the CPU",
    worked,
    walk,
    plots,
    errata: ERRATA,
};
