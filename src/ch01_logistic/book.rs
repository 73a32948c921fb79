//! What the book shows of chapter 1: the errata, the worked numbers, the walk-through and the
//! figures, and the chapter's entry in the book.

use super::{
    LEARNING_RATE, bce, bce_from_logit, chapter_model, classify, d_loss_d_yhat, d_yhat_d_z,
    sample_gradient, sigmoid, sigmoid_derivative, smoothness_bound,
};
use crate::errata::{Erratum, Kind};
use crate::error::Result;
use crate::plot::{Figure, LineChart, LogAxes, Regions, ScatterChart, Series};
use crate::report::{Chapter, Walk, Worked};
use crate::sources::D0;
use nalgebra::{DMatrix, DVector};
use std::path::{Path, PathBuf};

// ───────────────────────────── errata, worked numbers ─────────────────────────────

/// This chapter's rows of the errata register.
pub const ERRATA: &[Erratum] = &[
    Erratum {
        document: D0,
        section: "Deriving BCE, factor ①",
        printed: "∂L/∂ŷ = (ŷ − y)/(y(1 − ŷ))",
        correct: "∂L/∂ŷ = (ŷ − y)/(ŷ(1 − ŷ))",
        why: "Putting −(y/ŷ − (1−y)/(1−ŷ)) over the common denominator ŷ(1−ŷ) gives \
            (ŷ − y)/(ŷ(1−ŷ)); the printed denominator has y where ŷ belongs \
            (it would divide by zero for every y = 0 sample).",
        kind: Kind::Erratum,
        tests: &["tests/ch01_logistic.rs::factor_1_has_denominator_yhat_times_one_minus_yhat"],
    },
    Erratum {
        document: D0,
        section: "Deriving BCE, factor ③ and the result",
        printed: "∂z/∂w = z̄, so ∂J/∂w = z̄(ŷ − y), batch (1/N)Σ(ŷᵢ − yᵢ)zᵢ",
        correct: "∂z/∂w = x̄, so ∂ℓ/∂w = x̄(ŷ − y), batch (1/N)Σ(ŷᵢ − yᵢ)x̄ᵢ",
        why: "z = wᵀx + b is linear in w with coefficient vector x; z itself is a scalar and \
            cannot be the gradient of a scalar with respect to the vector w.",
        kind: Kind::Erratum,
        tests: &["tests/ch01_logistic.rs::factor_3_is_the_input_x_not_z"],
    },
    Erratum {
        document: D0,
        section: "Deriving BCE, log of the likelihood",
        printed: "log L = Σ log(yᵢ ŷᵢ (1 − ŷᵢ)^{1−yᵢ})",
        correct: "log L = Σ log(ŷᵢ^{yᵢ} (1 − ŷᵢ)^{1−yᵢ})",
        why: "The exponent yᵢ of ŷᵢ became a factor: for yᵢ = 0 the printed term is log 0 = −∞ \
            instead of log(1 − ŷᵢ). The next printed line is right again.",
        kind: Kind::Erratum,
        tests: &["tests/ch01_logistic.rs::log_likelihood_is_minus_the_summed_loss"],
    },
];

/// The chapter's worked numbers, recomputed.
pub fn worked() -> Result<Vec<Worked>> {
    let switch = |s: f64| sigmoid(s - 10.0);
    let y_hat = 0.8_f64;
    Ok(vec![
        Worked::number(
            "sigmoid_of_0_is_the_0_5_threshold",
            D0,
            "σ(0), the decision threshold",
            "0.5",
            sigmoid(0.0),
        ),
        Worked::number(
            "bias_minus_10_switches_on_at_weighted_sum_10",
            D0,
            "σ(weighted sum − 10) at weighted sum 10",
            "0.5",
            switch(10.0),
        ),
        Worked::text(
            "bias_minus_10_switches_on_at_weighted_sum_10",
            D0,
            "σ(s − 10) > 0.5 exactly when s > 10 (checked at s = 9.99, 10.01)",
            "only when weighted sum > 10",
            if switch(9.99) < 0.5 && switch(10.01) > 0.5 {
                "only when weighted sum > 10"
            } else {
                "no"
            },
        ),
        Worked::erratum(
            "factor_1_has_denominator_yhat_times_one_minus_yhat",
            D0,
            "factor ① at y = 0, ŷ = 0.8: (ŷ − y)/(y(1 − ŷ)) as printed vs (ŷ − y)/(ŷ(1 − ŷ))",
            "inf",
            format!("{:.1}", d_loss_d_yhat(0.0, y_hat)),
        ),
    ])
}

// ───────────────────────────── walk-through and plots ─────────────────────────────

/// The chapter in the order the document derives it.
pub fn walk(out: &mut Walk) -> Result<()> {
    out.step("1. The sigmoid squashes any z into (0, 1)")?;
    for z in [-1000.0, -10.0, -1.0, 0.0, 1.0, 10.0, 1000.0] {
        out.scalar(&format!("σ({z})"), sigmoid(z))?;
    }
    out.step("2. A bias of −10 makes the neuron switch on at weighted sum 10")?;
    for s in [5.0, 9.0, 10.0, 11.0, 15.0] {
        out.scalar(&format!("σ({s} − 10)"), sigmoid(s - 10.0))?;
    }
    out.step("3. One sample: x = (1, 2), w = (0.5, −0.25), b = 0.1, y = 1")?;
    let w = DVector::from_vec(vec![0.5, -0.25]);
    let x = DVector::from_vec(vec![1.0, 2.0]);
    let (b, y) = (0.1, 1.0);
    let z = w.dot(&x) + b;
    let y_hat = sigmoid(z);
    out.scalar("z = wᵀx + b", z)?;
    out.scalar("ŷ = σ(z)", y_hat)?;
    out.scalar("ℓ = −[y ln ŷ + (1−y) ln(1−ŷ)]", bce(y, y_hat))?;
    out.scalar("ℓ from the logit", bce_from_logit(y, z))?;
    out.step("4. The three chain-rule factors and their product")?;
    out.scalar("① ∂ℓ/∂ŷ = (ŷ − y)/(ŷ(1 − ŷ))", d_loss_d_yhat(y, y_hat))?;
    out.scalar("② ∂ŷ/∂z = ŷ(1 − ŷ)", d_yhat_d_z(y_hat))?;
    out.matrix("③ ∂z/∂w = x", &DMatrix::from_row_slice(1, 2, x.as_slice()))?;
    let g = sample_gradient(&w, b, &x, y)?;
    out.matrix("① · ② · ③ = (ŷ − y)x", &DMatrix::from_row_slice(1, 2, g.as_slice()))?;
    out.step("5. Gradient descent on two clouds of points")?;
    let (xs, ys, t) = chapter_model()?;
    out.scalar("smoothness L of the mean BCE", smoothness_bound(&xs))?;
    out.scalar("α (must be ≤ 1/L)", LEARNING_RATE)?;
    out.scalar("loss before training", t.losses[0])?;
    out.scalar("loss after training", *t.losses.last().unwrap_or(&f64::NAN))?;
    out.matrix("learned w", &DMatrix::from_row_slice(1, 2, t.w.as_slice()))?;
    out.scalar("learned b", t.b)?;
    out.scalar("training accuracy", t.accuracy(&xs, &ys)?)?;
    Ok(())
}

/// The chapter's figures as data: (file stem, figure).
pub fn figures() -> Result<Vec<(String, Figure)>> {
    let grid: Vec<f64> = (0..=200).map(|i| -8.0 + 16.0 * i as f64 / 200.0).collect();
    let sig = Figure::Line(LineChart {
        title: "The sigmoid and its derivative".into(),
        x_label: "z".into(),
        y_label: "value".into(),
        series: vec![
            Series::new("σ(z)", grid.iter().map(|&z| (z, sigmoid(z))).collect()),
            Series::new(
                "σ′(z) = σ(1 − σ)",
                grid.iter().map(|&z| (z, sigmoid_derivative(z))).collect(),
            ),
        ],
        markers: false,
    });
    let ps: Vec<f64> = (1..200).map(|i| i as f64 / 200.0).collect();
    let bce_fig = Figure::Line(LineChart {
        title: "Binary cross-entropy against the predicted probability".into(),
        x_label: "ŷ = P(y = 1 | x)".into(),
        y_label: "loss ℓ(y, ŷ)".into(),
        series: vec![
            Series::new("y = 1: −ln ŷ", ps.iter().map(|&p| (p, bce(1.0, p))).collect()),
            Series::new("y = 0: −ln(1 − ŷ)", ps.iter().map(|&p| (p, bce(0.0, p))).collect()),
        ],
        markers: false,
    });
    let (x, y, t) = chapter_model()?;
    // Most of the fall happens in the first ten steps and the tail is long: a log step axis
    // gives both their room. Point s is the loss after s updates; the loss before the first
    // (s = 0, which a log axis cannot place) is named in the legend.
    let loss_fig = Figure::LogLine(
        LineChart {
            title: format!("Training loss, full-batch gradient descent, α = {LEARNING_RATE}"),
            x_label: "step (log scale)".into(),
            y_label: "mean BCE".into(),
            series: vec![Series::new(
                format!("training loss (before training {:.3})", t.losses[0]),
                t.losses.iter().enumerate().skip(1).map(|(i, &l)| (i as f64, l)).collect(),
            )],
            markers: false,
        },
        LogAxes::X,
    );
    let mut classes = vec![Series::new("class 0", vec![]), Series::new("class 1", vec![])];
    for r in 0..x.nrows() {
        classes[y[r] as usize].points.push((x[(r, 0)], x[(r, 1)]));
    }
    let (w, b) = (t.w.clone(), t.b);
    let predict = |px: f64, py: f64| classify(sigmoid(w[0] * px + w[1] * py + b)) as usize;
    let (x0, x1) = (-6.0, 6.0);
    // The boundary wᵀx + b = 0, i.e. x₂ = −(w₁x₁ + b)/w₂.
    let boundary = if w[1].abs() > 1e-12 {
        vec![(x0, -(w[0] * x0 + b) / w[1]), (x1, -(w[0] * x1 + b) / w[1])]
    } else {
        vec![]
    };
    let scatter = Figure::Scatter(ScatterChart {
        title: "Two classes and the learned boundary σ(wᵀx + b) = 0.5".into(),
        x_label: "x₁".into(),
        y_label: "x₂".into(),
        classes,
        regions: Some(Regions::evaluate((x0, x1), (-5.0, 5.0), 120, 100, predict)),
        lines: vec![Series::new("wᵀx + b = 0", boundary)],
    });
    Ok(vec![
        ("ch01_sigmoid".into(), sig),
        ("ch01_bce".into(), bce_fig),
        ("ch01_loss".into(), loss_fig),
        ("ch01_boundary".into(), scatter),
    ])
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    crate::plot::save_all(&figures()?, dir)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter = Chapter {
    number: 1,
    stem: "ch01_logistic",
    title: "Logistic regression and binary cross-entropy",
    worked,
    walk,
    plots,
    errata: ERRATA,
};
