//! Chapter 4: XOR, the function no straight line can draw, and the two-layer networks that can.
//!
//! Four points, (0,0) ↦ 0, (0,1) ↦ 1, (1,0) ↦ 1, (1,1) ↦ 0. A linear model fitted by least squares
//! predicts 0.5 for all four; a hidden layer of two neurons bends the plane so that one line
//! separates the classes there. Built on chapter 3's [`Mlp`], dense layer and activations. The
//! prose is [`chapters/ch04_xor.md`](../../chapters/ch04_xor.md); the tests are `tests/ch04_xor.rs`.

use crate::ch03_mlp::{Activation, Layer, Mlp, TrainConfig, train};
use crate::errata::Erratum;
use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::ensure_finite;
use crate::plot::{Figure, Regions, ScatterChart, Series};
use crate::report::{Chapter, Walk, Worked};
use crate::rng::Rng;
use crate::sources::D3;
use crate::sources::THIS_CRATE;
use nalgebra::DMatrix;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// An output at or above this is read as class 1 (the document's rule for the ReLU network, and
/// σ(z) ≥ 0.5 ⇔ z ≥ 0 for the sigmoid one).
pub const THRESHOLD: f64 = 0.5;

/// The four inputs, one per row: (0,0), (0,1), (1,0), (1,1).
pub const XOR_INPUTS: [[f64; 2]; 4] = [[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]];
/// Their XOR: 0, 1, 1, 0.
pub const XOR_TARGETS: [f64; 4] = [0.0, 1.0, 1.0, 0.0];

/// The data set: x 4×2, y 4×1.
pub fn xor_data() -> (DMatrix<f64>, DMatrix<f64>) {
    let x = DMatrix::from_fn(4, 2, |r, c| XOR_INPUTS[r][c]);
    (x, DMatrix::from_column_slice(4, 1, &XOR_TARGETS))
}

// ───────────────────────────── the two printed networks ─────────────────────────────

/// A two-layer network as the document prints one: hidden h = f(W x + c) with one row of W per
/// hidden neuron, output f(w·h + b).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PrintedNet {
    /// W, one row per hidden neuron (the document's orientation).
    pub w_rows: [[f64; 2]; 2],
    /// c, the hidden biases.
    pub c: [f64; 2],
    /// w, the output weights.
    pub w_out: [f64; 2],
    /// b, the output bias.
    pub b_out: f64,
    /// The nonlinearity of both layers.
    pub activation: Activation,
}

/// The sigmoid network: W = [[20, 20], [−20, −20]], c = (−10, 30), w = (20, 20), b = −30.
/// Hidden neuron 1 is OR (on unless both inputs are 0), neuron 2 is NAND (on unless both are 1),
/// and the output is their AND.
pub const SIGMOID_NET: PrintedNet = PrintedNet {
    w_rows: [[20.0, 20.0], [-20.0, -20.0]],
    c: [-10.0, 30.0],
    w_out: [20.0, 20.0],
    b_out: -30.0,
    activation: Activation::Sigmoid,
};

/// The ReLU network: W = [[1, −1], [−1, 1]], c = (0, 0), w = (1, 1), b = −0.5, read with the
/// threshold 0.5. Hidden neuron 1 is ReLU(x₁ − x₂), neuron 2 is ReLU(x₂ − x₁).
pub const RELU_NET: PrintedNet = PrintedNet {
    w_rows: [[1.0, -1.0], [-1.0, 1.0]],
    c: [0.0, 0.0],
    w_out: [1.0, 1.0],
    b_out: -0.5,
    activation: Activation::Relu,
};

impl PrintedNet {
    /// As one of our MLPs. Our layers compute xW + b with one column per neuron, so the printed
    /// W (one row per neuron) enters transposed.
    pub fn mlp(&self) -> Result<Mlp<f64>> {
        let w = DMatrix::from_fn(2, 2, |i, j| self.w_rows[j][i]);
        self.mlp_with_hidden_weights(w)
    }

    /// The same numbers read the other way round, as x·W with the printed W untransposed (the
    /// convention of the document's ReLU code, `np.dot(x, W)`). For the symmetric ReLU W this is
    /// the same network; for the sigmoid W it is a different one.
    pub fn mlp_read_as_x_times_w(&self) -> Result<Mlp<f64>> {
        let w = DMatrix::from_fn(2, 2, |i, j| self.w_rows[i][j]);
        self.mlp_with_hidden_weights(w)
    }

    /// The printed network with the hidden layer's weights `w` (2×2, one column per neuron).
    fn mlp_with_hidden_weights(&self, w: DMatrix<f64>) -> Result<Mlp<f64>> {
        Mlp::from_layers(vec![
            Layer {
                w,
                b: DMatrix::from_row_slice(1, 2, &self.c),
                activation: Some(self.activation),
            },
            Layer {
                w: DMatrix::from_column_slice(2, 1, &self.w_out),
                b: DMatrix::from_element(1, 1, self.b_out),
                activation: Some(self.activation),
            },
        ])
    }
}

/// The hidden layer's pre-activations and activations (each N×2) of a two-layer MLP.
pub fn hidden_layer(mlp: &Mlp<f64>, x: &DMatrix<f64>) -> Result<(DMatrix<f64>, DMatrix<f64>)> {
    let t = mlp.forward(x)?;
    if t.inputs.len() < 2 {
        return Err(invalid("hidden_layer", "mlp", "needs at least two layers"));
    }
    Ok((t.pre[0].clone(), t.inputs[1].clone()))
}

/// The output layer's pre-activation (N×1) of a two-layer MLP.
pub fn output_pre_activation(mlp: &Mlp<f64>, x: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    let t = mlp.forward(x)?;
    Ok(t.pre[t.pre.len() - 1].clone())
}

/// Class 1 where the output is ≥ [`THRESHOLD`], one label per row of a one-column output.
pub fn classify(outputs: &DMatrix<f64>) -> Result<Vec<u8>> {
    if outputs.ncols() != 1 {
        return Err(shape_error("classify", "outputs", "N×1", shape_of(outputs)));
    }
    ensure_finite("classify", "outputs", outputs)?;
    Ok(outputs.iter().map(|&o| u8::from(o >= THRESHOLD)).collect())
}

/// The fraction of rows whose class by [`classify`] equals the 0/1 target. Errors on a shape
/// mismatch and on a target that is not 0 or 1 (NaN included).
pub fn accuracy(mlp: &Mlp<f64>, x: &DMatrix<f64>, y: &DMatrix<f64>) -> Result<f64> {
    let labels = classify(&mlp.predict(x)?)?;
    if y.shape() != (labels.len(), 1) {
        return Err(shape_error("accuracy", "y", format!("{}×1", labels.len()), shape_of(y)));
    }
    if let Some(r) = y.iter().position(|&t| t != 0.0 && t != 1.0) {
        return Err(invalid("accuracy", "y", format!("targets must be 0 or 1; y[{r}] = {}", y[r])));
    }
    let right = labels.iter().zip(y.iter()).filter(|&(&l, &t)| f64::from(l) == t).count();
    Ok(right as f64 / labels.len() as f64)
}

// ───────────────────────────── why a line cannot ─────────────────────────────

/// A least-squares linear fit ŷ = x·w + b.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearFit {
    /// w, one weight per input column (D×1).
    pub w: DMatrix<f64>,
    /// b.
    pub b: f64,
    /// ŷ for every row (N×1).
    pub predictions: DMatrix<f64>,
}

/// The least-squares fit of y by x·w + b, from the normal equations AᵀA θ = Aᵀy with A = [x 1].
/// Errors on shape mismatches, an empty batch, NaN, or a singular AᵀA (too few distinct points).
pub fn least_squares_fit(x: &DMatrix<f64>, y: &DMatrix<f64>) -> Result<LinearFit> {
    const OP: &str = "least_squares_fit";
    if x.nrows() == 0 {
        return Err(Error::Empty { op: OP, arg: "x" });
    }
    if y.shape() != (x.nrows(), 1) {
        return Err(shape_error(
            OP,
            "y",
            format!("{}×1 (one target per row of x)", x.nrows()),
            shape_of(y),
        ));
    }
    ensure_finite(OP, "x", x)?;
    ensure_finite(OP, "y", y)?;
    let d = x.ncols();
    let a = DMatrix::from_fn(x.nrows(), d + 1, |r, c| if c < d { x[(r, c)] } else { 1.0 });
    let ata = crate::matmul::matmul_tn(&a, &a)?;
    let aty = crate::matmul::matmul_tn(&a, y)?;
    let theta = ata
        .cholesky()
        .ok_or_else(|| {
            invalid(OP, "x", "AᵀA is singular: the points do not determine a unique fit")
        })?
        .solve(&aty);
    let predictions = crate::matmul::matmul(&a, &theta)?;
    Ok(LinearFit { w: theta.rows(0, d).into_owned(), b: theta[(d, 0)], predictions })
}

// ───────────────────────────── a learned 2-2-1 network ─────────────────────────────

/// The seed of the learned network's starting weights.
pub const LEARN_SEED: u64 = 1;
/// How it trains: full-batch gradient descent on the squared error (chapter 3's cost).
pub const LEARN_TRAIN: TrainConfig =
    TrainConfig { learning_rate: 2.0, epochs: 4000, batch_size: 4, seed: 0 };
/// The bias spread of the starting weights.
pub const LEARN_BIAS_STD: f64 = 1.0;
/// Seeds in the survey of how often training fails.
pub const SURVEY_SEEDS: Range<u64> = 0..200;

/// A 2-2-1 sigmoid network learned from `seed`.
#[derive(Clone, Debug)]
pub struct Learned {
    /// The trained network.
    pub mlp: Mlp<f64>,
    /// The cost before training and after each epoch.
    pub costs: Vec<f64>,
    /// Its accuracy on the four points.
    pub accuracy: f64,
}

/// Trains a 2-2-1 network with sigmoid hidden and output neurons from random weights drawn from
/// `seed`, by chapter 3's backprop and gradient descent.
pub fn learn_xor(seed: u64, config: TrainConfig) -> Result<Learned> {
    let (x, y) = xor_data();
    let mut mlp = Mlp::random(
        &[2, 2, 1],
        Activation::Sigmoid,
        Some(Activation::Sigmoid),
        LEARN_BIAS_STD,
        &mut Rng::new(seed),
    )?;
    let costs = train(&mut mlp, &x, &y, config)?;
    let accuracy = accuracy(&mlp, &x, &y)?;
    Ok(Learned { mlp, costs, accuracy })
}

/// How many seeds of a range fail to reach 100 %.
#[derive(Clone, Debug, PartialEq)]
pub struct SeedSurvey {
    /// Seeds tried.
    pub tried: usize,
    /// Those that did not reach 100 % accuracy.
    pub failures: Vec<u64>,
    /// The final cost of each failure, in the same order (about 1/8 when two points are stuck at
    /// an output of 0.5, about 1/6 when three are stuck at their average 1/3 or 2/3).
    pub failure_costs: Vec<f64>,
}

impl SeedSurvey {
    /// failures / tried.
    pub fn failure_rate(&self) -> f64 {
        self.failures.len() as f64 / self.tried.max(1) as f64
    }

    /// How many failures ended with a cost within 0.01 of `level` (e.g. 1/8 or 1/6).
    pub fn stuck_near(&self, level: f64) -> usize {
        self.failure_costs.iter().filter(|c| (*c - level).abs() < 0.01).count()
    }
}

/// Trains from every seed in `seeds` with `config` and records which fail.
pub fn seed_survey(seeds: Range<u64>, config: TrainConfig) -> Result<SeedSurvey> {
    let (mut failures, mut failure_costs) = (Vec::new(), Vec::new());
    let tried = seeds.clone().count();
    for s in seeds {
        let l = learn_xor(s, config)?;
        if l.accuracy < 1.0 {
            failures.push(s);
            failure_costs.push(l.costs[l.costs.len() - 1]);
        }
    }
    Ok(SeedSurvey { tried, failures, failure_costs })
}

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
                "accuracy of the 2-2-1 sigmoid net learned from seed {LEARN_SEED} ({} epochs, α = {})",
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
        "of the failures, {} end near cost 1/8 (two points stuck at 0.5) and {} near 1/6 (three stuck at 1/3 or 2/3)",
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
