//! The differential sweep every judge runs first: your function and the main crate's (the one the
//! `solutions` feature answers with) on the same generated inputs — ordinary and very large or
//! tiny values, shapes with 0 and 1 rows and unequal sizes, parameters at and just past the ends
//! of their valid range, ties and orderings — compared within the tolerance the exercise states.
//! An error must meet an error. After the cases come the edges of a few of them ([`Input::edges`]:
//! a row, a column, an element or a unit more or fewer), compared where the reference accepts
//! them. Each input is run through your function twice: a result that
//! changes between two runs on the same input is failed as nondeterministic.
//!
//! Everything is seeded ([`Gen`]), so a judge gives the same verdict and the same message on every
//! run. When an input shows a difference, the sweep shrinks it (fewer rows, shorter sequences,
//! simpler values) while the difference remains, and prints the smallest one it found with yours
//! and the expected result. The chapter's own checks (worked numbers, gradient checks, the known
//! mistakes computed on the judge's input) then run as explanations ([`explained`]).

use super::{NOT_STARTED, Section, Verdict, attempt};
use llm_workbook::rng::Rng;
use nalgebra::{DMatrix, DVector};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Quick mode (for the proof by mutation, which only needs to know *that* a judge fails): no
/// shrinking, and no explanation once the sweep has found a difference.
static QUICK: AtomicBool = AtomicBool::new(false);

/// A salt mixed into every [`Gen`]'s seed (0 for the judges as shipped): the proof by mutation
/// sweeps again with other salts to tell an equivalent mutant from one the sweep missed.
static SALT: AtomicU64 = AtomicU64::new(0);

/// Wide mode (for the proof by mutation's second look at a mutant its judge passed): every
/// [`Gen`] also varies the shapes and edges of what it draws — a matrix's rows or columns one
/// more or one fewer (down to 0), a vector, logits, tokens or weights one longer or shorter, a
/// token id past the vocabulary, values at 10⁻⁶ or 10⁶ times their scale — so that
/// "equivalent" means no difference on the valid inputs the exercise's doc covers, not only on
/// the judge's own sizes. A varied input the reference rejects is not compared (the doc may not
/// promise that error; the errors it promises are the judge's own cases, compared as shipped).
static WIDE: AtomicBool = AtomicBool::new(false);

/// Turns wide mode on or off (see `WIDE`); for the proof by mutation only.
pub fn set_wide(wide: bool) {
    WIDE.store(wide, Ordering::Relaxed);
}

/// The salt of the seeds (see `SALT`): the judges' own seeded matrices mix it in too.
pub fn salt() -> u64 {
    SALT.load(Ordering::Relaxed)
}

/// Turns quick mode on or off (see `QUICK`); for the proof by mutation only.
pub fn set_quick(quick: bool) {
    QUICK.store(quick, Ordering::Relaxed);
}

/// Sets the salt of every [`Gen`]'s seed (see `SALT`); for the proof by mutation only.
pub fn set_salt(salt: u64) {
    SALT.store(salt, Ordering::Relaxed);
}

/// How close a value must be to the reference: an entry is wrong when it is NaN or ∞ where the
/// reference is not (or the other way round), or when |yours − want| > `rel` · max(|want|,
/// `floor` · m), with m the largest finite |entry| of the whole expected output. `floor` lets
/// entries that cancel down to rounding noise be compared against the output's own scale.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tol {
    /// The relative tolerance.
    pub rel: f64,
    /// The fraction of the output's largest entry below which entries are compared absolutely.
    pub floor: f64,
}

impl Tol {
    /// Bit for bit (NaN matches NaN): for conversions, rounding and integer results, where there
    /// is one right answer.
    pub const EXACT: Tol = Tol { rel: 0.0, floor: 0.0 };

    /// The tolerance of the f64 exercises: the reference and a right answer written in another
    /// order differ by rounding only, a few units of 2⁻⁵² per operation, grown by the cancellation
    /// of a sum or a backward pass; 10⁻⁸ of the value (and of the output's largest entry for the
    /// entries that cancel to noise, 10⁻⁸ · 10⁻⁶) leaves room for ten million such units, while
    /// every mistake of formula changes some entry of some input by far more.
    pub const F64: Tol = Tol { rel: 1e-8, floor: 1e-6 };

    /// `F64` for the chains of many layers (a whole block's or model's backward), where rounding
    /// is amplified by a longer chain: 10⁻⁶.
    pub const CHAIN: Tol = Tol { rel: 1e-6, floor: 1e-6 };
}

/// What the sweep compares: a result flattened to numbers, with a shape that must match.
pub trait Output {
    /// The shape in words ("3×4", "length 5"); two results of different shapes differ.
    fn shape(&self) -> String;
    /// The numbers, in an order [`Output::label`] names.
    fn numbers(&self, out: &mut Vec<f64>);
    /// The name of number `i` (`[1,2]`).
    fn label(&self, i: usize) -> String {
        format!("entry {i}")
    }
}

/// `x` to 6 significant digits, short.
pub fn short(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor();
    if (-3.0..6.0).contains(&magnitude) {
        let decimals = (5.0 - magnitude).max(0.0) as usize;
        let s = format!("{x:.decimals$}");
        let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.') } else { &s };
        s.to_string()
    } else {
        format!("{x:.5e}")
    }
}

/// The numbers of `o`, at most `MAX_SHOWN` of them, as a list.
fn show_numbers(numbers: &[f64]) -> String {
    const MAX_SHOWN: usize = 16;
    let mut s: Vec<String> = numbers.iter().take(MAX_SHOWN).map(|&x| short(x)).collect();
    if numbers.len() > MAX_SHOWN {
        s.push(format!("… {} more", numbers.len() - MAX_SHOWN));
    }
    format!("[{}]", s.join(", "))
}

impl Output for f64 {
    fn shape(&self) -> String {
        "a number".into()
    }
    fn numbers(&self, out: &mut Vec<f64>) {
        out.push(*self);
    }
    fn label(&self, _: usize) -> String {
        "the value".into()
    }
}

impl Output for f32 {
    fn shape(&self) -> String {
        "a number".into()
    }
    fn numbers(&self, out: &mut Vec<f64>) {
        out.push(f64::from(*self));
    }
    fn label(&self, _: usize) -> String {
        "the value".into()
    }
}

macro_rules! integer_output {
    ($($t:ty),*) => {$(
        impl Output for $t {
            fn shape(&self) -> String {
                "a number".into()
            }
            fn numbers(&self, out: &mut Vec<f64>) {
                out.push(*self as f64);
            }
            fn label(&self, _: usize) -> String {
                "the value".into()
            }
        }
    )*};
}
integer_output!(u16, u32, i8, i32, usize, u64);

impl Output for () {
    fn shape(&self) -> String {
        "nothing".into()
    }
    fn numbers(&self, _: &mut Vec<f64>) {}
}

impl Output for DMatrix<f64> {
    fn shape(&self) -> String {
        format!("{}×{}", self.nrows(), self.ncols())
    }
    fn numbers(&self, out: &mut Vec<f64>) {
        // Row by row, as a reader counts entries.
        for r in 0..self.nrows() {
            out.extend(self.row(r).iter().copied());
        }
    }
    fn label(&self, i: usize) -> String {
        let c = self.ncols().max(1);
        format!("[{},{}]", i / c, i % c)
    }
}

impl Output for DVector<f64> {
    fn shape(&self) -> String {
        format!("length {}", self.len())
    }
    fn numbers(&self, out: &mut Vec<f64>) {
        out.extend(self.iter().copied());
    }
    fn label(&self, i: usize) -> String {
        format!("[{i}]")
    }
}

impl<T: Output> Output for Vec<T> {
    fn shape(&self) -> String {
        let parts: Vec<String> = self.iter().map(Output::shape).collect();
        format!("{} items ({})", self.len(), parts.join(", "))
    }
    fn numbers(&self, out: &mut Vec<f64>) {
        for x in self {
            x.numbers(out);
        }
    }
    fn label(&self, i: usize) -> String {
        locate(self.iter().map(|x| (String::new(), x as &dyn Output)), i, "item")
    }
}

/// The label of number `i` among `parts` (each named, or numbered by `word` when its name is "").
fn locate<'a>(
    parts: impl Iterator<Item = (String, &'a dyn Output)>,
    i: usize,
    word: &str,
) -> String {
    let mut at = i;
    for (k, (name, part)) in parts.enumerate() {
        let mut n = Vec::new();
        part.numbers(&mut n);
        if at < n.len() {
            let name = if name.is_empty() { format!("{word} {k}") } else { name };
            return format!("{name} {}", part.label(at));
        }
        at -= n.len();
    }
    format!("entry {i}")
}

/// An output of named parts (the gradients of a backward pass, a struct's fields).
#[derive(Clone, Debug, PartialEq)]
pub struct Named(pub Vec<(String, DMatrix<f64>)>);

impl Named {
    /// From names and matrices.
    pub fn of<S: Into<String>>(parts: impl IntoIterator<Item = (S, DMatrix<f64>)>) -> Named {
        Named(parts.into_iter().map(|(n, m)| (n.into(), m)).collect())
    }
}

impl Output for Named {
    fn shape(&self) -> String {
        let parts: Vec<String> =
            self.0.iter().map(|(n, m)| format!("{n} {}", Output::shape(m))).collect();
        parts.join(", ")
    }
    fn numbers(&self, out: &mut Vec<f64>) {
        for (_, m) in &self.0 {
            m.numbers(out);
        }
    }
    fn label(&self, i: usize) -> String {
        locate(self.0.iter().map(|(n, m)| (n.clone(), m as &dyn Output)), i, "part")
    }
}

macro_rules! tuple_output {
    ($($name:ident $i:tt),*) => {
        impl<$($name: Output),*> Output for ($($name,)*) {
            fn shape(&self) -> String {
                let parts: Vec<String> = vec![$(self.$i.shape()),*];
                format!("({})", parts.join(", "))
            }
            fn numbers(&self, out: &mut Vec<f64>) {
                $(self.$i.numbers(out);)*
            }
            fn label(&self, i: usize) -> String {
                let parts: Vec<(String, &dyn Output)> =
                    vec![$((String::new(), &self.$i as &dyn Output)),*];
                locate(parts.into_iter(), i, "output")
            }
        }
    };
}
tuple_output!(A 0, B 1);
tuple_output!(A 0, B 1, C 2);

/// The results of one function on one input: its value or its error's text.
pub type Outcome<O> = Result<O, String>;

/// Where `yours` differs from `want`, in words, or `None` when they agree to `tol`.
pub fn difference<O: Output>(yours: &Outcome<O>, want: &Outcome<O>, tol: Tol) -> Option<String> {
    match (yours, want) {
        (Err(_), Err(_)) => None,
        (Ok(_), Err(e)) => Some(format!(
            "yours returned Ok; the doc promises an Err here (the chapter's function says: {e})"
        )),
        (Err(e), Ok(_)) => Some(format!("yours returned an error on valid input: {e}")),
        (Ok(y), Ok(w)) => {
            let (ys, ws) = (y.shape(), w.shape());
            if ys != ws {
                return Some(format!("the shape differs: yours is {ys}, expected {ws}"));
            }
            let (mut a, mut b) = (Vec::new(), Vec::new());
            y.numbers(&mut a);
            w.numbers(&mut b);
            let scale = b.iter().filter(|v| v.is_finite()).fold(0.0f64, |m, v| m.max(v.abs()));
            let wrong = |(y, w): (f64, f64)| {
                if tol == Tol::EXACT {
                    return !(y.to_bits() == w.to_bits() || y.is_nan() && w.is_nan());
                }
                if y.is_nan() || w.is_nan() || y.is_infinite() || w.is_infinite() {
                    return !(y == w || y.is_nan() && w.is_nan());
                }
                // Below the smallest normal f64 (2.2·10⁻³⁰⁸) a subnormal has too few digits for
                // two right formulas to agree on: there the difference is compared absolutely.
                let d = (y - w).abs();
                d > f64::MIN_POSITIVE && d > tol.rel * w.abs().max(tol.floor * scale)
            };
            let i = a.iter().zip(&b).position(|(&y, &w)| wrong((y, w)))?;
            let (ya, wa) = super::differing(a[i], b[i]);
            let mut msg = format!("{}: yours {ya}, expected {wa}", w.label(i));
            if a.len() > 1 {
                let _ = write!(
                    msg,
                    "\n  all of yours: {}\n  all expected: {}",
                    show_numbers(&a),
                    show_numbers(&b)
                );
            }
            Some(msg)
        }
    }
}

/// What the sweep passes a function: shown in a message, and shrunk toward simpler inputs.
pub trait Input: Clone {
    /// The input in words and numbers, for the message.
    fn show(&self) -> String;
    /// Simpler inputs to try in its place, simplest first (the first candidate of every kind
    /// drops the last row, element or unit, so that a tuple can shrink all its parts at once).
    fn shrink(&self) -> Vec<Self>;
    /// Its neighbours at the edges of its shape: a matrix with a row or a column fewer (down to
    /// 0) or more, a sequence one shorter or longer, a size one smaller or larger, a number 0 or
    /// negated, a flag flipped. The sweep compares them where the reference accepts them (a
    /// valid input, which the doc covers whatever it is); one it rejects is not compared, since
    /// the doc need not promise that error.
    fn edges(&self) -> Vec<Self> {
        Vec::new()
    }
    /// What it is, in a word or two ("matrix", "number"), for the page's sweep column.
    fn kind() -> String;
}

/// What a sweep of inputs of `kinds` draws, with the repeated kinds counted: "3 matrices, flag".
fn described(kinds: &[String]) -> String {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for k in kinds {
        match seen.iter_mut().find(|(s, _)| s == k) {
            Some((_, n)) => *n += 1,
            None => seen.push((k.clone(), 1)),
        }
    }
    let parts: Vec<String> = seen
        .into_iter()
        .map(|(k, n)| match n {
            1 => k,
            _ if is_group(&k) => format!("{n} × ({k})"),
            _ => format!("{n} {}", plural(&k)),
        })
        .collect();
    parts.join(", ")
}

/// Whether a kind is itself a group of kinds ("2 sizes", "matrix, flag").
fn is_group(k: &str) -> bool {
    k.starts_with(|c: char| c.is_ascii_digit()) || k.contains(',')
}

/// The plural of a kind: "matrices", "lists of sizes", "bit patterns"; a group in parentheses.
fn plural(k: &str) -> String {
    if is_group(k) {
        format!("({k})")
    } else if let Some(rest) = k.strip_prefix("list of ") {
        format!("lists of {rest}")
    } else if let Some((head, last)) = k.rsplit_once(' ') {
        format!("{head} {}", plural_word(last))
    } else {
        plural_word(k)
    }
}

/// The plural of one word of a kind.
fn plural_word(w: &str) -> String {
    match w {
        "matrix" => "matrices".into(),
        "f32" | "f16" => format!("{w} values"),
        _ => format!("{w}s"),
    }
}

thread_local! {
    /// What the sweeps run since the last [`take_swept`] drew, one line per sweep.
    static SWEPT: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// What the sweeps run on this thread since the last call drew: "40 cases + 36 edges: 2
/// matrices", one per sweep (the page's sweep column).
pub fn take_swept() -> Vec<String> {
    SWEPT.with(|s| std::mem::take(&mut *s.borrow_mut()))
}

/// `m` with `rows` and `cols` rows and columns: its own entries where it has them, the last row
/// or column repeated where it grows.
fn resized(m: &DMatrix<f64>, rows: usize, cols: usize) -> DMatrix<f64> {
    let (r, c) = m.shape();
    DMatrix::from_fn(rows, cols, |i, j| {
        if r == 0 || c == 0 { 1.0 } else { m[(i.min(r - 1), j.min(c - 1))] }
    })
}

impl Input for DMatrix<f64> {
    fn kind() -> String {
        "matrix".into()
    }
    fn show(&self) -> String {
        let mut n = Vec::new();
        self.numbers(&mut n);
        format!("{}×{} {}", self.nrows(), self.ncols(), show_numbers(&n))
    }
    fn shrink(&self) -> Vec<Self> {
        let (r, c) = self.shape();
        let mut out = Vec::new();
        // Never down to 0 rows or columns: an empty input is a case of its own, which the doc
        // covers or not.
        if r > 1 {
            out.push(self.clone().remove_row(r - 1));
        }
        if c > 1 {
            out.push(self.clone().remove_column(c - 1));
        }
        if r > 1 {
            out.push(self.clone().remove_row(0));
        }
        if c > 1 {
            out.push(self.clone().remove_column(0));
        }
        let simple = self.map(simpler);
        if simple != *self {
            out.push(simple);
        }
        out
    }
    fn edges(&self) -> Vec<Self> {
        let (r, c) = self.shape();
        let mut out = Vec::new();
        if r > 0 {
            out.push(resized(self, r - 1, c));
        }
        if c > 0 {
            out.push(resized(self, r, c - 1));
        }
        out.push(resized(self, r + 1, c));
        out.push(resized(self, r, c + 1));
        out
    }
}

/// `x` with fewer digits: rounded to 2 significant digits, then to a whole number (large values
/// stay large, so that a difference of scale survives).
fn simpler(x: f64) -> f64 {
    if !x.is_finite() || x == 0.0 || x == x.round() {
        return x;
    }
    let magnitude = 10f64.powf(x.abs().log10().floor() - 1.0);
    let r = (x / magnitude).round() * magnitude;
    if r == x { x.round() } else { r }
}

impl Input for DVector<f64> {
    fn kind() -> String {
        "vector".into()
    }
    fn show(&self) -> String {
        format!("length {} {}", self.len(), show_numbers(self.as_slice()))
    }
    fn shrink(&self) -> Vec<Self> {
        let n = self.len();
        let mut out = Vec::new();
        if n > 1 {
            out.push(self.clone().remove_row(n - 1));
        }
        if n > 1 {
            out.push(self.clone().remove_row(0));
        }
        let simple = self.map(simpler);
        if simple != *self {
            out.push(simple);
        }
        out
    }
    fn edges(&self) -> Vec<Self> {
        let n = self.len();
        let mut out = Vec::new();
        if n > 0 {
            out.push(self.clone().remove_row(n - 1));
            out.push(self.clone().insert_row(n, self[n - 1]));
        }
        out
    }
}

impl<T: Input> Input for Vec<T> {
    fn kind() -> String {
        format!("list of {}", plural(&T::kind()))
    }
    fn show(&self) -> String {
        const MAX_SHOWN: usize = 16;
        let mut parts: Vec<String> = self.iter().take(MAX_SHOWN).map(Input::show).collect();
        if self.len() > MAX_SHOWN {
            parts.push(format!("… {} more", self.len() - MAX_SHOWN));
        }
        format!("length {} [{}]", self.len(), parts.join(", "))
    }
    fn shrink(&self) -> Vec<Self> {
        let n = self.len();
        let mut out = Vec::new();
        if n > 1 {
            out.push(self[..n - 1].to_vec());
            out.push(self[1..].to_vec());
            out.push([&self[..n / 2], &self[n / 2 + 1..]].concat());
        }
        let mut simple = self.clone();
        let mut changed = false;
        for x in &mut simple {
            if let Some(s) = x.shrink().into_iter().next() {
                *x = s;
                changed = true;
            }
        }
        if changed {
            out.push(simple);
        }
        out
    }
    fn edges(&self) -> Vec<Self> {
        let n = self.len();
        let mut out = Vec::new();
        if n > 0 {
            out.push(self[..n - 1].to_vec());
            out.push([self.as_slice(), &self[n - 1..]].concat());
            // The last element's own edges.
            for e in self[n - 1].edges() {
                let mut v = self.clone();
                v[n - 1] = e;
                out.push(v);
            }
        }
        out
    }
}

/// Floating-point scalars shrink toward fewer digits.
macro_rules! float_input {
    ($($t:ty: $kind:expr),*) => {$(
        impl Input for $t {
            fn kind() -> String {
                $kind.into()
            }
            fn show(&self) -> String {
                short(f64::from(*self))
            }
            fn shrink(&self) -> Vec<Self> {
                let s = simpler(f64::from(*self)) as $t;
                if s != *self && s.is_finite() { vec![s] } else { Vec::new() }
            }
            fn edges(&self) -> Vec<Self> {
                vec![0.0, -*self]
            }
        }
    )*};
}
float_input!(f64: "number", f32: "f32");

/// Codes, bit patterns and seeds are shown, never shrunk.
macro_rules! code_input {
    ($($t:ty: $kind:expr),*) => {$(
        impl Input for $t {
            fn kind() -> String {
                $kind.into()
            }
            fn show(&self) -> String {
                self.to_string()
            }
            fn shrink(&self) -> Vec<Self> {
                Vec::new()
            }
        }
    )*};
}
code_input!(i8: "code", i32: "level", u16: "bit pattern", u32: "bit pattern", u64: "seed");

impl Input for usize {
    fn kind() -> String {
        "size".into()
    }
    fn show(&self) -> String {
        self.to_string()
    }
    fn shrink(&self) -> Vec<Self> {
        // Sizes shrink toward 1, one step at a time, then by halves.
        let mut out = Vec::new();
        if *self > 1 {
            out.push(self - 1);
            if self / 2 >= 1 && self / 2 != self - 1 {
                out.push(self / 2);
            }
        }
        out
    }
    fn edges(&self) -> Vec<Self> {
        let mut out = vec![self + 1];
        if *self > 0 {
            out.push(self - 1);
        }
        out
    }
}

impl Input for bool {
    fn kind() -> String {
        "flag".into()
    }
    fn show(&self) -> String {
        self.to_string()
    }
    fn shrink(&self) -> Vec<Self> {
        Vec::new()
    }
    fn edges(&self) -> Vec<Self> {
        vec![!self]
    }
}

/// An input that is shown but never shrunk (a kind, a configuration).
#[derive(Clone, Debug)]
pub struct Fixed<T>(pub T);

impl<T: Clone + std::fmt::Debug> Input for Fixed<T> {
    fn kind() -> String {
        "setting".into()
    }
    fn show(&self) -> String {
        format!("{:?}", self.0)
    }
    fn shrink(&self) -> Vec<Self> {
        Vec::new()
    }
}

macro_rules! tuple_input {
    ($($name:ident $v:ident $i:tt),*) => {
        impl<$($name: Input),*> Input for ($($name,)*) {
            fn kind() -> String {
                described(&[$($name::kind()),*])
            }
            fn show(&self) -> String {
                let parts: Vec<String> = vec![$(self.$i.show()),*];
                parts.join("; ")
            }
            fn shrink(&self) -> Vec<Self> {
                let mut out = Vec::new();
                $(let $v = self.$i.shrink();)*
                // Every part's first candidate at once (one row fewer everywhere), then each
                // part's candidates alone.
                if $(!$v.is_empty())&&* {
                    out.push(($($v[0].clone(),)*));
                }
                tuple_input!(@each self out [$($v $i),*] [$($i),*]);
                out
            }
            fn edges(&self) -> Vec<Self> {
                // Each part's edges alone, then two parts' edges at once (the first four parts),
                // so that sizes that must agree are seen disagreeing, and agreeing at 0.
                let mut out = Vec::new();
                $(let $v = self.$i.edges();)*
                $(
                    for e in &$v {
                        let mut t = self.clone();
                        t.$i = e.clone();
                        out.push(t);
                    }
                )*
                let mut pairs: Vec<Box<dyn Fn(&mut Self, usize) -> bool>> = Vec::new();
                $(
                    {
                        let edges = $v.clone();
                        pairs.push(Box::new(move |t: &mut Self, k: usize| {
                            if let Some(e) = edges.get(k) {
                                t.$i = e.clone();
                                true
                            } else {
                                false
                            }
                        }));
                    }
                )*
                const PAIRED: usize = 4;
                let n = pairs.len().min(PAIRED);
                for a in 0..n {
                    for b in a + 1..n {
                        for ka in 0.. {
                            let mut t = self.clone();
                            if !pairs[a](&mut t, ka) {
                                break;
                            }
                            for kb in 0.. {
                                let mut u = t.clone();
                                if !pairs[b](&mut u, kb) {
                                    break;
                                }
                                out.push(u);
                            }
                        }
                    }
                }
                out
            }
        }
    };
    (@each $s:ident $out:ident [$($v:ident $i:tt),*] $all:tt) => {
        $(tuple_input!(@one $s $out $v $i $all);)*
    };
    (@one $s:ident $out:ident $v:ident $i:tt [$($j:tt),*]) => {
        for cand in &$v {
            let mut t = $s.clone();
            t.$i = cand.clone();
            $out.push(t);
        }
    };
}
tuple_input!(A a 0, B b 1);
tuple_input!(A a 0, B b 1, C c 2);
tuple_input!(A a 0, B b 1, C c 2, D d 3);
tuple_input!(A a 0, B b 1, C c 2, D d 3, E e 4);
tuple_input!(A a 0, B b 1, C c 2, D d 3, E e 4, F f 5);
tuple_input!(A a 0, B b 1, C c 2, D d 3, E e 4, F f 5, G g 6);
tuple_input!(A a 0, B b 1, C c 2, D d 3, E e 4, F f 5, G g 6, H h 7);

/// The seeded generator of the sweep's inputs: one per kind of input, used by every judge.
pub struct Gen {
    rng: Rng,
}

/// The scales the sweep draws values at: ordinary, tiny, large and very large (where a softmax
/// without its shift overflows and a variance as E\[x²\] − μ² loses its digits).
pub const SCALES: [f64; 5] = [1.0, 1e-4, 30.0, 1e3, 1e-9];

/// The shapes (rows, columns) of the sweep's matrices: 1 row, 1 column, 0 rows, unequal sizes.
pub const SHAPES: [(usize, usize); 7] = [(1, 1), (1, 4), (3, 1), (2, 3), (4, 5), (5, 2), (0, 3)];

impl Gen {
    /// A generator seeded by the exercise's name, so that each exercise sees its own inputs and
    /// every run the same ones.
    pub fn new(exercise: &str) -> Gen {
        let seed = exercise.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        Gen {
            rng: Rng::new(seed ^ SALT.load(Ordering::Relaxed).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        }
    }

    /// A whole number in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        self.rng.below(n)
    }

    /// `n`, or in wide mode (see `WIDE`) sometimes one more or one fewer.
    fn size(&mut self, n: usize) -> usize {
        if !WIDE.load(Ordering::Relaxed) {
            return n;
        }
        match self.rng.below(4) {
            0 => n + 1,
            1 => n.saturating_sub(1),
            _ => n,
        }
    }

    /// `scale`, or in wide mode sometimes 10⁻⁶ or 10⁶ times it.
    fn scale(&mut self, scale: f64) -> f64 {
        if !WIDE.load(Ordering::Relaxed) {
            return scale;
        }
        match self.rng.below(8) {
            0 => scale * 1e-6,
            1 => scale * 1e6,
            _ => scale,
        }
    }

    /// A matrix drawn by `fill` at the (in wide mode, varied) shape.
    fn shaped(
        &mut self,
        rows: usize,
        cols: usize,
        fill: impl FnOnce(&mut Gen, usize, usize) -> DMatrix<f64>,
    ) -> DMatrix<f64> {
        let (rows, cols) = (self.size(rows), self.size(cols));
        fill(self, rows, cols)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        self.rng.uniform(lo, hi)
    }

    /// A rows×cols matrix of N(0, scale²) entries.
    pub fn matrix(&mut self, rows: usize, cols: usize, scale: f64) -> DMatrix<f64> {
        let scale = self.scale(scale);
        self.shaped(rows, cols, |g, r, c| g.rng.normal_matrix(r, c, scale))
    }

    /// A rows×cols matrix whose rows lie on different scales (row r drawn at
    /// `SCALES[r % 5] · scale`, shifted by ±scale·r), and with two entries of one row tied.
    pub fn rows_apart(&mut self, rows: usize, cols: usize, scale: f64) -> DMatrix<f64> {
        self.shaped(rows, cols, |g, rows, cols| {
            let mut m = DMatrix::from_fn(rows, cols, |r, _| {
                let s = SCALES[r % SCALES.len()] * scale;
                s * g.rng.normal() + if r % 2 == 0 { 1.0 } else { -1.0 } * scale * r as f64
            });
            if rows > 0 && cols > 1 {
                m[(0, 1)] = m[(0, 0)];
            }
            m
        })
    }

    /// A vector of `n` N(0, scale²) entries.
    pub fn vector(&mut self, n: usize, scale: f64) -> DVector<f64> {
        let (n, scale) = (self.size(n), self.scale(scale));
        DVector::from_iterator(n, (0..n).map(|_| scale * self.rng.normal()))
    }

    /// `n` logits at `scale` with ties: every third one equal to the one before it.
    pub fn logits(&mut self, n: usize, scale: f64) -> Vec<f64> {
        let (n, scale) = (self.size(n), self.scale(scale));
        let mut v: Vec<f64> = (0..n).map(|_| scale * self.rng.normal()).collect();
        for i in (2..n).step_by(3) {
            v[i] = v[i - 1];
        }
        v
    }

    /// A token sequence of length `n` over a vocabulary of `vocab` ids (repeats likely).
    pub fn tokens(&mut self, n: usize, vocab: usize) -> Vec<usize> {
        let n = self.size(n);
        let mut t: Vec<usize> = (0..n).map(|_| self.rng.below(vocab)).collect();
        // Wide mode: sometimes an id past the vocabulary.
        if WIDE.load(Ordering::Relaxed) && n > 0 && self.rng.below(6) == 0 {
            let i = self.rng.below(n);
            t[i] = vocab;
        }
        t
    }

    /// A group of `n` rewards at `scale`, each group of one kind in turn: a rule's verdicts in
    /// {0, 1} (ties certain, now and then all equal), all equal, graded N(0, scale²) values, or
    /// values near 10⁸·scale that differ by whole units (where a one-pass variance loses its
    /// digits).
    pub fn rewards(&mut self, n: usize, scale: f64) -> Vec<f64> {
        let (n, scale) = (self.size(n), self.scale(scale));
        match self.rng.below(4) {
            0 => (0..n).map(|_| scale * self.rng.below(2) as f64).collect(),
            1 => vec![scale * self.rng.normal(); n],
            2 => (0..n).map(|_| scale * self.rng.normal()).collect(),
            _ => (0..n).map(|_| scale * (1e8 + self.rng.below(3) as f64)).collect(),
        }
    }

    /// A block of `n` f32 weights at `scale`, with one entry of each sign's largest magnitude
    /// repeated (ties for the block's maximum) where n ≥ 3.
    pub fn weights(&mut self, n: usize, scale: f32) -> Vec<f32> {
        let (n, scale) = (self.size(n), self.scale(f64::from(scale)) as f32);
        let mut w: Vec<f32> = (0..n).map(|_| scale * self.rng.normal() as f32).collect();
        if n >= 3 {
            let big = w.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            w[1] = -big;
            w[2] = big;
        }
        w
    }
}

/// Runs `f` with panics kept quiet and caught: `None` when it panicked.
fn quietly<R>(f: impl FnOnce() -> R) -> Option<R> {
    super::quiet_answer_panics();
    let outer = super::IN_ATTEMPT.with(|a| a.replace(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok();
    super::IN_ATTEMPT.with(|a| a.set(outer));
    super::PANIC_AT.with(|p| p.borrow_mut().take());
    r
}

/// How many of a sweep's cases (spread over those the reference accepts) also have their edges
/// swept ([`Input::edges`]).
const EDGE_BASES: usize = 4;

/// The most evaluations a shrink spends, so that a failing judge stays quick.
const SHRINK_BUDGET: usize = 300;

/// The sweep: `yours` and `reference` on every case (`reference` is the main crate's function,
/// in the exercise's signature), compared to `tol`; each case run twice through `yours`. The
/// first difference is shrunk and reported in the section `sec`'s terms; `Ok(())` when none is
/// found. A case on which the reference itself panics is outside what the exercise covers and is
/// skipped; an answer that panics where the reference returns fails.
pub fn sweep<I: Input, O: Output>(
    sec: Section,
    exercise: &str,
    tol: Tol,
    cases: &[I],
    yours: impl Fn(&I) -> Outcome<O>,
    reference: impl Fn(&I) -> Outcome<O>,
) -> Verdict {
    // What differs on `case`, if anything: None also when the reference panics there or its
    // Ok/Err differs from `kind` (a shrunk input must stay one the doc covers the same way).
    let check = |case: &I, kind: Option<bool>, lenient: bool| -> Result<Option<String>, String> {
        let Some(want) = quietly(|| reference(case)) else { return Ok(None) };
        if kind.is_some_and(|k| k != want.is_ok()) || lenient && want.is_err() {
            return Ok(None);
        }
        let first = match attempt(sec, exercise, || yours(case)) {
            Ok(r) => r,
            Err(m) if m.starts_with(NOT_STARTED) => return Err(m),
            Err(m) => return Ok(Some(panic_line(&m))),
        };
        if let Some(d) = difference(&first, &want, tol) {
            return Ok(Some(d));
        }
        let again = match attempt(sec, exercise, || yours(case)) {
            Ok(r) => r,
            Err(m) => return Ok(Some(panic_line(&m))),
        };
        if let Some(d) = difference(&again, &first, Tol::EXACT) {
            return Ok(Some(format!(
                "nondeterministic: a second run on the same input gave another result ({d}); \
                 the same input must give the same output every time (an iteration over a \
                 HashMap, whose order changes from map to map?)"
            )));
        }
        Ok(None)
    };
    // The cases, then the edges of a few of them that the reference accepts, spread over the
    // list: compared where the reference accepts them too (and in wide mode, every case: see
    // `WIDE`).
    // The bases are spread over the cases the reference accepts, so that a list that opens with
    // its error cases (d = 0, no lengths) still has its valid cases' edges swept.
    let valid: Vec<usize> = (0..cases.len())
        .filter(|&k| quietly(|| reference(&cases[k])).is_some_and(|w| w.is_ok()))
        .collect();
    let stride = valid.len().div_ceil(EDGE_BASES).max(1);
    let mut edges: Vec<(usize, I)> = Vec::new();
    for &k in valid.iter().step_by(stride) {
        edges.extend(cases[k].edges().into_iter().map(|e| (k, e)));
    }
    let wide = WIDE.load(Ordering::Relaxed);
    SWEPT.with(|s| {
        s.borrow_mut().push(format!(
            "{} cases + {} edges: {}",
            cases.len(),
            edges.len(),
            described(&[I::kind()])
        ))
    });
    let all = cases.iter().enumerate().map(|(k, c)| (k, c, false));
    for (k, case, edge) in all.chain(edges.iter().map(|(k, e)| (*k, e, true))) {
        let lenient = edge || wide;
        let Some(found) = check(case, None, lenient)? else { continue };
        let kind = quietly(|| reference(case)).map(|w| w.is_ok());
        let quick = QUICK.load(Ordering::Relaxed);
        let (mut smallest, mut what, mut spent) =
            (case.clone(), found, if quick { SHRINK_BUDGET } else { 0 });
        'shrinking: while spent < SHRINK_BUDGET {
            for cand in smallest.shrink() {
                spent += 1;
                if let Ok(Some(d)) = check(&cand, kind, lenient) {
                    (smallest, what) = (cand, d);
                    continue 'shrinking;
                }
                if spent >= SHRINK_BUDGET {
                    break;
                }
            }
            break;
        }
        let expected = match quietly(|| reference(&smallest)) {
            Some(Err(e)) => format!("an Err ({e})"),
            _ => "Ok".into(),
        };
        let which = if edge { "an edge of sweep case" } else { "sweep case" };
        return Err(sec.fail(format!(
            "`{exercise}` differs from the chapter's function ({which} {} of {}, shrunk to \
             the smallest input that still differs; expected: {expected}):\n  input: {}\n  {what}",
            k + 1,
            cases.len(),
            smallest.show()
        )));
    }
    Ok(())
}

/// The first line of a panic report, without its hint.
fn panic_line(m: &str) -> String {
    m.lines().next().unwrap_or_default().to_string()
}

/// The verdict of a judge from its sweep's and its chapter checks' (`checks`: worked numbers,
/// gradient checks, known mistakes computed on a discriminating input). When the sweep finds a
/// difference, the checks run as explanations: their failure, if any, is added to the sweep's
/// message; if they all pass, the message says so, and that no known mistake explains the
/// difference. When the sweep finds none, the checks' verdict stands.
pub fn explained(sweep: Verdict, checks: impl FnOnce() -> Verdict) -> Verdict {
    let found = match sweep {
        Ok(()) => return checks(),
        Err(m) if m.starts_with(NOT_STARTED) => return Err(m),
        Err(m) => m,
    };
    if QUICK.load(Ordering::Relaxed) {
        return Err(found);
    }
    let (body, hint) = found.rsplit_once("\n  hint:").unwrap_or((&found, ""));
    let panicked = |m: &str| m.contains("` panicked: ");
    match checks() {
        // A panic on the judge's own input is reported once, with the shapes it passed.
        Err(c) if panicked(&c) && panicked(&found) => Err(c),
        Err(c) if !c.starts_with(NOT_STARTED) => {
            Err(format!("{body}\n  explanation, from the chapter's own checks: {c}"))
        }
        _ => Err(format!(
            "{body}\n  no known mistake explains it: compare yours with the doc comment's formula \
             on that input\n  hint:{hint}"
        )),
    }
}

/// A main-crate result as the sweep compares it: the error as its text.
pub fn outcome<T>(r: llm_workbook::Result<T>) -> Outcome<T> {
    r.map_err(|e| e.to_string())
}

impl Gen {
    /// Matrices at every shape of [`SHAPES`] and every scale of [`SCALES`], then rows apart.
    pub fn matrices(&mut self) -> Vec<DMatrix<f64>> {
        let mut out = Vec::new();
        for &(r, c) in &SHAPES {
            for &s in &SCALES {
                out.push(self.matrix(r, c, s));
            }
            out.push(self.rows_apart(r, c, 1e3));
        }
        out
    }
}
