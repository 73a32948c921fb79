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
pub fn xor_sigmoid_net(f: impl Fn() -> PrintedNet) -> Verdict {
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
pub fn xor_relu_net(f: impl Fn() -> PrintedNet) -> Verdict {
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
pub fn least_squares_fit(f: impl Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<LinearFit>) -> Verdict {
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
