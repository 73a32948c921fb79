//! Judges of chapter 1's exercises.

use super::{Section, Verdict, attempt, close, compare, gradient_check, random};
use llm_workbook::Result;
use llm_workbook::ch01_logistic as book;
use nalgebra::{DMatrix, DVector};

const MODEL: Section = Section { chapter: "ch01_logistic", anchor: "1-the-model" };
const LOSS: Section =
    Section { chapter: "ch01_logistic", anchor: "2-the-loss-binary-cross-entropy" };
const GRADIENT: Section =
    Section { chapter: "ch01_logistic", anchor: "3-the-gradient-one-factor-at-a-time" };

fn column(m: &DVector<f64>) -> DMatrix<f64> {
    DMatrix::from_column_slice(m.len(), 1, m.as_slice())
}

/// The left tail where σ(z) is tiny but not 0: σ(−37) ≈ 8.5·10⁻¹⁷ is where 1 − σ(−z) first
/// rounds to 0, and σ(−700) ≈ 10⁻³⁰⁴ is near the smallest normal f64.
const FAR_LEFT_TAIL: [f64; 6] = [-30.0, -37.0, -40.0, -100.0, -500.0, -700.0];

/// σ(0) = 0.5, σ(2) = 0.880797 (to the printed 6 decimals), σ(−z) = 1 − σ(z), finite and exact
/// at ±1000, the main crate's σ relatively at 41 points in [−20, 20] and in the far left tail
/// (down to z = −700).
fn sigmoid_checks(f: impl Fn(f64) -> f64) -> Verdict {
    super::not_applicable(&[super::Probe::Batch, super::Probe::Order, super::Probe::Errors]);
    let s = |z: f64| attempt(MODEL, "sigmoid", || f(z));
    let at0 = s(0.0)?;
    if at0 != 0.5 {
        return Err(MODEL.fail(format!("σ(0) should be 0.5 (e^0 = 1, 1/(1 + 1)); yours is {at0}")));
    }
    let at2 = s(2.0)?;
    if format!("{at2:.6}") != "0.880797" {
        let why = if format!("{at2:.6}") == "0.119203" {
            " = σ(−2): the exponent is −z"
        } else {
            ""
        };
        return Err(MODEL.fail(format!("σ(2) should print as 0.880797; yours is {at2:.6}{why}")));
    }
    for z in [-1000.0, 1000.0] {
        let v = s(z)?;
        let want = if z > 0.0 { 1.0 } else { 0.0 };
        if v != want {
            return Err(MODEL.fail_hint(
                format!("σ({z}) should be {want}; yours is {v}"),
                "e^{±1000} overflows to ∞: use 1/(1 + e^{−z}) for z ≥ 0 \
                 and e^{z}/(1 + e^{z}) for z < 0",
            ));
        }
    }
    // The far tails, compared relatively: σ(−37) ≈ 8.5·10⁻¹⁷ is not 0.
    super::probe(super::Probe::Scale);
    super::probe(super::Probe::Named);
    for z in FAR_LEFT_TAIL {
        let (v, want) = (s(z)?, book::sigmoid(z));
        if (v - want).abs() > 1e-12 * want.abs() {
            let one_minus = 1.0 - book::sigmoid(-z);
            let why = if super::same_value(v, one_minus, 1e-12) {
                " — that is 1 − σ(−z), which rounds to 0 once σ(−z) rounds to 1 (z below −37): \
                 compute e^{z}/(1 + e^{z}) for z < 0"
            } else {
                ""
            };
            return Err(MODEL.fail(format!(
                "σ({z}) compared relatively (it is tiny, not 0): {}{why}",
                super::yours_expected(v, want)
            )));
        }
    }
    for i in 0..=40 {
        let z = -20.0 + i as f64;
        let (v, neg) = (s(z)?, s(-z)?);
        let want = book::sigmoid(z);
        if (v - want).abs() > 1e-12 * want {
            return Err(MODEL
                .fail(format!("σ({z}) compared relatively: {}", super::yours_expected(v, want))));
        }
        if !close(v + neg, 1.0, 1e-12) {
            return Err(MODEL.fail(format!(
                "σ({z}) + σ({}) should be 1; yours is {}",
                -z,
                v + neg
            )));
        }
    }
    Ok(())
}

/// Against the main crate on random batches (including a 1×D and an N×1 batch), and an error on
/// a shape mismatch.
fn logits_forward_checks(
    f: impl Fn(&DVector<f64>, f64, &DMatrix<f64>) -> Result<DVector<f64>>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order]);
    super::probe(super::Probe::Batch);
    for (seed, n, d) in [(1, 5, 3), (2, 1, 4), (3, 6, 1)] {
        let x = random(seed, n, d);
        let w = DVector::from_column_slice(random(seed + 10, d, 1).as_slice());
        let b = 0.75;
        let yours = super::attempt_ok_on(MODEL, "logits_forward", &[("w", &w), ("x", &x)], || {
            f(&w, b, &x)
        })?;
        let want = book::logits_forward(&w, b, &x).map_err(|e| e.to_string())?;
        compare(MODEL, "z", &column(&yours), &column(&want), 1e-10, &[])
            .map_err(|m| format!("with x {n}×{d}: {m}"))
            .map_err(|m| {
                let nob = book::logits_forward(&w, 0.0, &x).map(|z| column(&z));
                if nob.is_ok_and(|z| compare(MODEL, "", &column(&yours), &z, 1e-10, &[]).is_ok()) {
                    MODEL.fail("every logit is short by b = 0.75: did you forget the bias?")
                } else {
                    m
                }
            })?;
    }
    let (x, w) = (random(4, 3, 2), DVector::from_element(3, 1.0));
    super::expect_err(
        MODEL,
        "logits_forward",
        "w of length 3 with x of 2 columns (llm_workbook::Error::Shape names the shapes)",
        || f(&w, 0.0, &x),
    )
}

/// Equal to −[y ln σ(z) + (1 − y) ln(1 − σ(z))] where that is finite, and finite (exactly |z|)
/// where σ(z) rounds to 0 or 1.
fn bce_from_logit_checks(f: impl Fn(f64, f64) -> f64) -> Verdict {
    super::not_applicable(&[super::Probe::Batch, super::Probe::Order, super::Probe::Errors]);
    super::probe(super::Probe::Named);
    let l = |y: f64, z: f64| attempt(LOSS, "bce_from_logit", || f(y, z));
    for y in [0.0, 1.0] {
        for i in 0..=40 {
            let z = -10.0 + 0.5 * i as f64;
            let (v, want) = (l(y, z)?, book::bce(y, book::sigmoid(z)));
            if !close(v, want, 1e-9) {
                return Err(LOSS.fail(format!(
                    "ℓ(y = {y}, z = {z}): yours {v:.9}, −[y ln σ(z) + (1 − y) ln(1 − σ(z))] = \
                     {want:.9}"
                )));
            }
        }
    }
    super::probe(super::Probe::Scale);
    for (y, z, want) in [(0.0, 1000.0, 1000.0), (1.0, -1000.0, 1000.0), (1.0, 1000.0, 0.0)] {
        let v = l(y, z)?;
        if !close(v, want, 1e-12) {
            return Err(LOSS.fail_hint(
                format!("ℓ(y = {y}, z = {z}) should be {want}; yours is {v}"),
                "σ(z) rounds to 0 or 1 out there: use max(z, 0) − y z + ln(1 + e^{−|z|})",
            ));
        }
    }
    Ok(())
}

/// The logits and labels of [`sample_gradient`]'s scale probe: ŷ in the far tails, where it
/// rounds to 0 or 1. Left out: y = 1 with z > 0, where ŷ − y is itself the tail 1 − σ(z) and
/// the formula (ŷ − y)·x rounds to 0 however ŷ is computed.
const TAIL_POINTS: [(f64, f64); 6] =
    [(-40.0, 0.0), (-40.0, 1.0), (40.0, 0.0), (-900.0, 0.0), (-900.0, 1.0), (900.0, 0.0)];

/// The gradient check of ℓ(w) = BCE(y, σ(wᵀx + b)) in w, for labels 0 and 1 and random w, x;
/// then (σ(z) − y)·x relatively at the logits of `TAIL_POINTS` (z = ±40, ±900), naming the
/// three factors multiplied as written (∞·0 once ŷ rounds to 0 or 1) and ŷ as 1 − σ(−z).
fn sample_gradient_checks(
    f: impl Fn(&DVector<f64>, f64, &DVector<f64>, f64) -> Result<DVector<f64>>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Batch, super::Probe::Order, super::Probe::Errors]);
    for (seed, y) in [(5, 1.0), (6, 0.0), (7, 1.0)] {
        let w = random(seed, 4, 1);
        let x = random(seed + 20, 4, 1);
        let b = -0.3;
        let (wv, xv) =
            (DVector::from_column_slice(w.as_slice()), DVector::from_column_slice(x.as_slice()));
        let g =
            super::attempt_ok_on(GRADIENT, "sample_gradient", &[("w", &wv), ("x", &xv)], || {
                f(&wv, b, &xv, y)
            })?;
        let xs = x.clone();
        gradient_check(
            GRADIENT,
            &[("w", w)],
            &[column(&g)],
            |t| book::bce_from_logit(y, t[0].dot(&xs) + b),
            &[(-1.0, "(y − ŷ)·x is the negative: the gradient is (ŷ − y)·x")],
        )
        .map_err(|m| format!("label y = {y}: {m}"))?;
    }
    let (wv, xv) = (random(8, 4, 1), random(28, 4, 1));
    let (wv, xv) =
        (DVector::from_column_slice(wv.as_slice()), DVector::from_column_slice(xv.as_slice()));
    for (z, y) in TAIL_POINTS {
        let b = z - wv.dot(&xv);
        let g =
            super::attempt_ok_on(GRADIENT, "sample_gradient", &[("w", &wv), ("x", &xv)], || {
                f(&wv, b, &xv, y)
            })?;
        let want = column(&(&xv * (book::sigmoid(z) - y)));
        let y_hat = book::sigmoid(z);
        let literal =
            book::d_z_d_w(&xv) * (book::d_loss_d_yhat(y, y_hat) * book::d_yhat_d_z(y_hat));
        let mistakes = [
            (THREE_FACTORS, column(&literal)),
            (ONE_MINUS, column(&(&xv * (1.0 - book::sigmoid(-z) - y)))),
        ];
        let what = format!("label y = {y}, z = wᵀx + b = {z}");
        super::probe(super::Probe::Scale);
        let yours = column(&g);
        let name = format!("∂ℓ/∂w at {what}");
        if let Err(m) = super::compare_relative(GRADIENT, &name, &yours, &want, 1e-9) {
            // Matched relatively, as the tail is compared: 0 is not 4·10⁻¹⁸.
            let same = |a: &DMatrix<f64>, b: &DMatrix<f64>| {
                a.iter().zip(b.iter()).all(|(p, q)| {
                    p == q || p.is_nan() && q.is_nan() || (p - q).abs() <= 1e-9 * q.abs()
                })
            };
            return Err(match mistakes.iter().find(|(_, out)| same(&yours, out)) {
                Some((mistake, _)) => super::known_slip(GRADIENT, &format!("{what}: {mistake}")),
                None => m,
            });
        }
    }
    Ok(())
}

/// The gradient's slip at large |z|: the chain of factors multiplied as written.
const THREE_FACTORS: &str = "the three factors multiplied as written: once ŷ rounds to 0 or 1, \
                             (ŷ − y)/(ŷ(1 − ŷ)) is ∞ and ŷ(1 − ŷ) is 0, so their product is NaN \
                             — collapse them to (ŷ − y)·x";
/// The gradient's slip in the left tail: ŷ = σ(z) as 1 − σ(−z).
const ONE_MINUS: &str = "ŷ computed as 1 − σ(−z), which rounds to 0 once σ(−z) rounds to 1 \
                         (z below −37), so the tail's (ŷ − y)·x is lost — compute \
                         e^{z}/(1 + e^{z}) for z < 0";

/// The gradient check of L = Σ g ⊙ z(X, w, b) in X, w and b, with random g.
fn logits_backward_checks<F>(f: F) -> Verdict
where
    F: Fn(&DMatrix<f64>, &DVector<f64>, &DVector<f64>) -> Result<(DMatrix<f64>, DVector<f64>, f64)>,
{
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order, super::Probe::Errors]);
    super::probe(super::Probe::Batch);
    let (x, w, g) = (random(8, 5, 3), random(9, 3, 1), random(10, 5, 1));
    let (wv, gv) =
        (DVector::from_column_slice(w.as_slice()), DVector::from_column_slice(g.as_slice()));
    let (d_x, d_w, d_b) = super::attempt_ok_on(
        GRADIENT,
        "logits_backward",
        &[("x", &x), ("w", &wv), ("d_z", &gv)],
        || f(&x, &wv, &gv),
    )?;
    let loss = |t: &[DMatrix<f64>]| {
        let z = &t[0] * &t[1];
        z.iter().map(|v| v + t[2][(0, 0)]).zip(g.iter()).map(|(z, g)| z * g).sum::<f64>()
    };
    gradient_check(
        GRADIENT,
        &[("X", x.clone()), ("w", w.clone()), ("b", DMatrix::from_element(1, 1, 0.5))],
        &[d_x, column(&d_w), DMatrix::from_element(1, 1, d_b)],
        loss,
        &[(0.2, "∂L/∂b is the sum Σᵢ ∂L/∂zᵢ, not the mean")],
    )
}

// ───────────── the judges: the sweep against the main crate, then the checks above ─────────────

use super::sweep::{Gen, SCALES, Tol, explained, outcome, sweep};

/// The logits the sweep tries for the scalar exercises: ordinary values at every scale, the
/// far tails where σ rounds (±30 … ±745, ±1000) and 0.
fn logit_cases(draw: &mut Gen) -> Vec<f64> {
    let mut z = vec![0.0, -0.0, 1.0, -1.0];
    for t in [30.0, 36.5, 37.0, 40.0, 100.0, 500.0, 700.0, 709.5, 745.0, 1000.0] {
        z.extend([t, -t]);
    }
    for &s in &SCALES {
        z.extend((0..6).map(|_| s * draw.uniform(-1.0, 1.0)));
    }
    z
}

/// **σ(z)**: the sweep compares yours with the main crate's σ at ordinary values and in both far
/// tails to 10⁻⁸ relatively ([`Tol::F64`]: σ's tails are tiny and must be right to their own
/// digits), then the checks of `sigmoid_checks`.
pub fn sigmoid(f: impl Fn(f64) -> f64) -> Verdict {
    sigmoid_judged(&f)
}

/// [`sigmoid`]'s judge, compiled once here rather than in every test that calls it.
fn sigmoid_judged(f: &dyn Fn(f64) -> f64) -> Verdict {
    let cases = logit_cases(&mut Gen::new("sigmoid"));
    let found = sweep(MODEL, "sigmoid", Tol::F64, &cases, |&z| Ok(f(z)), |&z| Ok(book::sigmoid(z)));
    explained(found, || sigmoid_checks(f))
}

/// **z = Xw + b**: shapes with 0 and 1 rows, D = 1, unequal N and D, a w of the wrong length (an
/// error must meet an error), values at every scale; then `logits_forward_checks`.
pub fn logits_forward(
    f: impl Fn(&DVector<f64>, f64, &DMatrix<f64>) -> Result<DVector<f64>>,
) -> Verdict {
    logits_forward_judged(&f)
}

/// [`logits_forward`]'s judge, compiled once here rather than in every test that calls it.
fn logits_forward_judged(
    f: &dyn Fn(&DVector<f64>, f64, &DMatrix<f64>) -> Result<DVector<f64>>,
) -> Verdict {
    let mut draw = Gen::new("logits_forward");
    let mut cases = Vec::new();
    for (n, d, dw) in [(1, 1, 1), (3, 2, 2), (0, 3, 3), (5, 4, 4), (2, 3, 2), (2, 3, 4), (4, 1, 1)]
    {
        for &s in &SCALES {
            cases.push((draw.vector(dw, s), draw.uniform(-2.0, 2.0) * s, draw.matrix(n, d, s)));
        }
    }
    let found = sweep(
        MODEL,
        "logits_forward",
        Tol::F64,
        &cases,
        |(w, b, x)| outcome(f(w, *b, x)),
        |(w, b, x)| outcome(book::logits_forward(w, *b, x)),
    );
    explained(found, || logits_forward_checks(f))
}

/// **ℓ(y, z)**: both labels at every logit of the sigmoid's sweep, relatively to 10⁻⁸ (ℓ(0, −40)
/// is 4.2·10⁻¹⁸ and must not be 0); then `bce_from_logit_checks`.
pub fn bce_from_logit(f: impl Fn(f64, f64) -> f64) -> Verdict {
    bce_from_logit_judged(&f)
}

/// [`bce_from_logit`]'s judge, compiled once here rather than in every test that calls it.
fn bce_from_logit_judged(f: &dyn Fn(f64, f64) -> f64) -> Verdict {
    let z = logit_cases(&mut Gen::new("bce_from_logit"));
    let cases: Vec<(f64, f64)> = z.iter().flat_map(|&z| [(0.0, z), (1.0, z)]).collect();
    let found = sweep(
        LOSS,
        "bce_from_logit",
        Tol::F64,
        &cases,
        |&(y, z)| Ok(f(y, z)),
        |&(y, z)| Ok(book::bce_from_logit(y, z)),
    );
    explained(found, || bce_from_logit_checks(f))
}

/// **(ŷ − y)·x**: D from 1 to 5, a w of the wrong length (an error), both labels, logits from
/// ordinary to the far tails (w scaled up to 10³); then `sample_gradient_checks`.
pub fn sample_gradient(
    f: impl Fn(&DVector<f64>, f64, &DVector<f64>, f64) -> Result<DVector<f64>>,
) -> Verdict {
    sample_gradient_judged(&f)
}

/// [`sample_gradient`]'s judge, compiled once here rather than in every test that calls it.
fn sample_gradient_judged(
    f: &dyn Fn(&DVector<f64>, f64, &DVector<f64>, f64) -> Result<DVector<f64>>,
) -> Verdict {
    let mut draw = Gen::new("sample_gradient");
    let mut cases = Vec::new();
    for (d, dw) in [(1, 1), (3, 3), (5, 5), (2, 3), (0, 0)] {
        for &s in &SCALES {
            for y in [0.0, 1.0] {
                cases.push((
                    draw.vector(dw, s),
                    draw.uniform(-1.0, 1.0) * s,
                    draw.vector(d, 1.0),
                    y,
                ));
            }
        }
    }
    let found = sweep(
        GRADIENT,
        "sample_gradient",
        Tol::F64,
        &cases,
        |(w, b, x, y)| outcome(f(w, *b, x, *y)),
        |(w, b, x, y)| outcome(book::sample_gradient(w, *b, x, *y)),
    );
    explained(found, || sample_gradient_checks(f))
}

/// **(∂L/∂X, ∂L/∂w, ∂L/∂b)**: shapes with N = 0 and 1, D = 1, N ≠ D, mismatched w or ∂L/∂z;
/// values at every scale; then `logits_backward_checks`.
pub fn logits_backward<F>(f: F) -> Verdict
where
    F: Fn(&DMatrix<f64>, &DVector<f64>, &DVector<f64>) -> Result<(DMatrix<f64>, DVector<f64>, f64)>,
{
    let mut draw = Gen::new("logits_backward");
    let mut cases = Vec::new();
    for (n, d, dw, dz) in [(1, 1, 1, 1), (3, 2, 2, 3), (4, 5, 5, 4), (0, 2, 2, 0), (3, 2, 3, 3)] {
        for &s in &SCALES {
            cases.push((draw.matrix(n, d, s), draw.vector(dw, 1.0), draw.vector(dz, s)));
        }
    }
    let found = sweep(
        GRADIENT,
        "logits_backward",
        Tol::F64,
        &cases,
        |(x, w, d)| outcome(f(x, w, d)),
        |(x, w, d)| outcome(book::logits_backward(x, w, d).map(|g| (g.d_x, g.d_w, g.d_b))),
    );
    explained(found, || logits_backward_checks(&f))
}
