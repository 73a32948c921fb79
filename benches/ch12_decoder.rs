//! Chapter 12's training step against chapter 9's, measured (never in tests):
//! `cargo bench --bench ch12_decoder`.
//!
//! Both models have nanoGPT's CPU sizes (vocabulary 65, context 64, 4 layers, 4 heads, width
//! 128; a batch of 12 sequences of 64 tokens, f32): chapter 9's GPT-2 trained by the trainer's
//! fused step, and chapter 12's decoder in Llama's choices (rotary positions, RMSNorm, SwiGLU of
//! hidden width 344, no biases, tied unembedding; four key/value heads, so that the parameter
//! counts are equal within 1 %: the bench prints both) trained by the same trainer through the
//! decoder's [`Trainable`](llm_workbook::ch09_gpt::trainable::Trainable) step. One thread (the
//! bench starts itself again with `LLM_WORKBOOK_THREADS=1`), the thread's CPU time (other
//! programs' time on a shared machine is not counted), [`ROUNDS`] rounds that alternate the
//! two models ([`STEPS`] steps each, after warm-up steps), the same token stream and batches.
//! Prints tokens per second (median and range over the rounds), the ratio decoder / GPT-2 of each
//! round, the machine and the load (`/proc/loadavg`).
//!
//! With `-- --profile-decoder N` it runs only N decoder steps after two warm-up steps and
//! prints nothing: the process to sample with `perf record`.

#[path = "common/clock.rs"]
mod clock;
use clock::thread_cpu_seconds;
use clock::{cpu_name, load_average};
use llm_workbook::ch09_gpt::config::Config;
use llm_workbook::ch09_gpt::model::Gpt;
use llm_workbook::ch09_gpt::schedule::Schedule;
use llm_workbook::ch09_gpt::train::{Data, TrainConfig, Trainer};
use llm_workbook::ch12_modern::{
    Decoder, DecoderConfig, Gate, MlpKind, NormKind, Pairing, PositionKind, gated_hidden_width,
};
use llm_workbook::rng::Rng;
use llm_workbook::threads::{THREADS_ENV, default_threads};
use llm_workbook::workshop::run::RunModel;
use std::hint::black_box;

/// nanoGPT's CPU configuration: vocabulary, context, layers, heads, width.
const SIZES: (usize, usize, usize, usize, usize) = (65, 64, 4, 4, 128);
/// Sequences in a batch.
const BATCH: usize = 12;
/// Rounds, each timing both models.
const ROUNDS: usize = 7;
/// Steps timed per model and round.
const STEPS: usize = 4;
/// Steps before the first round (buffers and caches warmed).
const WARM_UP: usize = 2;
/// The gated MLP's hidden width is a multiple of this (as `gpt train --arch llama`'s).
const HIDDEN_MULTIPLE: usize = 8;
/// Tokens of the random stream the batches are drawn from.
const STREAM: usize = 50_000;

fn gpt_config() -> Config {
    let (v, n, l, h, c) = SIZES;
    Config::new(v, n, l, h, c)
}

fn llama_config() -> DecoderConfig {
    let (v, n, l, h, c) = SIZES;
    DecoderConfig {
        hidden: gated_hidden_width(c, HIDDEN_MULTIPLE).expect("a width the MLP takes"),
        positions: PositionKind::Rotary { base: 10_000.0, pairing: Pairing::Halves },
        norm: NormKind::Rms,
        mlp: MlpKind::Gated(Gate::Swish),
        biases: false,
        ..DecoderConfig::gpt2(v, n, l, h, c)
    }
}

/// Seconds of this thread's CPU time per step, over `n` steps of `trainer`.
fn time_steps<M: llm_workbook::ch09_gpt::trainable::Trainable<f32>>(
    trainer: &mut Trainer<f32, M>,
    data: &Data,
    tc: &TrainConfig,
    n: usize,
) -> f64 {
    let start = thread_cpu_seconds();
    for _ in 0..n {
        black_box(trainer.step(data, tc).expect("a step"));
    }
    (thread_cpu_seconds() - start) / n as f64
}

fn median_range(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if default_threads() != 1 {
        // One thread: run again with the process limited to one.
        let status = std::process::Command::new(std::env::current_exe().expect("own path"))
            .args(&args[1..])
            .env(THREADS_ENV, "1")
            .status()
            .expect("the bench starts again");
        std::process::exit(status.code().unwrap_or(1));
    }
    let mut rng = Rng::new(1);
    let tokens: Vec<u32> = (0..STREAM).map(|_| rng.below(SIZES.0) as u32).collect();
    let data = Data::Stream { tokens: &tokens, seq_len: SIZES.1 };
    let tc = TrainConfig::new(BATCH, Schedule::new(1e-3, 1e-4, 10, 1000).expect("a schedule"));
    let mut decoder =
        Trainer::new(Decoder::<f32>::new(llama_config(), 1).expect("a decoder"), &tc, 2)
            .expect("a trainer");
    if let Some(i) = args.iter().position(|a| a == "--profile-decoder") {
        let n = args.get(i + 1).and_then(|s| s.parse::<usize>().ok()).filter(|&n| n > 0);
        let Some(n) = n else {
            eprintln!("error: --profile-decoder needs a whole number of steps, at least 1");
            std::process::exit(2);
        };
        time_steps(&mut decoder, &data, &tc, n + WARM_UP);
        return;
    }
    let mut gpt =
        Trainer::new(Gpt::<f32>::new(gpt_config(), 1).expect("a GPT"), &tc, 2).expect("a trainer");
    let (p_gpt, p_dec) = (gpt.model.parameter_count(), decoder.model.parameter_count());
    let load_before = load_average();
    time_steps(&mut gpt, &data, &tc, WARM_UP);
    time_steps(&mut decoder, &data, &tc, WARM_UP);
    let tokens_per_step = (BATCH * SIZES.1) as f64;
    let (mut g, mut d, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        // Alternating which goes first, so that neither always follows the other.
        let (tg, td) = if round % 2 == 0 {
            let tg = time_steps(&mut gpt, &data, &tc, STEPS);
            (tg, time_steps(&mut decoder, &data, &tc, STEPS))
        } else {
            let td = time_steps(&mut decoder, &data, &tc, STEPS);
            (time_steps(&mut gpt, &data, &tc, STEPS), td)
        };
        g.push(tokens_per_step / tg);
        d.push(tokens_per_step / td);
        ratio.push(tg / td);
    }
    let (gm, gl, gh) = median_range(g);
    let (dm, dl, dh) = median_range(d);
    let (rm, rl, rh) = median_range(ratio);
    let (cpu, now) = (cpu_name(), clock::utc_now());
    println!("{cpu} · 1 thread · {now} UTC · load {load_before} before, {} after", load_average());
    println!("steps: {} · {}", gpt.model.step_name(), decoder.model.step_name());
    println!("| model | parameters | tokens/s (median) | range |");
    println!("|---|---|---|---|");
    println!("| chapter 9's GPT-2, fused step | {p_gpt} | {gm:.0} | {gl:.0} … {gh:.0} |");
    println!("| chapter 12's decoder, Llama's choices | {p_dec} | {dm:.0} | {dl:.0} … {dh:.0} |");
    println!(
        "decoder / GPT-2: {rm:.2}× (range {rl:.2} … {rh:.2}) over {ROUNDS} alternating rounds \
         of {STEPS} steps of {BATCH}×{} tokens",
        SIZES.1
    );
}
