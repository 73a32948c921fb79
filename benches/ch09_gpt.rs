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
//! With `-- --threads 1,2,4,8,16` (and `--rounds N`, default 2) it does only the thread
//! benchmark: the fused training step of the default model (3 layers, width 96) and of the
//! 6-layer, width-384, context-256 model on each thread count, each in a child process with
//! `LLM_WORKBOOK_THREADS` set, and prints tokens/s, speed-up and efficiency against the first
//! count; `--write` also rewrites its section of `chapters/benchmarks.md`. The built binary runs
//! alone (`cargo bench --bench ch09_gpt --no-run` prints its path).

#[path = "common/clock.rs"]
mod clock;
use llm_workbook::backend::{BACKEND_ENV, Backend, active_backend, nalgebra_products};
use llm_workbook::ch09_gpt::config::Config;
use llm_workbook::ch09_gpt::data::random_windows;
use llm_workbook::ch09_gpt::fast::{causal_blocks, gradient_shards};
use llm_workbook::ch09_gpt::model::Gpt;
use llm_workbook::ch09_gpt::sample::{Decoding, generate};
use llm_workbook::ch09_gpt::schedule::Schedule;
use llm_workbook::ch09_gpt::schedule::clip_global_norm;
use llm_workbook::ch09_gpt::train::{Data, TrainConfig, Trainer};
use llm_workbook::ch11_precision::quant::Storage;
use llm_workbook::ch11_precision::quant_step::QuantGpt;
use llm_workbook::matmul::{Op, Settings, gemm_with};
use llm_workbook::rng::Rng;
use llm_workbook::threads::{THREADS_ENV, default_threads, share_pieces};
use nalgebra::DMatrix;
use std::hint::black_box;
use std::time::Instant;

fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

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
    let load_before = load();
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
        load()
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

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
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
    let run = |cache: bool| {
        let t = Instant::now();
        let g = generate(&model, &[0], 256, &Decoding::temperature(1.0), &mut Rng::new(3), cache)
            .unwrap();
        assert_eq!(g.new_tokens().len(), 256);
        256.0 / t.elapsed().as_secs_f64()
    };
    ((0..3).map(|_| run(true)).fold(0.0, f64::max), run(false))
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
    let load_before = load();
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
        load()
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
                        load()
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
                println!("| {threads} | yes | {:.1} | {} |", v[0], load());
                println!("| {threads} | no | {:.1} | {} |", v[1], load());
                quantized.push((threads, v[2..].to_vec(), load()));
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
