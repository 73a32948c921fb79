//! Judges of chapter 4's exercises.

use super::{Section, Verdict, attempt, compare, random};
use llm_workbook::Result;
use llm_workbook::ch03_mlp::Activation;
use llm_workbook::ch04_xor::{self as book, LinearFit, PrintedNet};
use nalgebra::DMatrix;

const SIGMOID: Section = Section { chapter: "ch04_xor", anchor: "the-documents-sigmoid-network" };
const RELU: Section = Section { chapter: "ch04_xor", anchor: "the-documents-relu-network" };
const LINE: Section = Section { chapter: "ch04_xor", anchor: "no-straight-line" };

fn outputs(net: &PrintedNet) -> std::result::Result<DMatrix<f64>, String> {
    let (x, _) = book::xor_data();
    net.mlp().and_then(|m| m.predict(&x)).map_err(|e| e.to_string())
}

fn xor_net(
    sec: Section,
    name: &str,
    act: Activation,
    f: impl Fn() -> PrintedNet,
    within: f64,
) -> Verdict {
    let net = attempt(sec, name, f)?;
    if net.activation != act {
        return Err(sec.fail(format!(
            "this exercise asks for activation {:?}; yours is {:?}",
            act, net.activation
        )));
    }
    let out = outputs(&net)?;
    let (x, y) = book::xor_data();
    for r in 0..4 {
        let (o, t) = (out[(r, 0)], y[(r, 0)]);
        let wrong = if within > 0.0 {
            (o - t).abs() > within
        } else {
            (o >= book::THRESHOLD) != (t >= book::THRESHOLD)
        };
        if wrong {
            return Err(sec.fail(format!(
                "input ({}, {}): XOR is {t}, your network outputs {o:.4}{}",
                x[(r, 0)],
                x[(r, 1)],
                if within > 0.0 {
                    format!(" (needs to be within {within} of {t}: larger weights saturate σ)")
                } else {
                    " (class 1 needs ≥ 0.5)".to_string()
                }
            )));
        }
    }
    Ok(())
}

/// Your sigmoid network's four outputs are within 0.01 of XOR.
fn xor_sigmoid_net_checks(f: impl Fn() -> PrintedNet) -> Verdict {
    super::not_applicable(&[
        super::Probe::Scale,
        super::Probe::Batch,
        super::Probe::Order,
        super::Probe::Errors,
        super::Probe::Named,
    ]);
    xor_net(SIGMOID, "xor_sigmoid_net", Activation::Sigmoid, f, 0.01)
}

/// Your ReLU network classifies all four XOR inputs right at the threshold 0.5.
fn xor_relu_net_checks(f: impl Fn() -> PrintedNet) -> Verdict {
    super::not_applicable(&[
        super::Probe::Scale,
        super::Probe::Batch,
        super::Probe::Order,
        super::Probe::Errors,
        super::Probe::Named,
    ]);
    xor_net(RELU, "xor_relu_net", Activation::Relu, f, 0.0)
}

/// 0.5 for all four XOR points (the chapter's number); the main crate's fit on random data.
fn least_squares_fit_checks(
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<LinearFit>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order, super::Probe::Errors]);
    super::probe(super::Probe::Batch);
    let (x, y) = book::xor_data();
    let fit =
        super::attempt_ok_on(LINE, "least_squares_fit", &[("x", &x), ("y", &y)], || f(&x, &y))?;
    if fit.b == 0.0 {
        return Err(LINE.fail("your b is 0: is the column of ones missing from A = [x 1]?"));
    }
    compare(
        LINE,
        "predictions on XOR",
        &fit.predictions,
        &DMatrix::from_element(4, 1, 0.5),
        1e-9,
        &[],
    )?;
    let (x, y) = (random(40, 8, 3), random(41, 8, 1));
    let fit =
        super::attempt_ok_on(LINE, "least_squares_fit", &[("x", &x), ("y", &y)], || f(&x, &y))?;
    let want = book::least_squares_fit(&x, &y).map_err(|e| e.to_string())?;
    compare(LINE, "w", &fit.w, &want.w, 1e-8, &[])?;
    if (fit.b - want.b).abs() > 1e-8 {
        return Err(LINE.fail(format!("b: yours {:.6}, expected {:.6}", fit.b, want.b)));
    }
    compare(LINE, "predictions", &fit.predictions, &want.predictions, 1e-8, &[])
}

// ───────────── the judges: the sweep against the main crate, then the checks above ─────────────

use super::sweep::{Gen, Named, Tol, explained, outcome, sweep};

/// The sweep of a printed network: on each of the four XOR inputs, yours must give XOR's class
/// (within `within` of it for sigmoids; on the right side of 0.5 for ReLUs), as the main crate's
/// network does. Nothing else is asked, so nothing else is compared.
fn xor_sweep(sec: Section, exercise: &str, f: &impl Fn() -> PrintedNet, within: f64) -> Verdict {
    let (x, y) = book::xor_data();
    let cases: Vec<usize> = (0..x.nrows()).collect();
    let class = |net: &PrintedNet, i: usize| -> Result<f64> {
        let out = net.mlp()?.predict(&x.rows(i, 1).into_owned())?[(0, 0)];
        Ok(if within > 0.0 {
            if (out - y[(i, 0)]).abs() <= within { y[(i, 0)] } else { out }
        } else {
            f64::from(u8::from(out >= 0.5))
        })
    };
    sweep(sec, exercise, Tol::EXACT, &cases, |&i| outcome(class(&f(), i)), |&i| Ok(y[(i, 0)]))
}

/// **A sigmoid network for XOR**: its output on each of the four inputs within 0.01 of XOR;
/// then `xor_sigmoid_net_checks`.
pub fn xor_sigmoid_net(f: impl Fn() -> PrintedNet) -> Verdict {
    xor_sigmoid_net_judged(&f)
}

/// [`xor_sigmoid_net`]'s judge, compiled once here rather than in every test that calls it.
fn xor_sigmoid_net_judged(f: &dyn Fn() -> PrintedNet) -> Verdict {
    let found = xor_sweep(SIGMOID, "xor_sigmoid_net", &f, 0.01);
    explained(found, || xor_sigmoid_net_checks(f))
}

/// **A ReLU network for XOR**: each of the four inputs on XOR's side of 0.5; then
/// `xor_relu_net_checks`.
pub fn xor_relu_net(f: impl Fn() -> PrintedNet) -> Verdict {
    xor_relu_net_judged(&f)
}

/// [`xor_relu_net`]'s judge, compiled once here rather than in every test that calls it.
fn xor_relu_net_judged(f: &dyn Fn() -> PrintedNet) -> Verdict {
    let found = xor_sweep(RELU, "xor_relu_net", &f, 0.0);
    explained(found, || xor_relu_net_checks(f))
}

/// **Least squares**: N from D + 2 to 9 points, D from 1 to 3, unequal sizes, values at 0.1, 1
/// and 10 (the normal equations square the condition number of A, so two right solutions agree
/// to about 10⁻¹⁶ · κ(A)², well inside [`Tol::CHAIN`]'s 10⁻⁶); then `least_squares_fit_checks`.
pub fn least_squares_fit(f: impl Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<LinearFit>) -> Verdict {
    least_squares_fit_judged(&f)
}

/// [`least_squares_fit`]'s judge, compiled once here rather than in every test that calls it.
fn least_squares_fit_judged(
    f: &dyn Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<LinearFit>,
) -> Verdict {
    let mut draw = Gen::new("least_squares_fit");
    let mut cases = Vec::new();
    for (n, d) in [(3, 1), (4, 2), (9, 3), (6, 1), (5, 3)] {
        for s in [1.0, 0.1, 10.0] {
            cases.push((draw.matrix(n, d, s), draw.matrix(n, 1, s)));
        }
    }
    let named = |fit: LinearFit| {
        Named::of([("w", fit.w), ("b", DMatrix::from_element(1, 1, fit.b)), ("ŷ", fit.predictions)])
    };
    let found = sweep(
        LINE,
        "least_squares_fit",
        Tol::CHAIN,
        &cases,
        |(x, y)| outcome(f(x, y)).map(named),
        |(x, y)| outcome(book::least_squares_fit(x, y)).map(named),
    );
    explained(found, || least_squares_fit_checks(f))
}
