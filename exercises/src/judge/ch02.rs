//! Judges of chapter 2's exercises.

use super::{Section, Verdict, attempt_ok, compare, gradient_check, random};
use llm_workbook::Result;
use llm_workbook::ch02_softmax as book;
use nalgebra::DMatrix;

/// |a − b| ≤ tol·|b|.
fn close_rel(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * b.abs()
}

const STABLE: Section = Section { chapter: "ch02_softmax", anchor: "2-stable-by-construction" };
const CROSS: Section = Section { chapter: "ch02_softmax", anchor: "4-cross-entropy" };
const GRADIENT: Section = Section { chapter: "ch02_softmax", anchor: "5-the-gradient-ŷ--y" };

/// softmax((1, 2, 8)) = (0.0009, 0.0025, 0.9966) at the document's 4 decimals, the script's start
/// (0.1, 0.1, 0.1, 0.7) → 0.20737772 ×3, 0.37786684 at 8; rows sum to 1; no overflow at 1000;
/// the main crate's softmax on a random 4×5 Z.
fn softmax_rows_forward_checks(f: impl Fn(&DMatrix<f64>) -> Result<DMatrix<f64>>) -> Verdict {
    super::not_applicable(&[super::Probe::Order]);
    super::probe(super::Probe::Batch);
    super::probe(super::Probe::Named);
    let run = |z: &DMatrix<f64>| {
        super::attempt_ok_on(STABLE, "softmax_rows_forward", &[("z", z)], || f(z))
    };
    let z = random(11, 4, 5);
    let yours = run(&z)?;
    if yours.shape() == z.shape() {
        for r in 0..yours.nrows() {
            let s = yours.row(r).sum();
            if (s - 1.0).abs() > 1e-9 {
                let by_columns =
                    (0..yours.ncols()).all(|c| (yours.column(c).sum() - 1.0).abs() < 1e-9);
                let hint = if by_columns {
                    " — your columns sum to 1: softmax runs along each row (over the K classes)"
                } else {
                    ""
                };
                return Err(STABLE.fail(format!("row {r} of your softmax sums to {s:.4}{hint}")));
            }
        }
    }
    let want = book::softmax_rows_forward(&z).map_err(|e| e.to_string())?;
    compare(STABLE, "softmax(Z)", &yours, &want, 1e-10, &[])?;
    let printed = |z: &[f64], digits: usize, want: &[&str]| -> Verdict {
        let y = run(&DMatrix::from_row_slice(1, z.len(), z))?;
        let got: Vec<String> = y.iter().map(|v| format!("{v:.digits$}")).collect();
        if got != want {
            return Err(STABLE.fail(format!(
                "softmax({z:?}) should print as {want:?} at {digits} decimals; yours is {got:?}"
            )));
        }
        Ok(())
    };
    printed(&[1.0, 2.0, 8.0], 4, &["0.0009", "0.0025", "0.9966"])?;
    printed(&[0.1, 0.1, 0.1, 0.7], 8, &["0.20737772", "0.20737772", "0.20737772", "0.37786684"])?;
    let big = run(&DMatrix::from_row_slice(1, 3, &[1000.0, 1001.0, 1002.0]))?;
    if big.iter().any(|v| !v.is_finite()) {
        return Err(STABLE.fail_hint(
            format!("softmax((1000, 1001, 1002)) gave {:?}: e^1000 overflows", big.as_slice()),
            "subtract each row's maximum before exponentiating",
        ));
    }
    let apart = super::rows_apart(&random(22, 4, 5));
    let yours = run(&apart)?;
    if let Some(mistake) = super::shift_mistake(&yours, &apart, |p| p.clone()) {
        return Err(
            STABLE.fail(format!("rows thousands apart (maxima {ROW_OFFSETS:?}): {mistake}"))
        );
    }
    let want = book::softmax_rows_forward(&apart).map_err(|e| e.to_string())?;
    super::compare_relative(STABLE, "softmax(Z), rows thousands apart", &yours, &want, 1e-9)?;
    super::expect_err(STABLE, "softmax_rows_forward", "an empty Z (0×3)", || {
        f(&DMatrix::zeros(0, 3))
    })
}

use super::ROW_OFFSETS;

/// The errors the cross-entropy exercises promise: empty logits, 2 targets for 3 rows, a
/// target equal to K.
fn target_errors<R>(exercise: &str, f: &impl Fn(&DMatrix<f64>, &[usize]) -> Result<R>) -> Verdict {
    let z = random(25, 3, 4);
    super::expect_err(CROSS, exercise, "empty logits (0×4)", || f(&DMatrix::zeros(0, 4), &[]))?;
    super::expect_err(CROSS, exercise, "2 targets for 3 rows of logits", || f(&z, &[0, 1]))?;
    let what = "a target equal to K = 4 (the classes are 0..K)";
    super::expect_err(CROSS, exercise, what, || f(&z, &[0, 4, 1]))
}

/// ln 3 for uniform logits over 3 classes; the main crate's loss on random logits.
fn cross_entropy_from_logits_checks(f: impl Fn(&DMatrix<f64>, &[usize]) -> Result<f64>) -> Verdict {
    super::not_applicable(&[super::Probe::Order]);
    super::probe(super::Probe::Batch);
    super::probe(super::Probe::Named);
    let (zeros, targets) = (DMatrix::zeros(2, 3), [0, 2]);
    let passed: [(&str, &dyn super::Shaped); 2] = [("logits", &zeros), ("targets", &targets)];
    let uniform =
        super::attempt_ok_on(CROSS, "cross_entropy_from_logits", &passed, || f(&zeros, &targets))?;
    if (uniform - 3f64.ln()).abs() > 1e-12 {
        let why = if (uniform - 2.0 * 3f64.ln()).abs() < 1e-12 {
            " — N = 2 times too large: L is the mean over the N rows, divide by N"
        } else {
            ""
        };
        return Err(CROSS.fail(format!(
            "all logits equal over 3 classes: every ŷ is 1/3 and L = ln 3 = {:.6}; yours is \
             {uniform:.6}{why}",
            3f64.ln()
        )));
    }
    let (z, t) = (random(12, 5, 4) * 3.0, [0, 3, 1, 1, 2]);
    let yours = super::attempt_ok_on(
        CROSS,
        "cross_entropy_from_logits",
        &[("logits", &z), ("targets", &t)],
        || f(&z, &t),
    )?;
    let want = book::cross_entropy_from_logits(&z, &t).map_err(|e| e.to_string())?;
    if (yours - want).abs() > 1e-10 {
        let n = t.len() as f64;
        let why = if (yours - want * n).abs() < 1e-9 {
            " — yours is N = 5 times too large: L is the mean over the N rows, divide by N"
        } else {
            ""
        };
        return Err(CROSS.fail(format!("L: {}{why}", super::yours_expected(yours, want))));
    }
    let apart = super::rows_apart(&random(23, 4, 3));
    let t = [2, 0, 1, 1];
    let yours = super::attempt_ok_on(
        CROSS,
        "cross_entropy_from_logits",
        &[("logits", &apart), ("targets", &t)],
        || f(&apart, &t),
    )?;
    let want = book::cross_entropy_from_logits(&apart, &t).map_err(|e| e.to_string())?;
    if !close_rel(yours, want, 1e-9) {
        let why =
            if yours.is_finite() { String::new() } else { format!(" — {}", super::NO_SHIFT) };
        return Err(CROSS.fail(format!(
            "L for rows thousands apart (row maxima near {ROW_OFFSETS:?}): {}{why}",
            super::yours_expected(yours, want)
        )));
    }
    let huge = DMatrix::from_row_slice(1, 2, &[1000.0, -1000.0]);
    let far = attempt_ok(CROSS, "cross_entropy_from_logits", || f(&huge, &[1]))?;
    if (far - 2000.0).abs() > 1e-9 {
        return Err(CROSS.fail_hint(
            format!("L for logits (1000, −1000), target 1, should be 2000; yours is {far}"),
            "use ln Σ e^{z_c} − z_t with the maximum subtracted (log-sum-exp), never ln ŷ",
        ));
    }
    target_errors("cross_entropy_from_logits", &f)
}

/// The document's ŷ − y = (−0.9, 0.1, 0.1, 0.7) for ŷ = (0.1, 0.1, 0.1, 0.7), class 0 (here as
/// logits ln ŷ); the gradient check of the mean cross-entropy on random logits; (P − Y)/N on rows
/// thousands apart and on logits of ±900 and more, naming a dropped or whole-matrix max shift.
fn cross_entropy_from_logits_backward_checks(
    f: impl Fn(&DMatrix<f64>, &[usize]) -> Result<DMatrix<f64>>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Order]);
    super::probe(super::Probe::Batch);
    let run = |z: &DMatrix<f64>, t: &[usize]| {
        super::attempt_ok_on(
            GRADIENT,
            "cross_entropy_from_logits_backward",
            &[("logits", z), ("targets", &t)],
            || f(z, t),
        )
    };
    let doc = DMatrix::from_row_slice(1, 4, &[0.1_f64, 0.1, 0.1, 0.7]).map(f64::ln);
    let g = run(&doc, &[0])?;
    let want = DMatrix::from_row_slice(1, 4, &[-0.9, 0.1, 0.1, 0.7]);
    compare(GRADIENT, "ŷ − y", &g, &want, 1e-9, &[(-1.0, "it is ŷ − y, not y − ŷ")])?;
    let (z, t) = (random(13, 4, 3), [2, 0, 1, 2]);
    let g = run(&z, &t)?;
    gradient_check(
        GRADIENT,
        &[("Z", z.clone())],
        &[g],
        |m| book::cross_entropy_from_logits(&m[0], &t).unwrap_or(f64::NAN),
        &[
            (4.0, "a missing 1/N: L is the mean over the N = 4 rows"),
            (-1.0, "it is (P − Y)/N, not (Y − P)/N"),
        ],
    )?;
    // Scale: rows thousands apart, and logits of ±900 and more.
    let t = [1, 0, 2, 1];
    let probes = [
        (format!("rows thousands apart (maxima near {ROW_OFFSETS:?})"), super::rows_apart(&z)),
        (
            format!("rows scaled by {LOGIT_SCALES:?}"),
            super::rows_scaled(&random(24, 4, 3), &LOGIT_SCALES),
        ),
    ];
    for (what, z) in probes {
        let yours = run(&z, &t)?;
        let want = book::cross_entropy_from_logits_backward(&z, &t).map_err(|e| e.to_string())?;
        let n = t.len() as f64;
        let onehot = DMatrix::from_fn(z.nrows(), z.ncols(), |r, c| f64::from(u8::from(t[r] == c)));
        if let Some(mistake) = super::shift_mistake(&yours, &z, |p| (p - &onehot) / n) {
            return Err(GRADIENT.fail(format!("∂L/∂Z for {what}: {mistake}")));
        }
        let name = format!("∂L/∂Z for {what}");
        super::compare_with_floor(GRADIENT, &name, &yours, &want, 1e-9, SUBNORMAL, &[])?;
    }
    target_errors("cross_entropy_from_logits_backward", &f)
}

/// The factors [`cross_entropy_from_logits_backward`]'s scale probe multiplies rows by: logits
/// of ±900 and more, rows thousands apart.
const LOGIT_SCALES: [f64; 4] = [900.0, -900.0, 1.0, 2500.0];

/// Entries below this are compared against it, not relatively: a subnormal number (below
/// 2.2·10⁻³⁰⁸) has too few digits for two right formulas to agree on.
const SUBNORMAL: f64 = 1e-290;

/// The gradient check of L = Σ G ⊙ softmax(Z) in Z, through your backward at Y = softmax(Z).
fn softmax_rows_backward_checks(
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order, super::Probe::Errors]);
    super::probe(super::Probe::Batch);
    super::probe(super::Probe::Named);
    for (seed, n, k) in [(14, 3, 4), (15, 1, 5)] {
        let (z, g) = (random(seed, n, k), random(seed + 1, n, k));
        let y = book::softmax_rows_forward(&z).map_err(|e| e.to_string())?;
        let d_z = super::attempt_ok_on(
            GRADIENT,
            "softmax_rows_backward",
            &[("y", &y), ("d_y", &g)],
            || f(&y, &g),
        )?;
        gradient_check(
            GRADIENT,
            &[("Z", z)],
            &[d_z],
            |m| {
                book::softmax_rows_forward(&m[0])
                    .map(|p| super::weighted_sum(&g, &p))
                    .unwrap_or(f64::NAN)
            },
            &[],
        )
        .map_err(|m| {
            let plain = y.component_mul(&g);
            let d_z = f(&y, &g).unwrap_or_default();
            if d_z.shape() == plain.shape() && (d_z - plain).abs().max() < 1e-12 {
                GRADIENT.fail_hint(
                    "yours is Y ⊙ ∂L/∂Y: the diagonal of the Jacobian only",
                    "subtract rowsum(∂L/∂Y ⊙ Y) from ∂L/∂Y before multiplying by Y (the −y_i y_j \
                     terms)",
                )
            } else {
                m
            }
        })?;
    }
    Ok(())
}

const REGRESSION: Section = Section { chapter: "ch02_softmax", anchor: "8-softmax-regression" };

/// The gradient check of L = Σ G ⊙ log_softmax(Z) in Z (two random batches); a row with a masked
/// (−∞) logit gives a finite gradient, 0 at the masked entry when its ∂L/∂(ln Y) is 0; with
/// ∂L/∂(ln Y) = −onehot/N the answer is cross-entropy's (P − Y)/N.
fn log_softmax_rows_backward_checks(
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Order, super::Probe::Errors]);
    super::probe(super::Probe::Scale);
    super::probe(super::Probe::Batch);
    super::probe(super::Probe::Named);
    let name = "log_softmax_rows_backward";
    for (seed, n, k) in [(16, 3, 4), (17, 2, 5)] {
        let (z, g) = (random(seed, n, k) * 2.0, random(seed + 1, n, k));
        let log_y = book::log_softmax_rows(&z).map_err(|e| e.to_string())?;
        let d_z =
            super::attempt_ok_on(STABLE, name, &[("log_y", &log_y), ("d", &g)], || f(&log_y, &g))?;
        gradient_check(
            STABLE,
            &[("Z", z)],
            std::slice::from_ref(&d_z),
            |m| {
                book::log_softmax_rows(&m[0])
                    .map(|l| super::weighted_sum(&g, &l))
                    .unwrap_or(f64::NAN)
            },
            &[],
        )
        .map_err(|m| {
            if d_z.shape() == g.shape() && (&d_z - &g).abs().max() < 1e-12 {
                STABLE.fail_hint(
                    "yours returns ∂L/∂(ln Y) unchanged: every ln Y_rc depends on every logit of \
                     row r through the log-sum-exp",
                    "subtract Y ⊙ rowsum(∂L/∂(ln Y)), with Y = e^{ln Y}",
                )
            } else {
                let y = log_y.map(f64::exp);
                let by_columns =
                    DMatrix::from_fn(n, k, |r, c| g[(r, c)] - y[(r, c)] * g.column(c).sum());
                if d_z.shape() == g.shape() && (&d_z - by_columns).abs().max() < 1e-12 {
                    STABLE.fail(
                        "yours subtracts Y ⊙ the column sums of ∂L/∂(ln Y): the log-sum-exp is \
                         over each row, so the sum runs along the row",
                    )
                } else {
                    m
                }
            }
        })?;
    }
    // A masked logit: ln Y = −∞ there, Y = 0.
    let z = DMatrix::from_row_slice(2, 3, &[0.5, f64::NEG_INFINITY, -1.0, 2.0, 0.0, 1.0]);
    let log_y = book::log_softmax_rows(&z).map_err(|e| e.to_string())?;
    let d = DMatrix::from_row_slice(2, 3, &[-0.5, 0.0, 0.0, 0.0, 0.0, -0.5]);
    let d_z =
        super::attempt_ok_on(STABLE, name, &[("log_y", &log_y), ("d", &d)], || f(&log_y, &d))?;
    if d_z.iter().any(|v| !v.is_finite()) {
        return Err(STABLE.fail(
            "row 0 has a masked logit (ln Y = −∞): your ∂L/∂Z holds NaN or ∞; use Y = e^{ln Y} = 0 \
             there, never ln Y itself",
        ));
    }
    // −onehot/N through log-softmax is the mean cross-entropy: (P − Y)/N.
    let want = DMatrix::from_fn(2, 3, |r, c| {
        let onehot = if c == 2 * r { 1.0 } else { 0.0 };
        (log_y[(r, c)].exp() - onehot) / 2.0
    });
    compare(
        STABLE,
        "∂L/∂Z for ∂L/∂(ln Y) = −onehot/N (cross-entropy's (P − Y)/N)",
        &d_z,
        &want,
        1e-9,
        &[],
    )
}

/// The gradient check of L = Σ G ⊙ (XW + 1bᵀ) in X, W and b, W non-square (a misplaced transpose
/// shows in the shapes).
fn regression_logits_backward_checks(
    f: impl Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order, super::Probe::Errors]);
    super::probe(super::Probe::Batch);
    let (x, w, b, g) = (random(18, 5, 2), random(19, 2, 3), random(20, 1, 3), random(21, 5, 3));
    let (d_x, d_w, d_b) = super::attempt_ok_on(
        REGRESSION,
        "regression_logits_backward",
        &[("w", &w), ("x", &x), ("d_z", &g)],
        || f(&w, &x, &g),
    )?;
    gradient_check(
        REGRESSION,
        &[("X", x.clone()), ("W", w.clone()), ("b", b.clone())],
        &[d_x, d_w, d_b],
        |t| {
            book::regression_logits(&t[1], &t[2], &t[0])
                .map(|z| super::weighted_sum(&g, &z))
                .unwrap_or(f64::NAN)
        },
        &[(0.2, "∂L/∂b is the column sums of ∂L/∂Z, not their mean (the 1/N is already in ∂L/∂Z)")],
    )
}

// ───────────── the judges: the sweep against the main crate, then the checks above ─────────────

use super::sweep::{Gen, SCALES, SHAPES, Tol, explained, outcome, sweep};

/// Logits at every shape and scale, rows thousands apart and ties, with targets: N right ones,
/// and (for the errors the doc promises) one target too few and a target equal to K.
fn logits_and_targets(draw: &mut Gen) -> Vec<(DMatrix<f64>, Vec<usize>)> {
    let mut cases = Vec::new();
    for z in draw.matrices() {
        let (n, k) = z.shape();
        let t = draw.tokens(n, k.max(1));
        if let Some(last) = t.len().checked_sub(1) {
            cases.push((z.clone(), t[..last].to_vec()));
            let mut bad = t.clone();
            bad[last] = k;
            cases.push((z.clone(), bad));
        }
        cases.push((z, t));
    }
    cases
}

/// **softmax rows**: matrices at every shape of the sweep (0 rows: the promised error), values
/// from 10⁻⁹ to 10³ and rows thousands apart, to 10⁻⁸ ([`Tol::F64`]); then
/// `softmax_rows_forward_checks`.
pub fn softmax_rows_forward(f: impl Fn(&DMatrix<f64>) -> Result<DMatrix<f64>>) -> Verdict {
    softmax_rows_forward_judged(&f)
}

/// [`softmax_rows_forward`]'s judge, compiled once here rather than in every test that calls it.
fn softmax_rows_forward_judged(f: &dyn Fn(&DMatrix<f64>) -> Result<DMatrix<f64>>) -> Verdict {
    let cases = Gen::new("softmax_rows_forward").matrices();
    let found = sweep(
        STABLE,
        "softmax_rows_forward",
        Tol::F64,
        &cases,
        |z| outcome(f(z)),
        |z| outcome(book::softmax_rows_forward(z)),
    );
    explained(found, || softmax_rows_forward_checks(f))
}

/// **the mean cross-entropy**: logits of every shape and scale with their targets, and the three
/// errors the doc promises; then `cross_entropy_from_logits_checks`.
pub fn cross_entropy_from_logits(f: impl Fn(&DMatrix<f64>, &[usize]) -> Result<f64>) -> Verdict {
    cross_entropy_from_logits_judged(&f)
}

/// [`cross_entropy_from_logits`]'s judge, compiled once here rather than in every test that calls it.
fn cross_entropy_from_logits_judged(f: &dyn Fn(&DMatrix<f64>, &[usize]) -> Result<f64>) -> Verdict {
    let cases = logits_and_targets(&mut Gen::new("cross_entropy_from_logits"));
    let found = sweep(
        CROSS,
        "cross_entropy_from_logits",
        Tol::F64,
        &cases,
        |(z, t)| outcome(f(z, t)),
        |(z, t)| outcome(book::cross_entropy_from_logits(z, t)),
    );
    explained(found, || cross_entropy_from_logits_checks(f))
}

/// **(P − Y)/N**: as [`cross_entropy_from_logits`]; then
/// `cross_entropy_from_logits_backward_checks`.
pub fn cross_entropy_from_logits_backward(
    f: impl Fn(&DMatrix<f64>, &[usize]) -> Result<DMatrix<f64>>,
) -> Verdict {
    cross_entropy_from_logits_backward_judged(&f)
}

/// [`cross_entropy_from_logits_backward`]'s judge, compiled once here rather than in every test that calls it.
fn cross_entropy_from_logits_backward_judged(
    f: &dyn Fn(&DMatrix<f64>, &[usize]) -> Result<DMatrix<f64>>,
) -> Verdict {
    let cases = logits_and_targets(&mut Gen::new("cross_entropy_from_logits_backward"));
    let found = sweep(
        GRADIENT,
        "cross_entropy_from_logits_backward",
        Tol::F64,
        &cases,
        |(z, t)| outcome(f(z, t)),
        |(z, t)| outcome(book::cross_entropy_from_logits_backward(z, t)),
    );
    explained(found, || cross_entropy_from_logits_backward_checks(f))
}

/// Pairs (softmax or log-softmax of Z, an upstream gradient) at every shape (not 0 rows, which
/// these exercises' docs do not cover) and scale.
fn forward_and_gradient(
    draw: &mut Gen,
    forward: impl Fn(&DMatrix<f64>) -> llm_workbook::Result<DMatrix<f64>>,
) -> Vec<(DMatrix<f64>, DMatrix<f64>)> {
    let mut cases = Vec::new();
    for &(n, k) in SHAPES.iter().filter(|s| s.0 > 0) {
        for &s in &SCALES {
            let z = draw.rows_apart(n, k, s);
            if let Ok(y) = forward(&z) {
                cases.push((y, draw.matrix(n, k, 1.0)));
            }
        }
    }
    cases
}

/// **softmax backward**: Y the softmax of Z at every shape and scale (rows thousands apart, so
/// that some Y are exactly 0 and 1), ∂L/∂Y random; then `softmax_rows_backward_checks`.
pub fn softmax_rows_backward(
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    softmax_rows_backward_judged(&f)
}

/// [`softmax_rows_backward`]'s judge, compiled once here rather than in every test that calls it.
fn softmax_rows_backward_judged(
    f: &dyn Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    let cases =
        forward_and_gradient(&mut Gen::new("softmax_rows_backward"), book::softmax_rows_forward);
    let found = sweep(
        GRADIENT,
        "softmax_rows_backward",
        Tol::F64,
        &cases,
        |(y, d)| outcome(f(y, d)),
        |(y, d)| outcome(book::softmax_rows_backward(y, d)),
    );
    explained(found, || softmax_rows_backward_checks(f))
}

/// **log-softmax backward**: ln Y of Z at every shape and scale (some entries near −10³), and
/// rows with a masked −∞ logit; then `log_softmax_rows_backward_checks`.
pub fn log_softmax_rows_backward(
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    log_softmax_rows_backward_judged(&f)
}

/// [`log_softmax_rows_backward`]'s judge, compiled once here rather than in every test that calls it.
fn log_softmax_rows_backward_judged(
    f: &dyn Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    let mut draw = Gen::new("log_softmax_rows_backward");
    let mut cases = forward_and_gradient(&mut draw, book::log_softmax_rows);
    let mut z = draw.matrix(3, 4, 2.0);
    for at in [(0, 1), (2, 3)] {
        if let Some(v) = z.get_mut(at) {
            *v = f64::NEG_INFINITY;
        }
    }
    if let Ok(l) = book::log_softmax_rows(&z) {
        cases.push((l, draw.matrix(3, 4, 1.0)));
    }
    let found = sweep(
        STABLE,
        "log_softmax_rows_backward",
        Tol::F64,
        &cases,
        |(l, d)| outcome(f(l, d)),
        |(l, d)| outcome(book::log_softmax_rows_backward(l, d)),
    );
    explained(found, || log_softmax_rows_backward_checks(f))
}

/// **(∂L/∂Z Wᵀ, Xᵀ ∂L/∂Z, column sums)**: N, D, K from 1 to 5 in every combination of the
/// sweep's shapes, at every scale; then `regression_logits_backward_checks`.
pub fn regression_logits_backward(
    f: impl Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    regression_logits_backward_judged(&f)
}

/// [`regression_logits_backward`]'s judge, compiled once here rather than in every test that calls it.
fn regression_logits_backward_judged(
    f: &dyn Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    let mut draw = Gen::new("regression_logits_backward");
    let mut cases = Vec::new();
    for (n, d, k) in [(1, 1, 1), (1, 3, 2), (4, 2, 3), (3, 5, 1), (2, 2, 2), (5, 1, 4)] {
        for &s in &SCALES {
            cases.push((draw.matrix(d, k, s), draw.matrix(n, d, 1.0), draw.matrix(n, k, s)));
        }
    }
    let found = sweep(
        REGRESSION,
        "regression_logits_backward",
        Tol::F64,
        &cases,
        |(w, x, d)| outcome(f(w, x, d)),
        |(w, x, d)| outcome(book::regression_logits_backward(w, x, d)),
    );
    explained(found, || regression_logits_backward_checks(f))
}
