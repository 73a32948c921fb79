//! The main job: `cargo run --release` regenerates every chapter's plots and prints every
//! chapter's worked-number table; `-- chapter N` walks one chapter; `-- errata` prints the
//! errata register. `--help` explains it all. Output fits 100 columns; a closed pipe
//! (`… | head`) ends the program quietly.

#![forbid(unsafe_code)]

mod cli;

use clap::{Parser, Subcommand};
use cli::say;
use llm_workbook::book;
use llm_workbook::errata::markdown_table;
use llm_workbook::plot::image_dir;
use llm_workbook::report::{
    Chapter, Status, TERMINAL_WIDTH, Walk, Worked, errata_terminal, sync_prose, worked_terminal,
    wrap, write_if_changed,
};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "llm-workbook",
    version,
    max_term_width = TERMINAL_WIDTH,
    about = "The mathematics of neural networks, from one sigmoid neuron to a small GPT.",
    long_about = "With no command: regenerate every chapter's plots into chapters/img/ and print, \
chapter by chapter, the table of its worked examples (the quantity, the document, the value it \
printed, ours, and whether they match, differ by rounding, or the document is wrong: an erratum)."
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
        /// The chapter: its number (6), its name (attention) or its stem (ch06_attention).
        #[arg(value_parser = cli::find_chapter)]
        chapter: Chapter,
    },
    /// Print the errata register: every mistake found in the source documents, with the test
    /// that pins the correct value.
    Errata {
        /// Print each chapter's errata as the Markdown table its page carries.
        #[arg(long)]
        markdown: bool,
    },
    /// List the chapters.
    List,
    /// Chapter 9's GPT: `gpt train`, `resume`, `sample`, `quantize` (each with --help).
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
    cli::put(format_args!("{}", worked_terminal(rows, TERMINAL_WIDTH)));
}

/// The repository root, where `chapters/` lives.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `path` relative to the repository root when it is inside it, for shorter lines.
fn short(path: &Path) -> String {
    path.strip_prefix(root()).unwrap_or(path).display().to_string()
}

fn chapter_heading(ch: &Chapter) {
    let heading = format!("== Chapter {}: {}", ch.number, ch.title);
    for line in wrap(&heading, TERMINAL_WIDTH) {
        say!("{line}");
    }
}

/// How many figures `files` are: each is drawn twice, as PNG and as SVG, under one name.
fn figures(files: &[std::path::PathBuf]) -> String {
    let names: std::collections::BTreeSet<_> = files.iter().map(|f| f.with_extension("")).collect();
    match names.len() {
        1 => "1 figure (PNG and SVG)".to_string(),
        n => format!("{n} figures (PNG and SVG)"),
    }
}

fn run_all() -> Result<(), String> {
    book::compute_on_the_portable_kernel().map_err(|e| e.to_string())?;
    let chapters = book::chapters();
    let dir = image_dir();
    let mut mismatches = 0;
    let started = Instant::now();
    for (i, ch) in chapters.iter().enumerate() {
        if i > 0 {
            say!();
        }
        chapter_heading(ch);
        let t = Instant::now();
        let files = (ch.plots)(&dir).map_err(|e| format!("chapter {}: {e}", ch.number))?;
        let rows = (ch.worked)().map_err(|e| format!("chapter {}: {e}", ch.number))?;
        sync_prose(root(), ch).map_err(|e| format!("chapter {}: {e}", ch.number))?;
        say!(
            "chapter {}: {} into {}, worked numbers and tables … {:.1} s",
            ch.number,
            figures(&files),
            short(&dir),
            t.elapsed().as_secs_f64()
        );
        print_table(&rows);
        mismatches += rows.iter().filter(|r| r.status == Status::Mismatch).count();
    }
    let errata_page = root().join("chapters").join("errata.md");
    if write_if_changed(&errata_page, &book::errata_page()).map_err(|e| e.to_string())? {
        say!("\n(updated {}, the book's errata page)", short(&errata_page));
    }
    let sources_page = root().join("chapters").join("sources.md");
    let sources = std::fs::read_to_string(&sources_page)
        .map_err(|e| format!("{}: {e}", short(&sources_page)))?;
    let counted = book::sources_page(&sources).ok_or_else(|| {
        format!(
            "{}: a document's <!-- Dn-errata:begin/end --> markers are missing",
            short(&sources_page)
        )
    })?;
    if write_if_changed(&sources_page, &counted).map_err(|e| e.to_string())? {
        say!("(updated {}, the errata counts of the sources page)", short(&sources_page));
    }
    say!(
        "\n{} chapters in {:.1} s, {} errata in the register (see `-- errata`).",
        chapters.len(),
        started.elapsed().as_secs_f64(),
        llm_workbook::errata::error_count(book::errata_register().into_iter().map(|(_, e)| e))
    );
    if mismatches > 0 {
        return Err(format!("{mismatches} worked numbers do not match and are not explained"));
    }
    Ok(())
}

fn run_chapter(ch: Chapter) -> Result<(), String> {
    book::compute_on_the_portable_kernel().map_err(|e| e.to_string())?;
    chapter_heading(&ch);
    let mut stdout = cli::Stdout;
    let mut walk = Walk::new(&mut stdout);
    (ch.walk)(&mut walk).map_err(|e| e.to_string())?;
    say!("\n── Worked numbers");
    print_table(&(ch.worked)().map_err(|e| e.to_string())?);
    let files = (ch.plots)(&image_dir()).map_err(|e| e.to_string())?;
    if sync_prose(root(), &ch).map_err(|e| e.to_string())? {
        say!("\n(updated the tables in chapters/{}.md)", ch.stem);
    }
    say!("\n── Plots");
    for f in files {
        say!("   {}", short(&f));
    }
    Ok(())
}

fn errata(markdown: bool) {
    for (i, ch) in book::chapters().iter().filter(|c| !c.errata.is_empty()).enumerate() {
        if i > 0 {
            say!();
        }
        chapter_heading(ch);
        say!();
        if markdown {
            cli::put(format_args!("{}", markdown_table(ch.errata)));
        } else {
            cli::put(format_args!("{}", errata_terminal(ch.errata, TERMINAL_WIDTH)));
        }
    }
}

/// Forces the kernel `LLM_WORKBOOK_KERNEL` names for every product of the process (unset, empty
/// or `auto`: the best one the CPU runs); an error naming the variable otherwise.
fn apply_kernel_setting() -> llm_workbook::Result<()> {
    use llm_workbook::simd::set_kernel;
    use llm_workbook::simd::{KERNEL_ENV, parse_kernel_setting};
    let value = std::env::var(KERNEL_ENV).ok();
    parse_kernel_setting(value.as_deref()).and_then(|kernel| match kernel {
        Some(k) => set_kernel(Some(k)),
        None => Ok(()),
    })
}

fn main() -> ExitCode {
    // Chapter 9's walk-through trains two models; they show their progress on these bars.
    llm_workbook::ch09_gpt::book::show_progress_with(cli::Bar::book);
    // Bad flags and values get one line and exit status 2; --help and --version print as usual.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            eprintln!("{} (see --help)", cli::parser_error(&e));
            return ExitCode::from(2);
        }
    };
    // LLM_WORKBOOK_KERNEL is read once, here: a value naming no kernel this CPU runs is one line
    // and exit status 2, not products quietly run with another kernel.
    if let Err(e) = apply_kernel_setting() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        None => run_all(),
        Some(Command::Chapter { chapter }) => run_chapter(chapter),
        Some(Command::Errata { markdown }) => {
            errata(markdown);
            Ok(())
        }
        Some(Command::Gpt { command }) => cli::gpt::run(command).map_err(|e| e.to_string()),
        Some(Command::Exercises { watch }) => cli::exercises::run(watch),
        Some(Command::List) => {
            for ch in book::chapters() {
                say!("{:>2}  {:<22} {}", ch.number, ch.stem, ch.title);
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
