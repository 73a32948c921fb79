//! What the book shows about chapter 13: the worked-number table (no source document, so no
//! errata), the walk-through (the task, each loss on a hand-made case, the costs, the stages
//! measured), the figures of the held-out accuracy during fine-tuning and during GRPO, and the
//! file of the stages' measured values ([`RUNS_CSV`]) that the page's tables print, the same on
//! every machine (the main job trains on the portable kernel, fixed seeds).

use super::dpo::{DpoPair, dpo_forward};
use super::feedback::{
    CurveRun, DpoRun, FeedbackRecipe, GrpoRecord, make_pairs, run_dpo, run_grpo, run_more_sft,
};
use super::grpo::{GrpoSpec, GrpoTokens, grpo_log_prob_gradient, grpo_tokens_forward};
use super::lora::{BYTES_PER_F32, fine_tuning_cost};
use super::sft::masked_cross_entropy_forward;
use super::stages::{
    CURVE_PROBLEMS, Recipe, Stage, chapter_task, finetune, finetune_lora, pretrain,
};
use super::task::{AdditionTask, Problem, accuracy, accuracy_of};
use crate::errata::Erratum;
use crate::error::Result;
use crate::plot::{Figure, LineChart, Series};
use crate::report::{Chapter, Walk, Worked};
use crate::rng::Rng;
use crate::sources::THIS_CRATE;
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};

/// No source document, so no errata.
pub const ERRATA: &[Erratum] = &[];

/// GPT-2 124M's attention and MLP matrices, per layer (d = 768), for its 12 layers.
pub fn gpt2_small_matrices() -> Vec<(usize, usize)> {
    let layer = [(768, 2304), (768, 768), (768, 3072), (3072, 768)];
    (0..12).flat_map(|_| layer).collect()
}

/// The stages as the main job runs them: the task, the base model, fine-tuning with the prompt
/// masked and not, and LoRA.
#[derive(Clone, Debug)]
pub struct Results {
    /// The task.
    pub task: AdditionTask,
    /// The base model (pretrained on raw lines).
    pub base: Stage,
    /// Full fine-tuning, the prompt masked.
    pub masked: Stage,
    /// Full fine-tuning, every character scored.
    pub unmasked: Stage,
    /// LoRA, the prompt masked.
    pub lora: Stage,
    /// DPO and GRPO from the masked run's model after [`Recipe::start_at`] steps.
    pub feedback: Feedback,
}

/// The DPO values of β the main job compares.
pub const DPO_BETAS: [f64; 2] = [0.1, 0.5];

/// What DPO and GRPO did on the task, from one start.
#[derive(Clone, Debug)]
pub struct Feedback {
    /// Held-out exact match of the start (and reference) model.
    pub start_accuracy: f64,
    /// The share of the DPO pool's rejected answers that are the start model's own mistakes.
    pub own_mistakes: f64,
    /// One DPO run per β of [`DPO_BETAS`].
    pub dpo: Vec<DpoRun>,
    /// GRPO.
    pub grpo: CurveRun,
    /// More supervised fine-tuning for GRPO's compute.
    pub more_sft: CurveRun,
}

/// Runs every stage of `recipe` on the chapter's task, then DPO (each β of `betas`) and GRPO
/// by `feedback` from the masked run's model after [`Recipe::start_at`] steps.
pub fn results_of(recipe: &Recipe, feedback: &FeedbackRecipe, betas: &[f64]) -> Result<Results> {
    let task = chapter_task()?;
    let base = pretrain(&task, recipe)?;
    let masked = finetune(&task, &base.model, true, recipe)?;
    let unmasked = finetune(&task, &base.model, false, recipe)?;
    let lora = finetune_lora(&task, &base.model, recipe)?;
    let start = masked.snapshot.as_ref().unwrap_or(&masked.model);
    let feedback = feedback_of(&task, start, feedback, betas)?;
    Ok(Results { task, base, masked, unmasked, lora, feedback })
}

/// DPO for each β of `betas` and GRPO from `start`, and more SFT for GRPO's compute.
pub fn feedback_of(
    task: &AdditionTask,
    start: &crate::ch09_gpt::model::Gpt<f32>,
    recipe: &FeedbackRecipe,
    betas: &[f64],
) -> Result<Feedback> {
    let mut rng = Rng::new(recipe.seed);
    let pool = make_pairs(task, start, &task.train[..recipe.dpo_pool], &mut rng)?;
    let held_problems = &task.held_out[..recipe.curve_problems.min(task.held_out.len())];
    let held = make_pairs(task, start, held_problems, &mut rng)?;
    let own = pool.iter().filter(|p| p.own_mistake).count() as f64 / pool.len().max(1) as f64;
    let dpo = betas
        .iter()
        .map(|&beta| run_dpo(task, start, (&pool, &held), beta, recipe))
        .collect::<Result<Vec<_>>>()?;
    let grpo = run_grpo(task, start, recipe)?;
    let compute = recipe.grpo_steps * recipe.grpo_step_cost();
    let more_sft = run_more_sft(task, start, compute, recipe)?;
    let start_accuracy = accuracy(task, start, &task.held_out)?;
    Ok(Feedback { start_accuracy, own_mistakes: own, dpo, grpo, more_sft })
}

/// The chapter's stages ([`Recipe::CHAPTER`]), once per process (the worked numbers, the walk
/// and the figure share them).
pub fn results() -> Result<&'static Results> {
    static CELL: std::sync::OnceLock<std::result::Result<Results, String>> =
        std::sync::OnceLock::new();
    CELL.get_or_init(|| {
        results_of(&Recipe::CHAPTER, &FeedbackRecipe::CHAPTER, &DPO_BETAS)
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| crate::error::Error::InvalidValue {
        op: "ch13_finetune::results",
        arg: "training",
        reason: e.clone(),
    })
}

/// The masked cross-entropy of the hand-made case: a prompt row, then answer rows with
/// probabilities 3/4 and 1/2, L = ln(8/3)/2.
fn three_rows_loss() -> Result<f64> {
    let logits = DMatrix::from_row_slice(3, 2, &[5.0, 0.0, 3.0_f64.ln(), 0.0, 0.0, 0.0]);
    Ok(masked_cross_entropy_forward(&logits, &[1, 0, 1], &[false, true, true])?.0)
}

/// β of the DPO example.
pub const DPO_EXAMPLE_BETA: f64 = 0.5;

/// The DPO example: policy −2 and −3, reference −1 and −4, β = 1/2: (margin, loss).
fn dpo_example() -> Result<(f64, f64)> {
    let pair = DpoPair { chosen: -2.0, rejected: -3.0, ref_chosen: -1.0, ref_rejected: -4.0 };
    let (loss, cache) = dpo_forward(&[pair], DPO_EXAMPLE_BETA)?;
    Ok((cache.margins[0], loss))
}

/// Four hand-made replies to four problems, two right.
fn hand_accuracy(task: &AdditionTask) -> Result<f64> {
    let problems = [(1, 2), (10, 90), (5, 5), (0, 0)].map(|(a, b)| Problem { a, b });
    let replies = ["003\n12", "100\n", "011\n", "000"].map(String::from);
    accuracy_of(&task.answers(&problems), &replies)
}

/// The chapter's numbers, recomputed.
pub fn worked() -> Result<Vec<Worked>> {
    let task = chapter_task()?;
    let (margin, dpo_loss) = dpo_example()?;
    let gpt2 = gpt2_small_matrices();
    let full = fine_tuning_cost(&gpt2, 0, BYTES_PER_F32)?;
    let lora8 = fine_tuning_cost(&gpt2, 8, BYTES_PER_F32)?;
    let rows = vec![
        Worked::number(
            "masked_cross_entropy_of_two_answer_tokens_by_hand",
            THIS_CRATE,
            "masked cross-entropy of answer rows at 3/4 and 1/2, ln(8/3)/2",
            "0.4904",
            three_rows_loss()?,
        ),
        Worked::number(
            "gpt2_small_attention_and_mlp_with_rank_8_by_hand",
            THIS_CRATE,
            "GPT-2 124M attention and MLP matrices, trainable in full",
            "84934656",
            full.trainable as f64,
        ),
        Worked::number(
            "gpt2_small_attention_and_mlp_with_rank_8_by_hand",
            THIS_CRATE,
            "the same with LoRA r = 8",
            "1179648",
            lora8.trainable as f64,
        ),
        Worked::number(
            "gpt2_small_attention_and_mlp_with_rank_8_by_hand",
            THIS_CRATE,
            "AdamW's bytes (m, v in f32), full",
            "679477248",
            full.optimizer_bytes as f64,
        ),
        Worked::number(
            "gpt2_small_attention_and_mlp_with_rank_8_by_hand",
            THIS_CRATE,
            "AdamW's bytes, LoRA r = 8",
            "9437184",
            lora8.optimizer_bytes as f64,
        ),
        Worked::number(
            "dpo_loss_at_margin_zero_is_ln_2",
            THIS_CRATE,
            "DPO loss at margin 0, ln 2",
            "0.6931",
            dpo_forward(
                &[DpoPair { chosen: -2.0, rejected: -3.0, ref_chosen: -2.0, ref_rejected: -3.0 }],
                1.0,
            )?
            .0,
        ),
        Worked::number(
            "dpo_loss_and_margin_with_the_reference_by_hand",
            THIS_CRATE,
            "DPO margin at β = 0.5, policy (−2, −3) against reference (−1, −4)",
            "-1",
            margin,
        ),
        Worked::number(
            "dpo_loss_and_margin_with_the_reference_by_hand",
            THIS_CRATE,
            "its loss, ln(1 + e)",
            "1.3133",
            dpo_loss,
        ),
        Worked::number(
            "accuracy_of_four_hand_made_replies_is_one_half",
            THIS_CRATE,
            "exact match of four hand-made replies",
            "0.5",
            hand_accuracy(&task)?,
        ),
        Worked::number(
            "the_length_bias_of_per_answer_means_by_hand",
            THIS_CRATE,
            "GRPO weight of a token, 2-token answer over 4-token answer, same A",
            "2",
            length_bias()?,
        ),
        Worked::number(
            "a_group_of_eight_at_nine_in_ten_is_flat_by_hand",
            THIS_CRATE,
            "chance that G = 8 samples at p = 0.9 all get the same reward",
            "0.4305",
            flat_group_chance(FLAT_EXAMPLE.0, FLAT_EXAMPLE.1),
        ),
    ];
    Ok(rows)
}

/// The example of a group with no signal: G samples, each right with probability p.
pub const FLAT_EXAMPLE: (usize, f64) = (8, 0.9);

/// The chance that G independent samples, each rewarded with probability p, all get the same
/// reward: p^G + (1 − p)^G. Such a group has every advantage 0.
pub fn flat_group_chance(g: usize, p: f64) -> f64 {
    p.powi(g as i32) + (1.0 - p).powi(g as i32)
}

/// The length bias of GRPO's per-answer mean: the weight −∂L/∂ℓ_t of one token of a 2-token
/// answer over that of a 4-token answer, both with advantage 1, the policy still the sampler
/// and the reference (ρ = 1, k = 0): (1/2)/(1/4) = 2.
fn length_bias() -> Result<f64> {
    let spec = GrpoSpec { clip_eps: 0.2, kl_beta: 0.04 };
    let weight = |len: usize| -> Result<f64> {
        let ell = vec![-0.5; len];
        let mask = vec![true; len];
        let t = GrpoTokens {
            log_probs: &ell,
            mask: &mask,
            old_log_probs: &ell,
            ref_log_probs: &ell,
            advantage: 1.0,
        };
        Ok(-grpo_log_prob_gradient(&grpo_tokens_forward(spec, t)?.1)[0])
    };
    Ok(weight(2)? / weight(4)?)
}

/// The file, written by the main job beside the figures, that keeps at full precision the
/// measured values the page's tables of §6 print: a change of any of them shows as a changed
/// file, and `the_pages_run_tables_are_the_main_jobs` holds the page's tables to it.
pub const RUNS_CSV: &str = "ch13_runs.csv";

/// Mean of a GRPO record's field over the first or the last [`REWARD_WINDOW`] steps.
fn window_mean(steps: &[GrpoRecord], last: bool, field: fn(&GrpoRecord) -> f64) -> f64 {
    let n = REWARD_WINDOW.min(steps.len()).max(1);
    let part = if last { &steps[steps.len().saturating_sub(n)..] } else { &steps[..n] };
    part.iter().map(field).sum::<f64>() / n as f64
}

/// GRPO steps averaged for the reward and no-signal share at the start and at the end.
pub const REWARD_WINDOW: usize = 5;

/// The text of [`RUNS_CSV`]: `table,row,value` lines. Tables: `accuracy` (rows: the stages),
/// `trainable` and `adamw_bytes` (rows `full`, `lora`), `dpo_margin`, `dpo_ranked`,
/// `dpo_log_ratio` (rows: `beta=…`, and `start` for the log-ratio), `dpo_pairs` (row
/// `own_mistakes`), `grpo` (rows: rewards, no-signal shares and answer lengths over the first
/// and last [`REWARD_WINDOW`] steps, the compute) and `sft` (its steps).
pub fn runs_csv(r: &Results) -> String {
    let f = &r.feedback;
    let mut rows: Vec<(&str, String, f64)> = vec![
        ("accuracy", "base".into(), r.base.accuracy),
        ("accuracy", "masked".into(), r.masked.accuracy),
        ("accuracy", "unmasked".into(), r.unmasked.accuracy),
        ("accuracy", "lora".into(), r.lora.accuracy),
        ("accuracy", "start".into(), f.start_accuracy),
        ("accuracy", "grpo".into(), f.grpo.accuracy),
        ("accuracy", "more_sft".into(), f.more_sft.accuracy),
        ("trainable", "full".into(), r.masked.cost.trainable as f64),
        ("trainable", "lora".into(), r.lora.cost.trainable as f64),
        ("adamw_bytes", "full".into(), r.masked.cost.optimizer_bytes as f64),
        ("adamw_bytes", "lora".into(), r.lora.cost.optimizer_bytes as f64),
        ("dpo_pairs", "own_mistakes".into(), f.own_mistakes),
    ];
    if let Some(d) = f.dpo.first() {
        rows.push(("dpo_log_ratio", "start".into(), d.log_ratio.0));
    }
    for d in &f.dpo {
        let beta = format!("beta={}", d.beta);
        rows.push(("accuracy", format!("dpo {beta}"), d.accuracy));
        rows.push(("dpo_margin", beta.clone(), d.margin));
        rows.push(("dpo_ranked", beta.clone(), d.ranked));
        rows.push(("dpo_log_ratio", beta, d.log_ratio.1));
    }
    let s = &f.grpo.steps;
    for (last, when) in [(false, "first"), (true, "last")] {
        rows.push(("grpo", format!("reward_{when}"), window_mean(s, last, |x| x.reward)));
        rows.push(("grpo", format!("flat_{when}"), window_mean(s, last, |x| x.flat_groups)));
        rows.push(("grpo", format!("answer_len_{when}"), window_mean(s, last, |x| x.answer_len)));
    }
    let compute = f.grpo.curve.last().map_or(0, |c| c.0);
    rows.push(("grpo", "compute".into(), compute as f64));
    rows.push(("sft", "compute".into(), f.more_sft.curve.last().map_or(0, |c| c.0) as f64));
    let mut text = String::from("table,row,value\n");
    for (table, row, value) in rows {
        text += &format!("{table},{row},{value:?}\n");
    }
    text
}

/// The walk-through.
pub fn walk(out: &mut Walk) -> Result<()> {
    let task = chapter_task()?;
    let f = task.format;
    out.step("1. The task: addition as text, the answer ended by a newline")?;
    let p = Problem { a: 57, b: 68 };
    out.say(&format!(
        "prompt {:?}  answer {:?}  line {:?}",
        f.prompt(&p),
        f.answer(&p),
        f.line(&p)
    ))?;
    out.say(&format!(
        "{} problems to train on, {} held out; {} characters, ids {:?}",
        task.train.len(),
        task.held_out.len(),
        task.tokenizer.chars().len(),
        task.encode(&f.line(&p))?
    ))?;
    let (_, masked) = task.example(&p, true)?;
    let (_, all) = task.example(&p, false)?;
    let count = |t: &[Option<u32>]| t.iter().filter(|x| x.is_some()).count();
    out.say(&format!(
        "scored positions of its example: {} with the prompt masked, {} without",
        count(&masked),
        count(&all)
    ))?;
    out.say(&format!("four hand-made replies, two right: accuracy {}", hand_accuracy(&task)?))?;
    out.step("2. The masked cross-entropy of a hand-made case")?;
    out.say(&format!("L = ln(8/3)/2 = {:.6}", three_rows_loss()?))?;
    out.step("3. What LoRA trains and what AdamW keeps")?;
    let gpt2 = gpt2_small_matrices();
    for (name, rank) in [("GPT-2 124M, full", 0), ("GPT-2 124M, LoRA r = 8", 8)] {
        let c = fine_tuning_cost(&gpt2, rank, BYTES_PER_F32)?;
        out.say(&format!(
            "{name:<24} {:>12} parameters {:>12} bytes",
            c.trainable, c.optimizer_bytes
        ))?;
    }
    out.step("4. DPO against the reference")?;
    let (margin, loss) = dpo_example()?;
    out.say(&format!(
        "policy (−2, −3), reference (−1, −4), β = 1/2: margin {margin}, loss {loss:.6}"
    ))?;
    out.step("5. GRPO's pitfalls in numbers")?;
    let (g, p) = FLAT_EXAMPLE;
    out.say(&format!(
        "a group of {g} at p = {p} has every reward equal with chance {:.4}: no signal",
        flat_group_chance(g, p)
    ))?;
    out.say(&format!(
        "a token of a 2-token answer weighs {} times one of a 4-token answer",
        length_bias()?
    ))?;
    out.step("6. The stages, measured")?;
    let r = results()?;
    for line in stage_lines(r) {
        out.say(&line)?;
    }
    Ok(())
}

/// The stages' table as the walk and the main job print it (seconds are this run's).
fn stage_lines(r: &Results) -> Vec<String> {
    let recipe = Recipe::CHAPTER;
    let mut lines = vec![
        format!(
            "base: {} steps of {} windows of {} characters; each fine-tuning: {} steps of {}",
            recipe.pretrain_steps,
            recipe.pretrain_batch,
            recipe.context,
            recipe.finetune_steps,
            recipe.finetune_batch
        ),
        "  stage                      accuracy   seconds   trainable   AdamW bytes".to_string(),
    ];
    for (name, s) in [
        ("base (pretrained)", &r.base),
        ("full, prompt masked", &r.masked),
        ("full, every character", &r.unmasked),
        (&*format!("LoRA r = {}, prompt masked", recipe.lora_rank), &r.lora),
    ] {
        lines.push(format!(
            "  {name:<26} {:>8.3} {:>9.1} {:>11} {:>13}",
            s.accuracy, s.seconds, s.cost.trainable, s.cost.optimizer_bytes
        ));
    }
    let f = &r.feedback;
    lines.push(format!(
        "from the masked run's model at step {} (accuracy {:.3}; {:.0} % of the DPO pool's \
            rejected answers its own mistakes):",
        recipe.start_at,
        f.start_accuracy,
        100.0 * f.own_mistakes
    ));
    for d in &f.dpo {
        lines.push(format!(
            "  DPO β = {:<4}  accuracy {:.3}  mean margin {:+.3}  pairs ranked {:.3}",
            d.beta, d.accuracy, d.margin, d.ranked
        ));
    }
    let s = &f.grpo.steps;
    lines.push(format!(
        "  GRPO          accuracy {:.3}  reward {:.3} → {:.3}  flat groups {:.2} → {:.2}",
        f.grpo.accuracy,
        window_mean(s, false, |x| x.reward),
        window_mean(s, true, |x| x.reward),
        window_mean(s, false, |x| x.flat_groups),
        window_mean(s, true, |x| x.flat_groups)
    ));
    lines.push(format!("  more SFT      accuracy {:.3} for the same compute", f.more_sft.accuracy));
    let replies = r.task.replies(&r.masked.model, &r.task.held_out[..3]).unwrap_or_default();
    for (p, reply) in r.task.held_out.iter().zip(replies) {
        lines.push(format!("  fine-tuned: {:?} → {:?}", r.task.format.prompt(p), reply));
    }
    lines
}

/// The figure: held-out accuracy (first [`CURVE_PROBLEMS`] problems) against fine-tuning steps.
pub fn accuracy_figure(r: &Results) -> Figure {
    let series = [
        ("prompt masked", &r.masked),
        ("every character scored", &r.unmasked),
        ("LoRA, prompt masked", &r.lora),
    ]
    .into_iter()
    .map(|(name, s)| Series::new(name, s.curve.iter().map(|&(k, a)| (k as f64, a)).collect()))
    .collect();
    Figure::Line(LineChart {
        title: format!("Exact match on {CURVE_PROBLEMS} held-out problems while fine-tuning"),
        x_label: "fine-tuning step".into(),
        y_label: "accuracy".into(),
        series,
        markers: true,
    })
}

/// The figure of GRPO against more SFT: held-out accuracy (first problems) against compute,
/// and the reward of GRPO's own samples at each step.
pub fn grpo_figure(r: &Results) -> Figure {
    let f = &r.feedback;
    let points = |c: &[(usize, f64)]| c.iter().map(|&(k, a)| (k as f64, a)).collect();
    let cost = FeedbackRecipe::CHAPTER.grpo_step_cost();
    let reward = f.grpo.steps.iter().enumerate().map(|(i, s)| ((i * cost) as f64, s.reward));
    let problems = FeedbackRecipe::CHAPTER.curve_problems;
    Figure::Line(LineChart {
        title: format!("GRPO against more SFT from the same start ({problems} held-out problems)"),
        x_label: "compute, forward passes over a line (a backward counts 2)".into(),
        y_label: "exact match / reward".into(),
        series: vec![
            Series::new("GRPO, held-out accuracy", points(&f.grpo.curve)),
            Series::new("GRPO, reward of its samples", reward.collect()),
            Series::new("more SFT, held-out accuracy", points(&f.more_sft.curve)),
        ],
        markers: true,
    })
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    let r = results()?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        for line in stage_lines(r) {
            let _ = writeln!(out, " {line}");
        }
    }
    crate::report::write_if_changed(&dir.join(RUNS_CSV), &runs_csv(r))?;
    let figures =
        [("ch13_accuracy".into(), accuracy_figure(r)), ("ch13_grpo".into(), grpo_figure(r))];
    crate::plot::save_all(&figures, dir)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter = Chapter {
    number: 13,
    stem: "ch13_finetune",
    title: "After pretraining: fine-tuning on answers, LoRA, DPO and GRPO",
    worked,
    walk,
    plots,
    errata: ERRATA,
};
