//! What the book shows of chapter 4: the (empty) errata, the worked numbers, the walk-through
//! and the figures, and the chapter's entry in the book.

use super::{
    LEARN_SEED, LEARN_TRAIN, RELU_NET, SIGMOID_NET, SURVEY_SEEDS, THRESHOLD, XOR_TARGETS, classify,
    hidden_layer, learn_xor, least_squares_fit, output_pre_activation, seed_survey, xor_data,
};
use crate::ch03_mlp::{Activation, Mlp};
use crate::errata::Erratum;
use crate::error::Result;
use crate::plot::{Figure, Regions, ScatterChart, Series};
use crate::report::{Chapter, Walk, Worked};
use crate::sources::{D3, THIS_CRATE};
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};

// ───────────────────────────── errata, worked numbers ─────────────────────────────

/// This chapter's rows of the errata register (none: both worked networks compute what the
/// document says they compute).
pub const ERRATA: &[Erratum] = &[];

fn labels_text(labels: &[u8]) -> String {
    labels.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", ")
}

/// The chapter's worked numbers, recomputed.
pub fn worked() -> Result<Vec<Worked>> {
    let (x, _) = xor_data();
    let sig = SIGMOID_NET.mlp()?;
    let relu = RELU_NET.mlp()?;
    let (sz, sh) = hidden_layer(&sig, &x)?;
    let so = output_pre_activation(&sig, &x)?;
    let sy = sig.predict(&x)?;
    let (_, rh) = hidden_layer(&relu, &x)?;
    let ry = relu.predict(&x)?;
    let learned = learn_xor(LEARN_SEED, LEARN_TRAIN)?;
    let survey = seed_survey(SURVEY_SEEDS, LEARN_TRAIN)?;
    let targets = labels_text(&XOR_TARGETS.map(|t| t as u8));
    Ok(vec![
        Worked::text(
            "xor_table",
            D3,
            "XOR of (0,0), (0,1), (1,0), (1,1)",
            "0, 1, 1, 0",
            targets.clone(),
        ),
        Worked::number(
            "sigmoid_net_at_0_0",
            D3,
            "sigmoid net, x = (0,0): z₁ = 0×20 + 0×20 − 10",
            "-10",
            sz[(0, 0)],
        ),
        Worked::number(
            "sigmoid_net_at_0_0",
            D3,
            "sigmoid net, x = (0,0): h₁ = σ(−10) ≈ 0",
            "0",
            sh[(0, 0)],
        ),
        Worked::number(
            "sigmoid_net_at_0_0",
            D3,
            "sigmoid net, x = (0,0): z₂ = 0×(−20) + 0×(−20) + 30",
            "30",
            sz[(0, 1)],
        ),
        Worked::number(
            "sigmoid_net_at_0_0",
            D3,
            "sigmoid net, x = (0,0): h₂ = σ(30) ≈ 1",
            "1",
            sh[(0, 1)],
        ),
        Worked::number(
            "sigmoid_net_at_0_0",
            D3,
            "sigmoid net, x = (0,0): output argument h₁×20 + h₂×20 − 30",
            "-10",
            so[(0, 0)],
        ),
        Worked::number(
            "sigmoid_net_at_0_0",
            D3,
            "sigmoid net, x = (0,0): y = σ(−10) ≈ 0",
            "0",
            sy[(0, 0)],
        ),
        Worked::text(
            "sigmoid_net_computes_xor",
            D3,
            "sigmoid net on all four inputs, y ≥ 0.5 ↦ 1",
            &targets,
            labels_text(&classify(&sy)?),
        ),
        Worked::number(
            "relu_net_at_0_0",
            D3,
            "ReLU net, x = (0,0): h₁ = ReLU(0×1 + 0×(−1) + 0)",
            "0",
            rh[(0, 0)],
        ),
        Worked::number(
            "relu_net_at_0_0",
            D3,
            "ReLU net, x = (0,0): h₂ = ReLU(0×(−1) + 0×1 + 0)",
            "0",
            rh[(0, 1)],
        ),
        Worked::number(
            "relu_net_at_0_0",
            D3,
            "ReLU net, x = (0,0): y = ReLU(0×1 + 0×1 − 0.5)",
            "0",
            ry[(0, 0)],
        ),
        Worked::number(
            "relu_net_at_0_1",
            D3,
            "ReLU net, x = (0,1): h₁ = ReLU(0×1 + 1×(−1) + 0)",
            "0",
            rh[(1, 0)],
        ),
        Worked::number(
            "relu_net_at_0_1",
            D3,
            "ReLU net, x = (0,1): h₂ = ReLU(0×(−1) + 1×1 + 0)",
            "1",
            rh[(1, 1)],
        ),
        Worked::number(
            "relu_net_at_0_1",
            D3,
            "ReLU net, x = (0,1): y = ReLU(0×1 + 1×1 − 0.5)",
            "0.5",
            ry[(1, 0)],
        ),
        Worked::number(
            "relu_net_at_0_1",
            D3,
            "ReLU net, x = (0,1): class after the 0.5 threshold",
            "1",
            f64::from(classify(&ry)?[1]),
        ),
        Worked::text(
            "relu_net_computes_xor",
            D3,
            "ReLU net on all four inputs, y ≥ 0.5 ↦ 1",
            &targets,
            labels_text(&classify(&ry)?),
        ),
        Worked::number(
            "learned_2_2_1_net_reaches_100_percent",
            THIS_CRATE,
            format!(
                "accuracy of the 2-2-1 sigmoid net learned from seed {LEARN_SEED} \
                    ({} epochs, α = {})",
                LEARN_TRAIN.epochs, LEARN_TRAIN.learning_rate
            ),
            "1.00",
            learned.accuracy,
        ),
        Worked::number(
            "other_seeds_fail_at_the_reported_rate",
            THIS_CRATE,
            format!(
                "share of seeds {}..{} that do not reach 100 % (same schedule)",
                SURVEY_SEEDS.start, SURVEY_SEEDS.end
            ),
            "0.24",
            survey.failure_rate(),
        ),
    ])
}

// ───────────────────────────── walk-through and plots ─────────────────────────────

/// The chapter in the order the document derives it.
pub fn walk(out: &mut Walk) -> Result<()> {
    let (x, y) = xor_data();
    out.step("1. The XOR data")?;
    out.matrix("x", &x)?;
    out.matrix("y = XOR(x₁, x₂)", &y)?;
    out.step("2. No line: the least-squares fit ŷ = x·w + b")?;
    let fit = least_squares_fit(&x, &y)?;
    out.matrix("w", &fit.w)?;
    out.scalar("b", fit.b)?;
    out.matrix("ŷ", &fit.predictions)?;
    for (name, net) in [
        ("3. The document's sigmoid network", SIGMOID_NET),
        ("4. The document's ReLU network", RELU_NET),
    ] {
        out.step(name)?;
        let mlp = net.mlp()?;
        let (z, h) = hidden_layer(&mlp, &x)?;
        out.matrix("hidden pre-activations z = xWᵀ + c", &z)?;
        out.matrix("hidden h = f(z)", &h)?;
        out.matrix("output argument h·w + b", &output_pre_activation(&mlp, &x)?)?;
        out.matrix("output", &mlp.predict(&x)?)?;
        out.say(&format!("classes (≥ 0.5 ↦ 1): {}", labels_text(&classify(&mlp.predict(&x)?)?)))?;
    }
    out.step("5. The sigmoid W read as x·W instead of W·x")?;
    let flipped = SIGMOID_NET.mlp_read_as_x_times_w()?;
    out.say(&format!(
        "classes: {} (XOR is 0, 1, 1, 0)",
        labels_text(&classify(&flipped.predict(&x)?)?)
    ))?;
    out.step(&format!("6. A 2-2-1 sigmoid network learned from seed {LEARN_SEED}"))?;
    let l = learn_xor(LEARN_SEED, LEARN_TRAIN)?;
    for (i, layer) in l.mlp.layers().iter().enumerate() {
        out.matrix(&format!("layer {} W", i + 1), &layer.w)?;
        out.matrix(&format!("layer {} b", i + 1), &layer.b)?;
    }
    out.scalar("cost before", l.costs[0])?;
    out.scalar("cost after", l.costs[l.costs.len() - 1])?;
    out.matrix("outputs", &l.mlp.predict(&x)?)?;
    out.scalar("accuracy", l.accuracy)?;
    let survey = seed_survey(SURVEY_SEEDS, LEARN_TRAIN)?;
    out.say(&format!(
        "seeds {}..{}: {} of {} fail to reach 100 % ({:.1} %): {:?}",
        SURVEY_SEEDS.start,
        SURVEY_SEEDS.end,
        survey.failures.len(),
        survey.tried,
        100.0 * survey.failure_rate(),
        survey.failures
    ))?;
    out.say(&format!(
        "of the failures, {} end near cost 1/8 (two points stuck at 0.5) and {} near 1/6 \
            (three stuck at 1/3 or 2/3)",
        survey.stuck_near(0.125),
        survey.stuck_near(1.0 / 6.0)
    ))?;
    Ok(())
}

fn xor_classes(points: &DMatrix<f64>) -> Vec<Series> {
    let mut classes = vec![Series::new("XOR = 0", vec![]), Series::new("XOR = 1", vec![])];
    for r in 0..4 {
        classes[XOR_TARGETS[r] as usize].points.push((points[(r, 0)], points[(r, 1)]));
    }
    classes
}

fn regions_of(mlp: &Mlp<f64>) -> Regions {
    Regions::evaluate((-0.5, 1.5), (-0.5, 1.5), 120, 120, |a, b| {
        mlp.predict(&DMatrix::from_row_slice(1, 2, &[a, b]))
            .map_or(0, |o| usize::from(o[(0, 0)] >= THRESHOLD))
    })
}

/// The line in hidden space where the output layer's argument reaches its threshold: for a
/// sigmoid output z = 0 (σ = 0.5), for a ReLU output z = 0.5. Two points spanning [lo, hi].
fn hidden_boundary(mlp: &Mlp<f64>, lo: f64, hi: f64) -> Vec<(f64, f64)> {
    let out = &mlp.layers()[1];
    let (w1, w2, b) = (out.w[(0, 0)], out.w[(1, 0)], out.b[(0, 0)]);
    let level = if out.activation == Some(Activation::Relu) { THRESHOLD } else { 0.0 };
    // w₁h₁ + w₂h₂ + b = level.
    if w2.abs() > 1e-12 {
        vec![(lo, (level - b - w1 * lo) / w2), (hi, (level - b - w1 * hi) / w2)]
    } else if w1.abs() > 1e-12 {
        vec![((level - b) / w1, lo), ((level - b) / w1, hi)]
    } else {
        vec![]
    }
}

fn hidden_figure(title: &str, mlp: &Mlp<f64>) -> Result<Figure> {
    let (x, _) = xor_data();
    let (_, h) = hidden_layer(mlp, &x)?;
    let (lo, hi) = (h.min().min(0.0) - 0.25, h.max().max(1.0) + 0.25);
    let out = mlp.layers()[1].clone();
    let regions = Regions::evaluate((lo, hi), (lo, hi), 120, 120, |a, b| {
        let z = out.w[(0, 0)] * a + out.w[(1, 0)] * b + out.b[(0, 0)];
        let o = out.activation.map_or(z, |f| f.apply(z));
        usize::from(o >= THRESHOLD)
    });
    Ok(Figure::Scatter(ScatterChart {
        title: title.into(),
        x_label: "h₁".into(),
        y_label: "h₂".into(),
        classes: xor_classes(&h),
        regions: Some(regions),
        lines: vec![Series::new("output threshold", hidden_boundary(mlp, lo, hi))],
    }))
}

/// The chapter's figures as data: (file stem, figure).
pub fn figures() -> Result<Vec<(String, Figure)>> {
    let (x, _) = xor_data();
    let sig = SIGMOID_NET.mlp()?;
    let relu = RELU_NET.mlp()?;
    let learned = learn_xor(LEARN_SEED, LEARN_TRAIN)?;
    let scatter = |title: &str, regions: Option<Regions>| {
        Figure::Scatter(ScatterChart {
            title: title.into(),
            x_label: "x₁".into(),
            y_label: "x₂".into(),
            classes: xor_classes(&x),
            regions,
            lines: vec![],
        })
    };
    Ok(vec![
        (
            "ch04_xor_points".into(),
            scatter("XOR: no straight line separates the two classes", None),
        ),
        (
            "ch04_sigmoid_regions".into(),
            scatter("Decision regions of the document's sigmoid net", Some(regions_of(&sig))),
        ),
        (
            "ch04_relu_regions".into(),
            scatter(
                "Decision regions of the document's ReLU net (y ≥ 0.5)",
                Some(regions_of(&relu)),
            ),
        ),
        (
            "ch04_learned_regions".into(),
            scatter(
                &format!("Decision regions of the 2-2-1 net learned from seed {LEARN_SEED}"),
                Some(regions_of(&learned.mlp)),
            ),
        ),
        (
            "ch04_sigmoid_hidden".into(),
            hidden_figure("Sigmoid net: the four points in its hidden layer", &sig)?,
        ),
        (
            "ch04_relu_hidden".into(),
            hidden_figure("ReLU net: the four points in its hidden layer", &relu)?,
        ),
        (
            "ch04_learned_hidden".into(),
            hidden_figure("Learned net: the four points in its hidden layer", &learned.mlp)?,
        ),
    ])
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    crate::plot::save_all(&figures()?, dir)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter = Chapter {
    number: 4,
    stem: "ch04_xor",
    title: "XOR: why a hidden layer is needed",
    worked,
    walk,
    plots,
    errata: ERRATA,
};
