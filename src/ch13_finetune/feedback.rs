//! DPO and GRPO run on the task, on chapter 9's engine: what the lessons' losses do to a whole
//! model, measured.
//!
//! Both losses depend on the model only through the log-probabilities ℓ_r = ln p_r(y_r) of
//! chosen tokens, so their gradient is a weighted cross-entropy's. With c_r = ∂L/∂ℓ_r computed
//! from the current ℓ (and every other input of L held fixed: the reference's log-probabilities,
//! the sampling policy's, the advantages), the chain rule gives
//!
//! ```text
//! ∂L/∂θ = Σ_r c_r ∂ℓ_r/∂θ = ∂/∂θ Σ_r w_r·(−ℓ_r)   with w_r = −c_r
//! ```
//!
//! exactly, at the parameters the ℓ_r were computed at. So one step is: ℓ by the fused forward
//! pass ([`Trainer::target_log_probs`]), c from the lesson's backward ([`dpo_backward`],
//! [`grpo_log_prob_gradient`]), then chapter 9's weighted step ([`Trainer::step_weighted`]),
//! whose forward pass recomputes the same ℓ.
//!
//! - **DPO**: pairs made by the rule from training problems. The chosen answer is the right one;
//!   the rejected one is the start model's own greedy reply where that is wrong, else the right
//!   answer with one digit changed. The reference π_ref is the start model.
//! - **GRPO**: for each prompt G answers sampled at a temperature, reward 1 when the rule accepts
//!   the reply and 0 otherwise, advantages within the group, μ updates per batch on the clipped
//!   surrogate with the k3 penalty towards the start model. An answer ends at its first newline:
//!   the characters sampled after it are not part of it (masked out).

use super::dpo::{DpoPair, dpo_backward, dpo_forward};
use super::grpo::{
    ADVANTAGE_EPS, GrpoSpec, GrpoTokens, group_advantages, grpo_log_prob_gradient,
    grpo_tokens_forward,
};
use super::stages::train_config;
use super::task::{AdditionTask, END, Problem, accuracy, is_correct};
use crate::ch08_tokens::Tokenizer;
use crate::ch09_gpt::data::Batch;
use crate::ch09_gpt::fast::FusedStep;
use crate::ch09_gpt::model::Gpt;
use crate::ch09_gpt::sample::{Decoding, generate};
use crate::ch09_gpt::train::Trainer;
use crate::error::{Result, invalid};
use crate::rng::Rng;

/// The settings of the two stages and of the SFT run they are compared with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FeedbackRecipe {
    /// Training problems the DPO pairs are made from (one pair each).
    pub dpo_pool: usize,
    /// DPO's steps, pairs per step and peak learning rate.
    pub dpo_steps: usize,
    /// Pairs per DPO step.
    pub dpo_pairs: usize,
    /// DPO's peak learning rate.
    pub dpo_rate: f64,
    /// GRPO's steps (each a fresh batch of samples).
    pub grpo_steps: usize,
    /// Prompts per GRPO step.
    pub grpo_prompts: usize,
    /// G, answers sampled per prompt.
    pub grpo_group: usize,
    /// μ, updates on each batch of samples (π_old is the policy that sampled them).
    pub grpo_updates: usize,
    /// GRPO's peak learning rate.
    pub grpo_rate: f64,
    /// The sampling temperature.
    pub temperature: f64,
    /// ε_c and β of the objective.
    pub spec: GrpoSpec,
    /// Problems per supervised batch in the comparison run.
    pub sft_batch: usize,
    /// The supervised comparison's peak learning rate.
    pub sft_rate: f64,
    /// Held-out problems the curves are measured on.
    pub curve_problems: usize,
    /// GRPO steps between two points of the curves.
    pub curve_every: usize,
    /// The seed of the pairs' digits, the samples and the batches.
    pub seed: u64,
}

impl FeedbackRecipe {
    /// The chapter's settings, which the main job runs.
    pub const CHAPTER: FeedbackRecipe = FeedbackRecipe {
        dpo_pool: 256,
        dpo_steps: 60,
        dpo_pairs: 16,
        dpo_rate: 3e-4,
        grpo_steps: 40,
        grpo_prompts: 4,
        grpo_group: 8,
        grpo_updates: 2,
        grpo_rate: 1e-4,
        temperature: 1.0,
        spec: GrpoSpec { clip_eps: 0.2, kl_beta: 0.04 },
        sft_batch: 32,
        sft_rate: 1e-3,
        curve_problems: 100,
        curve_every: 5,
        seed: 52,
    };

    /// The compute of one GRPO step in forward passes over a line ([`PASS_COST`]): per sample
    /// one pass to sample it, one for the reference's ℓ, and per update one for the policy's ℓ
    /// and a forward and backward pass for the step.
    pub fn grpo_step_cost(&self) -> usize {
        let samples = self.grpo_prompts * self.grpo_group;
        samples * (2 + self.grpo_updates * (1 + PASS_COST.forward_backward))
    }

    /// The compute of one supervised step: a forward and backward pass per problem.
    pub fn sft_step_cost(&self) -> usize {
        self.sft_batch * PASS_COST.forward_backward
    }
}

/// Compute counted in forward passes over one line of the task: a training step's forward and
/// backward pass counts 3 (the backward does two products for each of the forward's); sampling
/// an answer (the prompt, then one token at a time from the key/value cache) counts 1.
pub struct PassCost {
    /// A forward and backward pass over a line, in forward passes.
    pub forward_backward: usize,
}

/// See [`PassCost`].
pub const PASS_COST: PassCost = PassCost { forward_backward: 3 };

/// One DPO pair: a problem, its right answer and a wrong one, and whether the wrong one is the
/// start model's own reply.
#[derive(Clone, Debug, PartialEq)]
pub struct Pair {
    /// The problem.
    pub problem: Problem,
    /// The right answer, newline included.
    pub chosen: String,
    /// A wrong answer of the same length.
    pub rejected: String,
    /// True when `rejected` is what the start model wrote.
    pub own_mistake: bool,
}

/// The pair of each problem: the right answer against `model`'s greedy reply when that is wrong
/// (and as long as the answer), else against the right answer with one digit changed (the place
/// and the new digit drawn by `rng`).
pub fn make_pairs(
    task: &AdditionTask,
    model: &Gpt<f32>,
    problems: &[Problem],
    rng: &mut Rng,
) -> Result<Vec<Pair>> {
    let replies = task.replies(model, problems)?;
    let digits = task.format.digits + 1;
    Ok(problems
        .iter()
        .zip(replies)
        .map(|(p, reply)| {
            let chosen = task.format.answer(p);
            let own = !is_correct(&chosen, &reply) && reply.chars().count() == task.answer_len();
            let rejected = if own {
                reply
            } else {
                let mut chars: Vec<char> = chosen.chars().collect();
                let at = rng.below(digits);
                let d = chars[at].to_digit(10).unwrap_or(0) as usize;
                let new = (d + 1 + rng.below(9)) % 10;
                chars[at] = char::from_digit(new as u32, 10).unwrap_or('0');
                chars.into_iter().collect()
            };
            Pair { problem: *p, chosen, rejected, own_mistake: own }
        })
        .collect())
}

/// One line per answer: `answers[i]` (of [`AdditionTask::answer_len`] characters) after the
/// prompt of `problems[i]`, the answer's positions scored up to its first newline, the prompt's
/// and the characters after that newline not.
pub fn answer_batch(
    task: &AdditionTask,
    problems: &[Problem],
    answers: &[String],
) -> Result<Batch> {
    let (mut inputs, mut targets) = (Vec::new(), Vec::new());
    let first = task.prompt_len();
    for (p, a) in problems.iter().zip(answers) {
        let line = task.encode(&format!("{}{a}", task.format.prompt(p)))?;
        if line.len() != task.line_len() {
            let reason = format!("{a:?} is not {} characters", task.answer_len());
            return Err(invalid("answer_batch", "answers", reason));
        }
        let end = a.find(END).map_or(task.answer_len(), |e| e + 1); // the answer's characters
        inputs.extend_from_slice(&line[..line.len() - 1]);
        targets.extend((0..line.len() - 1).map(|t| {
            let k = t + 1; // the character this position predicts
            (k >= first && k < first + end).then(|| line[k])
        }));
    }
    Ok(Batch { inputs, targets, batch: problems.len(), seq_len: task.seq_len() })
}

/// Σ over each sequence's scored positions of ℓ_r (`ell`, one per position of `batch`): the
/// sequences' log-probabilities ln π(y), one per sequence.
pub fn sequence_sums(batch: &Batch, ell: &[f64]) -> Vec<f64> {
    ell.chunks(batch.seq_len)
        .zip(batch.targets.chunks(batch.seq_len))
        .map(|(l, t)| l.iter().zip(t).filter(|(_, t)| t.is_some()).map(|(l, _)| l).sum())
        .collect()
}

/// The sequence log-probabilities of a batch of pairs laid out as [`pair_batch`] lays them out
/// (row 2i the chosen answer of pair i, row 2i + 1 the rejected one) from ℓ at every position
/// (`ell`): (ln π(y_w), ln π(y_l)) per pair. The layout [`dpo_weights`] reads, and `gpt
/// finetune`'s preference batches follow.
pub fn pair_sums(batch: &Batch, ell: &[f64]) -> Vec<(f64, f64)> {
    sequence_sums(batch, ell).chunks_exact(2).map(|c| (c[0], c[1])).collect()
}

/// What a set of preference pairs says about a policy against its reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PreferenceSummary {
    /// The mean implicit reward margin m = β[(ln π(y_w) − ln π_ref(y_w)) − (ln π(y_l) −
    /// ln π_ref(y_l))] (0 while π is π_ref).
    pub margin: f64,
    /// The share of pairs with m > 0 (0 while π is π_ref).
    pub ranked: f64,
    /// The mean of ln π(y_w) − ln π(y_l): how much more likely the policy finds the chosen answer.
    pub log_ratio: f64,
    /// The share of pairs with ln π(y_w) > ln π(y_l): the pairs the policy itself ranks right.
    pub preferred: f64,
}

/// The [`PreferenceSummary`] of pairs whose (chosen, rejected) sequence log-probabilities are
/// `policy` under π and `reference` under π_ref (one per pair each, as [`pair_sums`] gives
/// them), with β = `beta`. Errors as [`dpo_forward`], and naming `reference` when the two
/// lengths differ.
pub fn preference_summary(
    policy: &[(f64, f64)],
    reference: &[(f64, f64)],
    beta: f64,
) -> Result<PreferenceSummary> {
    if policy.len() != reference.len() {
        let reason = format!("{} pairs for a policy of {}", reference.len(), policy.len());
        return Err(invalid("preference_summary", "reference", reason));
    }
    let dpo: Vec<DpoPair> = policy
        .iter()
        .zip(reference)
        .map(|(a, b)| DpoPair { chosen: a.0, rejected: a.1, ref_chosen: b.0, ref_rejected: b.1 })
        .collect();
    let (_, cache) = dpo_forward(&dpo, beta)?;
    let n = policy.len() as f64;
    Ok(PreferenceSummary {
        margin: cache.margins.iter().sum::<f64>() / n,
        ranked: cache.accuracy(),
        log_ratio: policy.iter().map(|(w, l)| w - l).sum::<f64>() / n,
        preferred: policy.iter().filter(|(w, l)| w > l).count() as f64 / n,
    })
}

/// The batch of `pairs`: row 2i the chosen line of pair i, row 2i + 1 the rejected one, each
/// scored on its answer ([`answer_batch`]).
pub fn pair_batch(task: &AdditionTask, pairs: &[&Pair]) -> Result<Batch> {
    let problems: Vec<Problem> = pairs.iter().flat_map(|p| [p.problem, p.problem]).collect();
    let answers: Vec<String> =
        pairs.iter().flat_map(|p| [p.chosen.clone(), p.rejected.clone()]).collect();
    answer_batch(task, &problems, &answers)
}

/// The sequence log-probabilities of each pair under `model`: (chosen, rejected) per pair.
fn pair_log_probs(
    task: &AdditionTask,
    step: &mut FusedStep<f32>,
    model: &Gpt<f32>,
    pairs: &[&Pair],
) -> Result<Vec<(f64, f64)>> {
    let batch = pair_batch(task, pairs)?;
    Ok(pair_sums(&batch, &step.target_log_probs(model, &batch)?))
}

/// What a DPO run measured.
#[derive(Clone, Debug)]
pub struct DpoRun {
    /// β.
    pub beta: f64,
    /// The model after the run.
    pub model: Gpt<f32>,
    /// The mean DPO loss of each step's pairs, before its update.
    pub losses: Vec<f64>,
    /// Held-out exact match after the run.
    pub accuracy: f64,
    /// The mean implicit reward margin m over the held-out pairs after the run (0 before: the
    /// policy starts as the reference).
    pub margin: f64,
    /// The share of held-out pairs with m > 0 after the run.
    pub ranked: f64,
    /// The mean of ln π(y_w) − ln π(y_l) over the held-out pairs, before and after.
    pub log_ratio: (f64, f64),
}

/// DPO from `start` (also the reference) with β = `beta` on the pairs of `pool`, measured on
/// the pairs of `held` (held-out problems) and on every held-out problem.
pub fn run_dpo(
    task: &AdditionTask,
    start: &Gpt<f32>,
    (pool, held): (&[Pair], &[Pair]),
    beta: f64,
    recipe: &FeedbackRecipe,
) -> Result<DpoRun> {
    let r = recipe;
    let tc = train_config(2 * r.dpo_pairs, r.dpo_rate, r.dpo_steps)?;
    let mut trainer = Trainer::new(start.clone(), &tc, r.seed)?;
    let mut reference = FusedStep::<f32>::new();
    let all: Vec<&Pair> = pool.iter().collect();
    let ref_pool = pair_log_probs(task, &mut reference, start, &all)?;
    let held_refs: Vec<&Pair> = held.iter().collect();
    let ref_held = pair_log_probs(task, &mut reference, start, &held_refs)?;
    let mut rng = Rng::new(r.seed);
    let mut losses = Vec::with_capacity(r.dpo_steps);
    for _ in 0..r.dpo_steps {
        let picks: Vec<usize> = (0..r.dpo_pairs).map(|_| rng.below(pool.len())).collect();
        let pairs: Vec<&Pair> = picks.iter().map(|&i| &pool[i]).collect();
        let batch = pair_batch(task, &pairs)?;
        let ell = trainer.target_log_probs(&batch)?;
        let refs: Vec<(f64, f64)> = picks.iter().map(|&i| ref_pool[i]).collect();
        let (loss, weights) = dpo_weights(&batch, &ell, &refs, beta)?;
        trainer.step_weighted(&batch, &weights, &tc)?;
        losses.push(loss);
    }
    let mut policy = FusedStep::<f32>::new();
    let after = pair_log_probs(task, &mut policy, &trainer.model, &held_refs)?;
    let (before, after) = (
        preference_summary(&ref_held, &ref_held, beta)?,
        preference_summary(&after, &ref_held, beta)?,
    );
    Ok(DpoRun {
        beta,
        accuracy: accuracy(task, &trainer.model, &task.held_out)?,
        margin: after.margin,
        ranked: after.ranked,
        log_ratio: (before.log_ratio, after.log_ratio),
        losses,
        model: trainer.model,
    })
}

/// The mean DPO loss of a [`pair_batch`] and its per-position weights w_r = −∂L/∂ℓ_r: the
/// sequences' log-probabilities from `ell` (one per position), the reference's from `refs`
/// ((chosen, rejected) per pair), [`dpo_forward`] and [`dpo_backward`], and each answer
/// position of a sequence weighted by minus its sequence's derivative (ln π(y) = Σ_t ℓ_t, so
/// ∂L/∂ℓ_t = ∂L/∂ln π(y) at each of them).
pub fn dpo_weights(
    batch: &Batch,
    ell: &[f64],
    refs: &[(f64, f64)],
    beta: f64,
) -> Result<(f64, Vec<f64>)> {
    let dpo: Vec<DpoPair> = pair_sums(batch, ell)
        .into_iter()
        .zip(refs)
        .map(|(s, r)| DpoPair { chosen: s.0, rejected: s.1, ref_chosen: r.0, ref_rejected: r.1 })
        .collect();
    if dpo.len() != refs.len() || 2 * refs.len() != batch.batch {
        let reason = format!("{} pairs for a batch of {} sequences", refs.len(), batch.batch);
        return Err(invalid("dpo_weights", "refs", reason));
    }
    let (loss, cache) = dpo_forward(&dpo, beta)?;
    let grads = dpo_backward(&cache);
    let per_sequence: Vec<f64> =
        grads.d_chosen.iter().zip(&grads.d_rejected).flat_map(|(&w, &l)| [-w, -l]).collect();
    Ok((loss, spread(batch, &per_sequence)))
}

/// Per-position weights from one value per sequence: each scored position of sequence i gets
/// `per_sequence[i]`, every other position 0.
fn spread(batch: &Batch, per_sequence: &[f64]) -> Vec<f64> {
    batch
        .targets
        .chunks(batch.seq_len)
        .zip(per_sequence)
        .flat_map(|(t, &w)| t.iter().map(move |t| if t.is_some() { w } else { 0.0 }))
        .collect()
}

/// One GRPO step's record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GrpoRecord {
    /// The share of the step's samples the rule accepted.
    pub reward: f64,
    /// The share of its groups whose rewards were all equal (no signal).
    pub flat_groups: f64,
    /// The mean length of its sampled answers in characters, newline included.
    pub answer_len: f64,
    /// The mean GRPO loss of the first update.
    pub loss: f64,
}

/// What a GRPO run, or the supervised run it is compared with, measured.
#[derive(Clone, Debug)]
pub struct CurveRun {
    /// The model after the run.
    pub model: Gpt<f32>,
    /// (compute so far in forward passes over a line, accuracy on the first
    /// [`FeedbackRecipe::curve_problems`] held-out problems).
    pub curve: Vec<(usize, f64)>,
    /// One record per GRPO step (empty for the supervised run).
    pub steps: Vec<GrpoRecord>,
    /// Held-out exact match after the run.
    pub accuracy: f64,
}

/// Accuracy on the curve's problems.
fn curve_point(task: &AdditionTask, model: &Gpt<f32>, r: &FeedbackRecipe) -> Result<f64> {
    accuracy(task, model, &task.held_out[..r.curve_problems.min(task.held_out.len())])
}

/// GRPO from `start` (also the reference) for [`FeedbackRecipe::grpo_steps`] steps.
pub fn run_grpo(
    task: &AdditionTask,
    start: &Gpt<f32>,
    recipe: &FeedbackRecipe,
) -> Result<CurveRun> {
    let r = recipe;
    let g = r.grpo_group;
    let samples = r.grpo_prompts * g;
    let tc = train_config(samples, r.grpo_rate, r.grpo_steps * r.grpo_updates)?;
    let mut trainer = Trainer::new(start.clone(), &tc, r.seed)?;
    let mut reference = FusedStep::<f32>::new();
    let mut rng = Rng::new(r.seed + 1);
    let decoding = Decoding::temperature(r.temperature);
    let (mut curve, mut steps) = (Vec::new(), Vec::new());
    for step in 0..r.grpo_steps {
        if step.is_multiple_of(r.curve_every) {
            curve.push((step * r.grpo_step_cost(), curve_point(task, &trainer.model, r)?));
        }
        let prompts: Vec<Problem> =
            (0..r.grpo_prompts).map(|_| task.train[rng.below(task.train.len())]).collect();
        let (mut problems, mut answers, mut rewards) = (Vec::new(), Vec::new(), Vec::new());
        for p in &prompts {
            let prompt = task.encode(&task.format.prompt(p))?;
            for _ in 0..g {
                let out = generate(
                    &trainer.model,
                    &prompt,
                    task.answer_len(),
                    &decoding,
                    &mut rng,
                    true,
                )?;
                let reply = task.tokenizer.decode(out.new_tokens())?;
                rewards.push(if is_correct(&task.format.answer(p), &reply) { 1.0 } else { 0.0 });
                problems.push(*p);
                answers.push(reply);
            }
        }
        let mut advantages = Vec::with_capacity(samples);
        let mut flat = 0;
        for group in rewards.chunks(g) {
            flat += usize::from(group.iter().all(|&x| x == group[0]));
            advantages.extend(group_advantages(group, ADVANTAGE_EPS)?);
        }
        let batch = answer_batch(task, &problems, &answers)?;
        let ell_ref = reference.target_log_probs(start, &batch)?;
        let ell_old = trainer.target_log_probs(&batch)?;
        let mut first_loss = 0.0;
        for update in 0..r.grpo_updates {
            let ell =
                if update == 0 { ell_old.clone() } else { trainer.target_log_probs(&batch)? };
            let (loss, weights) =
                grpo_weights(&batch, (&ell, &ell_old, &ell_ref), &advantages, r.spec)?;
            if update == 0 {
                first_loss = loss;
            }
            trainer.step_weighted(&batch, &weights, &tc)?;
        }
        let len = answers.iter().map(|a| a.find(END).map_or(a.len(), |e| e + 1)).sum::<usize>();
        steps.push(GrpoRecord {
            reward: rewards.iter().sum::<f64>() / samples as f64,
            flat_groups: flat as f64 / r.grpo_prompts as f64,
            answer_len: len as f64 / samples as f64,
            loss: first_loss,
        });
    }
    curve.push((r.grpo_steps * r.grpo_step_cost(), curve_point(task, &trainer.model, r)?));
    let accuracy = accuracy(task, &trainer.model, &task.held_out)?;
    Ok(CurveRun { model: trainer.model, curve, steps, accuracy })
}

/// The mean GRPO loss over the batch's sequences, (1/N) Σ_i L_i, and its per-position weights
/// w_r = −∂L/∂ℓ_r: each sequence i's [`grpo_tokens_forward`] with the advantage `advantages[i]`
/// and its mask the batch's scored positions, then [`grpo_log_prob_gradient`] divided by N.
/// `(ell, old, reference)`: ℓ of the policy, of the sampling policy and of the reference at
/// every position.
pub fn grpo_weights(
    batch: &Batch,
    (ell, old, reference): (&[f64], &[f64], &[f64]),
    advantages: &[f64],
    spec: GrpoSpec,
) -> Result<(f64, Vec<f64>)> {
    let t = batch.seq_len;
    let n = batch.batch as f64;
    let (mut loss, mut weights) = (0.0, Vec::with_capacity(batch.inputs.len()));
    for (i, &advantage) in advantages.iter().enumerate() {
        let rows = i * t..(i + 1) * t;
        let mask: Vec<bool> = batch.targets[rows.clone()].iter().map(Option::is_some).collect();
        let tokens = GrpoTokens {
            log_probs: &ell[rows.clone()],
            mask: &mask,
            old_log_probs: &old[rows.clone()],
            ref_log_probs: &reference[rows],
            advantage,
        };
        let (l, terms) = grpo_tokens_forward(spec, tokens)?;
        loss += l / n;
        weights.extend(grpo_log_prob_gradient(&terms).iter().map(|c| -c / n));
    }
    Ok((loss, weights))
}

/// More supervised fine-tuning from `start` (prompt masked) for the compute of `compute`
/// forward passes over a line: the comparison for [`run_grpo`], its curve at the same compute.
pub fn run_more_sft(
    task: &AdditionTask,
    start: &Gpt<f32>,
    compute: usize,
    recipe: &FeedbackRecipe,
) -> Result<CurveRun> {
    let r = recipe;
    let steps = compute / r.sft_step_cost();
    let tc = train_config(r.sft_batch, r.sft_rate, steps)?;
    let mut trainer = Trainer::new(start.clone(), &tc, r.seed)?;
    let mut rng = Rng::new(r.seed + 2);
    let every = (r.curve_every * r.grpo_step_cost()).max(1);
    let mut curve = Vec::new();
    let mut next = 0;
    for step in 0..steps {
        let spent = step * r.sft_step_cost();
        if spent >= next {
            curve.push((spent, curve_point(task, &trainer.model, r)?));
            next += every;
        }
        let batch = task.batch(r.sft_batch, true, &mut rng)?;
        trainer.step_on(&batch, &tc)?;
    }
    curve.push((steps * r.sft_step_cost(), curve_point(task, &trainer.model, r)?));
    let accuracy = accuracy(task, &trainer.model, &task.held_out)?;
    Ok(CurveRun { model: trainer.model, curve, steps: Vec::new(), accuracy })
}
