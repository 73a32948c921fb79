//! Chapter 9's speed, measured (never in tests): `cargo bench --bench ch09_gpt`.
//!
//! 1. `gpt_train_step`: nanoGPT's CPU configuration (4 layers, 4 heads, width 128, context 64,
//!    batch 12, vocabulary 65, f32): forward + backward + clip + AdamW, in tokens per second, on 1
//!    and 2 threads (each in a child process, since the crate reads `LLM_WORKBOOK_THREADS` once).
//!    Two in-run peers: the very same fused step with every product computed by nalgebra's own
//!    `gemm` (`LLM_WORKBOOK_BACKEND=nalgebra`, see `llm_workbook::backend::Backend`), and the
//!    reference step the trainer took before the fused one (`Gpt::loss_and_grads`, chapter 6's
//!    functions). The share of the fused step spent in products is estimated by replaying exactly
//!    the products one step performs (same shapes, same order, same threads, through the crate's
//!    entry point) on random operands and dividing by the step's time.
//! 2. Generation: 256 new tokens at batch 1 from a 6-layer, width-384, 6-head model with a
//!    context of 256, with and without the key/value cache.
//!
//! Prints tables with the machine and the load (`/proc/loadavg`) they ran under.
//!
//! With `-- --attention-cost` it does only this: times chapter 9's forward pass at the lengths of
//! its attention-cost figure (`llm_workbook::ch09_gpt::book::forward_times`), rewrites the
//! committed measurements `data/ch09_attention_cost.csv` and redraws the figure from them. The
//! main job draws that figure from the committed file and never times anything.
//! `benches/ch09_gpt_pytorch.py` measures the same two things with PyTorch, for comparison.
//!
//! With `-- --memory-speed` (and `--rounds N`, default 5) it does only this: for `gpt train`'s
//! default model on the default corpus and for the 6-layer, width-384 model, one child process on
//! one thread pinned to one CPU (`taskset`) measures, round after round in a rotating order, a
//! plain sum of the very bytes the f32 cached step reads as weights, and the f32, int8 and 4-bit
//! cached steps (the block matrices stored, the unembedding f32); it prints one summary block:
//! the f32 step's weight-read rate as a share of the plain sum's, and the int8 and 4-bit tokens/s
//! against f32's (medians and ranges over the rounds).
//!
//! With `-- --threads 1,2,4,8,16` (and `--rounds N`, default 2) it does only the thread
//! benchmark: the fused training step of the default model (3 layers, width 96) and of the
//! 6-layer, width-384, context-256 model on each thread count, each in a child process with
//! `LLM_WORKBOOK_THREADS` set, and prints tokens/s, speed-up and efficiency against the first
//! count; `--write` also rewrites its section of `chapters/benchmarks.md`. The built binary runs
//! alone (`cargo bench --bench ch09_gpt --no-run` prints its path).
//!
//! With `-- --profile-steps N` it runs only N fused training steps of the comparison's model
//! (after two warm-up steps) and prints nothing: the process to sample with `perf record` for
//! chapter 10's profile of the step (PyTorch's side: `benches/ch09_gpt_pytorch.py --profile`).

#[path = "common/clock.rs"]
mod clock;
use clock::{cpu_name, load_average};
use llm_workbook::backend::{BACKEND_ENV, Backend, active_backend, nalgebra_products};
use llm_workbook::ch09_gpt::config::{Config, Positions};
use llm_workbook::ch09_gpt::data::random_windows;
use llm_workbook::ch09_gpt::fast::{causal_blocks, gradient_shards};
use llm_workbook::ch09_gpt::model::{Dim, Gpt, Param, Part};
use llm_workbook::ch09_gpt::sample::{Decoding, argmax, generate};
use llm_workbook::ch09_gpt::schedule::Schedule;
use llm_workbook::ch09_gpt::schedule::clip_global_norm;
use llm_workbook::ch09_gpt::train::{Data, TrainConfig, Trainer};
use llm_workbook::ch11_precision::quant::Storage;
use llm_workbook::ch11_precision::quant_step::{QuantGpt, SamplingModel};
use llm_workbook::matmul::{Op, Settings, gemm_with};
use llm_workbook::rng::Rng;
use llm_workbook::threads::{THREADS_ENV, default_threads, share_pieces};
use nalgebra::DMatrix;
use std::hint::black_box;
use std::time::Instant;

/// (m, k, n, kind): kind 0 = A·B, 1 = Aᵀ·B, 2 = A·Bᵀ, with A and B shaped for that kind.
type Product = (usize, usize, usize, u8);

/// Every product one shard of the fused training step ([`llm_workbook::ch09_gpt::fused`])
/// performs, in order, for `seqs` sequences of `t` tokens.
fn shard_products(c: &Config, seqs: usize, t: usize) -> Vec<Product> {
    let (n, d, h, v) = (seqs * t, c.width, c.heads, c.vocab_size);
    let hd = d / h;
    let mut p = Vec::new();
    for _ in 0..c.layers {
        p.push((n, d, 3 * d, 0)); // [Q K V] = n₁ W_QKV
        for _ in 0..seqs * h {
            for (r0, r1) in causal_blocks(t) {
                p.push((r1 - r0, hd, r1, 2)); // S = s·QKᵀ, one block of queries
            }
            for (r0, r1) in causal_blocks(t) {
                p.push((r1 - r0, r1, hd, 0)); // O = A V
            }
        }
        p.push((n, d, d, 0)); // W_O
        p.push((n, d, 4 * d, 0)); // c_fc
        p.push((n, 4 * d, d, 0)); // c_proj
    }
    p.push((n, d, v, 2)); // logits
    p.push((n, v, d, 0)); // ∂h = ∂z W_U
    p.push((v, n, d, 1)); // ∂W_U = ∂zᵀ h
    for _ in 0..c.layers {
        p.push((4 * d, n, d, 1)); // ∂W₂
        p.push((n, d, 4 * d, 2)); // ∂a₁
        p.push((d, n, 4 * d, 1)); // ∂W₁
        p.push((n, 4 * d, d, 2)); // ∂n₂
        p.push((d, n, d, 1)); // ∂W_O
        p.push((n, d, d, 2)); // ∂concat
        for _ in 0..seqs * h {
            for (c0, c1) in causal_blocks(t) {
                p.push((c1 - c0, t - c0, hd, 1)); // ∂V = Aᵀ ∂O, one block of keys
            }
            for (r0, r1) in causal_blocks(t) {
                p.push((r1 - r0, hd, r1, 2)); // ∂A = ∂O Vᵀ
                p.push((r1 - r0, r1, hd, 0)); // ∂Q = s ∂S K
            }
            for (c0, c1) in causal_blocks(t) {
                p.push((c1 - c0, t - c0, hd, 1)); // ∂K = s ∂Sᵀ Q
            }
        }
        p.push((d, n, 3 * d, 1)); // ∂W_QKV
        p.push((n, 3 * d, d, 2)); // ∂n₁
    }
    p
}

/// A product with its random operands.
type Operation = (Product, DMatrix<f32>, DMatrix<f32>);

fn operands(p: &Product, rng: &mut Rng) -> (DMatrix<f32>, DMatrix<f32>) {
    let (m, k, n, kind) = *p;
    match kind {
        0 => (rng.normal_matrix(m, k, 1.0), rng.normal_matrix(k, n, 1.0)),
        1 => (rng.normal_matrix(k, m, 1.0), rng.normal_matrix(k, n, 1.0)),
        _ => (rng.normal_matrix(m, k, 1.0), rng.normal_matrix(n, k, 1.0)),
    }
}

/// Seconds to run every product of every shard once, through the crate's entry point (with
/// whichever backend this process runs), the shards shared between the threads from a queue and
/// each shard's products on the threads left over, as the fused step runs them.
fn replay(shards: &[Vec<Operation>]) -> f64 {
    let threads = default_threads();
    let workers = threads.clamp(1, shards.len().max(1));
    let settings = Settings { threads: Some((threads / workers).max(1)), ..Settings::default() };
    let run = |ops: &[Operation]| {
        for ((m, _, n, kind), a, b) in ops {
            let (ta, tb) = match kind {
                0 => (Op::N, Op::N),
                1 => (Op::T, Op::N),
                _ => (Op::N, Op::T),
            };
            let mut c = DMatrix::<f32>::zeros(*m, *n);
            gemm_with(settings, 1.0, a, ta, b, tb, 0.0, &mut c).unwrap();
            black_box(c);
        }
    };
    let t = Instant::now();
    share_pieces(&mut vec![(); workers], shards.iter().collect(), |(), ops| run(ops));
    t.elapsed().as_secs_f64()
}

/// One step as the trainer took it before the fused step: the reference
/// [`Gpt::loss_and_grads`] (chapter 6's functions), clipping, AdamW.
fn reference_step(trainer: &mut Trainer<f32>, data: &Data, tc: &TrainConfig) {
    let batch = data.batch(tc.batch, &mut trainer.rng).unwrap();
    let mut out = trainer.model.loss_and_grads(&batch).unwrap();
    clip_global_norm(&mut out.grads.iter_mut().collect::<Vec<_>>(), tc.clip.unwrap()).unwrap();
    trainer.optimizer.config.learning_rate = tc.schedule.at(trainer.step);
    let decay = trainer.model.decay_mask();
    let grads: Vec<&DMatrix<f32>> = out.grads.iter().collect();
    trainer.optimizer.step(&mut trainer.model.tensors_mut(), &grads, &decay).unwrap();
    trainer.step += 1;
    black_box(out.loss);
}

/// Today's date (UTC) as YYYY-MM-DD, from the system clock.
fn today() -> String {
    clock::utc_now()[..10].to_string()
}

/// Measures the attention-cost figure's forward times, rewrites the committed file and redraws
/// the figure from it.
fn attention_cost() -> Result<(), String> {
    use llm_workbook::ch09_gpt::book::{
        ATTENTION_COST_FILE, COST_LENGTHS, COST_REPEATS, DATE_KEY, L2_KEY, L3_KEY, LOAD_KEY,
        MACHINE_KEY, attention_cost_figure, cost_table_meta, cost_table_text, forward_times,
        parse_cost_table,
    };
    let load_before = load_average();
    let times = forward_times(&COST_LENGTHS, COST_REPEATS, &clock::thread_cpu_seconds)
        .map_err(|e| e.to_string())?;
    // sysfs writes a cache's size as `512K` or `32M`.
    let cache = |index: u32| {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{index}/size");
        let text = std::fs::read_to_string(dir).unwrap_or_default();
        let text = text.trim();
        let (digits, unit) = match text.strip_suffix('K') {
            Some(d) => (d, 1usize << 10),
            None => text.strip_suffix('M').map_or((text, 1), |d| (d, 1 << 20)),
        };
        digits.parse::<usize>().map_or(0, |d| d * unit)
    };
    let header = format!(
        "Chapter 9's attention-cost figure (chapters/img/ch09_attention_cost.png) is drawn from\n\
         these measurements; the main job times nothing, so rerunning it changes no file.\n\
         Measured by `cargo bench --bench ch09_gpt -- --attention-cost` (which rewrites this\n\
         file and the figure): the forward pass of a 2-layer, width-64, 4-head GPT at batch 1\n\
         on one thread, timed by the thread's CPU time (time the scheduler gives to other\n\
         programs is not counted), fastest of {COST_REPEATS} runs.\n\
         {MACHINE_KEY}: {}\n\
         {L2_KEY}: {}\n\
         {L3_KEY}: {}\n\
         {DATE_KEY}: {}\n\
         {LOAD_KEY}: {} before, {} after",
        cpu_name(),
        cache(2),
        cache(3),
        today(),
        load_before,
        load_average()
    );
    let text = cost_table_text(&header, &times);
    // The figure is drawn from the numbers as written, as the main job will draw it.
    let times = parse_cost_table(&text).map_err(|e| e.to_string())?;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(ATTENTION_COST_FILE);
    let tmp = path.with_extension("csv.tmp");
    std::fs::write(&tmp, &text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    let meta = cost_table_meta(&text).map_err(|e| e.to_string())?;
    let files = attention_cost_figure(&times, &meta)
        .save(&llm_workbook::plot::image_dir(), "ch09_attention_cost")
        .map_err(|e| e.to_string())?;
    print!("{text}");
    println!("wrote {} and {} files", path.display(), files.len());
    Ok(())
}

/// Replaces what lies between `<!-- tag:begin -->` and `<!-- tag:end -->` in `path`, whole or not
/// at all.
fn replace_block(path: &std::path::Path, tag: &str, body: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (begin, end) = (format!("<!-- {tag}:begin -->"), format!("<!-- {tag}:end -->"));
    let start =
        text.find(&begin).ok_or(format!("{} has no {begin}", path.display()))? + begin.len();
    let stop = text[start..].find(&end).ok_or(format!("{} has no {end}", path.display()))? + start;
    let new = format!("{}\n{}\n{}", &text[..start], body.trim(), &text[stop..]);
    let tmp = path.with_extension("md.tmp");
    std::fs::write(&tmp, new).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

fn best_of(k: usize, mut f: impl FnMut() -> f64) -> f64 {
    (0..k).map(|_| f()).fold(f64::INFINITY, f64::min)
}

/// What the reference pass's copy of each block into chapter 6's types ([`Gpt::block`]) costs on
/// `gpt train`'s default model (3 blocks, 4 heads, width 96, context 64, a batch of 16, f32):
/// (seconds for the copies of every block, seconds for one reference forward and backward,
/// which makes them once), each the fastest of 20 on this thread.
fn block_copy() -> (f64, f64) {
    let config = Config::new(65, 64, 3, 4, 96);
    let model = Gpt::<f32>::new(config, 1).unwrap();
    let mut rng = Rng::new(1);
    let tokens: Vec<u32> = (0..20_000).map(|_| rng.below(65) as u32).collect();
    let batch = Data::Stream { tokens: &tokens, seq_len: 64 }.batch(16, &mut rng).unwrap();
    let time = |f: &mut dyn FnMut()| {
        best_of(20, || {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
    };
    let copies = time(&mut || (0..config.layers).for_each(|l| drop(black_box(model.block(l)))));
    let pass = time(&mut || drop(black_box(model.loss_and_grads(&batch).unwrap())));
    (copies, pass)
}

/// One configuration's step, measured in this process: (tokens/s, step s, products replayed s),
/// with the fused step or (`reference`) the reference one; the replay is skipped (0) for the
/// reference.
/// `n` fused steps of [`train_step`]'s model and data after two warm-up steps, nothing else.
fn profile_steps(n: usize) {
    let config = Config::new(65, 64, 4, 4, 128);
    let mut rng = Rng::new(1);
    let tokens: Vec<u32> = (0..50_000).map(|_| rng.below(65) as u32).collect();
    let tc = TrainConfig::new(12, Schedule::new(1e-3, 1e-4, 10, 1000).unwrap());
    let mut trainer = Trainer::new(Gpt::<f32>::new(config, 1).unwrap(), &tc, 2).unwrap();
    let data = Data::Stream { tokens: &tokens, seq_len: 64 };
    for _ in 0..n + 2 {
        black_box(trainer.step(&data, &tc).unwrap());
    }
}

fn train_step(reference: bool) -> (f64, f64, f64) {
    let config = Config::new(65, 64, 4, 4, 128);
    let (batch, t) = (12, 64);
    let mut rng = Rng::new(1);
    let tokens: Vec<u32> = (0..50_000).map(|_| rng.below(65) as u32).collect();
    let tc = TrainConfig::new(batch, Schedule::new(1e-3, 1e-4, 10, 1000).unwrap());
    let mut trainer = Trainer::new(Gpt::<f32>::new(config, 1).unwrap(), &tc, 2).unwrap();
    let data = Data::Stream { tokens: &tokens, seq_len: t };
    let one = |trainer: &mut Trainer<f32>| {
        if reference {
            reference_step(trainer, &data, &tc);
        } else {
            black_box(trainer.step(&data, &tc).unwrap());
        }
    };
    for _ in 0..2 {
        one(&mut trainer);
    }
    let steps = 10;
    let step = best_of(3, || {
        let s = Instant::now();
        for _ in 0..steps {
            one(&mut trainer);
        }
        s.elapsed().as_secs_f64() / steps as f64
    });
    if reference {
        return ((batch * t) as f64 / step, step, 0.0);
    }
    let _ = random_windows(&tokens, t, batch, &mut rng);
    // The shards as the fused step cuts the batch.
    let parts = gradient_shards(&config, batch, t);
    let shards: Vec<Vec<_>> = (0..parts)
        .map(|q| {
            let seqs = batch / parts + usize::from(q < batch % parts);
            shard_products(&config, seqs, t)
                .into_iter()
                .map(|p| {
                    let (a, b) = operands(&p, &mut rng);
                    (p, a, b)
                })
                .collect()
        })
        .collect();
    let products = best_of(5, || replay(&shards));
    ((batch * t) as f64 / step, step, products)
}

/// Tokens per second generating 256 new tokens, with the key/value cache (best of 3) and without.
fn generation() -> (f64, f64) {
    let config = Config::new(65, 256, 6, 6, 384);
    let model = Gpt::<f32>::new(config, 1).unwrap();
    let t = Instant::now();
    let g =
        generate(&model, &[0], 256, &Decoding::temperature(1.0), &mut Rng::new(3), false).unwrap();
    assert_eq!(g.new_tokens().len(), 256);
    (generation_cached(), 256.0 / t.elapsed().as_secs_f64())
}

/// Tokens per second generating 256 new tokens with the key/value cache, the best of 3 (what
/// `benches/ch09_gpt_pytorch.py --rounds` compares with PyTorch's cached generation).
fn generation_cached() -> f64 {
    let config = Config::new(65, 256, 6, 6, 384);
    let model = Gpt::<f32>::new(config, 1).unwrap();
    let run = || {
        let t = Instant::now();
        let g = generate(&model, &[0], 256, &Decoding::temperature(1.0), &mut Rng::new(3), true)
            .unwrap();
        assert_eq!(g.new_tokens().len(), 256);
        256.0 / t.elapsed().as_secs_f64()
    };
    (0..3).map(|_| run()).fold(0.0, f64::max)
}

/// The storages of the quantized generation rows: f32 (chapter 9's step), int8 and 4-bit blocks.
const GENERATION_STORAGES: [Storage; 3] = [Storage::F32, Storage::Int8, Storage::Q4];
/// Rounds of the quantized generation rows, each running every storage once in turn.
const GENERATION_ROUNDS: usize = 5;
/// Cached steps per round: the positions after the one-token prompt.
const GENERATION_STEPS: usize = 255;

/// Cached steps per second of the generation benchmark's model with its block matrices stored
/// each way of [`GENERATION_STORAGES`] (W_U stays f32), greedy from token 0: the best of
/// [`GENERATION_ROUNDS`] rounds that alternate the storages, with the weight bytes a step reads.
fn quantized_generation() -> Vec<(f64, usize)> {
    let model = Gpt::<f32>::new(Config::new(65, 256, 6, 6, 384), 1).unwrap();
    let stores: Vec<QuantGpt> =
        GENERATION_STORAGES.iter().map(|&s| QuantGpt::new(&model, s, false).unwrap()).collect();
    let mut best = vec![0.0f64; stores.len()];
    for _ in 0..GENERATION_ROUNDS {
        for (b, q) in best.iter_mut().zip(&stores) {
            let mut cache = q.new_kv_cache();
            let mut token = 0;
            let t = Instant::now();
            for _ in 0..GENERATION_STEPS {
                let z = q.step(&mut cache, token).unwrap();
                token = llm_workbook::ch09_gpt::sample::argmax(&z).unwrap() as u32;
            }
            *b = b.max(GENERATION_STEPS as f64 / t.elapsed().as_secs_f64());
        }
    }
    best.into_iter().zip(stores.iter().map(QuantGpt::weight_bytes_per_token)).collect()
}

// ───────────────────── generation at the memory's speed (`--memory-speed`) ─────────────────────

/// Rounds of `--memory-speed` when `--rounds` is not given.
const MEMORY_SPEED_ROUNDS: usize = 5;
/// Passes of the plain sum per round (the fastest is kept).
const SUM_PASSES: usize = 5;
/// Seconds of cached generation per storage and round (whole runs of n_ctx − 1 steps; the
/// fastest run is kept).
const STEP_SECONDS: f64 = 0.5;

/// The two models of `--memory-speed`: `gpt train`'s default on the default corpus (its
/// characters, 3 blocks, 4 heads, width 96, context 64, learned positions) and chapter 9's
/// generation model (6 blocks, 6 heads, width 384, context 256, vocabulary 65).
fn memory_speed_config(name: &str) -> Option<Config> {
    match name {
        "default" => {
            let text = llm_workbook::ch08_tokens::corpus::default_corpus();
            let chars = llm_workbook::ch08_tokens::chars::CharTokenizer::from_text(text).ok()?;
            Some(Config {
                positions: Positions::Learned,
                ..Config::new(chars.chars().len(), 64, 3, 4, 96)
            })
        }
        "6x384" => Some(Config::new(65, 256, 6, 6, 384)),
        _ => None,
    }
}

/// The tensors one cached f32 step reads as weights (what
/// [`SamplingModel::weight_bytes_per_token`] counts): every block matrix and the unembedding.
fn step_weights(model: &Gpt<f32>) -> Vec<&[f32]> {
    let unembedding = if model.config.tied { Param::Wte } else { Param::LmHead };
    model
        .shape()
        .order()
        .into_iter()
        .zip(model.params.iter())
        .filter(|((s, _), _)| {
            (s.part == Part::Block && s.rows != Dim::One) || s.param == unembedding
        })
        .map(|(_, t)| t.as_slice())
        .collect()
}

/// A plain sum of `values` in 16 interleaved lanes (the loop the compiler vectorises for the
/// baseline target): what reading the bytes costs, with one addition per value.
fn plain_sum(values: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    let chunks = values.chunks_exact(16);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += v;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// Tokens per second of `step` on cached generation: whole runs of n_ctx − 1 greedy steps from
/// token 0 for [`STEP_SECONDS`], the fastest run.
fn steps_per_second(context: usize, mut run: impl FnMut(usize) -> f64) -> f64 {
    let started = Instant::now();
    let mut best = 0.0f64;
    while best == 0.0 || started.elapsed().as_secs_f64() < STEP_SECONDS {
        best = best.max(run(context - 1));
    }
    best
}

/// One `--child-memory-speed` process (one thread, pinned by the parent): prints the weight bytes
/// per token of f32, int8 and 4-bit, then one line per round: the plain sum's GB/s over the f32
/// step's weights, and f32, int8 and 4-bit tokens/s, the four measured in a rotating order.
fn memory_speed_child(name: &str, rounds: usize) -> Result<(), String> {
    let config = memory_speed_config(name).ok_or(format!("no model named {name:?}"))?;
    let model = Gpt::<f32>::new(config, 1).map_err(|e| e.to_string())?;
    let stores: Vec<QuantGpt> = [Storage::Int8, Storage::Q4]
        .iter()
        .map(|&s| QuantGpt::new(&model, s, false))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let weights = step_weights(&model);
    let bytes: usize = weights.iter().map(|w| 4 * w.len()).sum();
    let f32_bytes = SamplingModel::F32(model.clone()).weight_bytes_per_token();
    if bytes != f32_bytes {
        return Err(format!("summed {bytes} bytes, the f32 step reads {f32_bytes}"));
    }
    println!(
        "{bytes} {} {}",
        stores[0].weight_bytes_per_token(),
        stores[1].weight_bytes_per_token()
    );
    let greedy = |steps: usize, step: &mut dyn FnMut(u32) -> Vec<f32>| {
        let mut token = 0;
        let t = Instant::now();
        for _ in 0..steps {
            token = argmax(&step(token)).unwrap() as u32;
        }
        steps as f64 / t.elapsed().as_secs_f64()
    };
    let context = config.context;
    for round in 0..rounds {
        let mut row = [0.0f64; 4];
        for i in 0..4 {
            let which = (i + round) % 4;
            row[which] = match which {
                0 => {
                    let seconds = best_of(SUM_PASSES, || {
                        let t = Instant::now();
                        black_box(weights.iter().map(|w| plain_sum(w)).sum::<f32>());
                        t.elapsed().as_secs_f64()
                    });
                    bytes as f64 / seconds / 1e9
                }
                1 => steps_per_second(context, |n| {
                    let mut cache = model.new_kv_cache();
                    greedy(n, &mut |t| model.step(&mut cache, t).unwrap())
                }),
                q => steps_per_second(context, |n| {
                    let store = &stores[q - 2];
                    let mut cache = store.new_kv_cache();
                    greedy(n, &mut |t| store.step(&mut cache, t).unwrap())
                }),
            };
        }
        println!("{} {} {} {}", row[0], row[1], row[2], row[3]);
    }
    Ok(())
}

/// The median and the range of `v` (not empty).
fn median_range(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    (median, v[0], v[n - 1])
}

/// `--memory-speed`: for each model of [`memory_speed_config`], one child process on one
/// thread, pinned to the last CPU with `taskset` where it exists; prints one summary block.
fn memory_speed(rounds: usize) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let cpu = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    let pinned = std::process::Command::new("taskset").arg("-V").output().is_ok();
    println!(
        "Generation at the memory's speed on {} ({} logical CPUs), kernel {}, one thread{}, \
            {rounds} rounds (each: a plain sum of the f32 step's weights, then the f32, int8 and \
            4-bit cached steps, in a rotating order); load before {}",
        cpu_name(),
        cpu + 1,
        llm_workbook::simd::active_kernel(),
        if pinned { format!(" pinned to CPU {cpu}") } else { " (not pinned: no taskset)".into() },
        load_average()
    );
    println!(
        "| model | f32 weights per token | plain sum GB/s | f32 step tokens/s | f32 step reads \
            GB/s | ÷ plain sum | int8 tokens/s | int8 ÷ f32 | 4-bit tokens/s | 4-bit ÷ f32 | \
            load after |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for name in ["default", "6x384"] {
        let mut command = if pinned {
            let mut c = std::process::Command::new("taskset");
            c.args(["-c", &cpu.to_string()]).arg(&exe);
            c
        } else {
            std::process::Command::new(&exe)
        };
        let out = command
            .args(["--child-memory-speed", name, &rounds.to_string()])
            .env(THREADS_ENV, "1")
            .output()
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<Vec<f64>> = text
            .lines()
            .map(|l| l.split_whitespace().filter_map(|v| v.parse().ok()).collect())
            .collect();
        if !out.status.success() || lines.len() != rounds + 1 {
            let why = String::from_utf8_lossy(&out.stderr);
            println!("| {name} | failed: {} |", why.lines().last().unwrap_or("no output"));
            continue;
        }
        let f32_bytes = lines[0][0];
        let column = |i: usize| lines[1..].iter().map(|r| r[i]).collect::<Vec<_>>();
        let per_round = |f: &dyn Fn(&[f64]) -> f64| lines[1..].iter().map(|r| f(r)).collect();
        let show = |(m, lo, hi): (f64, f64, f64), digits: usize| {
            format!("{m:.digits$} ({lo:.digits$}–{hi:.digits$})")
        };
        let config = memory_speed_config(name).unwrap();
        println!(
            "| {} layers, width {}, context {}, vocabulary {} | {:.2} MB | {} | {} | {} | {} | \
                {} | {} | {} | {} | {} |",
            config.layers,
            config.width,
            config.context,
            config.vocab_size,
            f32_bytes / 1e6,
            show(median_range(column(0)), 1),
            show(median_range(column(1)), 0),
            show(median_range(per_round(&|r| r[1] * f32_bytes / 1e9)), 1),
            show(median_range(per_round(&|r| r[1] * f32_bytes / 1e9 / r[0] * 100.0)), 0) + " %",
            show(median_range(column(2)), 0),
            show(median_range(per_round(&|r| r[2] / r[1])), 2),
            show(median_range(column(3)), 0),
            show(median_range(per_round(&|r| r[3] / r[1])), 2),
            load_average()
        );
    }
    println!(
        "(medians over the rounds, ranges in brackets; int8 and 4-bit store the block matrices, \
            the unembedding stays f32, as `gpt quantize` writes them)"
    );
    Ok(())
}

/// Runs this bench again as a child with `flag`, the thread count and the backend set, and
/// returns the numbers it printed (or the last line of its error output).
fn child(flag: &str, threads: usize, backend: Backend) -> Result<Vec<f64>, String> {
    let exe = std::env::current_exe().expect("the bench's own path");
    let out = std::process::Command::new(&exe)
        .arg(flag)
        .env(THREADS_ENV, threads.to_string())
        .env(BACKEND_ENV, backend.name())
        .output()
        .map_err(|e| e.to_string())?;
    let v: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.is_empty() || !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("no output")
            .to_string());
    }
    Ok(v)
}

/// Tokens per second of the fused training step of a model given as "layers,heads,width,context"
/// at `batch` sequences (best of 3 runs of 5 steps, after 2 warm-up steps), on the threads this
/// process was given (`LLM_WORKBOOK_THREADS`).
fn train_tokens_per_second(model: &str, batch: usize) -> Result<f64, String> {
    let v: Vec<usize> = model.split(',').filter_map(|x| x.trim().parse().ok()).collect();
    let [layers, heads, width, context] = v[..] else {
        return Err(format!("model {model:?}: expected layers,heads,width,context"));
    };
    let config = Config::new(65, context, layers, heads, width);
    let mut rng = Rng::new(1);
    let tokens: Vec<u32> = (0..50_000).map(|_| rng.below(65) as u32).collect();
    let tc = TrainConfig::new(batch, Schedule::new(1e-3, 1e-4, 10, 1000).unwrap());
    let mut trainer = Trainer::new(Gpt::<f32>::new(config, 1).map_err(|e| e.to_string())?, &tc, 2)
        .map_err(|e| e.to_string())?;
    let data = Data::Stream { tokens: &tokens, seq_len: context };
    for _ in 0..2 {
        black_box(trainer.step(&data, &tc).map_err(|e| e.to_string())?);
    }
    let steps = 5;
    let step = best_of(3, || {
        let s = Instant::now();
        for _ in 0..steps {
            black_box(trainer.step(&data, &tc).unwrap());
        }
        s.elapsed().as_secs_f64() / steps as f64
    });
    Ok((batch * context) as f64 / step)
}

/// The models of the thread benchmark: (name, "layers,heads,width,context", batch).
const SCALING_MODELS: [(&str, &str, usize); 2] = [
    ("default model: 3 layers, 4 heads, width 96, context 64, batch 16", "3,4,96,64", 16),
    ("6 layers, 6 heads, width 384, context 256, batch 16", "6,6,384,256", 16),
];

/// `--threads 1,2,4,8,16`: the training step of each model on each thread count, each run in a
/// child process with `LLM_WORKBOOK_THREADS` set, the counts taken in turn for `rounds` rounds
/// (best per count); prints a Markdown table of tokens/s, speed-up and efficiency against the
/// first count. Runs from the built binary alone (no cargo, no network).
fn thread_scaling(list: &str, rounds: usize) -> Result<String, String> {
    let counts: Vec<usize> = list
        .split(',')
        .map(|t| t.trim().parse::<usize>().ok().filter(|&t| t >= 1))
        .collect::<Option<_>>()
        .ok_or_else(|| format!("--threads: expected a list like 1,2,4,8,16, got {list:?}"))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let load_before = load_average();
    let mut out = String::new();
    for (name, model, batch) in SCALING_MODELS {
        let mut best = vec![0.0f64; counts.len()];
        for _ in 0..rounds {
            for (i, &t) in counts.iter().enumerate() {
                let o = std::process::Command::new(&exe)
                    .args(["--child-train-tps", model, &batch.to_string()])
                    .env(THREADS_ENV, t.to_string())
                    .output()
                    .map_err(|e| e.to_string())?;
                let text = String::from_utf8_lossy(&o.stdout);
                let tps: f64 = text.trim().parse().map_err(|_| {
                    format!("{t} threads: {}", String::from_utf8_lossy(&o.stderr).trim())
                })?;
                best[i] = best[i].max(tps);
            }
        }
        let plural = if rounds == 1 { "" } else { "s" };
        out.push_str(&format!(
            "\n{name} (fused training step, best of {rounds} round{plural}):\n\n\
             | threads | tokens/s | speed-up | efficiency |\n|---|---|---|---|\n"
        ));
        for (&t, &tps) in counts.iter().zip(&best) {
            let speed_up = tps / best[0];
            out.push_str(&format!(
                "| {t} | {tps:.0} | {speed_up:.2}× | {:.0} % |\n",
                100.0 * speed_up * counts[0] as f64 / t as f64
            ));
        }
    }
    Ok(format!(
        "`cargo bench --bench ch09_gpt -- --threads {list}` on {} ({} logical CPUs), {} UTC, \
         load average {load_before} before and {} after; the counts run in turn, each in its own \
         process with `LLM_WORKBOOK_THREADS` set.\n{out}",
        cpu_name(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        today(),
        load_average()
    ))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child-train-tps") {
        let (model, batch) = (args.get(i + 1), args.get(i + 2).and_then(|b| b.parse().ok()));
        match (model, batch) {
            (Some(m), Some(b)) => match train_tokens_per_second(m, b) {
                Ok(tps) => println!("{tps}"),
                Err(e) => {
                    eprintln!("error: {e}");
                    std::process::exit(1);
                }
            },
            _ => {
                eprintln!("error: --child-train-tps needs a model and a batch");
                std::process::exit(1);
            }
        }
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--threads") {
        let rounds = args
            .iter()
            .position(|a| a == "--rounds")
            .and_then(|j| args.get(j + 1)?.parse().ok())
            .unwrap_or(2);
        let list = args.get(i + 1).map_or("1,2,4,8,16", String::as_str);
        match thread_scaling(list, rounds) {
            Ok(table) => {
                println!("{table}");
                if args.iter().any(|a| a == "--write") {
                    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("chapters/benchmarks.md");
                    if let Err(e) = replace_block(&path, "ch09-threads", &table) {
                        eprintln!("error: {e}");
                        std::process::exit(1);
                    }
                    println!("wrote {}", path.display());
                }
            }
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--profile-steps") {
        // Only the fused training step, `n` times after two warm-up steps, printing nothing: the
        // run to sample with `perf record` (chapter 10's profile of the step against PyTorch's).
        let n = args.get(i + 1).and_then(|s| s.parse::<usize>().ok()).filter(|&n| n > 0);
        let Some(n) = n else {
            eprintln!("error: --profile-steps needs a whole number of steps, at least 1");
            std::process::exit(2);
        };
        profile_steps(n);
        return;
    }
    if let Some(kind) = args.iter().find(|a| a.starts_with("--child-train-step")) {
        let before = nalgebra_products();
        let (tps, step, products) = train_step(kind == "--child-train-step-reference");
        // The evidence that the requested backend really computed the step's products.
        let by_nalgebra = nalgebra_products() > before;
        assert_eq!(
            by_nalgebra,
            active_backend() == Backend::Nalgebra,
            "the backend that ran is not the one asked for"
        );
        println!("{tps} {step} {products}");
        return;
    }
    if (args.iter().any(|a| a == "--block-copy") || args.iter().any(|a| a == "--attention-cost"))
        && default_threads() != 1
    {
        // Both time one thread: run again with the process limited to one.
        let status = std::process::Command::new(std::env::current_exe().expect("own path"))
            .args(&args[1..])
            .env(THREADS_ENV, "1")
            .status()
            .expect("the bench starts again");
        std::process::exit(status.code().unwrap_or(1));
    }
    if args.iter().any(|a| a == "--block-copy") {
        let (copies, pass) = block_copy();
        println!(
            "block copies {:.1} µs, reference pass {:.1} µs: {:.2} % of the pass",
            copies * 1e6,
            pass * 1e6,
            100.0 * copies / pass
        );
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--child-memory-speed") {
        let (name, rounds) = (args.get(i + 1), args.get(i + 2).and_then(|r| r.parse().ok()));
        let result = match (name, rounds) {
            (Some(name), Some(rounds)) => memory_speed_child(name, rounds),
            _ => Err("--child-memory-speed needs a model and a number of rounds".into()),
        };
        if let Err(e) = result {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
        return;
    }
    if args.iter().any(|a| a == "--memory-speed") {
        let rounds = match args.iter().position(|a| a == "--rounds") {
            None => Ok(MEMORY_SPEED_ROUNDS),
            Some(i) => match args.get(i + 1).and_then(|r| r.parse::<usize>().ok()) {
                Some(r) if r > 0 => Ok(r),
                _ => Err("--rounds needs a whole number of rounds, at least 1".to_string()),
            },
        };
        if let Err(e) = rounds.and_then(memory_speed) {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
        return;
    }
    if args.iter().any(|a| a == "--child-generate-cached") {
        println!("{}", generation_cached());
        return;
    }
    if args.iter().any(|a| a == "--child-generate") {
        let (cached, uncached) = generation();
        print!("{cached} {uncached}");
        for (rate, bytes) in quantized_generation() {
            print!(" {rate} {bytes}");
        }
        println!();
        return;
    }
    if args.iter().any(|a| a == "--attention-cost") {
        if let Err(e) = attention_cost() {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
        return;
    }
    if args.iter().any(|a| a == "--list") {
        println!("gpt_train_step: bench\ngpt_generate: bench");
        return;
    }
    println!(
        "Chapter 9 benchmarks on {} ({} logical CPUs)",
        cpu_name(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!();
    println!(
        "gpt_train_step: 4 layers, 4 heads, width 128, context 64, batch 12, vocabulary 65, f32"
    );
    println!(
        "| threads | step | products by | tokens/s | ms/step | products replayed | share | fused \
            ours ÷ this row | load (1, 5, 15 min) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for threads in [1, 2] {
        let mut ours_tps = None;
        for (flag, step_kind, backend) in [
            ("--child-train-step", "fused", Backend::Ours),
            ("--child-train-step", "fused", Backend::Nalgebra),
            ("--child-train-step-reference", "reference", Backend::Ours),
        ] {
            match child(flag, threads, backend) {
                Ok(v) if v.len() == 3 => {
                    let (tps, step, products) = (v[0], v[1], v[2]);
                    let ratio = match ours_tps {
                        None => {
                            ours_tps = Some(tps);
                            "—".to_string()
                        }
                        Some(o) => format!("{:.2}×", o / tps),
                    };
                    let (replayed, share) = if products > 0.0 {
                        (
                            format!("{:.1} ms", products * 1e3),
                            format!("{:.0} %", 100.0 * products / step),
                        )
                    } else {
                        ("—".to_string(), "—".to_string())
                    };
                    println!(
                        "| {threads} | {step_kind} | {} | {tps:.0} | {:.1} | {replayed} | {share} \
                            | {ratio} | {} |",
                        backend.name(),
                        step * 1e3,
                        load_average()
                    );
                }
                Ok(v) => println!(
                    "| {threads} | {step_kind} | {} | failed: printed {v:?} |",
                    backend.name()
                ),
                Err(e) => {
                    println!("| {threads} | {step_kind} | {} | failed: {e} |", backend.name())
                }
            }
        }
    }
    println!(
        "(The fused step cuts the batch into {} shards and shares them between the threads, each \
            product on one thread, whatever the",
        gradient_shards(&Config::new(65, 64, 4, 4, 128), 12, 64)
    );
    println!(
        " backend; the reference step runs one product at a time, ours splitting large ones over \
            the threads.)"
    );
    println!();
    println!(
        "gpt_generate: 256 new tokens at batch 1, 6 layers, 6 heads, width 384, context 256, f32"
    );
    println!("| threads | key/value cache | tokens/s | load (1, 5, 15 min) |");
    println!("|---|---|---|---|");
    let mut quantized = Vec::new();
    for threads in [1, 2] {
        match child("--child-generate", threads, Backend::Ours) {
            Ok(v) if v.len() == 2 + 2 * GENERATION_STORAGES.len() => {
                println!("| {threads} | yes | {:.1} | {} |", v[0], load_average());
                println!("| {threads} | no | {:.1} | {} |", v[1], load_average());
                quantized.push((threads, v[2..].to_vec(), load_average()));
            }
            Ok(v) => println!("| {threads} | failed: printed {v:?} |"),
            Err(e) => println!("| {threads} | failed: {e} |"),
        }
    }
    println!();
    println!(
        "gpt_generate, weights stored in blocks (chapter 11): the same model, cached steps, best \
            of {GENERATION_ROUNDS} alternating rounds"
    );
    println!(
        "| threads | block matrices | tokens/s | ÷ f32 | MB of weights per token | GB/s implied | \
            load (1, 5, 15 min) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (threads, v, load) in quantized {
        let f32_rate = v[0];
        for (s, pair) in GENERATION_STORAGES.iter().zip(v.chunks(2)) {
            let (rate, bytes) = (pair[0], pair[1]);
            println!(
                "| {threads} | {} | {rate:.1} | {:.2}× | {:.1} | {:.1} | {load} |",
                s.name(),
                rate / f32_rate,
                bytes / 1e6,
                rate * bytes / 1e9
            );
        }
    }
}
