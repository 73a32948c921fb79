//! The binary's own modules: the `gpt` command's flags and printing ([`gpt`]), the exercises'
//! progress table ([`exercises`]), the progress bars that the library's training runs report to
//! ([`Bar`]), standard output that a closed pipe ends quietly ([`Stdout`], [`say!`]), and the
//! chapter a `chapter` argument names ([`find_chapter`]). The library knows neither clap nor
//! indicatif.

pub mod exercises;
pub mod finetune;
pub mod gpt;

use indicatif::{ProgressBar, ProgressStyle};
use llm_workbook::book;
use llm_workbook::ch09_gpt::train::Progress;
use llm_workbook::report::Chapter;
use std::io::{ErrorKind, IsTerminal, Write};
use std::time::Instant;

/// Standard output for the binary: a reader who closes the pipe (`… | head`) has seen what they
/// wanted, so a write that finds the pipe closed ends the program at once with status 0 instead
/// of an error.
pub struct Stdout;

impl Stdout {
    fn quiet<T>(r: std::io::Result<T>) -> std::io::Result<T> {
        match r {
            Err(e) if e.kind() == ErrorKind::BrokenPipe => std::process::exit(0),
            r => r,
        }
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Stdout::quiet(std::io::stdout().write(buf))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Stdout::quiet(std::io::stdout().flush())
    }
}

/// Writes formatted text to [`Stdout`]; any other failure to write is one line on stderr and
/// status 1.
pub fn put(args: std::fmt::Arguments) {
    let mut out = Stdout;
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        eprintln!("error: writing to standard output: {e}");
        std::process::exit(1);
    }
}

/// `println!` through [`put`]: a closed pipe ends the program quietly.
macro_rules! say {
    () => { $crate::cli::put(format_args!("\n")) };
    ($($t:tt)*) => { $crate::cli::put(format_args!("{}\n", format_args!($($t)*))) };
}
pub(crate) use say;

/// Whether standard output is a terminal: progress bars there, a line per phase elsewhere.
pub fn to_terminal() -> bool {
    std::io::stdout().is_terminal()
}

/// The chapter `arg` names: its number (`6`), its stem (`ch06_attention`) or the stem without
/// its number (`attention`); otherwise a short error that says what to give instead (the parser
/// writes it after the value and the argument's name, on one line of at most 100 columns).
pub fn find_chapter(arg: &str) -> Result<Chapter, String> {
    let arg = arg.trim();
    let chapters = book::chapters();
    let found = chapters.iter().find(|c| match arg.parse::<u32>() {
        Ok(n) => c.number == n,
        Err(_) => {
            let short = c.stem.split_once('_').map_or(c.stem, |(_, rest)| rest);
            arg.eq_ignore_ascii_case(c.stem) || arg.eq_ignore_ascii_case(short)
        }
    });
    match found {
        Some(c) => Ok(*c),
        None => Err(format!(
            "give 1 to {} or a name from `list`",
            chapters.last().map_or(0, |c| c.number)
        )),
    }
}

/// A parser's error as one line for the terminal: a missing argument is named (`error: missing
/// --checkpoint <CHECKPOINT>`), a refused value is given with its argument and the reason
/// (`error: invalid <CHAPTER> '99': give 1 to 11 or a name from `list``); any other error is its
/// first paragraph joined into one line (the usage and tips after it are left to `--help`).
pub fn parser_error(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let context = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => Some(v.join(" ")),
        _ => None,
    };
    match e.kind() {
        ErrorKind::MissingRequiredArgument => {
            if let Some(args) = context(ContextKind::InvalidArg) {
                return format!("error: missing {args}");
            }
        }
        ErrorKind::ValueValidation => {
            let reason = std::error::Error::source(e).map(ToString::to_string);
            if let (Some(arg), Some(value), Some(reason)) =
                (context(ContextKind::InvalidArg), context(ContextKind::InvalidValue), reason)
            {
                return format!("error: invalid {arg} '{}': {reason}", shortened(&value, 24));
            }
        }
        _ => {}
    }
    one_line(&e.to_string())
}

/// `text` cut to at most `most` characters, an ellipsis marking the cut.
fn shortened(text: &str, most: usize) -> String {
    if text.chars().count() <= most {
        return text.to_string();
    }
    format!("{}…", text.chars().take(most.saturating_sub(1)).collect::<String>())
}

/// The first paragraph of a parser's message, its lines joined with single spaces.
fn one_line(error: &str) -> String {
    let first = error.trim_start().split("\n\n").next().unwrap_or("");
    let line = first.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() { "error: invalid arguments".to_string() } else { line }
}

/// A training run's progress bar: the steps taken against the total, the loss (and the tokens
/// per second) beside it.
pub struct Bar {
    bar: ProgressBar,
    /// Cleared when the steps are done (the walk-through's runs) or left on screen (`gpt train`).
    clear: bool,
    /// Without a terminal: the run's name, when it started, its length, and the last step
    /// reported, for a line per tenth of the run (`gpt`) or one at the end (the book's runs).
    lines: Option<Lines>,
    /// `gpt train` and `resume`: the estimate of the whole run's time, said once after its
    /// first steps.
    estimate: Option<Estimate>,
}

/// The steps after the first whose time gives the estimate of the run's length (the first step
/// is not counted: it allocates what later steps reuse).
const ESTIMATE_AFTER_STEPS: usize = 10;

struct Estimate {
    /// The step count and the time when the first step ended.
    first: Option<(usize, Instant)>,
    steps: usize,
    said: bool,
}

impl Estimate {
    /// The line to print once `at` steps are done, if this is the moment: the time a step took
    /// over the [`ESTIMATE_AFTER_STEPS`] steps after the first, and what the rest will take.
    fn line(&mut self, at: usize) -> Option<String> {
        let Some((from, start)) = self.first else {
            self.first = Some((at, Instant::now()));
            return None;
        };
        if self.said || at < from + ESTIMATE_AFTER_STEPS || at >= self.steps {
            return None;
        }
        self.said = true;
        let per_step = start.elapsed().as_secs_f64() / (at - from) as f64;
        let left = per_step * (self.steps - at) as f64;
        Some(format!(
            "estimate: {:.3} s a step, so the {} steps to go take about {} (saves not counted)",
            per_step,
            self.steps - at,
            duration_words(left)
        ))
    }
}

/// A duration for a person: seconds under two minutes, minutes under two hours, else hours and
/// minutes.
fn duration_words(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    if s < 120 {
        format!("{s} s")
    } else if s < 7200 {
        format!("{} min", (s + 30) / 60)
    } else {
        format!("{} h {} min", s / 3600, (s % 3600) / 60)
    }
}

struct Lines {
    what: String,
    start: Instant,
    steps: usize,
    every_tenth: bool,
    /// What is counted: "step", or "window" for an evaluation.
    unit: &'static str,
    at: usize,
    last: String,
}

impl Bar {
    /// The bar of `gpt train` and `gpt resume`: `steps` long, at step `at` already, left on the
    /// screen when done.
    pub fn run(at: usize, steps: usize) -> Result<Bar, indicatif::style::TemplateError> {
        let estimate = Estimate { first: None, steps, said: false };
        if !to_terminal() {
            let what = "training".to_string();
            let (start, last) = (Instant::now(), String::new());
            let lines = Lines { what, start, steps, every_tenth: true, at, last, unit: "step" };
            let (bar, clear, lines) = (ProgressBar::hidden(), false, Some(lines));
            return Ok(Bar { bar, clear, lines, estimate: Some(estimate) });
        }
        let bar = ProgressBar::new(steps as u64);
        bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")?);
        bar.set_position(at as u64);
        Ok(Bar { bar, clear: false, lines: None, estimate: Some(estimate) })
    }

    /// The bar of an exact validation over `windows` windows, cleared when done (without a
    /// terminal: a line per tenth).
    pub fn evaluation(windows: usize) -> Result<Bar, indicatif::style::TemplateError> {
        if !to_terminal() {
            let what = "validation".to_string();
            let (start, last) = (Instant::now(), String::new());
            let (steps, every_tenth, at, unit) = (windows, true, 0, "window");
            let lines = Lines { what, start, steps, every_tenth, at, last, unit };
            return Ok(Bar {
                bar: ProgressBar::hidden(),
                clear: true,
                lines: Some(lines),
                estimate: None,
            });
        }
        let bar = ProgressBar::new(windows as u64);
        bar.set_style(ProgressStyle::with_template("validation {bar:30} {pos}/{len} {msg}")?);
        Ok(Bar { bar, clear: true, lines: None, estimate: None })
    }

    /// The bar of one of chapter 9's two walk-through runs, named `what`, cleared when done
    /// (installed with `ch09_gpt::book::show_progress_with`).
    pub fn book(what: &str, steps: usize) -> Box<dyn Progress> {
        if !to_terminal() {
            let what = format!("chapter 9: training the {} model", what.trim());
            let (start, last) = (Instant::now(), String::new());
            let lines = Lines { what, start, steps, every_tenth: false, at: 0, last, unit: "step" };
            let (bar, lines) = (ProgressBar::hidden(), Some(lines));
            return Box::new(Bar { bar, clear: true, lines, estimate: None });
        }
        let bar = ProgressBar::new(steps as u64);
        if let Ok(style) = ProgressStyle::with_template("  {prefix} {bar:30} {pos}/{len} {msg}") {
            bar.set_style(style);
        }
        bar.set_prefix(what.to_string());
        Box::new(Bar { bar, clear: true, lines: None, estimate: None })
    }
}

impl Progress for Bar {
    fn step(&mut self, steps: usize, loss: f64, tokens_per_s: Option<f64>) {
        let message = match tokens_per_s {
            Some(rate) => format!("loss {loss:.4} | {rate:.0} tokens/s"),
            None => format!("loss {loss:.4}"),
        };
        if let Some(line) = self.estimate.as_mut().and_then(|e| e.line(steps)) {
            if self.lines.is_some() {
                say!("{line}");
            } else {
                self.bar.println(line);
            }
        }
        if let Some(l) = &mut self.lines {
            let tenth = l.steps.div_ceil(10).max(1);
            if l.every_tenth && steps / tenth > l.at / tenth && steps < l.steps {
                let s = l.start.elapsed().as_secs_f64();
                say!("{}: {} {steps}/{}, {message} … {s:.1} s", l.what, l.unit, l.steps);
            }
            (l.at, l.last) = (steps, message);
            return;
        }
        self.bar.set_message(message);
        self.bar.set_position(steps as u64);
    }

    fn finish(&mut self) {
        if let Some(l) = &self.lines {
            let s = l.start.elapsed().as_secs_f64();
            say!("{}: {} {}/{}, {} … {s:.1} s", l.what, l.unit, l.at, l.steps, l.last);
        } else if self.clear {
            self.bar.finish_and_clear();
        } else {
            self.bar.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chapter_is_named_by_its_number_its_stem_or_its_name() {
        for arg in ["6", "attention", "ch06_attention", " Attention "] {
            assert_eq!(find_chapter(arg).map(|c| c.number), Ok(6), "{arg}");
        }
        assert_eq!(find_chapter("encoder_decoder").map(|c| c.number), Ok(7));
        assert_eq!(find_chapter("10").map(|c| c.stem), Ok("ch10_matmul"));
        let last = book::chapters().last().map_or(0, |c| c.number);
        for bad in ["0", &(last + 1).to_string(), "attn", "ch06", "", "-1"] {
            let e = find_chapter(bad).map(|c| c.number).unwrap_err();
            assert_eq!(e, format!("give 1 to {last} or a name from `list`"));
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
