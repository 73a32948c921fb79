//! Chapter 9 in the book: the errata, the worked numbers, the walk-through and the figures.
//!
//! Nothing here is part of the lesson (`mod.rs` and its topic files): this file recomputes what
//! the documents print and shows it. [`worked`] checks D1's GPT-3 accounting, GPT-2's
//! and GPT-1's sizes and D3's "I love AI" example against what they print; [`ERRATA`]
//! lists the mistakes found; [`walk`] derives the counts and the example step by step and trains
//! the chapter's two models ([`results`]); [`figures`] draws their loss curves and the attention
//! cost. [`loss_figure`] is the one figure the library's own runs draw (see its note).

use super::config::{Config, MatrixAccounting, gpt1_parameters};
use super::experiments::{
    CORPUS_STEPS, CorpusRun, SORT_STEPS, best_baseline, corpus_baseline_rows, corpus_setup,
    corpus_tokens, sort_setup, train_corpus,
};
use super::train::{Progress, Trainer};
use super::trainable::Trainable;
use super::{data, model, sample, train, walkthrough};
use crate::errata::{Erratum, Kind};
use crate::error::Result;
use crate::plot::{Figure, LineChart, LogAxes, Series};
use crate::report::{Chapter, Walk, Worked};
use crate::sources::{D0, D1, D3};
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// One billion, for counts printed in billions.
const BILLION: f64 = 1e9;

// ───────────────────────────── what the documents print ─────────────────────────────

/// h₀ of D3's "I love AI" example as printed, one row per token.
pub const PRINTED_H0: [[f64; 2]; 3] = [[0.14, 0.91], [0.59, 0.39], [0.79, 0.60]];

/// h₁("love") as printed.
pub const PRINTED_H1_LOVE: [f64; 2] = [0.155, 0.458];

/// h₂("love") as printed.
pub const PRINTED_H2_LOVE: [f64; 2] = [0.1753, 0.309];

/// The printed h₁("love") as a 1×2 row.
pub fn printed_h1_love() -> DMatrix<f64> {
    DMatrix::from_row_slice(1, 2, &PRINTED_H1_LOVE)
}

// ───────────────────────────── errata, worked numbers ─────────────────────────────

/// This chapter's rows of the errata register.
pub const ERRATA: &[Erratum] = &[
    Erratum {
        document: D3,
        section: "GPT, Going Through an Example: Masked Self-Attention",
        printed: "h₁(\"love\") = 0.1 × h₀(\"I\") + 0.9 × h₀(\"love\") = [0.155, 0.458]",
        correct: "[0.545, 0.442]",
        why: "With the document's own h₀(\"I\") = [0.14, 0.91] and h₀(\"love\") = [0.59, 0.39]: \
            0.1·0.14 + 0.9·0.59 = 0.545 and 0.1·0.91 + 0.9·0.39 = 0.442. The printed pair does not \
            follow from any weighting of the h₀ rows shown.",
        kind: Kind::Erratum,
        tests: &["tests/ch09_gpt.rs::i_love_ai_h1_love_is_0_545_0_442"],
    },
    Erratum {
        document: D3,
        section: "GPT, Going Through an Example: Feed Forward and Layer Norm",
        printed: "h₂(\"love\") = h₁(\"love\") × W = [0.1753, 0.309]",
        correct: "[0.2142, 0.2755] from the printed h₁; [0.2858, 0.3845] from the correct h₁ = \
            [0.545, 0.442]",
        why: "W = [0.2, 0.3, 0.4, 0.5] read as rows (0.2, 0.3), (0.4, 0.5): [0.155, 0.458] × W = \
            [0.155·0.2 + 0.458·0.4, 0.155·0.3 + 0.458·0.5] = [0.2142, 0.2755]. Reading W by \
            columns gives [0.1684, 0.291]; neither reading, nor the correct h₁, gives the printed \
            pair.",
        kind: Kind::Erratum,
        tests: &["tests/ch09_gpt.rs::i_love_ai_h2_love_follows_from_h1_times_w"],
    },
    Erratum {
        document: D3,
        section: "GPT Time Complexity",
        printed: "GPT3 has 175 layers and d is often set to a value like 1024",
        correct: "GPT-3 175B has 96 layers and d = 12,288",
        why: "175 is GPT-3's parameter count in billions, not its depth; with 96 layers of 96 \
            heads of width 128 (d = 96·128 = 12,288), the count comes to 175 billion (D1), \
            while 175 layers of width 1,024 would hold about 2.2 billion.",
        kind: Kind::Erratum,
        tests: &["tests/ch09_gpt.rs::gpt3_has_96_layers_of_width_12288_not_175_of_1024"],
    },
    Erratum {
        document: D3,
        section: "What's so different about GPT models? (quoting Troy Wang)",
        printed: "The original version of GPT comes with 150 million parameters",
        correct: "about 117 million (116,534,784)",
        why: "GPT-1's published configuration (12 layers, d = 768, 12 heads, 4d MLP, vocabulary \
            40,478, context 512, post-LayerNorm so no final LayerNorm) holds 31,087,104 + 393,216 \
            + 12·7,087,872 = 116,534,784 parameters.",
        kind: Kind::Erratum,
        tests: &["tests/ch09_gpt.rs::gpt1_holds_about_117_million_parameters_not_150"],
    },
    Erratum {
        document: D0,
        section: "Attention: the sizes of W_k and W_q",
        printed: "In GPT-3, n-embed = 12,388 and n-query-key = 128",
        correct: "n-embed = 12,288",
        why: "A changed digit (the third, 2 printed as 3): GPT-3's width is 96 heads × 128 = \
            12,288, which D1 gives and its embedding count confirms (617,558,016 / 50,257 = \
            12,288), and which makes the per-head count of chapter 6, 4 × 12,288 × 128 = \
            6,291,456 ≈ 6.3 million.",
        kind: Kind::Erratum,
        tests: &[
            "tests/ch09_gpt.rs::gpt3_width_is_12288_from_heads_and_embedding_count",
            "tests/ch06_attention.rs::gpt3_head_has_6_3_million_parameters",
        ],
    },
    Erratum {
        document: D0,
        section: "Embedding (d-embed · d-vocab)",
        printed: "where n = 13,288",
        correct: "n = 12,288",
        why: "The embedding vectors of GPT-3 have d-embed = 12,288 entries (96 · 128; 617,558,016 \
            / 50,257).",
        kind: Kind::Erratum,
        tests: &["tests/ch09_gpt.rs::gpt3_width_is_12288_from_heads_and_embedding_count"],
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
                &format!("{:.2}", PRINTED_H0[r][c]),
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
    let h2_printed = walkthrough::h2_of(&printed_h1_love())?;
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
    out.step("1. GPT-3, counted the way D1 counts it")?;
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
    out.matrix("h₂(\"love\") from the printed h₁", &walkthrough::h2_of(&printed_h1_love())?)?;
    out.step("6. Two models trained on the CPU (sorting digits; the default corpus)")?;
    print_results(results()?);
    Ok(())
}

// ───────────────────────────── the two trained models, reported ─────────────────────────────

/// Makes the progress display of one of the book's two training runs, from its name (`"sort  "`,
/// `"corpus"`) and its number of steps.
pub type ShowProgress = fn(&str, usize) -> Box<dyn Progress>;

static SHOW_PROGRESS: OnceLock<ShowProgress> = OnceLock::new();

/// Has the book's two training runs ([`results`]) show their progress with `show`: the binary
/// installs its progress bars here; without it (tests, other programs) the runs show nothing. The
/// first call decides.
pub fn show_progress_with(show: ShowProgress) {
    let _ = SHOW_PROGRESS.set(show);
}

fn progress(what: &str, steps: usize) -> Box<dyn Progress> {
    match SHOW_PROGRESS.get() {
        Some(show) => show(what, steps),
        None => Box::new(()),
    }
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

/// Trains both models as the main job does, the sorting model for `sort_steps` steps and the
/// corpus model for `corpus_steps` (the book's: [`SORT_STEPS`] and [`CORPUS_STEPS`]; a test trains
/// a few), on the process's kernel (the main job's is the portable one,
/// [`crate::book::compute_on_the_portable_kernel`]: the loss curves are committed figures, and
/// chapter 11 quantizes the corpus model), and reports them.
pub fn results_after(sort_steps: usize, corpus_steps: usize) -> Result<Results> {
    use crate::ch08_tokens::Tokenizer;
    // The sorting task.
    let t0 = std::time::Instant::now();
    let (task, config, tc) = sort_setup()?;
    let mut trainer = train::Trainer::new(model::Gpt::<f32>::new(config, 1)?, &tc, 2)?;
    let mut pb = progress("sort  ", sort_steps);
    trainer.run(&train::Data::Sort(&task), &tc, sort_steps, |r| {
        pb.step(r.step + 1, r.loss, None);
    })?;
    pb.finish();
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
    let setup = corpus_setup(tokens.tokenizer.vocab_size(), corpus_steps)?;
    let mut pb = progress("corpus", setup.steps);
    // The speed is the one the summary prints (train::Throughput): tokens over the steps' time.
    let corpus = train_corpus(&tokens, &setup, |r, speed| {
        pb.step(r.step + 1, r.loss, speed.per_second());
    })?;
    pb.finish();
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
    CELL.get_or_init(|| results_after(SORT_STEPS, CORPUS_STEPS).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| crate::error::Error::InvalidValue {
            op: "ch09_gpt::results",
            arg: "training",
            reason: e.clone(),
        })
}

/// Prints the two runs' results to standard output, every line within
/// [`TERMINAL_WIDTH`](crate::report::TERMINAL_WIDTH) columns. A closed pipe is not an error
/// here: the binary's next write ends the program quietly.
fn print_results(r: &Results) {
    use std::io::Write;
    let mut text = vec![format!(
        "sorting: exact match on 1,000 held-out strings {:.1} % ({:.0} s of training)",
        100.0 * r.sort_accuracy,
        r.seconds.0
    )];
    for (s, out) in &r.sort_examples {
        text.push(format!("  {s:?} → {out:?}"));
    }
    let c = &r.corpus;
    let (last, base) = (c.final_validation(), r.baseline.1);
    text.push(format!(
        "corpus (chapter 8's BPE, {:.2} characters per token): validation {last:.4} nats per \
            token after {} steps, against the best n-gram {base:.4} ({}); margin {:.4}",
        r.chars_per_token,
        c.history.len(),
        r.baseline.0,
        base - last
    ));
    let crossed = c.crossing(base).map_or("never".to_string(), |s| format!("after {s} steps"));
    text.push(format!(
        "corpus: below the baseline {crossed}; {} tokens in {:.0} s of training ({:.0} \
            tokens/s); {:.4} nats per character",
        crate::report::with_commas(c.tokens_seen as u64),
        r.seconds.1,
        c.tokens_seen as f64 / r.seconds.1.max(1e-9),
        last / r.chars_per_token
    ));
    text.push(format!("sample after {:?}:", r.corpus_sample.0));
    let width = crate::report::TERMINAL_WIDTH - 3;
    let mut out = std::io::stdout().lock();
    for paragraph in text {
        for line in crate::report::wrap(&paragraph, width) {
            let _ = writeln!(out, "   {line}");
        }
    }
    for line in r.corpus_sample.1.lines().flat_map(|l| crate::report::wrap(l, width - 2)) {
        let _ = writeln!(out, "     {line}");
    }
}

/// Measured forward time of a fixed model (2 layers, width 64, 4 heads, batch 1) against the
/// sequence length n, in milliseconds: (n, time), each point the fastest of `repeats` runs on
/// one thread. `clock` reads seconds: the benchmark passes the thread's CPU time, so that time
/// the scheduler gives to other programs on a shared machine is not counted; a wall clock works
/// too on a quiet one. The forward pass's products run on the process's threads, so the process
/// must have one (`LLM_WORKBOOK_THREADS=1`, as the benchmark sets): an error names the variable
/// otherwise.
pub fn forward_times(
    lengths: &[usize],
    repeats: usize,
    clock: &dyn Fn() -> f64,
) -> Result<Vec<(usize, f64)>> {
    let threads = crate::threads::default_threads();
    if threads != 1 {
        return Err(crate::error::invalid(
            "forward_times",
            crate::threads::THREADS_ENV,
            format!("the forward pass is timed on one thread; this process has {threads}"),
        ));
    }
    let max = lengths.iter().copied().max().unwrap_or(1);
    let m = model::Gpt::<f32>::new(Config::new(64, max, COST_LAYERS, COST_HEADS, 64), 1)?;
    let mut rng = crate::rng::Rng::new(3);
    let mut out = Vec::new();
    for &n in lengths {
        let ids: Vec<data::Token> = (0..n).map(|_| rng.below(64) as data::Token).collect();
        let mut best = f64::INFINITY;
        for _ in 0..repeats.max(1) {
            let t0 = clock();
            std::hint::black_box(m.forward(&ids, n)?);
            let t = clock() - t0;
            best = best.min(t * 1e3);
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
pub const COST_LENGTHS: [usize; 9] = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096];

/// How many times the benchmark runs the forward pass at each length; the fastest run counts.
pub const COST_REPEATS: usize = 5;

/// Where the attention-cost measurements live, relative to the repository root.
pub const ATTENTION_COST_FILE: &str = "data/ch09_attention_cost.csv";

/// The committed measurements of [`forward_times`] at [`COST_LENGTHS`] (see the file's header
/// for the machine and the date). The figure is drawn from them, not from timings the main job
/// takes, so that running the main job twice changes no file; only
/// `cargo bench --bench ch09_gpt -- --attention-cost` measures again and rewrites them.
const ATTENTION_COST: &str = include_str!("../../data/ch09_attention_cost.csv");

/// The `n, milliseconds` rows of a measurements file like [`ATTENTION_COST_FILE`] (`#` starts a
/// comment line); each n a positive whole number, each time finite and positive, n increasing.
pub fn parse_cost_table(text: &str) -> Result<Vec<(usize, f64)>> {
    let bad = |line: usize, reason: String| crate::Error::Parse {
        file: ATTENTION_COST_FILE.into(),
        line: Some(line),
        reason,
    };
    let mut out: Vec<(usize, f64)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (n, t) =
            line.split_once(',').ok_or_else(|| bad(i + 1, format!("{line:?} is not `n, ms`")))?;
        let n: usize = n.trim().parse().map_err(|_| bad(i + 1, format!("n = {n:?}")))?;
        let t: f64 = t.trim().parse().map_err(|_| bad(i + 1, format!("time {t:?}")))?;
        if n == 0 || !(t.is_finite() && t > 0.0) || out.last().is_some_and(|p| p.0 >= n) {
            return Err(bad(i + 1, format!("n = {n}, {t} ms: want increasing n > 0, time > 0")));
        }
        out.push((n, t));
    }
    if out.len() < 2 {
        return Err(bad(text.lines().count(), "fewer than two measurements".into()));
    }
    Ok(out)
}

/// The measurements the attention-cost figure is drawn from: [`ATTENTION_COST_FILE`] as it was
/// when the crate was compiled.
pub fn committed_forward_times() -> Result<Vec<(usize, f64)>> {
    parse_cost_table(ATTENTION_COST)
}

/// `points` as the text of [`ATTENTION_COST_FILE`], under `header` (each line commented).
pub fn cost_table_text(header: &str, points: &[(usize, f64)]) -> String {
    let mut out: String = header.lines().map(|l| format!("# {l}\n")).collect();
    out.push_str("# n, milliseconds\n");
    for (n, t) in points {
        out.push_str(&format!("{n}, {t:.4}\n"));
    }
    out
}

/// The `# key: value` line of a measurements file naming the processor and its caches.
pub const MACHINE_KEY: &str = "machine";
/// The `# key: value` line of a measurements file with the bytes of one core's L2 cache.
pub const L2_KEY: &str = "L2 bytes per core";
/// The `# key: value` line of a measurements file with the bytes of the L3 cache.
pub const L3_KEY: &str = "L3 bytes";
/// The `# key: value` line of a measurements file with the date of the measurement.
pub const DATE_KEY: &str = "date (UTC)";
/// The `# key: value` line of a measurements file with the load average before and after.
pub const LOAD_KEY: &str = "load average";

/// Where and under what load a measurements file was taken: its `# machine:`, `# L2 bytes per
/// core:`, `# L3 bytes:`, `# date (UTC):` and `# load average:` lines.
#[derive(Clone, Debug, PartialEq)]
pub struct CostMeta {
    /// The processor.
    pub machine: String,
    /// Bytes of one core's L2 cache.
    pub l2_bytes: usize,
    /// Bytes of the L3 cache.
    pub l3_bytes: usize,
    /// When, UTC.
    pub date: String,
    /// The load average (1, 5, 15 minutes) before and after.
    pub load: String,
}

/// The [`CostMeta`] of a measurements file like [`ATTENTION_COST_FILE`]; a missing line is an
/// error naming it.
pub fn cost_table_meta(text: &str) -> Result<CostMeta> {
    let find = |key: &str| {
        let prefix = format!("# {key}: ");
        text.lines().find_map(|l| l.strip_prefix(prefix.as_str())).map(str::to_string).ok_or_else(
            || crate::Error::Parse {
                file: ATTENTION_COST_FILE.into(),
                line: None,
                reason: format!("no `# {key}:` line"),
            },
        )
    };
    let bytes = |key: &str| -> Result<usize> {
        let v = find(key)?;
        v.trim().parse().map_err(|_| crate::Error::Parse {
            file: ATTENTION_COST_FILE.into(),
            line: None,
            reason: format!("`# {key}: {v}` is not a whole number"),
        })
    };
    Ok(CostMeta {
        machine: find(MACHINE_KEY)?,
        l2_bytes: bytes(L2_KEY)?,
        l3_bytes: bytes(L3_KEY)?,
        date: find(DATE_KEY)?,
        load: find(LOAD_KEY)?,
    })
}

/// The where and when of the committed measurements ([`ATTENTION_COST_FILE`]).
pub fn committed_cost_meta() -> Result<CostMeta> {
    cost_table_meta(ATTENTION_COST)
}

/// Layers and heads of the model [`forward_times`] times: each layer computes one n×n score
/// matrix per head.
pub const COST_LAYERS: usize = 2;
/// See [`COST_LAYERS`].
pub const COST_HEADS: usize = 4;

/// Bytes of one head's n×n score matrix in f32: 4·n².
pub fn score_matrix_bytes(n: usize) -> usize {
    4 * n * n
}

/// The longest measured length whose score matrix ([`score_matrix_bytes`]) fits in one core's
/// L2 cache: the range over which t ≈ a·n + b·n² is fitted and holds. Beyond it each score
/// entry costs more (see [`score_entry_ns`]) and the time outgrows the fit.
pub fn fit_limit(points: &[(usize, f64)], meta: &CostMeta) -> usize {
    let inside = points.iter().map(|p| p.0).filter(|&n| score_matrix_bytes(n) <= meta.l2_bytes);
    inside.max().unwrap_or(0)
}

/// [`fit_linear_quadratic`] over the points with n ≤ `up_to` only.
pub fn fit_up_to(points: &[(usize, f64)], up_to: usize) -> (f64, f64) {
    let inside: Vec<(usize, f64)> = points.iter().copied().filter(|p| p.0 <= up_to).collect();
    fit_linear_quadratic(&inside)
}

/// The length at which the quadratic part of t ≈ a·n + b·n² equals the linear part: n = a/b
/// (infinite when b = 0).
pub fn crossover(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::INFINITY }
}

/// The fit's worst miss over the points with n ≤ `up_to`: the largest of measured/fitted and
/// fitted/measured (1 when it meets every point), and the n where it happens.
pub fn worst_miss(points: &[(usize, f64)], (a, b): (f64, f64), up_to: usize) -> (f64, usize) {
    let mut worst = (1.0, 0);
    for &(n, t) in points.iter().filter(|p| p.0 <= up_to) {
        let fit = a * n as f64 + b * (n * n) as f64;
        let miss = (t / fit).max(fit / t);
        if miss > worst.0 {
            worst = (miss, n);
        }
    }
    worst
}

/// What one entry of one head's score matrix costs at each length: the measured time less the
/// fit's linear part a·n, divided by the [`COST_LAYERS`]·[`COST_HEADS`]·n² entries, in
/// nanoseconds: (n, bytes of one head's f32 score matrix 4·n², ns per entry). Constant where
/// the n² model holds; rising where the score matrices leave a cache.
pub fn score_entry_ns(points: &[(usize, f64)], a: f64) -> Vec<(usize, usize, f64)> {
    points
        .iter()
        .map(|&(n, t)| {
            let entries = (COST_LAYERS * COST_HEADS * n * n) as f64;
            (n, score_matrix_bytes(n), (t - a * n as f64) * 1e6 / entries)
        })
        .collect()
}

/// What chapter 9's text says about the attention-cost measurements, computed from them: each
/// phrase must appear in the chapter as written here (a test holds the text to the file).
/// - the fitted range: `n ≤ L` with L = [`fit_limit`];
/// - the crossover n = a/b of the fit over that range ([`crossover`]): `$n \approx C$`;
/// - the fit's worst miss inside the range ([`worst_miss`]): `within a factor of F`;
/// - beyond the range, the measured time over the fit's: `X to Y times the fit`;
/// - for each length from 64 on, a table row `| n |` … `| ns per score entry | growth× |`
///   ([`score_entry_ns`], and the time over the time at the length before).
pub fn cost_findings(points: &[(usize, f64)], meta: &CostMeta) -> Vec<String> {
    let limit = fit_limit(points, meta);
    let (a, b) = fit_up_to(points, limit);
    let (worst, _) = worst_miss(points, (a, b), limit);
    let beyond: Vec<f64> = points
        .iter()
        .filter(|p| p.0 > limit)
        .map(|&(n, t)| t / (a * n as f64 + b * (n * n) as f64))
        .collect();
    let (lo, hi) = beyond.iter().fold((f64::INFINITY, 0.0f64), |(l, h), &r| (l.min(r), h.max(r)));
    let mut out = vec![
        format!("$n \\le {limit}$"),
        format!("$n \\approx {:.0}$", crossover(a, b)),
        format!("within a factor of {worst:.2}"),
    ];
    if !beyond.is_empty() {
        out.push(format!("{lo:.1} to {hi:.1} times the fit"));
    }
    // The table's rows from n = 64: ns per score entry and the growth from the length before.
    let entries = score_entry_ns(points, a);
    for (w, e) in points.windows(2).zip(entries.iter().skip(1)) {
        if w[1].0 >= 64 {
            out.push(format!("| {} |", w[1].0));
            out.push(format!("| {:.1} | {:.2}× |", e.2, w[1].1 / w[0].1));
        }
    }
    out
}

/// The attention-cost figure of measured forward times on log–log axes: the points, the fit
/// t ≈ a·n + b·n² over the lengths whose score matrices fit in L2 ([`fit_limit`],
/// [`fit_up_to`]) drawn across every length, and its n² part; the caption names the machine and
/// the load from `meta`.
pub fn attention_cost_figure(times: &[(usize, f64)], meta: &CostMeta) -> Figure {
    let limit = fit_limit(times, meta);
    let (a, b) = fit_up_to(times, limit);
    let machine = meta.machine.as_str();
    let load = meta.load.split_whitespace().next().unwrap_or("?");
    Figure::LogLine(
        LineChart {
            title: format!("Forward pass, 2 layers, d = 64, one thread: {machine}, load {load}"),
            x_label: "sequence length n (log scale)".into(),
            y_label: "milliseconds of CPU time (log scale)".into(),
            series: vec![
                Series::new("measured", times.iter().map(|&(n, t)| (n as f64, t)).collect()),
                Series::new(
                    format!("fit over n ≤ {limit}: {a:.1e}·n + {b:.1e}·n²"),
                    times
                        .iter()
                        .map(|&(n, _)| (n as f64, a * n as f64 + b * (n * n) as f64))
                        .collect(),
                ),
                Series::new(
                    "its n² part (attention scores)",
                    times.iter().map(|&(n, _)| (n as f64, b * (n * n) as f64)).collect(),
                ),
            ],
            markers: true,
        },
        LogAxes::Both,
    )
}

/// The chapter's figures as data: (file stem, figure). Trains both models (see [`results`]); the
/// attention cost comes from the committed measurements ([`committed_forward_times`]).
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
    let cost = attention_cost_figure(&committed_forward_times()?, &committed_cost_meta()?);
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

/// Draws the training loss per step and its running mean into a run's checkpoint folder, as
/// [`LOSS_PLOT`](crate::workshop::run::LOSS_PLOT)`.png` and `.svg`; returns the files written.
/// Not one of the book's figures, but a figure all the same: only `book.rs` draws.
pub fn save_loss_plot<M: Trainable<f32>>(
    trainer: &Trainer<f32, M>,
    out: &Path,
) -> Result<Vec<PathBuf>> {
    loss_figure(trainer).save(out, crate::workshop::run::LOSS_PLOT)
}

/// The figure [`save_loss_plot`] draws: the loss of every step and its running mean
/// ([`RunningMean`](super::train::RunningMean), bias-corrected, so it starts at the first loss
/// and follows a fast fall instead of lagging above it).
pub fn loss_figure<M: Trainable<f32>>(trainer: &Trainer<f32, M>) -> Figure {
    let raw: Vec<(f64, f64)> =
        trainer.history.iter().map(|r| (r.step as f64 + 1.0, r.loss)).collect();
    let mut mean = super::train::RunningMean::default();
    let smooth: Vec<(f64, f64)> = raw.iter().map(|&(x, y)| (x, mean.add(y))).collect();
    Figure::Line(LineChart {
        title: "Training loss".into(),
        x_label: "step".into(),
        y_label: "nats per token".into(),
        series: vec![Series::new("batch loss", raw), Series::new("running mean (0.95)", smooth)],
        markers: false,
    })
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
