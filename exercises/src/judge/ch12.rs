//! Judges of chapter 12's exercises: RMSNorm's backward, the rotation of the queries and its
//! backward, SwiGLU's backward, grouped-query attention's backward and the cache's bytes per
//! token, each against the main crate on the shared sweep, then the page's worked numbers, the
//! gradient checks and the classic mistakes computed on a discriminating input.

use super::sweep::{Fixed, Gen, Named, Output, SCALES, Tol, explained, outcome, sweep};
use super::{
    Probe, Section, Verdict, attempt_ok, expect_err, gradient_check, known_slip, not_applicable,
    probe, random, weighted_sum,
};
use crate::solutions::ch12_modern as solution;
use llm_workbook::Result;
use llm_workbook::ch06_attention::{AttnSpec, attention_backward, concat_heads, split_heads};
use llm_workbook::ch12_modern::{
    self as book, GluGrads, Gqa, GqaGrads, KvCacheShape, Pairing, RmsNorm,
};
use llm_workbook::matmul::matmul_tn;
use nalgebra::DMatrix;

const NORM: Section = Section { chapter: "ch12_modern", anchor: "1-rmsnorm" };
const ROPE: Section = Section { chapter: "ch12_modern", anchor: "2-rotary-positions" };
const GLU: Section = Section { chapter: "ch12_modern", anchor: "3-gated-mlps" };
const GQA: Section =
    Section { chapter: "ch12_modern", anchor: "4-grouped-query-attention-and-qk-norm" };
const CACHE: Section = Section { chapter: "ch12_modern", anchor: "5-the-keyvalue-cache" };

/// How close two outputs must be for one to "match" a known mistake: relatively 10⁻⁹, far
/// tighter than any mistake's distance from the right answer on the judges' inputs.
const MATCH: f64 = 1e-9;

/// Whether `a` and `b` have the same shape and numbers to [`MATCH`].
pub(crate) fn matches<O: Output>(a: &O, b: &O) -> bool {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    a.numbers(&mut x);
    b.numbers(&mut y);
    a.shape() == b.shape()
        && x.len() == y.len()
        && x.iter().zip(&y).all(|(p, q)| super::same_value(*p, *q, MATCH))
}

/// The verdict on `yours` against `want` on the judge's input `what`: passed when they agree to
/// 10⁻⁶; otherwise the first of `mistakes` (its name and its output on that input) that yours
/// matches and the right answer does not, named; otherwise where the two differ.
pub(crate) fn explain<O: Output + Clone>(
    sec: Section,
    what: &str,
    yours: &O,
    want: &O,
    mistakes: &[(&str, O)],
) -> Verdict {
    probe(Probe::Named);
    // The sweep holds an answer to its exercise's tolerance; here 10⁻⁶ decides, so that a right
    // answer written in another order is never failed by a check.
    let (y, w) = (Ok(yours.clone()), Ok(want.clone()));
    let Some(d) = super::sweep::difference(&y, &w, Tol::CHAIN) else { return Ok(()) };
    if let Some((name, _)) = mistakes.iter().find(|(_, m)| matches(yours, m) && !matches(want, m)) {
        return Err(known_slip(sec, &format!("{name} (on {what})")));
    }
    Err(sec.fail(format!("on {what}: {d}")))
}

/// Two matrices: (∂L/∂x, ∂L/∂γ).
type Two = (DMatrix<f64>, DMatrix<f64>);

/// A main-crate result as a judge's own check needs it: its error is the judge's defect.
fn ours<T>(r: Result<T>) -> std::result::Result<T, String> {
    r.map_err(|e| format!("the judge's own computation failed: {e}"))
}

// ─────────────────────────────── RMSNorm ───────────────────────────────

/// RMSNorm's backward with ε placed outside the root, r = √mean(x²) + ε (a classic slip):
/// ∂L/∂x_c = g_c/r − (Σ_j g_j x_j) x_c / (C r² √mean(x²)), ∂L/∂γ = Σ_rows ∂L/∂y ⊙ x/r.
fn eps_outside(
    x: &DMatrix<f64>,
    gamma: &DMatrix<f64>,
    d_y: &DMatrix<f64>,
    eps: f64,
) -> (DMatrix<f64>, DMatrix<f64>) {
    let (n, c) = x.shape();
    let mut d_x = DMatrix::zeros(n, c);
    let mut d_gamma = DMatrix::zeros(1, c);
    for r in 0..n {
        let root = (x.row(r).iter().map(|v| v * v).sum::<f64>() / c as f64).sqrt();
        let rms = root + eps;
        let g: Vec<f64> = (0..c).map(|j| gamma[(0, j)] * d_y[(r, j)]).collect();
        let gx: f64 = (0..c).map(|j| g[j] * x[(r, j)]).sum();
        for j in 0..c {
            d_x[(r, j)] = g[j] / rms - gx * x[(r, j)] / (c as f64 * rms * rms * root);
            d_gamma[(0, j)] += d_y[(r, j)] * x[(r, j)] / rms;
        }
    }
    (d_x, d_gamma)
}

/// RMSNorm's backward with LayerNorm's −mean(g) kept (`centred`) or with r treated as a
/// constant (∂L/∂x = g/r): two slips of the derivation.
fn rms_slip(
    x: &DMatrix<f64>,
    gamma: &DMatrix<f64>,
    d_y: &DMatrix<f64>,
    eps: f64,
    centred: bool,
) -> std::result::Result<(DMatrix<f64>, DMatrix<f64>), String> {
    let (d_x, d_gamma) = ours(solution::rms_norm_backward(x, gamma, d_y, eps))?;
    let (n, c) = x.shape();
    let mut out = d_x.clone();
    for r in 0..n {
        let ms = x.row(r).iter().map(|v| v * v).sum::<f64>() / c as f64;
        let rms = (ms + eps).sqrt();
        let g: Vec<f64> = (0..c).map(|j| gamma[(0, j)] * d_y[(r, j)]).collect();
        let mean_g = g.iter().sum::<f64>() / c as f64;
        for j in 0..c {
            out[(r, j)] = if centred { d_x[(r, j)] - mean_g / rms } else { g[j] / rms };
        }
    }
    Ok((out, d_gamma))
}

/// The page's row x = (1, −2, 2), ε = 1 (r = 2, x̂ = (½, −1, 1)) with γ = 1 and ∂L/∂y = (1, 0,
/// 0): ∂L/∂x = (11/24, 1/12, −1/12), ∂L/∂γ = (½, 0, 0); then the gradient check of
/// Σ G ⊙ RMSNorm(X) in X and γ; rows of 10⁻⁹ (r ≈ √ε); ε outside the root, LayerNorm's
/// −mean(g) and r taken as a constant named on rows where ε matters.
fn rms_norm_backward_checks(
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>, &DMatrix<f64>, f64) -> Result<Two>,
) -> Verdict {
    not_applicable(&[Probe::Order]);
    const OP: &str = "rms_norm_backward";
    let x = DMatrix::from_row_slice(1, 3, &[1.0, -2.0, 2.0]);
    let (ones, d_y) =
        (DMatrix::from_element(1, 3, 1.0), DMatrix::from_row_slice(1, 3, &[1.0, 0.0, 0.0]));
    let yours = attempt_ok(NORM, OP, || f(&x, &ones, &d_y, 1.0))?;
    let want = (
        DMatrix::from_row_slice(1, 3, &[11.0 / 24.0, 1.0 / 12.0, -1.0 / 12.0]),
        DMatrix::from_row_slice(1, 3, &[0.5, 0.0, 0.0]),
    );
    let page = "the page's row x = (1, −2, 2), ε = 1, γ = 1, ∂L/∂y = (1, 0, 0)";
    let slips = [
        ("ε outside the root: r = √mean(x²) + ε", eps_outside(&x, &ones, &d_y, 1.0)),
        (
            "LayerNorm's −mean(g) kept: RMSNorm does not centre",
            rms_slip(&x, &ones, &d_y, 1.0, true)?,
        ),
        (
            "r treated as a constant: x̂ = x/r depends on x through r too",
            rms_slip(&x, &ones, &d_y, 1.0, false)?,
        ),
    ];
    explain(NORM, page, &yours, &want, &slips)?;
    // Rows of unequal content, where ε = 0.5 matters.
    let (x, gamma, g) = (random(1201, 4, 5) * 0.7, random(1202, 1, 5), random(1203, 4, 5));
    super::non_square(&[&x, &g]);
    let yours = super::attempt_ok_on(NORM, OP, &[("x", &x), ("γ", &gamma), ("d_y", &g)], || {
        f(&x, &gamma, &g, 0.5)
    })?;
    let want = ours(solution::rms_norm_backward(&x, &gamma, &g, 0.5))?;
    let slips = [
        ("ε outside the root: r = √mean(x²) + ε", eps_outside(&x, &gamma, &g, 0.5)),
        (
            "LayerNorm's −mean(g) kept: RMSNorm does not centre",
            rms_slip(&x, &gamma, &g, 0.5, true)?,
        ),
        (
            "r treated as a constant: x̂ = x/r depends on x through r too",
            rms_slip(&x, &gamma, &g, 0.5, false)?,
        ),
    ];
    explain(NORM, "4 rows with ε = 0.5", &yours, &want, &slips)?;
    gradient_check(
        NORM,
        &[("X", x.clone()), ("γ", gamma.clone())],
        &[yours.0, yours.1],
        |t| {
            let norm = RmsNorm { gamma: t[1].clone(), eps: 0.5 };
            book::rms_norm_forward(&norm, &t[0])
                .map(|(y, _)| weighted_sum(&g, &y))
                .unwrap_or(f64::NAN)
        },
        &[],
    )?;
    // Scale: rows of 10⁻⁹, where ε = 10⁻⁶ dominates the root.
    probe(Probe::Scale);
    let tiny = &x * 1e-9;
    let yours = attempt_ok(NORM, OP, || f(&tiny, &gamma, &g, 1e-6))?;
    let want = ours(solution::rms_norm_backward(&tiny, &gamma, &g, 1e-6))?;
    explain(NORM, "rows of 10⁻⁹ with ε = 10⁻⁶ (r ≈ √ε)", &yours, &want, &[])?;
    expect_err(NORM, OP, "ε = 0", || f(&x, &gamma, &g, 0.0))
}

/// One RMSNorm case: (X, γ, ∂L/∂Y, ε).
type NormCase = (DMatrix<f64>, DMatrix<f64>, DMatrix<f64>, f64);

/// **RMSNorm backward**: rows of 1 to 5 entries at every scale and rows apart, ε from 10⁻⁶ to
/// ½, and the errors the doc promises (no rows, γ of another width or not one row, ∂L/∂Y of
/// another shape, ε = 0, < 0, ∞ or NaN); then `rms_norm_backward_checks`.
pub fn rms_norm_backward(
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>, &DMatrix<f64>, f64) -> Result<Two>,
) -> Verdict {
    rms_norm_backward_judged(&f)
}

/// [`rms_norm_backward`]'s judge, compiled once here rather than in every test that calls it.
fn rms_norm_backward_judged(
    f: &dyn Fn(&DMatrix<f64>, &DMatrix<f64>, &DMatrix<f64>, f64) -> Result<Two>,
) -> Verdict {
    let mut draw = Gen::new("rms_norm_backward");
    let mut cases: Vec<NormCase> = Vec::new();
    for (n, c) in [(1, 1), (1, 4), (3, 2), (2, 5), (4, 3)] {
        for &s in &SCALES {
            for eps in [1e-6, 0.5] {
                cases.push((
                    draw.rows_apart(n, c, s),
                    draw.matrix(1, c, 1.0),
                    draw.matrix(n, c, 1.0),
                    eps,
                ));
            }
        }
    }
    let (x, g, d) = (draw.matrix(2, 3, 1.0), draw.matrix(1, 3, 1.0), draw.matrix(2, 3, 1.0));
    cases.push((DMatrix::zeros(0, 3), g.clone(), DMatrix::zeros(0, 3), 1e-6));
    cases.push((x.clone(), draw.matrix(1, 4, 1.0), d.clone(), 1e-6));
    cases.push((x.clone(), draw.matrix(2, 3, 1.0), d.clone(), 1e-6));
    cases.push((x.clone(), g.clone(), draw.matrix(3, 3, 1.0), 1e-6));
    for eps in [0.0, -1e-6, f64::INFINITY, f64::NAN] {
        cases.push((x.clone(), g.clone(), d.clone(), eps));
    }
    let found = sweep(
        NORM,
        "rms_norm_backward",
        Tol::CHAIN,
        &cases,
        |(x, g, d, e)| outcome(f(x, g, d, *e)),
        |(x, g, d, e)| outcome(solution::rms_norm_backward(x, g, d, *e)),
    );
    explained(found, || rms_norm_backward_checks(f))
}

// ─────────────────────────────── rotary positions ───────────────────────────────

/// Each head of `m` (T rows at positions `start` …) rotated pair by pair at the frequencies
/// `theta` (one per pair), by +tθ (`sign` 1) or −tθ (−1): the judge's own rotation, for the
/// slips whose frequencies or positions differ from the chapter's.
fn rotated(
    m: &DMatrix<f64>,
    n_heads: usize,
    start: usize,
    theta: &[f64],
    pairing: Pairing,
    sign: f64,
) -> DMatrix<f64> {
    let d_h = m.ncols() / n_heads;
    let mut y = m.clone();
    for h in 0..n_heads {
        for r in 0..m.nrows() {
            let t = (start + r) as f64;
            for (i, th) in theta.iter().enumerate() {
                let (ca, cb) = pairing.columns(d_h, i);
                let (ca, cb) = (h * d_h + ca, h * d_h + cb);
                let (cos, sin) = ((t * th).cos(), sign * (t * th).sin());
                let (a, b) = (m[(r, ca)], m[(r, cb)]);
                y[(r, ca)] = a * cos - b * sin;
                y[(r, cb)] = a * sin + b * cos;
            }
        }
    }
    y
}

/// The other pairing.
fn other(pairing: Pairing) -> Pairing {
    match pairing {
        Pairing::Adjacent => Pairing::Halves,
        Pairing::Halves => Pairing::Adjacent,
    }
}

/// The slips of a rotation of `m` (H heads, positions from `start`, `base`, `pairing`) as the
/// judge computes them: `sign` 1 for the forward, −1 for the backward.
fn rope_slips(
    m: &DMatrix<f64>,
    n_heads: usize,
    start: usize,
    base: f64,
    pairing: Pairing,
    sign: f64,
) -> std::result::Result<Vec<(&'static str, DMatrix<f64>)>, String> {
    let d_h = m.ncols() / n_heads;
    let theta = ours(book::rope_frequencies(d_h, base))?;
    let d = m.ncols() as f64;
    let over_d: Vec<f64> = (0..d_h / 2).map(|i| base.powf(-2.0 * i as f64 / d)).collect();
    Ok(vec![
        (
            "the pairs taken from the other layout: Adjacent pairs columns (2i, 2i + 1), Halves \
             pairs (i, i + d_h/2)",
            rotated(m, n_heads, start, &theta, other(pairing), sign),
        ),
        (
            "the angle's exponent over the model's width d = H·d_h: θ_i = base^(−2i/d_h), with \
             the head's width",
            rotated(m, n_heads, start, &over_d, pairing, sign),
        ),
        (
            "positions counted from 0: row r sits at position start + r",
            rotated(m, n_heads, 0, &theta, pairing, sign),
        ),
        (
            "the rotation's direction: the forward turns by +tθ_i, its backward by −tθ_i (the \
             transpose)",
            rotated(m, n_heads, start, &theta, pairing, -sign),
        ),
    ])
}

/// The exercise's signature of both rotations.
type RopeFn<'a> = dyn Fn(&DMatrix<f64>, usize, usize, f64, Pairing) -> Result<DMatrix<f64>> + 'a;

/// One head of width 2 at position 1, (1, 0) ↦ (cos 1, sin 1) (θ_0 = 1 whatever the base);
/// then 3 positions from 5 of 2 heads of width 4, base 100, both pairings, against the
/// rotation and its slips; for the backward, the gradient check of Σ G ⊙ rope(Q).
fn rope_checks(f: &RopeFn<'_>, name: &str, sign: f64) -> Verdict {
    not_applicable(&[Probe::Order, Probe::Scale]);
    let one = DMatrix::from_row_slice(1, 2, &[1.0, 0.0]);
    let yours = attempt_ok(ROPE, name, || f(&one, 1, 1, 10_000.0, Pairing::Adjacent))?;
    let want = DMatrix::from_row_slice(1, 2, &[1f64.cos(), sign * 1f64.sin()]);
    let turned = DMatrix::from_row_slice(1, 2, &[1f64.cos(), -sign * 1f64.sin()]);
    let direction = "the rotation's direction: the forward turns by +tθ_i, its backward by −tθ_i \
                     (the transpose)";
    let what = "(1, 0) at position 1, one head of width 2";
    explain(ROPE, what, &yours, &want, &[(direction, turned)])?;
    let q = random(1210, 3, 8);
    super::non_square(&[&q]);
    for pairing in [Pairing::Adjacent, Pairing::Halves] {
        let yours = super::attempt_ok_on(ROPE, name, &[("q", &q)], || f(&q, 2, 5, 100.0, pairing))?;
        let want = if sign > 0.0 {
            ours(solution::rope_forward(&q, 2, 5, 100.0, pairing))?
        } else {
            ours(solution::rope_backward(&q, 2, 5, 100.0, pairing))?
        };
        let slips = rope_slips(&q, 2, 5, 100.0, pairing, sign)?;
        let what = format!("3 rows from position 5, 2 heads of width 4, base 100, {pairing:?}");
        explain(ROPE, &what, &yours, &want, &slips)?;
        if sign < 0.0 {
            let g = random(1211, 3, 8);
            let d_q = attempt_ok(ROPE, name, || f(&g, 2, 5, 100.0, pairing))?;
            gradient_check(
                ROPE,
                &[("Q", q.clone())],
                &[d_q],
                |t| {
                    solution::rope_forward(&t[0], 2, 5, 100.0, pairing)
                        .map(|y| weighted_sum(&g, &y))
                        .unwrap_or(f64::NAN)
                },
                &[],
            )?;
        }
    }
    expect_err(ROPE, name, "base 1 (θ_i = 1 for every pair)", || {
        f(&q, 2, 0, 1.0, Pairing::Adjacent)
    })
}

/// One rotation case: (Q or ∂L/∂Y, H, start, base, pairing).
type RopeCase = (DMatrix<f64>, usize, usize, f64, Fixed<Pairing>);

/// T = 1 to 5 rows of 1 to 3 heads of width 2 to 8, from positions 0, 7 and 1000, bases 10,
/// 10⁴ and 5·10⁵, both pairings, every scale; the errors the doc promises (no rows, H = 0, H not
/// dividing the width, d_h = 0 or odd, base 1, ½, ∞, NaN).
fn rope_cases(draw: &mut Gen) -> Vec<RopeCase> {
    let mut cases = Vec::new();
    let mut k = 0;
    for (t, h, d_h) in [(1, 1, 2), (3, 2, 4), (4, 1, 6), (2, 3, 2), (5, 2, 8)] {
        for pairing in [Pairing::Adjacent, Pairing::Halves] {
            for (start, base) in [(0, 10_000.0), (7, 500_000.0), (1000, 10.0)] {
                let s = SCALES[k % SCALES.len()];
                k += 1;
                cases.push((draw.matrix(t, h * d_h, s), h, start, base, Fixed(pairing)));
            }
        }
    }
    let q = draw.matrix(2, 4, 1.0);
    let a = Fixed(Pairing::Adjacent);
    cases.push((DMatrix::zeros(0, 4), 2, 0, 10_000.0, a.clone()));
    cases.push((q.clone(), 0, 0, 10_000.0, a.clone()));
    cases.push((q.clone(), 3, 0, 10_000.0, a.clone()));
    cases.push((draw.matrix(2, 6, 1.0), 2, 0, 10_000.0, a.clone()));
    cases.push((DMatrix::zeros(2, 0), 2, 0, 10_000.0, a.clone()));
    for base in [1.0, 0.5, f64::INFINITY, f64::NAN] {
        cases.push((q.clone(), 2, 3, base, a.clone()));
    }
    cases
}

/// **Rotating the queries**: `rope_cases` against the main crate's table and rotation, head by
/// head; then `rope_checks`.
pub fn rope_forward(
    f: impl Fn(&DMatrix<f64>, usize, usize, f64, Pairing) -> Result<DMatrix<f64>>,
) -> Verdict {
    rope_forward_judged(&f)
}

/// [`rope_forward`]'s judge, compiled once here rather than in every test that calls it.
fn rope_forward_judged(f: &RopeFn<'_>) -> Verdict {
    rope_judged(f, "rope_forward", &solution::rope_forward, 1.0)
}

/// The judge of a rotation (`sign` 1: the forward, −1: its backward): `rope_cases` against the
/// main crate's `want`, then `rope_checks`.
fn rope_judged(f: &RopeFn<'_>, name: &str, want: &RopeFn<'_>, sign: f64) -> Verdict {
    let cases = rope_cases(&mut Gen::new(name));
    let found = sweep(
        ROPE,
        name,
        Tol::F64,
        &cases,
        |(x, h, s, b, p)| outcome(f(x, *h, *s, *b, p.0)),
        |(x, h, s, b, p)| outcome(want(x, *h, *s, *b, p.0)),
    );
    explained(found, || rope_checks(f, name, sign))
}

/// **Rotating the queries, backward**: `rope_cases` as ∂L/∂Y against the main crate's
/// transposed rotation; then `rope_checks` with the gradient check.
pub fn rope_backward(
    f: impl Fn(&DMatrix<f64>, usize, usize, f64, Pairing) -> Result<DMatrix<f64>>,
) -> Verdict {
    rope_backward_judged(&f)
}

/// [`rope_backward`]'s judge, compiled once here rather than in every test that calls it.
fn rope_backward_judged(f: &RopeFn<'_>) -> Verdict {
    rope_judged(f, "rope_backward", &solution::rope_backward, -1.0)
}

// ─────────────────────────────── SwiGLU ───────────────────────────────

/// SwiGLU's gradients as named parts, in the order of the doc.
fn glu_named(g: GluGrads<f64>) -> Named {
    Named::of([
        ("∂L/∂X", g.d_x),
        ("∂L/∂W_gate", g.d_w_gate),
        ("∂L/∂W_up", g.d_w_up),
        ("∂L/∂W_down", g.d_w_down),
    ])
}

/// σ(a).
fn sigma(a: f64) -> f64 {
    llm_workbook::ch01_logistic::sigmoid(a)
}

/// SwiGLU's backward with the gate's derivative replaced by `d_phi` and the gate put on the
/// W_up branch when `swapped`: the judge's own arithmetic for the slips.
fn glu_slip(
    x: &DMatrix<f64>,
    w: [&DMatrix<f64>; 3],
    d_y: &DMatrix<f64>,
    swapped: bool,
    d_phi: fn(f64) -> f64,
) -> Named {
    let [w_gate, w_up, w_down] = w;
    let (a, b) = (x * w_gate, x * w_up);
    let phi = |v: f64| v * sigma(v);
    let (gated, plain) = if swapped { (&b, &a) } else { (&a, &b) };
    let h = gated.map(phi).component_mul(plain);
    let d_h = d_y * w_down.transpose();
    let d_gated = DMatrix::from_fn(h.nrows(), h.ncols(), |r, c| {
        d_h[(r, c)] * plain[(r, c)] * d_phi(gated[(r, c)])
    });
    let d_plain = d_h.component_mul(&gated.map(phi));
    let (d_a, d_b) = if swapped { (d_plain, d_gated) } else { (d_gated, d_plain) };
    Named::of([
        ("∂L/∂X", &d_a * w_gate.transpose() + &d_b * w_up.transpose()),
        ("∂L/∂W_gate", x.transpose() * &d_a),
        ("∂L/∂W_up", x.transpose() * &d_b),
        ("∂L/∂W_down", h.transpose() * d_y),
    ])
}

/// φ′ of SiLU.
fn silu_derivative(a: f64) -> f64 {
    sigma(a) * (1.0 + a * (1.0 - sigma(a)))
}

/// The exercise's signature.
type GluFn<'a> = dyn Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
    ) -> Result<GluGrads<f64>>
    + 'a;

/// The page's x = 1, W_gate = 2, W_up = 3, W_down = ½ (Y = 3σ(2)) with ∂L/∂Y = 1; then the
/// gradient check of Σ G ⊙ Y in X and the three weights; the gate on the W_up branch and φ′
/// taken as σ named; pre-activations of ±40 and beyond compared relatively.
fn swiglu_backward_checks(f: &GluFn<'_>) -> Verdict {
    not_applicable(&[Probe::Order]);
    const OP: &str = "swiglu_backward";
    let one = |v: f64| DMatrix::from_element(1, 1, v);
    let (x, wg, wu, wd, dy) = (one(1.0), one(2.0), one(3.0), one(0.5), one(1.0));
    let yours = glu_named(attempt_ok(GLU, OP, || f(&x, &wg, &wu, &wd, &dy))?);
    let (s, phi, dphi) = (sigma(2.0), 2.0 * sigma(2.0), silu_derivative(2.0));
    let (d_a, d_b) = (0.5 * 3.0 * dphi, 0.5 * phi);
    let want = Named::of([
        ("∂L/∂X", one(2.0 * d_a + 3.0 * d_b)),
        ("∂L/∂W_gate", one(d_a)),
        ("∂L/∂W_up", one(d_b)),
        ("∂L/∂W_down", one(3.0 * 2.0 * s)),
    ]);
    let page = "the page's x = 1, W_gate = 2, W_up = 3, W_down = 0.5, ∂L/∂Y = 1";
    explain(
        GLU,
        page,
        &yours,
        &want,
        &[(
            "the gate on the wrong branch: φ goes on X W_gate, not on X W_up",
            glu_slip(&x, [&wg, &wu, &wd], &dy, true, silu_derivative),
        )],
    )?;
    let (x, wg, wu, wd, g) = (
        random(1220, 4, 3),
        random(1221, 3, 5),
        random(1222, 3, 5),
        random(1223, 5, 3),
        random(1224, 4, 3),
    );
    super::non_square(&[&x, &wg, &wd]);
    let yours = attempt_ok(GLU, OP, || f(&x, &wg, &wu, &wd, &g))?;
    let want = glu_named(ours(solution::swiglu_backward(&x, &wg, &wu, &wd, &g))?);
    let slips = [
        (
            "the gate on the wrong branch: φ goes on X W_gate, not on X W_up",
            glu_slip(&x, [&wg, &wu, &wd], &g, true, silu_derivative),
        ),
        (
            "φ′(a) taken as σ(a): the derivative of a σ(a) is σ(a)(1 + a(1 − σ(a)))",
            glu_slip(&x, [&wg, &wu, &wd], &g, false, sigma),
        ),
    ];
    explain(GLU, "4 rows, C = 3, F = 5", &glu_named(yours.clone()), &want, &slips)?;
    gradient_check(
        GLU,
        &[("X", x.clone()), ("W_gate", wg.clone()), ("W_up", wu.clone()), ("W_down", wd.clone())],
        &[yours.d_x, yours.d_w_gate, yours.d_w_up, yours.d_w_down],
        |t| {
            let p = book::GatedMlp {
                w_gate: t[1].clone(),
                w_up: t[2].clone(),
                w_down: t[3].clone(),
                gate: book::Gate::Swish,
            };
            book::glu_forward(&p, &t[0]).map(|(y, _)| weighted_sum(&g, &y)).unwrap_or(f64::NAN)
        },
        &[],
    )?;
    probe(Probe::Scale);
    let big = &x * 40.0;
    let yours = glu_named(attempt_ok(GLU, OP, || f(&big, &wg, &wu, &wd, &g))?);
    let want = glu_named(ours(solution::swiglu_backward(&big, &wg, &wu, &wd, &g))?);
    explain(GLU, "x × 40 (pre-activations past ±40, where σ saturates)", &yours, &want, &[])?;
    expect_err(GLU, OP, "W_up of another shape than W_gate", || f(&x, &wg, &wd, &wd, &g))
}

/// One SwiGLU case: (X, W_gate, W_up, W_down, ∂L/∂Y).
type GluCase = (DMatrix<f64>, DMatrix<f64>, DMatrix<f64>, DMatrix<f64>, DMatrix<f64>);

/// **SwiGLU backward**: N, C, F from 1 to 5 at the scales where the gate is linear, saturated or
/// in between, and the errors the doc promises (F = 0, W_up, W_down, X or ∂L/∂Y of another
/// shape); then `swiglu_backward_checks`.
pub fn swiglu_backward(
    f: impl Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
    ) -> Result<GluGrads<f64>>,
) -> Verdict {
    swiglu_backward_judged(&f)
}

/// [`swiglu_backward`]'s judge, compiled once here rather than in every test that calls it.
fn swiglu_backward_judged(
    f: &dyn Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
    ) -> Result<GluGrads<f64>>,
) -> Verdict {
    let mut draw = Gen::new("swiglu_backward");
    let mut cases: Vec<GluCase> = Vec::new();
    for (n, c, h) in [(1, 1, 1), (2, 3, 4), (3, 2, 5), (4, 4, 2)] {
        for s in [1.0, 1e-4, 30.0] {
            for w in [1.0, 0.1] {
                cases.push((
                    draw.rows_apart(n, c, s),
                    draw.matrix(c, h, w),
                    draw.matrix(c, h, w),
                    draw.matrix(h, c, w),
                    draw.matrix(n, c, 1.0),
                ));
            }
        }
    }
    let (x, wg, wu, wd, d) = (
        draw.matrix(2, 3, 1.0),
        draw.matrix(3, 4, 1.0),
        draw.matrix(3, 4, 1.0),
        draw.matrix(4, 3, 1.0),
        draw.matrix(2, 3, 1.0),
    );
    cases.push((
        x.clone(),
        DMatrix::zeros(3, 0),
        DMatrix::zeros(3, 0),
        DMatrix::zeros(0, 3),
        d.clone(),
    ));
    cases.push((x.clone(), wg.clone(), draw.matrix(3, 5, 1.0), wd.clone(), d.clone()));
    cases.push((x.clone(), wg.clone(), wu.clone(), draw.matrix(4, 2, 1.0), d.clone()));
    cases.push((draw.matrix(2, 4, 1.0), wg.clone(), wu.clone(), wd.clone(), d.clone()));
    cases.push((x, wg, wu, wd, draw.matrix(3, 3, 1.0)));
    let found = sweep(
        GLU,
        "swiglu_backward",
        Tol::F64,
        &cases,
        |(x, a, b, c, d)| outcome(f(x, a, b, c, d).map(glu_named)),
        |(x, a, b, c, d)| outcome(solution::swiglu_backward(x, a, b, c, d).map(glu_named)),
    );
    explained(found, || swiglu_backward_checks(&f))
}

// ─────────────────────────────── grouped-query attention ───────────────────────────────

/// A GQA layer without QK-norm, rotation or biases, from its four weights.
fn gqa_layer(n_heads: usize, n_kv_heads: usize, w: [DMatrix<f64>; 4]) -> Gqa<f64> {
    let [w_q, w_k, w_v, w_o] = w;
    Gqa { n_heads, n_kv_heads, w_q, w_k, w_v, w_o, qk_norm: None, rope: None, biases: None }
}

/// GQA's gradients as named parts (the two optional ones must be `None`: a `Some` is shown as
/// a part the right answer lacks).
fn gqa_named(g: GqaGrads<f64>) -> Named {
    let mut parts = vec![
        ("∂L/∂X".to_string(), g.d_x),
        ("∂L/∂W_Q".to_string(), g.d_w_q),
        ("∂L/∂W_K".to_string(), g.d_w_k),
        ("∂L/∂W_V".to_string(), g.d_w_v),
        ("∂L/∂W_O".to_string(), g.d_w_o),
    ];
    if let Some((q, k)) = g.d_qk_gamma {
        parts.extend([("∂L/∂γ_q (no QK-norm here)".to_string(), q), ("∂L/∂γ_k".to_string(), k)]);
    }
    if let Some(b) = g.d_biases {
        parts.push(("∂L/∂b_Q (no biases here)".to_string(), b.b_q));
    }
    Named(parts)
}

/// One GQA case, drawn from its seed: (seed, H, H_kv, d_h, C, T, N, defect), where defect 1
/// gives X one column too many and 2 gives ∂L/∂Y one row too few (promised errors).
type GqaCase = (u64, usize, usize, usize, usize, usize, usize, usize);

/// The layer, X and ∂L/∂Y of a case: weights N(0, 1/C), X at a scale chosen by the seed (1,
/// 0.1, 3 or 30: scores in the hundreds, where a softmax without its shift overflows).
fn gqa_inputs(case: &GqaCase) -> (Gqa<f64>, DMatrix<f64>, DMatrix<f64>) {
    let &(seed, h, h_kv, d_h, c, _, n, defect) = case;
    let salted = seed ^ super::sweep::salt().wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut rng = llm_workbook::rng::Rng::new(salted);
    let std = 1.0 / (c.max(1) as f64).sqrt();
    let w = [
        rng.normal_matrix(c, h * d_h, std),
        rng.normal_matrix(c, h_kv * d_h, std),
        rng.normal_matrix(c, h_kv * d_h, std),
        rng.normal_matrix(h * d_h, c, std),
    ];
    let scale = [1.0, 0.1, 3.0, 30.0][(seed % 4) as usize];
    let x = rng.normal_matrix(n, c + usize::from(defect == 1), scale);
    let d_y = rng.normal_matrix(n.saturating_sub(usize::from(defect == 2)), c, 1.0);
    (gqa_layer(h, h_kv, w), x, d_y)
}

/// ∂L/∂W_K and ∂L/∂W_V when each key/value head's gradient is *assigned* the last query head's
/// of its group instead of summed over the group (`mean` false), or averaged over it (`mean`
/// true): the judge's own arithmetic for the slips, from the main crate's cache.
fn gqa_group_slip(
    p: &Gqa<f64>,
    x: &DMatrix<f64>,
    t: usize,
    d_y: &DMatrix<f64>,
    mean: bool,
) -> std::result::Result<(DMatrix<f64>, DMatrix<f64>), String> {
    let (_, cache) = ours(book::gqa_forward(p, x, t))?;
    let d_concat = d_y * p.w_o.transpose();
    let d_outs = ours(split_heads(&d_concat, p.n_heads))?;
    let spec = AttnSpec::causal(t);
    let (n, d_h) = (x.nrows(), p.head_dim());
    let mut d_k = vec![DMatrix::zeros(n, d_h); p.n_kv_heads];
    let mut d_v = d_k.clone();
    let share = if mean { 1.0 / p.group_size() as f64 } else { 1.0 };
    for (h, d_o) in d_outs.iter().enumerate() {
        let g = p.kv_head_of(h);
        let (q, k) = (&cache.q[h].rotated, &cache.k[g].rotated);
        let grads = ours(attention_backward(q, k, &cache.v[g], &cache.weights[h], d_o, &spec))?;
        if mean {
            d_k[g] += grads.d_k * share;
            d_v[g] += grads.d_v * share;
        } else {
            d_k[g] = grads.d_k;
            d_v[g] = grads.d_v;
        }
    }
    let (d_k, d_v) = (ours(concat_heads(&d_k))?, ours(concat_heads(&d_v))?);
    Ok((ours(matmul_tn(x, &d_k))?, ours(matmul_tn(x, &d_v))?))
}

/// The exercise's signature.
type GqaFn<'a> =
    dyn Fn(&Gqa<f64>, &DMatrix<f64>, usize, &DMatrix<f64>) -> Result<GqaGrads<f64>> + 'a;

/// Two sequences of 3 tokens, C = 3, 4 query heads sharing 2 key/value heads of width 2: the
/// group's gradient assigned (the last head's) or averaged named on ∂L/∂W_K and ∂L/∂W_V; the
/// gradient check of Σ G ⊙ Y in X and the four weights; X × 30 (scores past 700) compared; the
/// error for H_kv = 3 with H = 4.
fn gqa_backward_checks(f: &GqaFn<'_>) -> Verdict {
    not_applicable(&[Probe::Order]);
    const OP: &str = "gqa_backward";
    let (p, x, g) = gqa_inputs(&(1230, 4, 2, 2, 3, 3, 6, 0));
    super::batch_probe(super::BatchInput { sequences: 2, t_q: 3, t_k: 3, width: 3 });
    let yours = super::attempt_ok_on(GQA, OP, &[("x", &x), ("d_y", &g)], || f(&p, &x, 3, &g))?;
    let want = ours(solution::gqa_backward(&p, &x, 3, &g))?;
    let kv = |gr: &GqaGrads<f64>| (gr.d_w_k.clone(), gr.d_w_v.clone());
    let slips = [
        (
            "the group's gradient assigned instead of summed: every query head of the group \
             adds its ∂L/∂K_g and ∂L/∂V_g (+=), the last one does not replace the others",
            gqa_group_slip(&p, &x, 3, &g, false)?,
        ),
        (
            "the group's gradient averaged: a key/value head read by H/H_kv query heads gets \
             the sum of their gradients, not their mean",
            gqa_group_slip(&p, &x, 3, &g, true)?,
        ),
    ];
    let what = "2 sequences of 3 tokens, C = 3, H = 4, H_kv = 2 (∂L/∂W_K, ∂L/∂W_V)";
    explain(GQA, what, &kv(&yours), &kv(&want), &slips)?;
    explain(GQA, "the same input", &gqa_named(yours.clone()), &gqa_named(want), &[])?;
    gradient_check(
        GQA,
        &[
            ("X", x.clone()),
            ("W_Q", p.w_q.clone()),
            ("W_K", p.w_k.clone()),
            ("W_V", p.w_v.clone()),
            ("W_O", p.w_o.clone()),
        ],
        &[yours.d_x, yours.d_w_q, yours.d_w_k, yours.d_w_v, yours.d_w_o],
        |t| {
            let q = gqa_layer(4, 2, [t[1].clone(), t[2].clone(), t[3].clone(), t[4].clone()]);
            book::gqa_forward(&q, &t[0], 3).map(|(y, _)| weighted_sum(&g, &y)).unwrap_or(f64::NAN)
        },
        &[],
    )?;
    probe(Probe::Scale);
    let big = &x * 30.0;
    let yours = gqa_named(attempt_ok(GQA, OP, || f(&p, &big, 3, &g))?);
    let want = gqa_named(ours(solution::gqa_backward(&p, &big, 3, &g))?);
    explain(
        GQA,
        "X × 30 (scores in the hundreds: shift each row by its maximum)",
        &yours,
        &want,
        &[],
    )?;
    let (bad, x, g) = gqa_inputs(&(1231, 4, 3, 2, 3, 3, 3, 0));
    expect_err(GQA, OP, "H_kv = 3 with H = 4", || f(&bad, &x, 3, &g))
}

/// **GQA backward**: MHA (H_kv = H), GQA and MQA (H_kv = 1) with heads of width 1 and 2, one to
/// three sequences of 1 to 4 tokens, X at four scales, and the errors the doc promises (H_kv = 0
/// or not dividing H, T = 0 or not dividing N, X or ∂L/∂Y of another shape); then
/// `gqa_backward_checks`.
pub fn gqa_backward(
    f: impl Fn(&Gqa<f64>, &DMatrix<f64>, usize, &DMatrix<f64>) -> Result<GqaGrads<f64>>,
) -> Verdict {
    gqa_backward_judged(&f)
}

/// [`gqa_backward`]'s judge, compiled once here rather than in every test that calls it.
fn gqa_backward_judged(
    f: &dyn Fn(&Gqa<f64>, &DMatrix<f64>, usize, &DMatrix<f64>) -> Result<GqaGrads<f64>>,
) -> Verdict {
    let mut cases: Vec<GqaCase> = Vec::new();
    let shapes = [
        (1, 1, 1, 1, 1, 1),
        (2, 1, 2, 3, 2, 4),
        (4, 2, 2, 3, 3, 6),
        (4, 4, 1, 5, 2, 2),
        (3, 1, 2, 2, 4, 4),
        (6, 3, 1, 4, 1, 3),
    ];
    for (k, &(h, h_kv, d_h, c, t, n)) in shapes.iter().enumerate() {
        for seed in 0..4u64 {
            cases.push((1200 + 4 * k as u64 + seed, h, h_kv, d_h, c, t, n, 0));
        }
    }
    for (h, h_kv, t, n, defect) in [
        (4, 3, 2, 4, 0),
        (4, 0, 2, 4, 0),
        (2, 1, 0, 4, 0),
        (2, 1, 4, 6, 0),
        (2, 1, 2, 4, 1),
        (2, 1, 2, 4, 2),
        (2, 1, 2, 0, 0),
    ] {
        cases.push((1299, h, h_kv, 2, 3, t, n, defect));
    }
    fn run(g: &GqaFn<'_>, case: &GqaCase) -> super::Outcome<Named> {
        let (p, x, d_y) = gqa_inputs(case);
        outcome(g(&p, &x, case.5, &d_y).map(gqa_named))
    }
    let found = sweep(
        GQA,
        "gqa_backward",
        Tol::CHAIN,
        &cases,
        |case| run(&f, case),
        |case| run(&solution::gqa_backward, case),
    );
    explained(found, || gqa_backward_checks(&f))
}

// ─────────────────────────────── the cache's bytes ───────────────────────────────

/// The page's table: (what, layers, H, H_kv, d_h, bytes per token in 16-bit values).
const PUBLISHED: [(&str, usize, usize, usize, usize, u64); 5] = [
    ("GPT-2 124M", 12, 12, 12, 64, 36_864),
    ("Llama 3 8B", 32, 32, 8, 128, 131_072),
    ("Llama 3 8B as MHA", 32, 32, 32, 128, 524_288),
    ("Llama 3 8B as MQA", 32, 32, 1, 128, 16_384),
    ("Qwen3-8B", 36, 32, 8, 128, 147_456),
];

/// Bytes of one 16-bit value.
const HALF: usize = 2;

/// The exercise's signature.
type KvFn<'a> = dyn Fn(usize, usize, usize, usize, usize) -> Result<u64> + 'a;

/// The page's five rows, naming the factor 2 (a key *and* a value) dropped, H in place of H_kv
/// and bits in place of bytes; the error for H_kv = 3 with H = 32.
fn kv_cache_checks(f: &KvFn<'_>) -> Verdict {
    not_applicable(&[Probe::Batch, Probe::Order, Probe::Scale]);
    const OP: &str = "kv_cache_bytes_per_token";
    for (what, layers, h, h_kv, d_h, want) in PUBLISHED {
        let yours = attempt_ok(CACHE, OP, || f(layers, h, h_kv, d_h, HALF))?;
        let mha = KvCacheShape { layers, n_heads: h, n_kv_heads: h, head_dim: d_h };
        let slips = [
            ("the factor 2 dropped: each layer keeps a key and a value per head", want / 2),
            (
                "H in place of H_kv: the cache holds the key/value heads only",
                ours(mha.bytes_per_token(HALF))?,
            ),
            ("bits, not bytes: 16-bit values take 2 bytes each", want * 8),
        ];
        explain(CACHE, &format!("{what} (16-bit values)"), &yours, &want, &slips)?;
    }
    expect_err(CACHE, OP, "H_kv = 3 with H = 32", || f(32, 32, 3, 128, HALF))
}

/// **The cache's bytes per token**: the page's five rows, every layers × (H, H_kv) × d_h ×
/// bytes of a small grid, and the errors the doc promises (each count 0, H_kv not dividing H, a
/// product past `u64::MAX`), exactly; then `kv_cache_checks`.
pub fn kv_cache_bytes_per_token(
    f: impl Fn(usize, usize, usize, usize, usize) -> Result<u64>,
) -> Verdict {
    kv_cache_bytes_per_token_judged(&f)
}

/// [`kv_cache_bytes_per_token`]'s judge, compiled once here rather than in every test that calls it.
fn kv_cache_bytes_per_token_judged(
    f: &dyn Fn(usize, usize, usize, usize, usize) -> Result<u64>,
) -> Verdict {
    let mut cases: Vec<(usize, usize, usize, usize, usize)> =
        PUBLISHED.iter().map(|&(_, l, h, k, d, _)| (l, h, k, d, HALF)).collect();
    for layers in [1, 7] {
        for (h, h_kv) in [(1, 1), (4, 2), (6, 3), (8, 1), (6, 4), (4, 0)] {
            for d_h in [1, 64] {
                for bytes in [1, 2, 4] {
                    cases.push((layers, h, h_kv, d_h, bytes));
                }
            }
        }
    }
    cases.extend([(0, 4, 2, 8, 2), (2, 0, 1, 8, 2), (2, 4, 2, 0, 2), (2, 4, 2, 8, 0)]);
    cases.extend([(usize::MAX / 2, 4, 4, 1 << 20, 2), (1 << 31, 1, 1, 1 << 31, 2)]);
    let found = sweep(
        CACHE,
        "kv_cache_bytes_per_token",
        Tol::EXACT,
        &cases,
        |&(l, h, k, d, b)| outcome(f(l, h, k, d, b)),
        |&(l, h, k, d, b)| outcome(solution::kv_cache_bytes_per_token(l, h, k, d, b)),
    );
    explained(found, || kv_cache_checks(&f))
}
