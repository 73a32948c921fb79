//! What the book shows about chapter 12: the worked-number table (no source document, so no
//! errata), the walk-through (RMSNorm, the rotation, the gated MLP, the groups of GQA, the cache,
//! the composed decoder) and two figures computed from formulas, the same bits on every machine:
//! the rotary wavelengths against the context for two bases, and the key/value cache's bytes
//! per token of published configurations; and a third drawn from measurements committed beside
//! it, never retrained here: GPT-2's block against today's ([`COMPARISON_FILE`], which
//! `benches/ch12_compare.rs` measures).

use super::compare::{ArmSummary, CompareRow, gaps_to_gpt2, parse_compare_csv, summarize};
use super::decoder::{Decoder, DecoderConfig, MlpKind, NormKind, PositionKind};
use super::glu::{Gate, GatedMlp, LLAMA_HIDDEN_MULTIPLE, gated_hidden_width, glu_forward};
use super::rms_norm::{RmsNorm, rms_norm_forward};
use super::rope::{Pairing, ROPE_BASE, rope_frequencies, rope_wavelengths};
use super::{BYTES_PER_HALF, KvCacheShape};
use crate::ch09_gpt::data::{Batch, Token};
use crate::errata::Erratum;
use crate::error::Result;
use crate::plot::{BarChart, Figure, LineChart, LogAxes, Series};
use crate::report::{Chapter, Walk, Worked};
use crate::sources::THIS_CRATE;
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};

/// No source document, so no errata.
pub const ERRATA: &[Erratum] = &[];

/// Llama 3's rotary base (`rope_theta` in its `config.json`).
pub const LLAMA3_ROPE_BASE: f64 = 500_000.0;

/// The head width of the wavelength figure and table (Llama 3 8B's, Qwen3-8B's).
pub const WAVELENGTH_HEAD_DIM: usize = 128;

/// The context the wavelengths are held against: Llama 3's 8192 tokens.
pub const WAVELENGTH_CONTEXT: f64 = 8192.0;

/// Published attention shapes, from each model's `config.json` (`n_layer`, `n_head` for GPT-2;
/// `num_hidden_layers`, `num_attention_heads`, `num_key_value_heads`, `head_dim` or
/// `hidden_size`/heads for the others): GPT-2 124M (openai-community/gpt2), Llama 3 8B
/// (meta-llama/Meta-Llama-3-8B), Qwen3-8B (Qwen/Qwen3-8B); and nanochat's d20, which publishes no
/// `config.json`: its training script (karpathy/nanochat, `scripts/base_train.py`) builds depth 20
/// with width 20 · 64 = 1280 in heads of 128, so 10 heads, each with its own key/value head.
pub const PUBLISHED: [(&str, KvCacheShape); 4] = [
    ("GPT-2 124M", KvCacheShape { layers: 12, n_heads: 12, n_kv_heads: 12, head_dim: 64 }),
    ("Llama 3 8B", KvCacheShape { layers: 32, n_heads: 32, n_kv_heads: 8, head_dim: 128 }),
    ("Qwen3-8B", KvCacheShape { layers: 36, n_heads: 32, n_kv_heads: 8, head_dim: 128 }),
    ("nanochat d20", KvCacheShape { layers: 20, n_heads: 10, n_kv_heads: 10, head_dim: 128 }),
];

/// Pairs of a head of width d_h whose wavelength exceeds the context.
fn pairs_beyond(base: f64) -> Result<usize> {
    let waves = rope_wavelengths(WAVELENGTH_HEAD_DIM, base)?;
    Ok(waves.iter().filter(|&&w| w > WAVELENGTH_CONTEXT).count())
}

/// RMSNorm of (1, −2, 2) with ε = 1 and γ = 1: r = √(3 + 1) = 2.
fn rms_example() -> Result<f64> {
    let norm = RmsNorm::<f64> { gamma: DMatrix::from_element(1, 3, 1.0), eps: 1.0 };
    let x = DMatrix::from_row_slice(1, 3, &[1.0, -2.0, 2.0]);
    Ok(rms_norm_forward(&norm, &x)?.1.rms[0])
}

/// SwiGLU of x = 1 with W_gate = 2, W_up = 3, W_down = 0.5; and with the gate on the up branch.
fn swiglu_example() -> Result<(f64, f64)> {
    let one = |v: f64| DMatrix::from_element(1, 1, v);
    let mlp = GatedMlp { w_gate: one(2.0), w_up: one(3.0), w_down: one(0.5), gate: Gate::Swish };
    let right = glu_forward(&mlp, &one(1.0))?.0[(0, 0)];
    let wrong = glu_forward(&GatedMlp { w_gate: one(3.0), w_up: one(2.0), ..mlp }, &one(1.0))?.0;
    Ok((right, wrong[(0, 0)]))
}

/// The chapter's numbers, recomputed (the prose derives each).
pub fn worked() -> Result<Vec<Worked>> {
    let paper = rope_wavelengths(WAVELENGTH_HEAD_DIM, ROPE_BASE)?;
    let llama3 = rope_wavelengths(WAVELENGTH_HEAD_DIM, LLAMA3_ROPE_BASE)?;
    let (swiglu, wrong_branch) = swiglu_example()?;
    let m = LLAMA_HIDDEN_MULTIPLE;
    let bytes = |s: KvCacheShape| -> Result<f64> { Ok(s.bytes_per_token(BYTES_PER_HALF)? as f64) };
    let [gpt2, llama, qwen, nanochat] = PUBLISHED.map(|(_, s)| s);
    let t = THIS_CRATE;
    Ok(vec![
        Worked::number(
            "rms_norm_of_one_row_by_hand",
            t,
            "RMSNorm's r of x = (1, −2, 2) with ε = 1",
            "2",
            rms_example()?,
        ),
        Worked::number(
            "rms_norm_of_one_row_by_hand",
            t,
            "the same with ε outside the root",
            "2.732",
            3f64.sqrt() + 1.0,
        ),
        Worked::number(
            "rope_frequencies_by_hand",
            t,
            "frequency θ₁ of heads of width d_h = 8, base 10 000",
            "0.1",
            rope_frequencies(8, ROPE_BASE)?[1],
        ),
        Worked::number(
            "rope_wavelengths_against_the_context",
            t,
            "wavelength of pair 32 of d_h = 128, base 10 000",
            "628.3",
            paper[32],
        ),
        Worked::number(
            "rope_wavelengths_against_the_context",
            t,
            "wavelength of pair 32, base 500 000",
            "4442.9",
            llama3[32],
        ),
        Worked::number(
            "rope_wavelengths_against_the_context",
            t,
            "wavelength of pair 63, base 10 000",
            "54410",
            paper[63],
        ),
        Worked::number(
            "rope_wavelengths_against_the_context",
            t,
            "wavelength of pair 63, base 500 000",
            "2559196",
            llama3[63],
        ),
        Worked::number(
            "rope_wavelengths_against_the_context",
            t,
            "pairs longer than 8192 tokens, base 10 000",
            "14",
            pairs_beyond(ROPE_BASE)? as f64,
        ),
        Worked::number(
            "rope_wavelengths_against_the_context",
            t,
            "pairs longer than 8192 tokens, base 500 000",
            "29",
            pairs_beyond(LLAMA3_ROPE_BASE)? as f64,
        ),
        Worked::number(
            "swiglu_of_one_number_by_hand",
            t,
            "SwiGLU of x = 1, W_gate = 2, W_up = 3, W_down = 0.5",
            "2.642391",
            swiglu,
        ),
        Worked::number(
            "swiglu_of_one_number_by_hand",
            t,
            "the same with the gate on the up branch",
            "2.857722",
            wrong_branch,
        ),
        Worked::number(
            "the_gated_hidden_width_keeps_the_parameter_count_of_the_4x_mlp",
            t,
            "gated hidden width of C = 4096, a multiple of 256",
            "11008",
            gated_hidden_width(4096, m)? as f64,
        ),
        Worked::number(
            "the_gated_hidden_width_keeps_the_parameter_count_of_the_4x_mlp",
            t,
            "gated hidden width of C = 5120",
            "13824",
            gated_hidden_width(5120, m)? as f64,
        ),
        Worked::number(
            "kv_cache_bytes_per_token_of_published_configurations",
            t,
            "cache bytes per token, 16-bit, GPT-2 124M",
            "36864",
            bytes(gpt2)?,
        ),
        Worked::number(
            "kv_cache_bytes_per_token_of_published_configurations",
            t,
            "the same, Llama 3 8B (8 key/value heads)",
            "131072",
            bytes(llama)?,
        ),
        Worked::number(
            "kv_cache_bytes_per_token_of_published_configurations",
            t,
            "the same, Llama 3 8B as MHA (32)",
            "524288",
            bytes(llama.as_mha())?,
        ),
        Worked::number(
            "kv_cache_bytes_per_token_of_published_configurations",
            t,
            "the same, Llama 3 8B as MQA (1)",
            "16384",
            bytes(KvCacheShape { n_kv_heads: 1, ..llama })?,
        ),
        Worked::number(
            "kv_cache_bytes_per_token_of_published_configurations",
            t,
            "the same, Qwen3-8B",
            "147456",
            bytes(qwen)?,
        ),
        Worked::number(
            "kv_cache_bytes_per_token_of_published_configurations",
            t,
            "the same, nanochat d20 (10 heads, MHA)",
            "102400",
            bytes(nanochat)?,
        ),
    ])
}

/// The walk-through's decoder: V = 16, n_ctx = 8, 2 blocks, H = 4 of width 4, `n_kv` key/value
/// heads, F = 48 (GELU) or 32 (gated: 8C/3 rounded up to a multiple of 16).
fn walk_config(modern: bool) -> DecoderConfig {
    let mut c = DecoderConfig::gpt2(16, 8, 2, 4, 16);
    c.hidden = 48;
    if modern {
        c.positions = PositionKind::Rotary { base: ROPE_BASE, pairing: Pairing::Halves };
        (c.norm, c.mlp, c.n_kv_heads, c.qk_norm, c.biases, c.tied) =
            (NormKind::Rms, MlpKind::Gated(Gate::Swish), 2, true, false, false);
        c.hidden = 32;
        c.eps = super::RMS_NORM_EPS;
    }
    c
}

/// The walk-through, printed by `cargo run --release -- chapter 12`.
pub fn walk(out: &mut Walk) -> Result<()> {
    out.decimals = 6;
    out.step("1. RMSNorm: r = √(mean(x²) + ε), x̂ = x/r, y = γ ⊙ x̂")?;
    out.say("x = (1, −2, 2), ε = 1: mean(x²) = 3, r = √4 = 2, x̂ = (0.5, −1, 1).")?;
    out.scalar("r", rms_example()?)?;
    out.scalar("r with ε outside the root, √3 + 1", 3f64.sqrt() + 1.0)?;
    out.step("2. Rotary positions: pair i turns by tθ_i, θ_i = base^(−2i/d_h)")?;
    for (base, name) in [(ROPE_BASE, "10 000"), (LLAMA3_ROPE_BASE, "500 000")] {
        let waves = rope_wavelengths(WAVELENGTH_HEAD_DIM, base)?;
        out.say(&format!(
            "base {name}, d_h = 128: wavelengths {:.2} (pair 0), {:.1} (pair 32), {:.0} \
             (pair 63); {} of 64 pairs longer than 8192 tokens",
            waves[0],
            waves[32],
            waves[63],
            pairs_beyond(base)?
        ))?;
    }
    out.step("3. The gated MLP: Y = (SiLU(X W_gate) ⊙ X W_up) W_down")?;
    let (right, wrong) = swiglu_example()?;
    out.scalar("SwiGLU of x = 1 (W_gate = 2, W_up = 3, W_down = 0.5)", right)?;
    out.scalar("the gate on the up branch instead", wrong)?;
    for c in [768, 4096, 5120] {
        let f = gated_hidden_width(c, LLAMA_HIDDEN_MULTIPLE)?;
        out.say(&format!("C = {c}: F = {f} (3·C·F = {} against 8C² = {})", 3 * c * f, 8 * c * c))?;
    }
    out.step("4. Grouped-query attention: query head h reads key/value head ⌊h/(H/H_kv)⌋")?;
    for kv in [8, 2, 1] {
        let groups: Vec<String> = (0..8).map(|h| (h / (8 / kv)).to_string()).collect();
        out.say(&format!(
            "H = 8, H_kv = {kv}: key/value head of each query head {}",
            groups.join(" ")
        ))?;
    }
    out.step("5. The key/value cache: layers · 2 · H_kv · d_h values per token (16-bit)")?;
    for (name, s) in PUBLISHED {
        let b = s.bytes_per_token(BYTES_PER_HALF)?;
        let mha = s.as_mha().bytes_per_token(BYTES_PER_HALF)?;
        out.say(&format!(
            "{name}: {b} bytes per token ({} KiB; as MHA {} KiB)",
            b / 1024,
            mha / 1024
        ))?;
    }
    out.step("6. The composed decoder, GPT-2's choices and today's, at one size")?;
    let tokens: Vec<Token> = vec![3, 1, 4, 1, 5, 9, 2, 6];
    let targets = tokens[1..].iter().map(|&t| Some(t)).chain([None]).collect();
    let batch = Batch { inputs: tokens.clone(), targets, batch: 1, seq_len: tokens.len() };
    for modern in [false, true] {
        let model = Decoder::<f64>::new(walk_config(modern), 12)?;
        let name = if modern { "RoPE, RMSNorm, SwiGLU, GQA 4:2, QK-norm" } else { "GPT-2" };
        let mut kv = model.new_kv();
        let mut worst = 0f64;
        let full = model.logits(&tokens, tokens.len())?;
        for (p, &u) in tokens.iter().enumerate() {
            let step = model.step(&mut kv, u)?;
            for (a, b) in step.iter().zip(full.row(p).iter()) {
                worst = worst.max((a - b).abs());
            }
        }
        out.say(&format!(
            "{name}: {} parameters, initial loss {:.4} nats (ln 16 = {:.4}), cache {} bytes \
             per token in f64, cached step against the full pass {worst:.1e}",
            model.parameter_count(),
            model.loss(&batch)?,
            16f64.ln(),
            kv.bytes_per_token()
        ))?;
    }
    out.step("7. GPT-2's block against today's, measured (chapters/img/ch12_compare.csv)")?;
    let rows = committed_comparison()?;
    if let Some(first) = summarize(&rows)?.first() {
        out.say(&format!(
            "{} steps, {} training tokens a run, parameters matched by the MLP's width:",
            first.steps, first.tokens
        ))?;
    }
    for line in comparison_table(&summarize(&rows)?).lines() {
        out.say(line)?;
    }
    Ok(())
}

/// The figures: the rotary wavelengths against the context, and the cache's bytes per token.
pub fn figures() -> Result<Vec<(String, Figure)>> {
    let mut series = Vec::new();
    for (base, name) in [(ROPE_BASE, "base 10 000"), (LLAMA3_ROPE_BASE, "base 500 000")] {
        let waves = rope_wavelengths(WAVELENGTH_HEAD_DIM, base)?;
        series.push(Series::new(
            name,
            waves.iter().enumerate().map(|(i, &w)| (i as f64, w)).collect(),
        ));
    }
    let last = (WAVELENGTH_HEAD_DIM / 2 - 1) as f64;
    series.push(Series::new(
        "context, 8192 tokens",
        vec![(0.0, WAVELENGTH_CONTEXT), (last, WAVELENGTH_CONTEXT)],
    ));
    let waves = Figure::LogLine(
        LineChart {
            title: "Wavelength 2π/θ_i of each pair of a head of width 128".into(),
            x_label: "pair i".into(),
            y_label: "wavelength in tokens (log scale)".into(),
            series,
            markers: false,
        },
        LogAxes::YDecades,
    );
    let kib =
        |s: KvCacheShape| -> Result<f64> { Ok(s.bytes_per_token(BYTES_PER_HALF)? as f64 / 1024.0) };
    let mut rows: [(String, Vec<f64>); 3] =
        ["as MHA", "as published", "as MQA"].map(|n| (n.to_string(), Vec::new()));
    for (_, s) in PUBLISHED {
        rows[0].1.push(kib(s.as_mha())?);
        rows[1].1.push(kib(s)?);
        rows[2].1.push(kib(KvCacheShape { n_kv_heads: 1, ..s })?);
    }
    let cache = Figure::Bars(BarChart {
        title: "Key/value cache per token in 16-bit values".into(),
        x_label: "model".into(),
        y_label: "KiB per token".into(),
        categories: PUBLISHED.iter().map(|(n, _)| n.to_string()).collect(),
        series: rows.into(),
    });
    Ok(vec![
        ("ch12_rope_wavelengths".into(), waves),
        ("ch12_kv_cache".into(), cache),
        ("ch12_compare".into(), comparison_figure(&committed_comparison()?)),
    ])
}

/// The comparison's measurements, committed; `cargo bench --bench ch12_compare -- --write`
/// measures them again.
pub const COMPARISON_FILE: &str = "chapters/img/ch12_compare.csv";

/// The text of [`COMPARISON_FILE`], read when the crate is built.
const COMPARISON: &str = include_str!("../../chapters/img/ch12_compare.csv");

/// The committed comparison's rows. Errors as [`parse_compare_csv`] does.
pub fn committed_comparison() -> Result<Vec<CompareRow>> {
    parse_compare_csv(COMPARISON, COMPARISON_FILE)
}

/// The figure: each arm's validation loss minus GPT-2's at the same seed and step (mean over
/// the arm's seeds), against the training step; GPT-2's block is the zero line.
pub fn comparison_figure(rows: &[CompareRow]) -> Figure {
    let gaps = gaps_to_gpt2(rows);
    let last = gaps.iter().flat_map(|(_, p)| p.iter().map(|q| q.0)).fold(0.0, f64::max);
    let mut series = vec![Series::unmarked("GPT-2's block", vec![(0.0, 0.0), (last, 0.0)])];
    series.extend(gaps.into_iter().map(|(arm, points)| Series::new(arm.label(), points)));
    Figure::Line(LineChart {
        title: "Validation loss against GPT-2's block, same seeds and batches".into(),
        x_label: "training step".into(),
        y_label: "difference in nats per token (below 0: better)".into(),
        series,
        markers: true,
    })
}

/// The page's table of the comparison, in Markdown: one row per arm with its parameters, seeds,
/// final validation loss (mean ± sample standard deviation over several seeds), its difference
/// from GPT-2's block at the same seeds and its mean training seconds.
pub fn comparison_table(summaries: &[ArmSummary]) -> String {
    let mut out = String::from(
        "| configuration | parameters | seeds | validation loss (nats/token) | against GPT-2 \
         | seconds per run |\n|---|---:|---:|---:|---:|---:|\n",
    );
    for s in summaries {
        let loss = match s.spread {
            Some(sd) => format!("{:.4} ± {sd:.4}", s.mean),
            None => format!("{:.4}", s.mean),
        };
        let gap = match (s.arm, s.against_gpt2) {
            (super::compare::Arm::Gpt2, _) | (_, None) => "—".to_string(),
            (_, Some(d)) => signed(d),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {loss} | {gap} | {:.0} |\n",
            s.arm.label(),
            thousands(s.parameters),
            s.finals.len(),
            s.seconds
        ));
    }
    out
}

/// A difference with its sign, a minus sign (U+2212) below zero: +0.0123, −0.0456.
pub fn signed(d: f64) -> String {
    if d < 0.0 { format!("−{:.4}", -d) } else { format!("+{d:.4}") }
}

/// A count with a space between groups of three digits, as the pages write them: 391 008.
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(ch);
    }
    out
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    crate::plot::save_all(&figures()?, dir)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter = Chapter {
    number: 12,
    stem: "ch12_modern",
    title: "From GPT-2's block to today's decoder",
    worked,
    walk,
    plots,
    errata: ERRATA,
};
