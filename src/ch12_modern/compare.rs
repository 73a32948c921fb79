//! The measured comparison: GPT-2's block against today's, and each part swapped in alone, all
//! trained by chapter 9's trainer on chapter 9's corpus at one parameter count.
//!
//! Every arm starts from chapter 9's corpus model (3 blocks, H = 4, C = 96, context 64, the
//! 512-token BPE), turns on its parts, then sets the MLP's hidden width F to the one that brings
//! the whole model's parameter count P(F) nearest GPT-2's P₀. P is affine in F (each block's
//! MLP holds F·(2C + b) or 3C·F parameters, b = 1 with biases), so
//!
//! ```text
//! F* = 1 + round((P₀ − P(1)) / (P(2) − P(1)))
//! ```
//!
//! A run records, every `eval_every` steps and after the last, the validation loss over every
//! held-out token, in nats per token, with the tokens and the training seconds so far: the rows
//! of [`COMPARE_CSV`], which `benches/ch12_compare.rs` measures and the main job draws from.

use super::decoder::{Decoder, DecoderConfig, MlpKind, NormKind, PositionKind};
use super::glu::Gate;
use super::rms_norm::RMS_NORM_EPS;
use super::rope::{Pairing, ROPE_BASE};
use crate::ch09_gpt::data::covering_windows;
use crate::ch09_gpt::experiments::{CorpusTokens, corpus_setup};
use crate::ch09_gpt::train::{Data, Throughput, Trainer};
use crate::ch09_gpt::trainable::Trainable;
use crate::error::{Error, Result, invalid};

/// The file the benchmark writes and the main job reads, under `chapters/img/`.
pub const COMPARE_CSV: &str = "ch12_compare.csv";

/// The CSV's header line.
pub const COMPARE_HEADER: &str = "configuration,seed,parameters,step,tokens,validation,seconds";

/// Query heads per key/value head in the comparison's grouped-query attention (half the
/// key/value heads of GPT-2's block).
pub const KV_SHARING: usize = 2;

/// Windows per validation batch (chapter 9's corpus run measures with the same).
pub const VALIDATION_WINDOWS: usize = 32;

/// One configuration of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// GPT-2's block: learned positions, LayerNorm, 4× GELU MLP, H_kv = H, biases, tied.
    Gpt2,
    /// Today's block: rotary positions (halves), RMSNorm, SwiGLU, H_kv = H/2, QK-norm, no
    /// biases, tied.
    Modern,
    /// GPT-2's block with rotary positions (halves, base 10 000) in place of W_P.
    Rope,
    /// GPT-2's block with RMSNorm in place of every LayerNorm.
    RmsNorm,
    /// GPT-2's block with SwiGLU in place of the GELU MLP (and so no biases anywhere: the
    /// decoder's one switch turns them off together, and a gated MLP has none).
    SwiGlu,
    /// GPT-2's block with half the key/value heads.
    Gqa,
    /// GPT-2's block with QK-norm.
    QkNorm,
}

impl Arm {
    /// Every arm, in the table's order: the two ends, then the parts alone.
    pub const ALL: [Arm; 7] =
        [Arm::Gpt2, Arm::Modern, Arm::Rope, Arm::RmsNorm, Arm::SwiGlu, Arm::Gqa, Arm::QkNorm];

    /// Its key in the CSV.
    pub fn key(self) -> &'static str {
        match self {
            Arm::Gpt2 => "gpt2",
            Arm::Modern => "modern",
            Arm::Rope => "rope",
            Arm::RmsNorm => "rms_norm",
            Arm::SwiGlu => "swiglu",
            Arm::Gqa => "gqa",
            Arm::QkNorm => "qk_norm",
        }
    }

    /// Its name on the page and in the figure.
    pub fn label(self) -> &'static str {
        match self {
            Arm::Gpt2 => "GPT-2's block",
            Arm::Modern => "today's block",
            Arm::Rope => "GPT-2 + RoPE",
            Arm::RmsNorm => "GPT-2 + RMSNorm",
            Arm::SwiGlu => "GPT-2 + SwiGLU, no biases",
            Arm::Gqa => "GPT-2 + GQA (2 of 4 kv heads)",
            Arm::QkNorm => "GPT-2 + QK-norm",
        }
    }

    /// The arm with key `key`, if any.
    pub fn from_key(key: &str) -> Option<Arm> {
        Arm::ALL.into_iter().find(|a| a.key() == key)
    }

    /// Whether it is one of the two ends (trained with every seed of the comparison).
    pub fn is_end(self) -> bool {
        matches!(self, Arm::Gpt2 | Arm::Modern)
    }

    /// `base` (GPT-2's choices) with this arm's parts switched on, its hidden width not yet
    /// matched.
    fn switched(self, base: &DecoderConfig) -> DecoderConfig {
        let mut c = *base;
        let rope = PositionKind::Rotary { base: ROPE_BASE, pairing: Pairing::Halves };
        let half_kv = (base.n_heads / KV_SHARING).max(1);
        match self {
            Arm::Gpt2 => {}
            Arm::Modern => {
                (c.positions, c.norm, c.mlp) = (rope, NormKind::Rms, MlpKind::Gated(Gate::Swish));
                (c.n_kv_heads, c.qk_norm, c.biases, c.eps) = (half_kv, true, false, RMS_NORM_EPS);
            }
            Arm::Rope => c.positions = rope,
            Arm::RmsNorm => (c.norm, c.eps) = (NormKind::Rms, RMS_NORM_EPS),
            Arm::SwiGlu => (c.mlp, c.biases) = (MlpKind::Gated(Gate::Swish), false),
            Arm::Gqa => c.n_kv_heads = half_kv,
            Arm::QkNorm => c.qk_norm = true,
        }
        c
    }

    /// This arm's decoder: `base` (GPT-2's choices) with the arm's parts on and the MLP's hidden
    /// width F the one whose parameter count is nearest `base`'s (see the module's formula; half
    /// a unit of F rounds up). Errors as [`DecoderConfig::validate`] does.
    pub fn config(self, base: &DecoderConfig) -> Result<DecoderConfig> {
        let target = parameter_count(base)? as f64;
        let c = self.switched(base);
        let at = |f: usize| parameter_count(&DecoderConfig { hidden: f, ..c });
        let (p1, p2) = (at(1)?, at(2)?);
        let slope = (p2 - p1) as f64;
        let f = 1.0 + ((target - p1 as f64) / slope).round();
        Ok(DecoderConfig { hidden: f.max(1.0) as usize, ..c })
    }
}

/// The parameters of a decoder of `config`, counted on its tensors.
pub fn parameter_count(config: &DecoderConfig) -> Result<usize> {
    Ok(Decoder::<f32>::zeros(*config)?.parameter_count())
}

/// One measurement of a run: the validation loss after `step` steps.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareRow {
    /// The arm's [`Arm::key`].
    pub arm: Arm,
    /// The seed: the model is initialised with it and the batches drawn with seed + 1, so seed
    /// 1 is chapter 9's corpus run's pair (1, 2).
    pub seed: u64,
    /// The model's parameters.
    pub parameters: usize,
    /// Steps taken.
    pub step: usize,
    /// Training tokens seen (B·T per step).
    pub tokens: usize,
    /// The mean loss over every validation token, nats per token.
    pub validation: f64,
    /// Wall-clock seconds of the training steps so far (validation not counted).
    pub seconds: f64,
}

/// Trains `arm` with `seed` for `steps` steps of chapter 9's corpus setup (its batch, AdamW and
/// schedule squeezed to `steps`, [`corpus_setup`]) through chapter 9's [`Trainer`] on the
/// tokens' training part, measuring the validation loss every `eval_every` steps and after the
/// last. It stops after `until` steps (`steps` for the whole run; fewer gives the run's first
/// rows, the same bits). `on_row` sees each measurement as it is made. Errors on zero steps, a
/// zero `eval_every` or `until` beyond `steps`, and as the trainer does.
pub fn compare_run(
    tokens: &CorpusTokens,
    (arm, seed): (Arm, u64),
    (steps, eval_every, until): (usize, usize, usize),
    mut on_row: impl FnMut(&CompareRow),
) -> Result<Vec<CompareRow>> {
    const OP: &str = "compare_run";
    if eval_every == 0 {
        return Err(invalid(OP, "eval_every", "must be at least 1"));
    }
    if until > steps {
        return Err(invalid(OP, "until", format!("{until} is beyond the run's {steps} steps")));
    }
    let setup = corpus_setup(crate::ch08_tokens::Tokenizer::vocab_size(&tokens.tokenizer), steps)?;
    let c = &setup.config;
    let base = DecoderConfig::gpt2(c.vocab_size, c.context, c.layers, c.heads, c.width);
    let config = arm.config(&base)?;
    let model = Decoder::<f32>::new(config, seed)?;
    let parameters = model.parameter_count();
    let data_seed = seed.checked_add(1).ok_or_else(|| invalid(OP, "seed", "is u64::MAX"))?;
    let mut trainer = Trainer::new(model, &setup.train, data_seed)?;
    let data = Data::Stream { tokens: &tokens.train, seq_len: c.context };
    let val = covering_windows(&tokens.validation, c.context, VALIDATION_WINDOWS);
    let mut speed = Throughput::default();
    let mut rows = Vec::new();
    while trainer.step < until {
        let t = std::time::Instant::now();
        let r = trainer.step(&data, &setup.train)?;
        speed.add(r.tokens, t.elapsed().as_secs_f64());
        if trainer.step.is_multiple_of(eval_every) || trainer.step == steps {
            let row = CompareRow {
                arm,
                seed,
                parameters,
                step: trainer.step,
                tokens: speed.tokens,
                validation: validation_loss(&trainer.model, &val)?,
                seconds: speed.seconds,
            };
            on_row(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// The mean loss over every scored token of `batches`, nats per token.
pub fn validation_loss(
    model: &Decoder<f32>,
    batches: &[crate::ch09_gpt::data::Batch],
) -> Result<f64> {
    let (mut total, mut count) = (0.0, 0usize);
    for b in batches {
        let n = b.scored();
        total += model.batch_loss(b)? * n as f64;
        count += n;
    }
    if count == 0 {
        return Err(Error::Empty { op: "validation_loss", arg: "batches" });
    }
    Ok(total / count as f64)
}

/// The CSV text of `rows`: [`COMPARE_HEADER`], then one line per row, the loss with 6 decimals
/// and the seconds with 1.
pub fn compare_csv_text(rows: &[CompareRow]) -> String {
    let mut out = format!("{COMPARE_HEADER}\n");
    for r in rows {
        out.push_str(&format!(
            "{},{},{},{},{},{:.6},{:.1}\n",
            r.arm.key(),
            r.seed,
            r.parameters,
            r.step,
            r.tokens,
            r.validation,
            r.seconds
        ));
    }
    out
}

/// Reads [`compare_csv_text`]'s format back. Errors, naming `file` and the line, on another
/// header, a line without 7 fields, an unknown configuration or a field that is not a number.
pub fn parse_compare_csv(text: &str, file: &str) -> Result<Vec<CompareRow>> {
    let bad = |line: usize, reason: String| Error::Parse {
        file: file.to_string(),
        line: Some(line),
        reason,
    };
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.trim() == COMPARE_HEADER => {}
        _ => return Err(bad(1, format!("the header must be {COMPARE_HEADER}"))),
    }
    let mut rows = Vec::new();
    for (i, line) in lines.filter(|(_, l)| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 7 {
            return Err(bad(i + 1, format!("{} fields, the header has 7", f.len())));
        }
        let arm = Arm::from_key(f[0])
            .ok_or_else(|| bad(i + 1, format!("unknown configuration {:?}", f[0])))?;
        let int = |k: usize| -> Result<usize> {
            f[k].parse()
                .map_err(|_| bad(i + 1, format!("field {} is not a count: {:?}", k + 1, f[k])))
        };
        let real = |k: usize| -> Result<f64> {
            f[k].parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| bad(i + 1, format!("field {} is not a number: {:?}", k + 1, f[k])))
        };
        rows.push(CompareRow {
            arm,
            seed: int(1)? as u64,
            parameters: int(2)?,
            step: int(3)?,
            tokens: int(4)?,
            validation: real(5)?,
            seconds: real(6)?,
        });
    }
    Ok(rows)
}

/// Training steps of each run: a sixth of chapter 9's corpus run (1 600), its schedule squeezed
/// to this length, so that each of the comparison's 21 runs takes minutes on one core.
pub const COMPARE_STEPS: usize = 250;
/// Validation is measured this often (and after the last step).
pub const COMPARE_EVAL_EVERY: usize = 50;
/// Seeds of the two ends.
pub const COMPARE_END_SEEDS: u64 = 3;
/// Seeds of each single part.
pub const COMPARE_PART_SEEDS: u64 = 3;

/// One arm's result: its runs' last measurements summarised.
#[derive(Clone, Debug, PartialEq)]
pub struct ArmSummary {
    /// The arm.
    pub arm: Arm,
    /// Its parameters.
    pub parameters: usize,
    /// Steps of each run.
    pub steps: usize,
    /// Training tokens of each run.
    pub tokens: usize,
    /// (seed, final validation loss) of each run, by seed.
    pub finals: Vec<(u64, f64)>,
    /// The mean final validation loss m = (1/n) Σ_s L_s, nats per token.
    pub mean: f64,
    /// The spread over seeds, the sample standard deviation √(Σ_s (L_s − m)²/(n − 1)); None
    /// for one seed.
    pub spread: Option<f64>,
    /// The mean over its seeds of L_s − L_s(GPT-2), the GPT-2 run with the same seed (hence the
    /// same batches); None when GPT-2 lacks one of its seeds.
    pub against_gpt2: Option<f64>,
    /// The mean training seconds of a run.
    pub seconds: f64,
}

/// The last measurement of every (arm, seed) run of `rows`, in row order.
pub fn final_rows(rows: &[CompareRow]) -> Vec<&CompareRow> {
    let mut last: Vec<&CompareRow> = Vec::new();
    for r in rows {
        match last.iter_mut().find(|l| l.arm == r.arm && l.seed == r.seed) {
            Some(l) if r.step >= l.step => *l = r,
            Some(_) => {}
            None => last.push(r),
        }
    }
    last
}

/// Each arm of `rows` summarised (in [`Arm::ALL`] order, arms without rows left out). Errors on
/// no rows, and on runs of one arm with different parameter counts, steps or tokens.
pub fn summarize(rows: &[CompareRow]) -> Result<Vec<ArmSummary>> {
    const OP: &str = "summarize";
    let last = final_rows(rows);
    if last.is_empty() {
        return Err(Error::Empty { op: OP, arg: "rows" });
    }
    let gpt2 = |seed: u64| last.iter().find(|r| r.arm == Arm::Gpt2 && r.seed == seed);
    let mut out = Vec::new();
    for arm in Arm::ALL {
        let mut runs: Vec<&CompareRow> = last.iter().copied().filter(|r| r.arm == arm).collect();
        runs.sort_by_key(|r| r.seed);
        let Some(&first) = runs.first() else { continue };
        if runs.iter().any(|r| {
            (r.parameters, r.step, r.tokens) != (first.parameters, first.step, first.tokens)
        }) {
            let why = format!("the runs of {} differ in parameters, steps or tokens", arm.key());
            return Err(invalid(OP, "rows", why));
        }
        let n = runs.len() as f64;
        let mean = runs.iter().map(|r| r.validation).sum::<f64>() / n;
        let spread = (runs.len() > 1).then(|| {
            (runs.iter().map(|r| (r.validation - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        });
        let diffs: Option<Vec<f64>> =
            runs.iter().map(|r| gpt2(r.seed).map(|g| r.validation - g.validation)).collect();
        out.push(ArmSummary {
            arm,
            parameters: first.parameters,
            steps: first.step,
            tokens: first.tokens,
            finals: runs.iter().map(|r| (r.seed, r.validation)).collect(),
            mean,
            spread,
            against_gpt2: diffs.map(|d| d.iter().sum::<f64>() / n),
            seconds: runs.iter().map(|r| r.seconds).sum::<f64>() / n,
        });
    }
    Ok(out)
}

/// For each arm but GPT-2's, (steps, mean over its seeds of L_s(step) − L_s(GPT-2)(step)) at
/// every step both measured: how far each arm runs ahead of or behind GPT-2's block during
/// training (below 0: ahead).
pub fn gaps_to_gpt2(rows: &[CompareRow]) -> Vec<(Arm, Vec<(f64, f64)>)> {
    let mut out = Vec::new();
    for arm in Arm::ALL.into_iter().filter(|&a| a != Arm::Gpt2) {
        let mut steps: Vec<usize> = rows.iter().filter(|r| r.arm == arm).map(|r| r.step).collect();
        steps.sort_unstable();
        steps.dedup();
        let mut points = Vec::new();
        for step in steps {
            let d: Vec<f64> = rows
                .iter()
                .filter(|r| r.arm == arm && r.step == step)
                .filter_map(|r| {
                    rows.iter()
                        .find(|g| g.arm == Arm::Gpt2 && g.seed == r.seed && g.step == step)
                        .map(|g| r.validation - g.validation)
                })
                .collect();
            if !d.is_empty() {
                points.push((step as f64, d.iter().sum::<f64>() / d.len() as f64));
            }
        }
        if !points.is_empty() {
            out.push((arm, points));
        }
    }
    out
}
