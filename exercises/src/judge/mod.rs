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
pub mod ch11;
pub mod ch12;
pub mod ch13;
pub mod sweep;

pub use sweep::{Gen, Named, Outcome, Tol, explained, sweep};

use llm_workbook::gradcheck::{self, Config};
use nalgebra::DMatrix;
use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::fmt::Display;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

/// The kinds of probe a judge runs beyond the worked numbers and the gradient check; the table
/// of `chapters/exercises.md` lists them per exercise and a test holds it to what the judges run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Probe {
    /// Large inputs (scores ≥ 40, logits ±900, rows thousands apart, far tails compared
    /// relatively): a dropped max shift, one max for the whole matrix, 1 − σ(−z).
    Scale,
    /// Several sequences of unequal content, non-square shapes, T_q ≠ T_k: an ignored batch loop
    /// or a transposed factor.
    Batch,
    /// Ties and order: equal scores or counts, merges whose new ids are not in rank order.
    Order,
    /// Every error the exercise's doc comment promises (d = 0, T ≤ 0, empty or mismatched input).
    Errors,
    /// Known classic mistakes computed on the judge's input and named when the answer matches.
    Named,
}

impl Probe {
    /// Every kind, in the order of the page's columns.
    pub const ALL: [Probe; 5] =
        [Probe::Scale, Probe::Batch, Probe::Order, Probe::Errors, Probe::Named];

    /// The column's heading on `chapters/exercises.md`.
    pub fn heading(self) -> &'static str {
        match self {
            Probe::Scale => "scale",
            Probe::Batch => "batch/shape",
            Probe::Order => "ties/order",
            Probe::Errors => "errors",
            Probe::Named => "named mistakes",
        }
    }
}

thread_local! {
    static PROBED: RefCell<BTreeSet<Probe>> = const { RefCell::new(BTreeSet::new()) };
    static NOT_APPLICABLE: RefCell<BTreeSet<Probe>> = const { RefCell::new(BTreeSet::new()) };
    static IN_ATTEMPT: Cell<bool> = const { Cell::new(false) };
    static PANIC_AT: RefCell<Option<String>> = const { RefCell::new(None) };
    static PASSED: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Records that the running judge uses a probe of `kind` (see [`probes_run`]).
pub fn probe(kind: Probe) {
    PROBED.with(|p| p.borrow_mut().insert(kind));
}

/// Records that no mistake of these kinds can arise in the running judge's exercise (a scalar
/// has no batch, a linear map no overflow, a doc comment that promises no error has none to
/// probe): the page shows "—" there.
pub fn not_applicable(kinds: &[Probe]) {
    NOT_APPLICABLE.with(|p| p.borrow_mut().extend(kinds));
}

/// Records a [`Probe::Batch`] probe of shapes only (an exercise of one sequence or one batch of
/// rows): the judge's own matrices must all be non-square, so that a transpose on the wrong
/// side cannot pass (a judge built against this rule stops with a panic naming it).
pub fn non_square(matrices: &[&DMatrix<f64>]) {
    for m in matrices {
        assert!(
            m.nrows() != m.ncols(),
            "a shape probe passed a square {}×{}",
            m.nrows(),
            m.ncols()
        );
    }
    probe(Probe::Batch);
}

/// What a judge did with each kind of probe.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Probes {
    /// The kinds it probed.
    pub run: BTreeSet<Probe>,
    /// The kinds it declared not applicable to its exercise.
    pub not_applicable: BTreeSet<Probe>,
    /// What its sweeps drew, one line per sweep ("40 cases + 36 edges: 2 matrices").
    pub swept: Vec<String>,
}

/// Runs `judge` and returns its verdict with the kinds of probe it ran and declared.
pub fn probes_run(judge: impl FnOnce() -> Verdict) -> (Verdict, Probes) {
    PROBED.with(|p| p.borrow_mut().clear());
    NOT_APPLICABLE.with(|p| p.borrow_mut().clear());
    sweep::take_swept();
    let verdict = judge();
    let run = PROBED.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let not_applicable = NOT_APPLICABLE.with(|p| std::mem::take(&mut *p.borrow_mut()));
    (verdict, Probes { run, not_applicable, swept: sweep::take_swept() })
}

/// What a judge passes an answer, described by its shape for a panic report ("Q 4×3").
pub trait Shaped {
    /// The shape in words: `rows×cols` for a matrix, the sizes that matter for anything else.
    fn shape_text(&self) -> String;
}

impl Shaped for DMatrix<f64> {
    fn shape_text(&self) -> String {
        format!("{}×{}", self.nrows(), self.ncols())
    }
}

impl Shaped for nalgebra::DVector<f64> {
    fn shape_text(&self) -> String {
        format!("of length {}", self.len())
    }
}

impl<T> Shaped for &[T] {
    fn shape_text(&self) -> String {
        format!("of length {}", self.len())
    }
}

impl<T> Shaped for Vec<T> {
    fn shape_text(&self) -> String {
        format!("of length {}", self.len())
    }
}

impl<T, const N: usize> Shaped for [T; N] {
    fn shape_text(&self) -> String {
        format!("of length {N}")
    }
}

impl Shaped for llm_workbook::ch07_encoder_decoder::Batch {
    fn shape_text(&self) -> String {
        format!("(B = {}, T = {}, lengths {:?})", self.sequences(), self.len, self.lengths)
    }
}

impl Shaped for llm_workbook::ch06_attention::MultiHead<f64> {
    fn shape_text(&self) -> String {
        let (q, k, v, o) = (&self.w_q, &self.w_k, &self.w_v, &self.w_o);
        format!(
            "({} heads, W_Q {}, W_K {}, W_V {}, W_O {})",
            self.heads,
            q.shape_text(),
            k.shape_text(),
            v.shape_text(),
            o.shape_text()
        )
    }
}

impl Shaped for llm_workbook::ch06_attention::MhaCache<f64> {
    fn shape_text(&self) -> String {
        let spec = &self.spec;
        format!(
            "(X_q {}, X_kv {}, T_q = {}, T_k = {})",
            self.x_q.shape_text(),
            self.x_kv.shape_text(),
            spec.q_len,
            spec.kv_len
        )
    }
}

impl Shaped for llm_workbook::ch06_attention::FfnCache<f64> {
    fn shape_text(&self) -> String {
        format!("(x {}, z₁ {})", self.x.shape_text(), self.z1.shape_text())
    }
}

impl Shaped for llm_workbook::ch06_attention::Ffn<f64> {
    fn shape_text(&self) -> String {
        format!("(W₁ {}, W₂ {})", self.w1.shape_text(), self.w2.shape_text())
    }
}

impl Shaped for llm_workbook::ch06_attention::BlockCache<f64> {
    fn shape_text(&self) -> String {
        format!("(its attention's {})", self.attn.shape_text())
    }
}

impl Shaped for llm_workbook::ch06_attention::Block<f64> {
    fn shape_text(&self) -> String {
        format!("(MHA {}, FFN {})", self.attn.shape_text(), self.ffn.shape_text())
    }
}

impl Shaped for llm_workbook::ch07_encoder_decoder::DecoderBlockCache<f64> {
    fn shape_text(&self) -> String {
        format!(
            "(self-attention {}, cross-attention {})",
            self.self_attention.shape_text(),
            self.cross_attention.shape_text()
        )
    }
}

impl Shaped for llm_workbook::ch07_encoder_decoder::DecoderBlock<f64> {
    fn shape_text(&self) -> String {
        format!("(width {}, FFN {})", self.norm1.gamma.ncols(), self.ffn.shape_text())
    }
}

impl Shaped for llm_workbook::ch07_encoder_decoder::EncoderDecoder<f64> {
    fn shape_text(&self) -> String {
        let c = self.config;
        format!(
            "(V = {}, C = {}, {} heads, {} encoder and {} decoder layers)",
            c.vocab, c.width, c.heads, c.encoder_layers, c.decoder_layers
        )
    }
}

impl Shaped for llm_workbook::ch03_mlp::Trace<f64> {
    fn shape_text(&self) -> String {
        let inputs: Vec<String> = self.inputs.iter().map(Shaped::shape_text).collect();
        format!("(layer inputs {})", inputs.join(", "))
    }
}

impl Shaped for llm_workbook::ch03_mlp::Mlp<f64> {
    fn shape_text(&self) -> String {
        let w: Vec<String> = self.layers().iter().map(|l| l.w.shape_text()).collect();
        format!("(W {})", w.join(", "))
    }
}

/// Tells the next [`attempt`] what the judge passes, as names and shapes ("Q 4×3, K 5×3"), so a
/// panic inside the answer is reported with the inputs that caused it.
pub fn passing(inputs: &[(&str, &dyn Shaped)]) {
    let text: Vec<String> = inputs.iter().map(|(n, m)| format!("{n} {}", m.shape_text())).collect();
    PASSED.with(|p| *p.borrow_mut() = text.join(", "));
}

/// [`attempt`] on the inputs `passed` (names and values): a panic is reported with their shapes.
pub fn attempt_on<R>(
    sec: Section,
    exercise: &str,
    passed: &[(&str, &dyn Shaped)],
    f: impl FnOnce() -> R,
) -> Result<R, String> {
    passing(passed);
    attempt(sec, exercise, f)
}

/// [`attempt_ok`] on the inputs `passed` (names and values): a panic is reported with their
/// shapes.
pub fn attempt_ok_on<R, E: Display>(
    sec: Section,
    exercise: &str,
    passed: &[(&str, &dyn Shaped)],
    f: impl FnOnce() -> Result<R, E>,
) -> Result<R, String> {
    passing(passed);
    attempt_ok(sec, exercise, f)
}

/// The widest line a judge target prints, in terminal columns.
pub const WIDTH: usize = 100;

/// `message` as a judge target prints it: each of its lines broken by the main crate's
/// [`llm_workbook::report::wrap`] into lines of at most [`WIDTH`] columns, a continuation
/// indented two columns past its own line's indent.
pub fn printed(message: &str) -> String {
    let mut out = Vec::new();
    for line in message.lines() {
        let body = line.trim_start_matches(' ');
        let indent = &line[..line.len() - body.len()];
        // A combining mark (the hat of m̂) is a character of its own to a count of characters.
        let marks = body.chars().filter(|c| ('\u{300}'..='\u{36f}').contains(c)).count();
        let width = WIDTH.saturating_sub(indent.len() + 2 + marks);
        let parts = llm_workbook::report::wrap(body, width);
        for (i, part) in parts.into_iter().enumerate() {
            let more = if i == 0 { "" } else { "  " };
            out.push(format!("{indent}{more}{part}"));
        }
    }
    out.join("\n")
}

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

/// Installs (once) a panic hook that is silent inside [`attempt`]: it only notes where the answer
/// panicked, and the judge's message reports the panic once. Elsewhere the default hook prints.
fn quiet_answer_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_ATTEMPT.with(Cell::get) {
                let at = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()))
                    .filter(|at| is_answer_code(at))
                    .or_else(answer_frame);
                PANIC_AT.with(|p| *p.borrow_mut() = at);
            } else {
                default(info);
            }
        }));
    });
}

/// Whether a source location (`file:line`) is in code a student wrote or planted, rather than in
/// a library (nalgebra, the standard library) or the judges.
fn is_answer_code(at: &str) -> bool {
    let file = at.split(':').next().unwrap_or_default();
    let answers = file.contains("src/ch") || file.ends_with("tests/planted.rs");
    let library = ["/.cargo/registry/", "/rustc/", "/library/", "judge/"];
    answers && !library.iter().any(|l| file.contains(l)) && !file.starts_with("../src/")
}

/// A backtrace's path (relative to the exercises' folder, where the judges run) as the reader
/// finds it from the repository's root: `./tests/../src/ch06_attention.rs` becomes
/// `exercises/src/ch06_attention.rs`.
fn from_the_root(path: &str) -> String {
    let path = path.trim_start_matches("./").replace("tests/../src/", "src/");
    if path.starts_with("src/") || path.starts_with("tests/") {
        format!("exercises/{path}")
    } else {
        path
    }
}

/// The innermost frame of the panicking thread's backtrace in code a student wrote, as
/// `file:line`: where a panic raised inside a library (nalgebra's shape checks) was called from.
/// `None` when the build has no line tables.
fn answer_frame() -> Option<String> {
    let trace = std::backtrace::Backtrace::force_capture().to_string();
    trace
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("at "))
        .find(|at| is_answer_code(at))
        .map(|at| from_the_root(at.rsplit_once(':').map_or(at, |(file_line, _column)| file_line)))
}

/// What a panic's text means for a student, when it is one of nalgebra's shape checks.
fn panic_meaning(text: &str) -> Option<&'static str> {
    let t = text.to_lowercase();
    if t.contains("dimension") || t.contains("mismatch") || t.contains("shape") {
        Some(
            "two matrices whose shapes do not fit were combined: compare each factor's shape \
             with the doc comment (a missing or extra transpose?)",
        )
    } else if t.contains("out of bounds") {
        Some("an index ran past a matrix or slice: check the loop bounds against the shapes")
    } else {
        None
    }
}

/// The two shapes a nalgebra shape check quotes ("  left: (4, 3)" and " right: (2, 5)" give
/// "4×3 and 2×5"), if it quotes them.
fn shapes_that_met(text: &str) -> Option<String> {
    let shape = |side: &str| {
        let line = text.lines().find(|l| l.trim_start().starts_with(side))?;
        let inner = line.split_once('(')?.1.split_once(')')?.0;
        let (r, c) = inner.split_once(',')?;
        Some(format!("{}×{}", r.trim(), c.trim()))
    };
    Some(format!("{} and {}", shape("left:")?, shape("right:")?))
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
    quiet_answer_panics();
    let passed = PASSED.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let outer = IN_ATTEMPT.with(|a| a.replace(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    IN_ATTEMPT.with(|a| a.set(outer));
    match result {
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
                let first = text.lines().next().unwrap_or_default();
                let at = PANIC_AT.with(|p| p.borrow_mut().take());
                let mut msg = format!("your `{exercise}` panicked: {first}");
                if let Some(at) = at {
                    msg = format!("{msg}\n  at {at}");
                }
                if let Some(met) = shapes_that_met(&text) {
                    msg = format!("{msg}\n  the shapes that met there: {met}");
                }
                if !passed.is_empty() {
                    msg = format!("{msg}\n  the judge passed {passed}");
                }
                match panic_meaning(first) {
                    Some(meaning) => Err(sec.fail_hint(msg, meaning)),
                    None => Err(sec.fail(msg)),
                }
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

/// Whether `a` and `b` are the same number to `tol` ([`close`]), NaN matching NaN and ∞ matching ∞.
pub fn same_value(a: f64, b: f64, tol: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan()) || close(a, b, tol)
}

/// Where a softmax takes the maximum it subtracts: the judge's own arithmetic for naming a
/// dropped or misplaced shift.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shift {
    /// Each row's own maximum (the right one).
    Row,
    /// One maximum for the whole matrix.
    Whole,
    /// No shift at all.
    None,
}

/// The softmax of every row of `z` (−∞ entries give 0) with the maximum taken as `shift` says.
pub fn softmax_rows_shifted(z: &DMatrix<f64>, shift: Shift) -> DMatrix<f64> {
    let whole = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut out = z.clone();
    for mut row in out.row_iter_mut() {
        let m = match shift {
            Shift::Row => row.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            Shift::Whole => whole,
            Shift::None => 0.0,
        };
        row.apply(|v| *v = (*v - m).exp());
        let total = row.sum();
        row /= total;
    }
    out
}

/// The mistake named when a softmax's maximum shift is missing.
pub const NO_SHIFT: &str = "the max shift dropped: e^{s} overflows to ∞ (or every term \
                            underflows to 0) for large scores — subtract each row's maximum \
                            before exponentiating";
/// The mistake named when a softmax subtracts one maximum for the whole matrix.
pub const WHOLE_MAX: &str = "one max for the whole matrix: a row far below it underflows to 0/0 \
                             — subtract each row's own maximum";

/// Names a misplaced softmax shift: whether `yours` (a matrix of softmax rows, or anything
/// computed from them by `then`) matches the rows of `scores` with no shift or one shift for the
/// whole matrix, while the right answer is finite.
pub fn shift_mistake(
    yours: &DMatrix<f64>,
    scores: &DMatrix<f64>,
    then: impl Fn(&DMatrix<f64>) -> DMatrix<f64>,
) -> Option<String> {
    if yours.iter().all(|v| v.is_finite()) {
        return None;
    }
    shift_slip(|shift| {
        let mistake = [("", then(&softmax_rows_shifted(scores, shift)))];
        named(yours, &mistake, 1e-9).is_some()
    })
}

/// The misplaced softmax shift that explains an answer, given `matches(shift)`: whether yours is
/// what a softmax with `shift` gives on the judge's input. [`NO_SHIFT`] or [`WHOLE_MAX`], or both
/// (joined by "or") where both explain it, as when both leave every entry NaN. Records the
/// [`Probe::Named`] probe.
pub fn shift_slip(matches: impl Fn(Shift) -> bool) -> Option<String> {
    probe(Probe::Named);
    match (matches(Shift::None), matches(Shift::Whole)) {
        (true, true) => Some(format!("{NO_SHIFT}; or {WHOLE_MAX}")),
        (true, false) => Some(NO_SHIFT.to_string()),
        (false, true) => Some(WHOLE_MAX.to_string()),
        (false, false) => None,
    }
}

/// The rows of `m` that hold a NaN or an infinity.
pub fn non_finite_rows(m: &DMatrix<f64>) -> BTreeSet<usize> {
    (0..m.nrows()).filter(|&r| m.row(r).iter().any(|v| !v.is_finite())).collect()
}

/// The entry at which `yours` is first NaN or ∞ (row by row) where `want` is finite, if any.
pub fn first_overflow(yours: &DMatrix<f64>, want: &DMatrix<f64>) -> Option<(usize, usize)> {
    if yours.shape() != want.shape() {
        return None;
    }
    (0..want.nrows())
        .flat_map(|r| (0..want.ncols()).map(move |c| (r, c)))
        .find(|&(r, c)| !yours[(r, c)].is_finite() && want[(r, c)].is_finite())
}

/// The shift [`shifted_far`] adds to every entry: 10⁸, where E\[x²\] − μ² loses every digit of σ²
/// (x² is near 10¹⁶, whose last place is worth 2) while x − μ is still exact to about 10⁻⁸.
pub const FAR_SHIFT: f64 = 1e8;

/// A copy of `m` with [`FAR_SHIFT`] added to every entry (a [`Probe::Scale`] probe of a function
/// that subtracts each row's mean, so that its answer should not change).
pub fn shifted_far(m: &DMatrix<f64>) -> DMatrix<f64> {
    probe(Probe::Scale);
    m.add_scalar(FAR_SHIFT)
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
    if yours.iter().all(|v| *v == 0.0) {
        return Some("yours is all zeros: nothing reaches it — a path is missing".to_string());
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

/// `x` to `digits` significant digits, in plain notation for moderate sizes.
fn significant(x: f64, digits: usize) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor();
    if (-4.0..9.0).contains(&magnitude) {
        let decimals = (digits as f64 - 1.0 - magnitude).max(0.0) as usize;
        format!("{x:.decimals$}")
    } else {
        format!("{x:.prec$e}", prec = digits - 1)
    }
}

/// `yours` and `want` printed with the fewest significant digits (at least 6) at which they
/// differ, so a wrong value never prints the same as the right one.
pub fn differing(yours: f64, want: f64) -> (String, String) {
    let mut digits = 6;
    loop {
        let (a, b) = (significant(yours, digits), significant(want, digits));
        if a != b || digits >= 17 {
            return (a, b);
        }
        digits += 1;
    }
}

/// "yours Y, expected W (difference D)", with [`differing`] digits.
pub fn yours_expected(yours: f64, want: f64) -> String {
    let (a, b) = differing(yours, want);
    format!("yours {a}, expected {b} (difference {:.3e})", yours - want)
}

/// The sentence for a matrix of the wrong shape: `name` (e.g. `"causal_mask(4, 4)"`) should be
/// `rows×cols` — what that shape is (`meaning`, e.g. `"queries × keys"`, or `""`) — and yours is
/// `m`'s. `None` when `m` has that shape.
pub fn shape_mismatch(
    name: &str,
    m: &DMatrix<f64>,
    (rows, cols): (usize, usize),
    meaning: &str,
) -> Option<String> {
    if m.shape() == (rows, cols) {
        return None;
    }
    let meaning = if meaning.is_empty() { String::new() } else { format!(" ({meaning})") };
    Some(format!("{name} should be {rows}×{cols}{meaning}; yours is {}", m.shape_text()))
}

/// The shape check of a judge: the failure of [`shape_mismatch`] with the section's hint.
pub fn expect_shape(
    sec: Section,
    name: &str,
    m: &DMatrix<f64>,
    shape: (usize, usize),
    meaning: &str,
) -> Verdict {
    shape_mismatch(name, m, shape, meaning).map_or(Ok(()), |msg| Err(sec.fail(msg)))
}

/// Compares `yours` (named `name`, e.g. `"softmax(Z)"`) with `want` entry by entry: the shape,
/// then the first wrong entry (row by row), then a [`diagnose`]d slip if one explains it. An
/// entry is wrong when |yours − want| > tol · max(1, |want|).
pub fn compare(
    sec: Section,
    name: &str,
    yours: &DMatrix<f64>,
    want: &DMatrix<f64>,
    tol: f64,
    factors: &[(f64, &str)],
) -> Verdict {
    compare_with_floor(sec, name, yours, want, tol, 1.0, factors)
}

/// [`compare`] relatively everywhere: an entry is wrong when |yours − want| > tol · |want|, so
/// tiny values (tails, small probabilities) must be right to `tol` of themselves.
pub fn compare_relative(
    sec: Section,
    name: &str,
    yours: &DMatrix<f64>,
    want: &DMatrix<f64>,
    tol: f64,
) -> Verdict {
    compare_with_floor(sec, name, yours, want, tol, f64::MIN_POSITIVE, &[])
}

/// [`compare`] with the floor of its relative test given: an entry is wrong when
/// |yours − want| > tol · max(floor, |want|), so entries far below `floor` are compared against it
/// (for gradients whose exact value is 0, computed as rounding noise).
pub fn compare_with_floor(
    sec: Section,
    name: &str,
    yours: &DMatrix<f64>,
    want: &DMatrix<f64>,
    tol: f64,
    floor: f64,
    factors: &[(f64, &str)],
) -> Verdict {
    // [`diagnose`] names the transpose, the sign, a path left at zero and a constant factor.
    probe(Probe::Named);
    if let Some(mut msg) = shape_mismatch(name, yours, want.shape(), "") {
        if let Some(d) = diagnose(yours, want, factors) {
            msg = format!("{msg}; {d}");
        }
        return Err(sec.fail(msg));
    }
    let wrong = |r: usize, c: usize| {
        let (y, w) = (yours[(r, c)], want[(r, c)]);
        !y.is_finite() && y != w || (y - w).abs() > tol * floor.max(w.abs())
    };
    let first = (0..want.nrows())
        .flat_map(|r| (0..want.ncols()).map(move |c| (r, c)))
        .find(|&(r, c)| wrong(r, c));
    let Some((r, c)) = first else { return Ok(()) };
    let mut msg = format!(
        "{name}[{r},{c}] (the first wrong entry): {}",
        yours_expected(yours[(r, c)], want[(r, c)])
    );
    if let Some(d) = diagnose(yours, want, factors) {
        msg = format!("{msg} — {d}");
    }
    Err(sec.fail(msg))
}

/// The first of `mistakes` (a name in the chapter's words and that mistake's output on the
/// judge's input) that `yours` matches to `tol`, if any.
pub fn named<'a>(
    yours: &DMatrix<f64>,
    mistakes: &'a [(&'a str, DMatrix<f64>)],
    tol: f64,
) -> Option<&'a str> {
    probe(Probe::Named);
    mistakes
        .iter()
        .find(|(_, m)| {
            m.shape() == yours.shape()
                && m.iter().zip(yours.iter()).all(|(a, b)| same_value(*a, *b, tol))
        })
        .map(|(n, _)| *n)
}

/// A promised error: `call` on bad input (described by `what`) must return an `Err`.
pub fn expect_err<R, E>(
    sec: Section,
    exercise: &str,
    what: &str,
    call: impl FnOnce() -> Result<R, E>,
) -> Verdict {
    probe(Probe::Errors);
    match attempt(sec, exercise, call)
        .map_err(|m| note(m, &format!("that was {what}: return an Err, do not panic")))?
    {
        Err(_) => Ok(()),
        Ok(_) => Err(sec.fail(format!("{what}: yours returned Ok; the doc promises an Err"))),
    }
}

/// The offsets [`rows_apart`] adds to rows 0, 1, 2, 3, … (cyclically): thousands apart, so no
/// one maximum serves them all and e^{z} overflows without a shift.
pub const ROW_OFFSETS: [f64; 4] = [0.0, 3000.0, -2500.0, 800.0];

/// A copy of `m` with [`ROW_OFFSETS`] added to its rows (for the [`Probe::Scale`] probes).
pub fn rows_apart(m: &DMatrix<f64>) -> DMatrix<f64> {
    probe(Probe::Scale);
    DMatrix::from_fn(m.nrows(), m.ncols(), |r, c| m[(r, c)] + ROW_OFFSETS[r % ROW_OFFSETS.len()])
}

/// A copy of `m` whose row r is multiplied by `scales[r % scales.len()]`: rows on very different
/// scales (scores thousands apart, logits ±900), for the [`Probe::Scale`] probes.
pub fn rows_scaled(m: &DMatrix<f64>, scales: &[f64]) -> DMatrix<f64> {
    probe(Probe::Scale);
    DMatrix::from_fn(m.nrows(), m.ncols(), |r, c| m[(r, c)] * scales[r % scales.len()])
}

/// The layout of a [`Probe::Batch`] probe's input: what the judge feeds the exercise.
#[derive(Clone, Copy, Debug)]
pub struct BatchInput {
    /// B, the sequences (at least 2, of unequal content).
    pub sequences: usize,
    /// T_q, the padded length of the query (or only) side.
    pub t_q: usize,
    /// T_k, the padded length of the key side (T_q again where the exercise has one side).
    pub t_k: usize,
    /// C, the width of a row.
    pub width: usize,
}

/// Records a [`Probe::Batch`] probe after checking that the judge's own input is one: B ≥ 2
/// sequences and no square matrix (B·T_q ≠ C, B·T_k ≠ C). Whether T_q ≠ T_k is the judge's to
/// choose where the exercise allows it. A judge built against these rules stops with a panic
/// that names the rule (a defect of the judge, never of the answer).
pub fn batch_probe(input: BatchInput) {
    let BatchInput { sequences, t_q, t_k, width } = input;
    assert!(sequences >= 2, "a batch probe needs B ≥ 2 sequences, not {sequences}");
    assert!(
        sequences * t_q != width && sequences * t_k != width,
        "a batch probe's matrices must not be square (B = {sequences}, T_q = {t_q}, \
         T_k = {t_k}, C = {width})"
    );
    probe(Probe::Batch);
}

/// The slips a [`Probe::Batch`] probe names: the judge computes each one's output with the
/// main crate on its own input and names the one your answer matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchSlip {
    /// Only sequence 0 computed: the loop over the batch stops after the first sequence.
    FirstOnly,
    /// Sequence 0's content used for every sequence of the batch.
    FirstForAll,
}

impl BatchSlip {
    /// The slip in words, for the message.
    pub fn name(self) -> &'static str {
        match self {
            BatchSlip::FirstOnly => {
                "the batch loop ignored: only sequence 0 counts in yours — loop over all B \
                 sequences, sequence b in rows b·T … (b+1)·T − 1"
            }
            BatchSlip::FirstForAll => {
                "sequence 0's content used for every sequence: sequence b reads its own rows, \
                 b·T … (b+1)·T − 1"
            }
        }
    }
}

/// A copy of `m` (B sequences of `t` rows each, stacked) whose every sequence holds sequence 0's
/// rows: the input on which the judge computes what an answer that reads sequence 0's content for
/// every sequence returns.
pub fn first_for_all(m: &DMatrix<f64>, t: usize) -> DMatrix<f64> {
    DMatrix::from_fn(m.nrows(), m.ncols(), |r, c| m[(r % t, c)])
}

/// What the judge knows of a batched output when it looks for a [`BatchSlip`].
#[derive(Clone, Copy, Debug)]
pub struct BatchRows<'a> {
    /// T, the rows of one sequence.
    pub t: usize,
    /// The right output.
    pub want: &'a DMatrix<f64>,
    /// The right output on the input whose every sequence is sequence 0's ([`first_for_all`]).
    pub first_for_all: &'a DMatrix<f64>,
    /// What the other sequences' rows hold when the answer never writes them, besides zero (the
    /// input itself, for an answer that starts from a copy of it).
    pub untouched: Option<&'a DMatrix<f64>>,
}

/// The [`BatchSlip`] that explains `yours` (B sequences of `rows.t` rows each), if one does:
/// [`BatchSlip::FirstOnly`] when sequence 0's rows are right and every other sequence's rows are
/// zero (or untouched) though the right ones are not; [`BatchSlip::FirstForAll`] when yours is
/// the right output of the input whose every sequence is sequence 0's, and the right output is
/// not. Entries agree to `tol` relatively. Records the [`Probe::Batch`] probe.
pub fn batch_slip(yours: &DMatrix<f64>, rows: BatchRows, tol: f64) -> Option<&'static str> {
    probe(Probe::Batch);
    let BatchRows { t, want, first_for_all, untouched } = rows;
    if yours.shape() != want.shape() || want.nrows() < 2 * t {
        return None;
    }
    let agree = |a: &DMatrix<f64>, b: &DMatrix<f64>, from: usize, n: usize| {
        (from..from + n).all(|r| (0..a.ncols()).all(|c| same_value(a[(r, c)], b[(r, c)], tol)))
    };
    let rest = want.nrows() - t;
    let zero = DMatrix::zeros(want.nrows(), want.ncols());
    let blank = |m: &DMatrix<f64>| agree(yours, m, t, rest) && !agree(want, m, t, rest);
    if agree(yours, want, 0, t) && (blank(&zero) || untouched.is_some_and(blank)) {
        return Some(BatchSlip::FirstOnly.name());
    }
    let all = want.nrows();
    if agree(yours, first_for_all, 0, all) && !agree(want, first_for_all, 0, all) {
        return Some(BatchSlip::FirstForAll.name());
    }
    None
}

/// One batched output for [`batch_slips`]: (yours, the right one, the right one on sequence 0's
/// content for all, T).
pub type Batched<'a> = (&'a DMatrix<f64>, &'a DMatrix<f64>, &'a DMatrix<f64>, usize);

/// [`batch_slip`] over several batched outputs: the failure naming the first slip found.
pub fn batch_slips(sec: Section, outputs: &[Batched], tol: f64) -> Verdict {
    for &(yours, want, first_for_all, t) in outputs {
        let rows = BatchRows { t, want, first_for_all, untouched: None };
        if let Some(slip) = batch_slip(yours, rows, tol) {
            return Err(known_slip(sec, slip));
        }
    }
    Ok(())
}

/// The failure for an answer that matches a known slip: `slip` in the chapter's words.
pub fn known_slip(sec: Section, slip: &str) -> String {
    sec.fail(format!("yours matches a known slip — {slip}"))
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
    // [`diagnose`] names the transpose, the sign, a path left at zero and a constant factor.
    probe(Probe::Named);
    let config = Config { tolerance: 1e-5, floor: 1e-3, ..Config::default() };
    for (i, ((name, m), a)) in inputs.iter().zip(analytic).enumerate() {
        let meaning = format!("{name}'s shape");
        if let Some(mut msg) = shape_mismatch(&format!("∂L/∂{name}"), a, m.shape(), &meaning) {
            let numeric = numeric_gradient(inputs, i, &mut loss);
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
    let (a, n) = differing(w.analytic, w.numeric);
    let mut msg = format!(
        "∂L/∂{}[{},{}]: yours {a}, finite differences {n} (difference {:.3e})",
        w.tensor,
        w.at.0,
        w.at.1,
        w.analytic - w.numeric
    );
    let numeric = numeric_gradient(inputs, worst, &mut loss);
    if let Some(d) = diagnose(&analytic[worst], &numeric, factors) {
        msg = format!("{msg} — {d}");
    }
    Err(sec.fail(msg))
}

/// The seeded random matrices the judges draw their inputs from.
pub fn random(seed: u64, rows: usize, cols: usize) -> DMatrix<f64> {
    // The proof by mutation's other seeds (0 as shipped) reach these matrices too.
    let salted = seed ^ sweep::salt().wrapping_mul(0x9e37_79b9_7f4a_7c15);
    llm_workbook::rng::Rng::new(salted).normal_matrix(rows, cols, 1.0)
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
