//! The judges: one function per exercise, taking the candidate function as its argument, so the
//! same judge grades your answer, the main crate's solution and the planted mistakes in
//! `tests/planted.rs`. A judge returns `Ok(())` or a message that names what is wrong in the
//! chapter's terms and ends with a hint pointing to the chapter's section.
//!
//! What a judge uses is what the chapter has: the documents' worked numbers (at the printed
//! precision), the finite-difference gradient checker ([`llm_workbook::gradcheck`]) on every input
//! and parameter, the invariants (softmax rows sum to 1, no causal leak, LayerNorm's zero mean)
//! and the main crate's own implementation on random inputs ([`llm_workbook::rng`]).

pub mod ch01;
pub mod ch02;
pub mod ch03;
pub mod ch04;
pub mod ch05;
pub mod ch06;
pub mod ch07;
pub mod ch08;
pub mod ch09;
pub mod ch10;

use llm_workbook::gradcheck::{self, Config};
use nalgebra::DMatrix;
use std::fmt::Display;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

/// A judge's verdict: `Ok(())` when the answer is right, otherwise the message for the reader.
pub type Verdict = Result<(), String>;

/// The first words of the message of an exercise whose body is still `todo!()`.
pub const NOT_STARTED: &str = "not started";

/// Where in the book an exercise is taught: the chapter's page and the section's anchor.
#[derive(Clone, Copy, Debug)]
pub struct Section {
    /// The chapter's stem, e.g. `ch02_softmax`.
    pub chapter: &'static str,
    /// The section's GitHub anchor, e.g. `5-the-gradient-ŷ--y`.
    pub anchor: &'static str,
}

impl Section {
    /// A failure message: `what`, then the hint line that points to this section.
    pub fn fail(&self, what: impl Display) -> String {
        format!("{what}\n  hint: read chapters/{}.md#{}", self.chapter, self.anchor)
    }

    /// A failure with an extra hint sentence before the pointer to the section.
    pub fn fail_hint(&self, what: impl Display, hint: &str) -> String {
        format!("{what}\n  hint: {hint} (chapters/{}.md#{})", self.chapter, self.anchor)
    }
}

/// The message `todo!()` panics with.
const TODO_MESSAGE: &str = "not yet implemented";

fn quiet_todo_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let text = payload_text(info.payload());
            if !text.starts_with(TODO_MESSAGE) {
                default(info);
            }
        }));
    });
}

fn payload_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// Calls the candidate `exercise` (named for messages), catching a panic: `todo!()` becomes
/// "not started", any other panic a failure that quotes it.
pub fn attempt<R>(sec: Section, exercise: &str, f: impl FnOnce() -> R) -> Result<R, String> {
    quiet_todo_panics();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Ok(r),
        Err(payload) => {
            let text = payload_text(payload.as_ref());
            if text.starts_with(TODO_MESSAGE) {
                Err(format!(
                    "{NOT_STARTED}: `{exercise}` still has `todo!()` as its body\n  hint: read \
                     chapters/{}.md#{}, then replace the todo!() with your answer",
                    sec.chapter, sec.anchor
                ))
            } else {
                Err(sec.fail(format!("your `{exercise}` panicked: {text}")))
            }
        }
    }
}

/// [`attempt`] for a candidate that returns a `Result`: an `Err` on valid input is a failure.
pub fn attempt_ok<R, E: Display>(
    sec: Section,
    exercise: &str,
    f: impl FnOnce() -> Result<R, E>,
) -> Result<R, String> {
    attempt(sec, exercise, f)?
        .map_err(|e| sec.fail(format!("your `{exercise}` returned an error on valid input: {e}")))
}

/// Adds `note` to a failure message `m`, before its closing hint (unless `m` is "not started").
pub fn note(m: String, note: &str) -> String {
    if m.starts_with(NOT_STARTED) {
        return m;
    }
    match m.rfind("\n  hint:") {
        Some(at) => format!("{}\n  {note}{}", &m[..at], &m[at..]),
        None => format!("{m}\n  {note}"),
    }
}

/// Whether `a` and `b` agree to `tol`, relatively where they are large.
pub fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * 1.0_f64.max(a.abs()).max(b.abs())
}

/// Rounds `x` to `digits` decimals, as the documents print.
pub fn rounded(x: f64, digits: i32) -> f64 {
    let s = 10f64.powi(digits);
    (x * s).round() / s
}

/// What a wrong matrix looks like next to the right one, if it is a common slip: the transpose,
/// the sign flipped, every entry off by the same factor (named when `factors` knows it), or the
/// right answer with a row or column shifted. `None` when nothing simple explains it.
pub fn diagnose(
    yours: &DMatrix<f64>,
    want: &DMatrix<f64>,
    factors: &[(f64, &str)],
) -> Option<String> {
    let tol = 1e-6;
    let same = |a: &DMatrix<f64>, b: &DMatrix<f64>| {
        a.shape() == b.shape() && a.iter().zip(b.iter()).all(|(x, y)| close(*x, *y, tol))
    };
    if yours.shape() != want.shape() {
        if yours.shape() == (want.ncols(), want.nrows()) {
            return Some(if same(&yours.transpose(), want) {
                "yours is the transpose of the right answer: check the transpose".to_string()
            } else {
                format!(
                    "yours is {}×{} but should be {}×{}: transposed — check which side the \
                     transpose goes on",
                    yours.nrows(),
                    yours.ncols(),
                    want.nrows(),
                    want.ncols()
                )
            });
        }
        return None;
    }
    if want.iter().all(|v| v.abs() < 1e-12) {
        return None;
    }
    // The same factor everywhere?
    let (mut num, mut den) = (0.0, 0.0);
    for (y, w) in yours.iter().zip(want.iter()) {
        num += y * w;
        den += w * w;
    }
    let k = num / den;
    if k.is_finite() && !close(k, 1.0, 1e-6) && same(&(want * k), yours) {
        for &(f, name) in factors {
            if close(k, f, 1e-6) {
                return Some(format!("every entry is {k:.4} times the right value: {name}"));
            }
        }
        if close(k, -1.0, 1e-6) {
            return Some("every entry has the wrong sign: check the sign".to_string());
        }
        return Some(format!(
            "every entry is {k:.4} times the right value: a factor is missing or extra"
        ));
    }
    if want.nrows() == want.ncols() && same(yours, &want.transpose()) {
        return Some("yours is the transpose of the right answer: check the transpose".into());
    }
    None
}

/// Compares `yours` (named `name`, e.g. `"softmax(Z)"`) with `want` entry by entry: the shape,
/// then the worst entry, then a [`diagnose`]d slip if one explains it.
pub fn compare(
    sec: Section,
    name: &str,
    yours: &DMatrix<f64>,
    want: &DMatrix<f64>,
    tol: f64,
    factors: &[(f64, &str)],
) -> Verdict {
    if yours.shape() != want.shape() {
        let mut msg = format!(
            "{name} should be {}×{} but yours is {}×{}",
            want.nrows(),
            want.ncols(),
            yours.nrows(),
            yours.ncols()
        );
        if let Some(d) = diagnose(yours, want, factors) {
            msg = format!("{msg}; {d}");
        }
        return Err(sec.fail(msg));
    }
    let mut worst: Option<(usize, usize, f64)> = None;
    for c in 0..want.ncols() {
        for r in 0..want.nrows() {
            let (y, w) = (yours[(r, c)], want[(r, c)]);
            let err = if y.is_finite() { (y - w).abs() / 1.0_f64.max(w.abs()) } else { f64::MAX };
            if err > tol && worst.is_none_or(|(_, _, e)| err > e) {
                worst = Some((r, c, err));
            }
        }
    }
    let Some((r, c, _)) = worst else { return Ok(()) };
    let mut msg =
        format!("{name}[{r},{c}]: yours {:.6}, expected {:.6}", yours[(r, c)], want[(r, c)]);
    if let Some(d) = diagnose(yours, want, factors) {
        msg = format!("{msg} — {d}");
    }
    Err(sec.fail(msg))
}

/// The central differences of `loss` with respect to every entry of `inputs[which]`.
pub fn numeric_gradient(
    inputs: &[(&str, DMatrix<f64>)],
    which: usize,
    loss: &mut dyn FnMut(&[DMatrix<f64>]) -> f64,
) -> DMatrix<f64> {
    let h = Config::default().step;
    let mut t: Vec<DMatrix<f64>> = inputs.iter().map(|(_, m)| m.clone()).collect();
    let (rows, cols) = t[which].shape();
    DMatrix::from_fn(rows, cols, |r, c| {
        let x = t[which][(r, c)];
        t[which][(r, c)] = x + h;
        let plus = loss(&t);
        t[which][(r, c)] = x - h;
        let minus = loss(&t);
        t[which][(r, c)] = x;
        (plus - minus) / (2.0 * h)
    })
}

/// The gradient check: `analytic[i]` (yours) against finite differences of `loss` over every
/// entry of `inputs[i]`, by [`llm_workbook::gradcheck::check`]. A failure names the worst entry as
/// "∂L/∂W\[r,c\]: yours …, finite differences …" and a [`diagnose`]d slip if one explains it.
pub fn gradient_check(
    sec: Section,
    inputs: &[(&str, DMatrix<f64>)],
    analytic: &[DMatrix<f64>],
    mut loss: impl FnMut(&[DMatrix<f64>]) -> f64,
    factors: &[(f64, &str)],
) -> Verdict {
    let config = Config { tolerance: 1e-5, floor: 1e-3, ..Config::default() };
    for (i, ((name, m), a)) in inputs.iter().zip(analytic).enumerate() {
        if a.shape() != m.shape() {
            let numeric = numeric_gradient(inputs, i, &mut loss);
            let mut msg = format!(
                "∂L/∂{name} should have {name}'s shape {}×{} but yours is {}×{}",
                m.nrows(),
                m.ncols(),
                a.nrows(),
                a.ncols()
            );
            if let Some(d) = diagnose(a, &numeric, factors) {
                msg = format!("{msg}; {d}");
            }
            return Err(sec.fail(msg));
        }
    }
    let report = gradcheck::check(config, inputs, analytic, &mut loss);
    if report.passed() {
        return Ok(());
    }
    let worst = report
        .tensors
        .iter()
        .position(|w| w.error.is_nan() || w.error > config.tolerance)
        .unwrap_or_default();
    let w = &report.tensors[worst];
    let mut msg = format!(
        "∂L/∂{}[{},{}]: yours {:.6}, finite differences {:.6}",
        w.tensor, w.at.0, w.at.1, w.analytic, w.numeric
    );
    let numeric = numeric_gradient(inputs, worst, &mut loss);
    if let Some(d) = diagnose(&analytic[worst], &numeric, factors) {
        msg = format!("{msg} — {d}");
    }
    Err(sec.fail(msg))
}

/// The seeded random matrices the judges draw their inputs from.
pub fn random(seed: u64, rows: usize, cols: usize) -> DMatrix<f64> {
    llm_workbook::rng::Rng::new(seed).normal_matrix(rows, cols, 1.0)
}

/// Σ G ⊙ M: the scalar loss the gradient checks differentiate, with fixed random weights G.
pub fn weighted_sum(g: &DMatrix<f64>, m: &DMatrix<f64>) -> f64 {
    if g.shape() != m.shape() {
        return f64::NAN;
    }
    g.component_mul(m).sum()
}

/// The tensor a [`gradient_check`] failure names ("∂L/∂W_Q\[0,1\]: …" gives `W_Q`), if any.
pub fn failed_tensor(message: &str) -> Option<&str> {
    let rest = message.split_once("∂L/∂")?.1;
    let end = rest.find(['[', ' ']).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// A [`gradient_check`] over named tensors whose names are built at run time.
pub fn gradient_check_named(
    sec: Section,
    inputs: &[(String, DMatrix<f64>)],
    analytic: &[DMatrix<f64>],
    loss: impl FnMut(&[DMatrix<f64>]) -> f64,
    factors: &[(f64, &str)],
) -> Verdict {
    let named: Vec<(&str, DMatrix<f64>)> =
        inputs.iter().map(|(n, m)| (n.as_str(), m.clone())).collect();
    gradient_check(sec, &named, analytic, loss, factors)
}
