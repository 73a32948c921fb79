//! The main job: `cargo run --release` regenerates every chapter's plots and prints every
//! chapter's worked-number table; `-- chapter N` walks one chapter; `-- errata` prints the
//! errata register. `--help` explains it all.

#![forbid(unsafe_code)]

mod cli;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use llm_workbook::book;
use llm_workbook::errata::markdown_table;
use llm_workbook::plot::image_dir;
use llm_workbook::report::{Chapter, Status, Walk, Worked, sync_prose};
use std::path::Path;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "llm-workbook",
    version,
    about = "The mathematics of neural networks, from one sigmoid neuron to a small GPT.",
    long_about = "With no command: regenerate every chapter's plots into chapters/img/ and print, \
chapter by chapter, the table of its worked examples (the document's value, ours, and whether they \
match, differ by rounding, or the document is wrong: an erratum)."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Walk one chapter: print each intermediate quantity of its worked examples (name, shape,
    /// value) in the order the document derives them, then redraw its plots.
    Chapter {
        /// The chapter number (1 to 10).
        number: u32,
    },
    /// Print the errata register: every mistake found in the source documents, with the test
    /// that pins the correct value.
    Errata,
    /// List the chapters.
    List,
    /// Chapter 9's GPT on your own text: `gpt train`, `gpt resume`, `gpt sample` (each with
    /// --help).
    Gpt {
        #[command(subcommand)]
        command: cli::gpt::GptCommand,
    },
    /// Your progress through the exercises (exercises/): chapter, exercise, ✓ / ✗ / not started,
    /// and the next one to do with its judge's message.
    Exercises {
        /// Judge again whenever a file under exercises/src is saved.
        #[arg(long)]
        watch: bool,
    },
}

fn print_table(rows: &[Worked]) {
    let w = |f: fn(&Worked) -> &str, min: usize| {
        rows.iter().map(|r| f(r).chars().count()).max().unwrap_or(0).clamp(min, 60)
    };
    let (wq, wp, wo) = (w(|r| &r.quantity, 8), w(|r| &r.printed, 8), w(|r| &r.ours, 4));
    println!("  {:<wq$}  {:<wp$}  {:<wo$}  status", "quantity", "document", "ours");
    for r in rows {
        let cut = |s: &str, n: usize| {
            if s.chars().count() > n {
                format!("{}…", s.chars().take(n - 1).collect::<String>())
            } else {
                s.to_string()
            }
        };
        println!(
            "  {:<wq$}  {:<wp$}  {:<wo$}  {}",
            cut(&r.quantity, wq),
            cut(&r.printed, wp),
            cut(&r.ours, wo),
            r.status.word()
        );
    }
}

fn run_all() -> Result<(), String> {
    let chapters = book::chapters();
    let bar = ProgressBar::new(chapters.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").map_err(|e| e.to_string())?,
    );
    let dir = image_dir();
    let mut mismatches = 0;
    for ch in &chapters {
        bar.set_message(format!("chapter {}: {}", ch.number, ch.title));
        let files = (ch.plots)(&dir).map_err(|e| format!("chapter {}: {e}", ch.number))?;
        let rows = (ch.worked)().map_err(|e| format!("chapter {}: {e}", ch.number))?;
        sync_prose(Path::new(env!("CARGO_MANIFEST_DIR")), ch)
            .map_err(|e| format!("chapter {}: {e}", ch.number))?;
        bar.suspend(|| {
            println!(
                "\n== Chapter {}: {} ({} plots written to {})",
                ch.number,
                ch.title,
                files.len(),
                dir.display()
            );
            print_table(&rows);
        });
        mismatches += rows.iter().filter(|r| r.status == Status::Mismatch).count();
        bar.inc(1);
    }
    bar.finish_with_message("done");
    println!(
        "\n{} chapters, {} errata in the register (see `-- errata`).",
        chapters.len(),
        book::errata_register().len()
    );
    if mismatches > 0 {
        return Err(format!("{mismatches} worked numbers do not match and are not explained"));
    }
    Ok(())
}

fn run_chapter(ch: Chapter) -> Result<(), String> {
    println!("Chapter {}: {}", ch.number, ch.title);
    let mut stdout = std::io::stdout();
    let mut walk = Walk::new(&mut stdout);
    (ch.walk)(&mut walk).map_err(|e| e.to_string())?;
    println!("\n── Worked numbers");
    print_table(&(ch.worked)().map_err(|e| e.to_string())?);
    let files = (ch.plots)(&image_dir()).map_err(|e| e.to_string())?;
    if sync_prose(Path::new(env!("CARGO_MANIFEST_DIR")), &ch).map_err(|e| e.to_string())? {
        println!("\n(updated the tables in chapters/{}.md)", ch.stem);
    }
    println!("\n── Plots");
    for f in files {
        println!("   {}", f.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    // Chapter 9's walk-through trains two models; they show their progress on these bars.
    llm_workbook::ch09_gpt::book::show_progress_with(cli::Bar::book);
    // Bad flags and values get one line and exit status 2; --help and --version print as usual.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            let text = e.to_string();
            eprintln!(
                "{} (see --help)",
                text.lines().next().unwrap_or("invalid arguments").trim_end()
            );
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        None => run_all(),
        Some(Command::Chapter { number }) => match book::chapter(number) {
            Some(ch) => run_chapter(ch),
            None => Err(format!(
                "there is no chapter {number}; the chapters are {}",
                book::chapters()
                    .iter()
                    .map(|c| c.number.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        },
        Some(Command::Errata) => {
            for ch in book::chapters().iter().filter(|c| !c.errata.is_empty()) {
                println!("\n== Chapter {}: {}\n", ch.number, ch.title);
                print!("{}", markdown_table(ch.errata));
            }
            Ok(())
        }
        Some(Command::Gpt { command }) => cli::gpt::run(command).map_err(|e| e.to_string()),
        Some(Command::Exercises { watch }) => cli::exercises::run(watch),
        Some(Command::List) => {
            for ch in book::chapters() {
                println!("{:>2}  {:<22} {}", ch.number, ch.stem, ch.title);
            }
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
