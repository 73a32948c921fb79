//! Chapter 9's speed, measured (never in tests): `cargo bench --bench ch09_gpt`.
//!
//! 1. `gpt_train_step`: nanoGPT's CPU configuration (4 layers, 4 heads, width 128, context 64,
//!    batch 12, vocabulary 65, f32): forward + backward + clip + AdamW, in tokens per second, with
//!    the matrix products limited to 1 and to 2 threads (each in a child process, since the
//!    crate reads `LLM_WORKBOOK_THREADS` once). The share of the step spent in products is
//!    measured by replaying exactly the products one step performs (same shapes, same order,
//!    through the crate's entry point); the in-run peer replays them with nalgebra's own
//!    products, and the step time with nalgebra products is estimated as
//!    step − (our products) + (nalgebra's products), everything else being the same code.
//! 2. Generation: 256 new tokens at batch 1 from a 6-layer, width-384, 6-head model with a
//!    context of 256, with and without the key/value cache.
//!
//! Prints a table with the machine it ran on.

use llm_workbook::ch09_gpt::config::Config;
use llm_workbook::ch09_gpt::data::random_windows;
use llm_workbook::ch09_gpt::model::Gpt;
use llm_workbook::ch09_gpt::sample::{Decoding, generate};
use llm_workbook::ch09_gpt::schedule::Schedule;
use llm_workbook::ch09_gpt::train::{Data, TrainConfig, Trainer};
use llm_workbook::matmul::{matmul, matmul_nt, matmul_tn};
use llm_workbook::rng::Rng;
use nalgebra::DMatrix;
use std::hint::black_box;
use std::time::Instant;

const THREADS_ENV: &str = "LLM_WORKBOOK_THREADS";

fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_else(|| "unknown CPU".into())
}

/// (m, k, n, kind): kind 0 = A·B, 1 = Aᵀ·B, 2 = A·Bᵀ, with A and B shaped for that kind.
type Product = (usize, usize, usize, u8);

/// Every product of one training step of the configuration, in order.
fn step_products(c: &Config, batch: usize, t: usize) -> Vec<Product> {
    let (n, d, h, v) = (batch * t, c.width, c.heads, c.vocab_size);
    let hd = d / h;
    let mut p = Vec::new();
    for _ in 0..c.layers {
        for _ in 0..3 {
            p.push((n, d, d, 0)); // Q, K, V
        }
        for _ in 0..batch * h {
            p.push((t, hd, t, 2)); // QKᵀ
            p.push((t, t, hd, 0)); // A V
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
        p.push((n, 4 * d, d, 2)); // ∂x
        p.push((d, n, d, 1)); // ∂W_O
        p.push((n, d, d, 2)); // ∂concat
        for _ in 0..batch * h {
            p.push((t, t, hd, 1)); // ∂V = Aᵀ ∂O
            p.push((t, hd, t, 2)); // ∂A = ∂O Vᵀ
            p.push((t, t, hd, 0)); // ∂Q = ∂S K
            p.push((t, t, hd, 1)); // ∂K = ∂Sᵀ Q
        }
        for _ in 0..3 {
            p.push((n, d, d, 2)); // ∂x through W_Q, W_K, W_V
            p.push((d, n, d, 1)); // ∂W_Q, ∂W_K, ∂W_V
        }
    }
    p
}

fn operands(p: &Product, rng: &mut Rng) -> (DMatrix<f32>, DMatrix<f32>) {
    let (m, k, n, kind) = *p;
    match kind {
        0 => (rng.normal_matrix(m, k, 1.0), rng.normal_matrix(k, n, 1.0)),
        1 => (rng.normal_matrix(k, m, 1.0), rng.normal_matrix(k, n, 1.0)),
        _ => (rng.normal_matrix(m, k, 1.0), rng.normal_matrix(n, k, 1.0)),
    }
}

/// Seconds to run every product once, through the crate (`ours`) or nalgebra directly.
fn replay(ops: &[(Product, DMatrix<f32>, DMatrix<f32>)], ours: bool) -> f64 {
    let t = Instant::now();
    for (p, a, b) in ops {
        let c = match (ours, p.3) {
            (true, 0) => matmul(a, b).unwrap(),
            (true, 1) => matmul_tn(a, b).unwrap(),
            (true, _) => matmul_nt(a, b).unwrap(),
            (false, 0) => a * b,
            (false, 1) => a.transpose() * b,
            (false, _) => a * b.transpose(),
        };
        black_box(c);
    }
    t.elapsed().as_secs_f64()
}

fn best_of(k: usize, mut f: impl FnMut() -> f64) -> f64 {
    (0..k).map(|_| f()).fold(f64::INFINITY, f64::min)
}

/// One configuration's step, measured in this process: (tokens/s, step s, our products s, nalgebra products s).
fn train_step() -> (f64, f64, f64, f64) {
    let config = Config::new(65, 64, 4, 4, 128);
    let (batch, t) = (12, 64);
    let mut rng = Rng::new(1);
    let tokens: Vec<u32> = (0..50_000).map(|_| rng.below(65) as u32).collect();
    let tc = TrainConfig::new(batch, Schedule::new(1e-3, 1e-4, 10, 1000).unwrap());
    let mut trainer = Trainer::new(Gpt::<f32>::new(config, 1).unwrap(), &tc, 2).unwrap();
    let data = Data::Stream { tokens: &tokens, seq_len: t };
    for _ in 0..2 {
        trainer.step(&data, &tc).unwrap();
    }
    let steps = 10;
    let step = best_of(3, || {
        let s = Instant::now();
        for _ in 0..steps {
            black_box(trainer.step(&data, &tc).unwrap());
        }
        s.elapsed().as_secs_f64() / steps as f64
    });
    let _ = random_windows(&tokens, t, batch, &mut rng);
    let ops: Vec<_> = step_products(&config, batch, t)
        .into_iter()
        .map(|p| {
            let (a, b) = operands(&p, &mut rng);
            (p, a, b)
        })
        .collect();
    let ours = best_of(5, || replay(&ops, true));
    let peer = best_of(5, || replay(&ops, false));
    ((batch * t) as f64 / step, step, ours, peer)
}

fn generation() -> (f64, f64) {
    let config = Config::new(65, 256, 6, 6, 384);
    let model = Gpt::<f32>::new(config, 1).unwrap();
    let run = |cache: bool| {
        let t = Instant::now();
        let g = generate(&model, &[0], 256, &Decoding::temperature(1.0), &mut Rng::new(3), cache).unwrap();
        assert_eq!(g.new_tokens().len(), 256);
        256.0 / t.elapsed().as_secs_f64()
    };
    (run(true), run(false))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child-train-step") {
        let _ = i;
        let (tps, step, ours, peer) = train_step();
        println!("{tps} {step} {ours} {peer}");
        return;
    }
    if args.iter().any(|a| a == "--list") {
        println!("gpt_train_step: bench\ngpt_generate: bench");
        return;
    }
    println!("Chapter 9 benchmarks on {} ({} logical CPUs)", cpu_name(), std::thread::available_parallelism().map_or(1, |n| n.get()));
    println!();
    println!("gpt_train_step: 4 layers, 4 heads, width 128, context 64, batch 12, vocabulary 65, f32");
    println!("| threads | tokens/s | ms/step | products (ours) | share | products (nalgebra) | step with nalgebra products (est.) |");
    println!("|---|---|---|---|---|---|---|");
    let exe = std::env::current_exe().expect("the bench's own path");
    for threads in [1, 2] {
        let out =
            std::process::Command::new(&exe).arg("--child-train-step").env(THREADS_ENV, threads.to_string()).output().expect("child run");
        let text = String::from_utf8_lossy(&out.stdout);
        let v: Vec<f64> = text.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        if v.len() != 4 {
            println!("| {threads} | failed: {} |", String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or(""));
            continue;
        }
        let (tps, step, ours, peer) = (v[0], v[1], v[2], v[3]);
        let est = step - ours + peer;
        println!(
            "| {threads} | {tps:.0} | {:.1} | {:.1} ms | {:.0} % | {:.1} ms | {:.1} ms ({:.0} tokens/s) |",
            step * 1e3,
            ours * 1e3,
            100.0 * ours / step,
            peer * 1e3,
            est * 1e3,
            768.0 / est
        );
    }
    println!("PyTorch 2.x on this kind of machine, same step (issue 9): about 14,500 tokens/s on 1 thread, 22,000–23,500 on 2.");
    println!();
    let (cached, uncached) = generation();
    println!("gpt_generate: 256 new tokens at batch 1, 6 layers, 6 heads, width 384, context 256, f32");
    println!("| key/value cache | tokens/s |");
    println!("|---|---|");
    println!("| yes | {cached:.1} |");
    println!("| no | {uncached:.1} |");
    println!("PyTorch on 2 threads with a cache, same size (issue 9): about 290 tokens/s.");
}
