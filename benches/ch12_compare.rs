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
//! `--part-seeds N` (the single parts), `--first-seed N` (start at seed N, leaving out the
//! seeds before it), `--only KEY[,KEY…]` (those arms only, for a trial), `--write` (rewrite
//! `chapters/img/ch12_compare.csv` after every run; the main job draws the figure and the page's
//! table from it), `--keep` (with `--write`: keep the file's rows of every (arm, seed) run this
//! one does not make, the rows sorted by seed, arm and step as a whole run writes them). Without
//! `--write` it prints the rows only. A run whose (arm, seed) the file already holds is compared
//! with the file's rows and said to be the same bits or not.

use llm_workbook::ch09_gpt::experiments::corpus_tokens;
use llm_workbook::ch12_modern::compare::{
    Arm, COMPARE_CSV, COMPARE_END_SEEDS, COMPARE_EVAL_EVERY, COMPARE_PART_SEEDS, COMPARE_STEPS,
    CompareRow, compare_csv_text, compare_run, parse_compare_csv,
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
    first_seed: u64,
    only: Option<Vec<Arm>>,
    write: bool,
    keep: bool,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        steps: COMPARE_STEPS,
        eval_every: COMPARE_EVAL_EVERY,
        seeds: COMPARE_END_SEEDS,
        part_seeds: COMPARE_PART_SEEDS,
        first_seed: 1,
        only: None,
        write: false,
        keep: false,
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
            "--first-seed" => o.first_seed = count("--first-seed", value("--first-seed")?)? as u64,
            "--write" => o.write = true,
            "--keep" => o.keep = true,
            other => return Err(format!("unknown option {other:?} (see the file's top comment)")),
        }
    }
    if o.keep && !o.write {
        return Err("--keep is for --write (it keeps the file's other runs)".into());
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
    let stored = match std::fs::read_to_string(&path) {
        Ok(text) => parse_compare_csv(&text, &path.display().to_string())?,
        Err(_) => Vec::new(),
    };
    let mut rows: Vec<CompareRow> = Vec::new();
    for seed in o.first_seed..=o.seeds.max(o.part_seeds) {
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
            let before: Vec<&CompareRow> =
                stored.iter().filter(|r| (r.arm, r.seed) == (arm, seed)).collect();
            if !before.is_empty() {
                let same = before.len() == run.len()
                    && before.iter().zip(&run).all(|(a, b)| {
                        (a.parameters, a.step, a.tokens) == (b.parameters, b.step, b.tokens)
                            && format!("{:.6}", a.validation) == format!("{:.6}", b.validation)
                    });
                let verdict = if same { "the same" } else { "NOT the same" };
                println!("  {} seed {seed}: losses {verdict} as the file's", arm.key());
            }
            rows.extend(run);
            if o.write {
                llm_workbook::report::write_if_changed(
                    &path,
                    &compare_csv_text(&merged(o, &stored, &rows)),
                )?;
            }
        }
    }
    println!("done in {:.0} s, load {}", t0.elapsed().as_secs_f64(), load_average());
    if !o.write {
        print!("{}", compare_csv_text(&rows));
    }
    Ok(())
}

/// `rows`, with `--keep` the stored rows of every (arm, seed) run `rows` does not hold as well,
/// sorted by seed, then arm in [`Arm::ALL`]'s order, then step.
fn merged(o: &Options, stored: &[CompareRow], rows: &[CompareRow]) -> Vec<CompareRow> {
    let mut out = rows.to_vec();
    if o.keep {
        let made = |r: &CompareRow| rows.iter().any(|m| (m.arm, m.seed) == (r.arm, r.seed));
        out.extend(stored.iter().filter(|r| !made(r)).cloned());
    }
    let place = |a: Arm| Arm::ALL.iter().position(|&b| b == a).unwrap_or(usize::MAX);
    out.sort_by_key(|r| (r.seed, place(r.arm), r.step));
    out
}
