//! What the book shows about chapter 13: the worked-number table (no source document, so no
//! errata), the walk-through (the task, each loss on a hand-made case, the costs, the stages
//! measured) and the figure of the held-out accuracy during fine-tuning, the same on every
//! machine (the main job trains on the portable kernel, fixed seeds).

use super::dpo::{DpoPair, dpo_forward};
use super::lora::{BYTES_PER_F32, FineTuneCost, fine_tuning_cost};
use super::sft::masked_cross_entropy_forward;
use super::stages::{
    CURVE_PROBLEMS, Recipe, Stage, chapter_task, finetune, finetune_lora, pretrain,
};
use super::task::{AdditionTask, Problem, accuracy_of};
use crate::errata::Erratum;
use crate::error::Result;
use crate::plot::{Figure, LineChart, Series};
use crate::report::{Chapter, Walk, Worked};
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
}

/// Runs every stage of `recipe` on the chapter's task.
pub fn results_of(recipe: &Recipe) -> Result<Results> {
    let task = chapter_task()?;
    let base = pretrain(&task, recipe)?;
    let masked = finetune(&task, &base.model, true, recipe)?;
    let unmasked = finetune(&task, &base.model, false, recipe)?;
    let lora = finetune_lora(&task, &base.model, recipe)?;
    Ok(Results { task, base, masked, unmasked, lora })
}

/// The chapter's stages ([`Recipe::CHAPTER`]), once per process (the worked numbers, the walk
/// and the figure share them).
pub fn results() -> Result<&'static Results> {
    static CELL: std::sync::OnceLock<std::result::Result<Results, String>> =
        std::sync::OnceLock::new();
    CELL.get_or_init(|| results_of(&Recipe::CHAPTER).map_err(|e| e.to_string())).as_ref().map_err(
        |e| crate::error::Error::InvalidValue {
            op: "ch13_finetune::results",
            arg: "training",
            reason: e.clone(),
        },
    )
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

/// The costs of fine-tuning the chapter's model: every parameter, or rank-r adapters on the
/// block matrices.
fn chapter_costs(r: &Results) -> (FineTuneCost, FineTuneCost) {
    (r.masked.cost, r.lora.cost)
}

/// The chapter's numbers, recomputed.
pub fn worked() -> Result<Vec<Worked>> {
    let task = chapter_task()?;
    let (margin, dpo_loss) = dpo_example()?;
    let gpt2 = gpt2_small_matrices();
    let full = fine_tuning_cost(&gpt2, 0, BYTES_PER_F32)?;
    let lora8 = fine_tuning_cost(&gpt2, 8, BYTES_PER_F32)?;
    let mut rows = vec![
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
    ];
    rows.extend(measured_rows(results()?));
    Ok(rows)
}

/// The measured rows: each stage's held-out accuracy and the parameters each fine-tuning
/// trains. The numbers are the same bits on every CPU (portable kernel, fixed seeds).
pub fn measured_rows(r: &Results) -> Vec<Worked> {
    const TEST: &str = "the_stages_measured_as_the_page_reports";
    let (full, lora) = chapter_costs(r);
    let held = r.task.held_out.len();
    let rows = [
        (format!("base model, exact match on {held} held-out problems"), "0.040", r.base.accuracy),
        ("fine-tuned, prompt masked".to_string(), "0.974", r.masked.accuracy),
        ("fine-tuned, every character scored".to_string(), "0.104", r.unmasked.accuracy),
        ("fine-tuned with LoRA, prompt masked".to_string(), "0.106", r.lora.accuracy),
        ("the chapter's model, trainable in full".to_string(), "58032", full.trainable as f64),
        ("with LoRA on its block matrices".to_string(), "12288", lora.trainable as f64),
    ];
    rows.into_iter()
        .map(|(q, printed, ours)| Worked::number(TEST, THIS_CRATE, q, printed, ours))
        .collect()
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
    out.step("5. The stages, measured")?;
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

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    let r = results()?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        for line in stage_lines(r) {
            let _ = writeln!(out, " {line}");
        }
    }
    crate::plot::save_all(&[("ch13_accuracy".into(), accuracy_figure(r))], dir)
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
