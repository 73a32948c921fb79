//! Chapter 12's measured comparison (never in tests): `cargo bench --bench ch12_compare`.
//!
//! Trains, on chapter 9's corpus with chapter 9's trainer, batches, AdamW and schedule (squeezed
//! to the comparison's steps), every arm of `llm_workbook::ch12_modern::compare::Arm` at one
//! parameter count: GPT-2's block and today's block with every seed, each part swapped alone into
//! GPT-2's block with the first `--part-seeds` seeds. Runs go seed by seed, every arm within a
//! seed, so load from other programs falls on all arms alike. Every product runs on the portable
//! kernel, so the losses are the same bits on every CPU; the seconds are this run's.
//!
//! Options (after `--`): `--steps N`, `--eval-every N`, `--seeds N` (the two ends),
//! `--part-seeds N` (the single parts), `--only KEY[,KEY…]` (those arms only, for a trial),
//! `--write` (rewrite `chapters/img/ch12_compare.csv` after every run; the main job draws the
//! figure and the page's table from it). Without `--write` it prints the rows only.

use llm_workbook::ch09_gpt::experiments::corpus_tokens;
use llm_workbook::ch12_modern::compare::{
    Arm, COMPARE_CSV, COMPARE_END_SEEDS, COMPARE_EVAL_EVERY, COMPARE_PART_SEEDS, COMPARE_STEPS,
    CompareRow, compare_csv_text, compare_run,
};
use std::time::Instant;

#[path = "common/clock.rs"]
mod clock;
use clock::{cpu_name, load_average};

struct Options {
    steps: usize,
    eval_every: usize,
    seeds: u64,
    part_seeds: u64,
    only: Option<Vec<Arm>>,
    write: bool,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        steps: COMPARE_STEPS,
        eval_every: COMPARE_EVAL_EVERY,
        seeds: COMPARE_END_SEEDS,
        part_seeds: COMPARE_PART_SEEDS,
        only: None,
        write: false,
    };
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        let count = |name: &str, v: String| -> Result<usize, String> {
            v.parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or(format!("{name} must be a count ≥ 1; got {v:?}"))
        };
        match a.as_str() {
            "--steps" => o.steps = count("--steps", value("--steps")?)?,
            "--eval-every" => o.eval_every = count("--eval-every", value("--eval-every")?)?,
            "--seeds" => o.seeds = count("--seeds", value("--seeds")?)? as u64,
            "--part-seeds" => o.part_seeds = count("--part-seeds", value("--part-seeds")?)? as u64,
            "--only" => {
                let keys = value("--only")?;
                let arms: Option<Vec<Arm>> = keys.split(',').map(Arm::from_key).collect();
                o.only = Some(arms.ok_or(format!("--only: unknown configuration in {keys:?}"))?);
            }
            "--write" => o.write = true,
            other => return Err(format!("unknown option {other:?} (see the file's top comment)")),
        }
    }
    Ok(o)
}

fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&o) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(o: &Options) -> llm_workbook::Result<()> {
    llm_workbook::book::compute_on_the_portable_kernel()?;
    println!("chapter 12's comparison on {}, load {} at the start", cpu_name(), load_average());
    let t0 = Instant::now();
    let tokens = corpus_tokens()?;
    println!(
        "corpus: {} training and {} validation tokens ({:.1} s)",
        tokens.train.len(),
        tokens.validation.len(),
        t0.elapsed().as_secs_f64()
    );
    let arms: Vec<Arm> = o.only.clone().unwrap_or_else(|| Arm::ALL.to_vec());
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("chapters/img").join(COMPARE_CSV);
    let mut rows: Vec<CompareRow> = Vec::new();
    for seed in 1..=o.seeds.max(o.part_seeds) {
        for &arm in &arms {
            let seeds = if arm.is_end() { o.seeds } else { o.part_seeds };
            if seed > seeds {
                continue;
            }
            let start = Instant::now();
            let plan = (o.steps, o.eval_every, o.steps);
            let run = compare_run(&tokens, (arm, seed), plan, |r| {
                println!(
                    "  {:<8} seed {seed} step {:>5}: validation {:.4} nats/token, {:.0} s training",
                    arm.key(),
                    r.step,
                    r.validation,
                    r.seconds
                );
            })?;
            let last = run.last().expect("at least one measurement");
            println!(
                "{} seed {seed}: {} parameters, {} steps, validation {:.4}; {:.0} s in all, \
                 load {}",
                arm.label(),
                last.parameters,
                last.step,
                last.validation,
                start.elapsed().as_secs_f64(),
                load_average()
            );
            rows.extend(run);
            if o.write {
                llm_workbook::report::write_if_changed(&path, &compare_csv_text(&rows))?;
            }
        }
    }
    println!("done in {:.0} s, load {}", t0.elapsed().as_secs_f64(), load_average());
    if !o.write {
        print!("{}", compare_csv_text(&rows));
    }
    Ok(())
}
