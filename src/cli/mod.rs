//! The binary's own modules: the `gpt` command's flags and printing ([`gpt`]), the exercises'
//! progress table ([`exercises`]), and the progress
//! bars that the library's training runs report to ([`Bar`]). The library prints nothing and
//! knows neither clap nor indicatif.

pub mod exercises;
pub mod gpt;

use indicatif::{ProgressBar, ProgressStyle};
use llm_workbook::ch09_gpt::train::Progress;

/// A training run's progress bar: the steps taken against the total, the loss (and the tokens
/// per second) beside it.
pub struct Bar {
    bar: ProgressBar,
    /// Cleared when the steps are done (the walk-through's runs) or left on screen (`gpt train`).
    clear: bool,
}

impl Bar {
    /// The bar of `gpt train` and `gpt resume`: `steps` long, at step `at` already, left on the
    /// screen when done.
    pub fn run(at: usize, steps: usize) -> Result<Bar, indicatif::style::TemplateError> {
        let bar = ProgressBar::new(steps as u64);
        bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")?);
        bar.set_position(at as u64);
        Ok(Bar { bar, clear: false })
    }

    /// The bar of one of chapter 9's two walk-through runs, named `what`, cleared when done
    /// (installed with `ch09_gpt::book::show_progress_with`).
    pub fn book(what: &str, steps: usize) -> Box<dyn Progress> {
        let bar = ProgressBar::new(steps as u64);
        if let Ok(style) = ProgressStyle::with_template("  {prefix} {bar:30} {pos}/{len} {msg}") {
            bar.set_style(style);
        }
        bar.set_prefix(what.to_string());
        Box::new(Bar { bar, clear: true })
    }
}

impl Progress for Bar {
    fn step(&mut self, steps: usize, loss: f64, tokens_per_s: Option<f64>) {
        self.bar.set_message(match tokens_per_s {
            Some(rate) => format!("loss {loss:.4} | {rate:.0} tokens/s"),
            None => format!("loss {loss:.4}"),
        });
        self.bar.set_position(steps as u64);
    }

    fn finish(&mut self) {
        if self.clear {
            self.bar.finish_and_clear();
        } else {
            self.bar.finish();
        }
    }
}
