//! The stages run on the task: a base model pretrained on raw lines, then fine-tuned on answers
//! with the prompt masked or not, in full or through LoRA adapters.
//!
//! Everything reuses chapter 9: its [`Gpt`], its [`Trainer`] (AdamW, warm-up and cosine,
//! clipping) and its fused training step. The base model reads the training problems as one
//! stream of text (`57+68=125\n31+4=35\n…`) with the next-token loss at every position, as
//! pretraining reads a corpus; fine-tuning reads one problem per row
//! ([`AdditionTask::example`]). LoRA trains adapters on every block's four matrices (W_QKV, W_O,
//! W₁, W₂) and nothing else: the model's weights are the merged W + (α/r)AᵀBᵀ
//! ([`Lora::merged`]), the fused step gives ∂L/∂W of each merged weight, and
//! [`lora_weight_backward`] carries it to A and B.

use super::lora::{FineTuneCost, Lora, fine_tuning_cost, lora_weight_backward};
use super::task::{AdditionTask, Format, accuracy};
use crate::ch09_gpt::config::Config;
use crate::ch09_gpt::data::Token;
use crate::ch09_gpt::fast::FusedStep;
use crate::ch09_gpt::model::{Gpt, Param};
use crate::ch09_gpt::schedule::{Schedule, clip_global_norm};
use crate::ch09_gpt::train::{Data, StepRecord, TrainConfig, Trainer};
use crate::error::Result;
use crate::optim::{AdamConfig, AdamW};
use crate::rng::Rng;
use nalgebra::DMatrix;
use std::time::Instant;

/// The problems: numbers below 10^2 (10,000 problems), the sum in the usual order.
pub const TASK_FORMAT: Format = Format { digits: 2, reversed: false };
/// Problems kept out of every stage's training, which measure accuracy.
pub const TASK_HELD_OUT: usize = 500;
/// The split's seed.
pub const TASK_SEED: u64 = 13;

/// The chapter's task: [`TASK_FORMAT`], [`TASK_HELD_OUT`], [`TASK_SEED`].
pub fn chapter_task() -> Result<AdditionTask> {
    AdditionTask::new(TASK_FORMAT, TASK_HELD_OUT, TASK_SEED)
}

/// Every setting of the stages: the model, and for each stage its steps, batch and peak rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Recipe {
    /// The model's context n_ctx (a window of the stream holds one or two lines).
    pub context: usize,
    /// Blocks.
    pub layers: usize,
    /// Heads per block.
    pub heads: usize,
    /// Width d.
    pub width: usize,
    /// The base model's initialisation seed (the seed of its batches is the next one).
    pub model_seed: u64,
    /// Pretraining steps on the stream.
    pub pretrain_steps: usize,
    /// Windows per pretraining batch.
    pub pretrain_batch: usize,
    /// Pretraining's peak learning rate.
    pub pretrain_rate: f64,
    /// Fine-tuning steps (every fine-tuning stage takes as many).
    pub finetune_steps: usize,
    /// Problems per fine-tuning batch.
    pub finetune_batch: usize,
    /// Full fine-tuning's peak learning rate.
    pub finetune_rate: f64,
    /// LoRA's rank r.
    pub lora_rank: usize,
    /// LoRA's α (the update is scaled by α/r).
    pub lora_alpha: f64,
    /// LoRA's peak learning rate (adapters start at zero and take larger steps).
    pub lora_rate: f64,
    /// The seed of the adapters' A and of the fine-tuning batches.
    pub finetune_seed: u64,
    /// The step of the masked fine-tuning run whose model starts DPO and GRPO (and is their
    /// reference): part-way, so that they have room to show what they do.
    pub start_at: usize,
}

impl Recipe {
    /// The chapter's recipe, which the main job runs.
    pub const CHAPTER: Recipe = Recipe {
        context: 16,
        layers: 2,
        heads: 4,
        width: 48,
        model_seed: 1,
        pretrain_steps: 1_500,
        pretrain_batch: 16,
        pretrain_rate: 3e-3,
        finetune_steps: 600,
        finetune_batch: 32,
        finetune_rate: 3e-3,
        lora_rank: 8,
        lora_alpha: 8.0,
        lora_rate: 3e-3,
        finetune_seed: 7,
        start_at: 300,
    };

    /// The model's shape for `task`'s vocabulary.
    pub fn model_config(&self, task: &AdditionTask) -> Config {
        Config::new(task.tokenizer.chars().len(), self.context, self.layers, self.heads, self.width)
    }
}

/// Warm-up over a twentieth of the steps, then cosine to a tenth of `peak`; AdamW as chapter 9
/// (λ = 0.1 on the matrices, clipping at 1) with `batch` sequences.
pub fn train_config(batch: usize, peak: f64, steps: usize) -> Result<TrainConfig> {
    Ok(TrainConfig::new(batch, Schedule::new(peak, peak / 10.0, steps / 20, steps)?))
}

/// Held-out problems the accuracy curves are measured on.
pub const CURVE_PROBLEMS: usize = 100;
/// The accuracy curves' spacing, in steps.
pub const CURVE_EVERY: usize = 50;

/// Appends (step, accuracy on the first [`CURVE_PROBLEMS`] held-out problems) to `curve` when
/// `step` is a multiple of [`CURVE_EVERY`].
fn measure(
    task: &AdditionTask,
    model: &Gpt<f32>,
    step: usize,
    curve: &mut Vec<(usize, f64)>,
) -> Result<()> {
    if step.is_multiple_of(CURVE_EVERY) {
        let few = &task.held_out[..CURVE_PROBLEMS.min(task.held_out.len())];
        curve.push((step, accuracy(task, model, few)?));
    }
    Ok(())
}

/// What one stage produced.
#[derive(Clone, Debug)]
pub struct Stage {
    /// The model after the stage (merged, for LoRA).
    pub model: Gpt<f32>,
    /// One record per step.
    pub history: Vec<StepRecord>,
    /// Wall-clock seconds of the training steps.
    pub seconds: f64,
    /// Held-out exact-match accuracy after the stage.
    pub accuracy: f64,
    /// (steps taken, accuracy on the first [`CURVE_PROBLEMS`] held-out problems) at the start
    /// and every [`CURVE_EVERY`] steps (fine-tuning stages; empty for pretraining).
    pub curve: Vec<(usize, f64)>,
    /// What the stage trained and what AdamW kept for it (4-byte values).
    pub cost: FineTuneCost,
    /// The model after [`Recipe::start_at`] steps (full fine-tuning; `None` for the others).
    pub snapshot: Option<Gpt<f32>>,
}

/// The stream the base model reads: the training problems' lines, one after another.
pub fn stream(task: &AdditionTask) -> Result<Vec<Token>> {
    task.encode(&task.text(&task.train))
}

/// Pretrains chapter 9's GPT ([`Recipe::model_config`]) on random windows of the [`stream`] of
/// training lines, next-token loss everywhere.
pub fn pretrain(task: &AdditionTask, recipe: &Recipe) -> Result<Stage> {
    let r = recipe;
    let tc = train_config(r.pretrain_batch, r.pretrain_rate, r.pretrain_steps)?;
    let model = Gpt::<f32>::new(r.model_config(task), r.model_seed)?;
    let mut trainer = Trainer::new(model, &tc, r.model_seed + 1)?;
    let tokens = stream(task)?;
    let data = Data::Stream { tokens: &tokens, seq_len: r.context };
    let start = Instant::now();
    trainer.run(&data, &tc, r.pretrain_steps, |_| {})?;
    let seconds = start.elapsed().as_secs_f64();
    let cost = full_cost(&trainer.model)?;
    finish(task, trainer.model, trainer.history, seconds, cost, Vec::new())
}

fn finish(
    task: &AdditionTask,
    model: Gpt<f32>,
    history: Vec<StepRecord>,
    seconds: f64,
    cost: FineTuneCost,
    curve: Vec<(usize, f64)>,
) -> Result<Stage> {
    let accuracy = accuracy(task, &model, &task.held_out)?;
    Ok(Stage { model, history, seconds, accuracy, curve, cost, snapshot: None })
}

/// Every parameter trained, AdamW's two f32 moments for each.
fn full_cost(model: &Gpt<f32>) -> Result<FineTuneCost> {
    let shapes: Vec<(usize, usize)> = model.params.iter().map(|m| m.shape()).collect();
    fine_tuning_cost(&shapes, 0, super::lora::BYTES_PER_F32)
}

/// Full supervised fine-tuning of `base`, every parameter trained, on batches of training
/// problems with the prompt masked (`mask_prompt`) or every character after the first scored.
pub fn finetune(
    task: &AdditionTask,
    base: &Gpt<f32>,
    mask_prompt: bool,
    recipe: &Recipe,
) -> Result<Stage> {
    let r = recipe;
    let tc = train_config(r.finetune_batch, r.finetune_rate, r.finetune_steps)?;
    let mut trainer = Trainer::new(base.clone(), &tc, r.finetune_seed)?;
    let mut rng = Rng::new(r.finetune_seed);
    let (mut seconds, mut curve, mut snapshot) = (0.0, Vec::new(), None);
    for step in 0..r.finetune_steps {
        measure(task, &trainer.model, step, &mut curve)?;
        if step == r.start_at {
            snapshot = Some(trainer.model.clone());
        }
        let batch = task.batch(r.finetune_batch, mask_prompt, &mut rng)?;
        let start = Instant::now();
        trainer.step_on(&batch, &tc)?;
        seconds += start.elapsed().as_secs_f64();
    }
    measure(task, &trainer.model, r.finetune_steps, &mut curve)?;
    let cost = full_cost(&trainer.model)?;
    let stage = finish(task, trainer.model, trainer.history, seconds, cost, curve)?;
    Ok(Stage { snapshot: snapshot.or_else(|| Some(stage.model.clone())), ..stage })
}

/// The block matrices LoRA adapts, in order: each block's W_QKV, W_O, W₁, W₂.
pub const ADAPTED: [Param; 4] = [Param::WQkv, Param::WO, Param::W1, Param::W2];

/// A model with LoRA adapters on [`ADAPTED`] of every block: the frozen base and one [`Lora`]
/// (W₀ in f64, A, B, α) per matrix, as (tensor, block, adapter).
#[derive(Clone, Debug)]
pub struct LoraGpt {
    /// The base model; its adapted matrices are replaced in [`LoraGpt::merged`].
    pub base: Gpt<f32>,
    /// The adapters.
    pub adapters: Vec<(Param, usize, Lora)>,
}

impl LoraGpt {
    /// Rank-`rank` adapters on every adapted matrix of `base`, A seeded by `seed` + its index.
    pub fn new(base: Gpt<f32>, rank: usize, alpha: f64, seed: u64) -> Result<LoraGpt> {
        let mut adapters = Vec::new();
        for layer in 0..base.config.layers {
            for p in ADAPTED {
                let w = base.params.of(p, layer).map(f64::from);
                let lora = Lora::new(w, rank, alpha, seed + adapters.len() as u64)?;
                adapters.push((p, layer, lora));
            }
        }
        Ok(LoraGpt { base, adapters })
    }

    /// The base with each adapted matrix replaced by W + (α/r)AᵀBᵀ rounded to f32.
    pub fn merged(&self) -> Result<Gpt<f32>> {
        let mut model = self.base.clone();
        for (p, layer, lora) in &self.adapters {
            *model.params.of_mut(*p, *layer) = lora.merged()?.map(|x| x as f32);
        }
        Ok(model)
    }

    /// The adapters' trainable parameters and AdamW's f32 state for them.
    pub fn cost(&self) -> Result<FineTuneCost> {
        let shapes: Vec<(usize, usize)> =
            self.adapters.iter().map(|(_, _, l)| l.w.shape()).collect();
        let rank = self.adapters.first().map_or(0, |a| a.2.rank());
        fine_tuning_cost(&shapes, rank, super::lora::BYTES_PER_F32)
    }
}

/// Fine-tunes `base` through rank-r adapters on the same batches as [`finetune`] with the prompt
/// masked: the fused step's ∂L/∂W of each merged matrix, carried to A and B by
/// [`lora_weight_backward`], their global norm clipped at 1, AdamW (no decay) on A and B alone.
/// Every other parameter stays the base's.
pub fn finetune_lora(task: &AdditionTask, base: &Gpt<f32>, recipe: &Recipe) -> Result<Stage> {
    let r = recipe;
    let (steps, batch_size) = (r.finetune_steps, r.finetune_batch);
    let tc = train_config(batch_size, r.lora_rate, steps)?;
    let mut lora = LoraGpt::new(base.clone(), r.lora_rank, r.lora_alpha, r.finetune_seed)?;
    let mut model = lora.merged()?;
    let adam = AdamConfig {
        learning_rate: r.lora_rate,
        beta1: tc.beta1,
        beta2: tc.beta2,
        epsilon: tc.epsilon,
    };
    let mut optimizer = AdamW::<f64>::new(adam, 0.0)?;
    let mut fused = FusedStep::<f32>::new();
    let mut rng = Rng::new(r.finetune_seed);
    let (mut history, mut seconds, mut curve) = (Vec::new(), 0.0, Vec::new());
    for step in 0..steps {
        measure(task, &model, step, &mut curve)?;
        let batch = task.batch(batch_size, true, &mut rng)?;
        let start = Instant::now();
        let (loss, grads) = fused.loss_and_grads(&model, &batch)?;
        let mut adapter_grads: Vec<DMatrix<f64>> = Vec::new();
        for (p, layer, l) in &lora.adapters {
            let g = grads[model.params.at(*p, *layer)].map(f64::from);
            let (d_a, d_b) = lora_weight_backward(l, &g)?;
            adapter_grads.extend([d_a, d_b]);
        }
        let grad_norm = clip_global_norm(&mut adapter_grads.iter_mut().collect::<Vec<_>>(), 1.0)?;
        let lr = tc.schedule.at(step);
        optimizer.config.learning_rate = lr;
        let mut params: Vec<&mut DMatrix<f64>> =
            lora.adapters.iter_mut().flat_map(|(_, _, l)| [&mut l.a, &mut l.b]).collect();
        let refs: Vec<&DMatrix<f64>> = adapter_grads.iter().collect();
        optimizer.step(&mut params, &refs, &vec![false; refs.len()])?;
        for (p, layer, l) in &lora.adapters {
            *model.params.of_mut(*p, *layer) = l.merged()?.map(|x| x as f32);
        }
        seconds += start.elapsed().as_secs_f64();
        let tokens = batch.inputs.len();
        history.push(StepRecord { step, loss, lr, grad_norm, tokens, skipped: false });
    }
    measure(task, &model, steps, &mut curve)?;
    let cost = lora.cost()?;
    finish(task, model, history, seconds, cost, curve)
}
