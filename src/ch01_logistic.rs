//! Chapter 1: logistic regression and binary cross-entropy.
//!
//! One neuron: z = wᵀx + b, ŷ = σ(z) = 1/(1 + e^{−z}) = P(y = 1 | x), trained by gradient descent on
//! the binary cross-entropy ℓ = −[y ln ŷ + (1 − y) ln(1 − ŷ)]. The prose is
//! [`chapters/ch01_logistic.md`](../../chapters/ch01_logistic.md); the tests are
//! `tests/ch01_logistic.rs`.
//!
//! Conventions (as everywhere in the crate): a batch is an N×D matrix `x` with one sample per
//! row; weights `w` and labels `y` are vectors.

use crate::errata::Erratum;
use crate::error::{Error, Result, invalid, shape_error};
use crate::float::{Float, ensure_finite};
use crate::plot::{Figure, LineChart, Regions, ScatterChart, Series};
use crate::report::{Chapter, Walk, Worked};
use crate::rng::Rng;
use crate::sources::D0;
use nalgebra::{DMatrix, DVector};
use std::path::{Path, PathBuf};

/// The decision threshold: predict class 1 when σ(z) ≥ 0.5, i.e. when z ≥ 0.
pub const THRESHOLD: f64 = 0.5;

// ───────────────────────────── the sigmoid ─────────────────────────────

/// σ(z) = 1/(1 + e^{−z}), computed without overflow for any z: for z ≥ 0 as 1/(1 + e^{−z}),
/// for z < 0 as e^{z}/(1 + e^{z}), so the exponential never exceeds 1.
pub fn sigmoid<T: Float>(z: T) -> T {
    if z >= T::zero() {
        T::one() / (T::one() + (-z).exp())
    } else {
        let e = z.exp();
        e / (T::one() + e)
    }
}

/// σ′(z) = σ(z)(1 − σ(z)).
pub fn sigmoid_derivative<T: Float>(z: T) -> T {
    let s = sigmoid(z);
    s * (T::one() - s)
}

/// The 0.5 rule: class 1 when σ(z) ≥ 0.5.
pub fn classify<T: Float>(probability: T) -> u8 {
    u8::from(probability >= T::of(THRESHOLD))
}

// ───────────────────────────── input checks ─────────────────────────────

fn check_batch<T: Float>(op: &'static str, w: &DVector<T>, x: &DMatrix<T>) -> Result<()> {
    if x.nrows() == 0 {
        return Err(Error::Empty { op, arg: "x (the batch)" });
    }
    if w.len() != x.ncols() {
        return Err(shape_error(
            op,
            "w and x",
            format!("w of length {} (one weight per column of x)", x.ncols()),
            format!("w of length {}, x {}×{}", w.len(), x.nrows(), x.ncols()),
        ));
    }
    ensure_finite(op, "x", x)?;
    if let Some(i) = w.iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFinite { op, arg: "w", at: format!("index {i}") });
    }
    Ok(())
}

fn check_labels<T: Float>(op: &'static str, y: &DVector<T>, n: usize) -> Result<()> {
    if y.len() != n {
        return Err(shape_error(
            op,
            "y and x",
            format!("{n} labels (one per row of x)"),
            format!("{} labels", y.len()),
        ));
    }
    if let Some(i) = y.iter().position(|&v| v != T::zero() && v != T::one()) {
        return Err(invalid(op, "y", format!("labels must be 0 or 1; y[{i}] = {}", y[i])));
    }
    Ok(())
}

// ───────────────────────────── forward / backward ─────────────────────────────

/// z = Xw + b: one logit per row. Shapes: x N×D, w D, result N.
pub fn logits_forward<T: Float>(w: &DVector<T>, b: T, x: &DMatrix<T>) -> Result<DVector<T>> {
    check_batch("logits_forward", w, x)?;
    let wm = DMatrix::from_column_slice(w.len(), 1, w.as_slice());
    let z = crate::matmul::matmul(x, &wm)?;
    Ok(DVector::from_iterator(z.nrows(), z.iter().map(|&v| v + b)))
}

/// Gradients of [`logits_forward`].
#[derive(Clone, Debug)]
pub struct LogitGrads<T: Float> {
    /// ∂L/∂x = ∂L/∂z · wᵀ, N×D.
    pub d_x: DMatrix<T>,
    /// ∂L/∂w = Xᵀ · ∂L/∂z, length D.
    pub d_w: DVector<T>,
    /// ∂L/∂b = Σᵢ ∂L/∂zᵢ.
    pub d_b: T,
}

/// Backward of [`logits_forward`]: from ∂L/∂z (length N) to the gradients of x, w and b.
pub fn logits_backward<T: Float>(
    x: &DMatrix<T>,
    w: &DVector<T>,
    d_z: &DVector<T>,
) -> Result<LogitGrads<T>> {
    if d_z.len() != x.nrows() || w.len() != x.ncols() {
        return Err(shape_error(
            "logits_backward",
            "x, w and d_z",
            format!("w of length {} and d_z of length {}", x.ncols(), x.nrows()),
            format!("x {}×{}, w {}, d_z {}", x.nrows(), x.ncols(), w.len(), d_z.len()),
        ));
    }
    let dzm = DMatrix::from_column_slice(d_z.len(), 1, d_z.as_slice());
    let wm = DMatrix::from_column_slice(w.len(), 1, w.as_slice());
    let d_w = crate::matmul::matmul_tn(x, &dzm)?; // z = Xw + b ⇒ ∂L/∂w = Xᵀ ∂L/∂z
    let d_x = crate::matmul::matmul_nt(&dzm, &wm)?; // z = Xw + b ⇒ ∂L/∂X = ∂L/∂z wᵀ
    let d_b = d_z.iter().copied().sum(); //             z = Xw + b ⇒ ∂L/∂b = Σᵢ ∂L/∂zᵢ
    Ok(LogitGrads { d_x, d_w: DVector::from_column_slice(d_w.as_slice()), d_b })
}

/// ŷ = σ(Xw + b) for every row of x.
pub fn predict_proba<T: Float>(w: &DVector<T>, b: T, x: &DMatrix<T>) -> Result<DVector<T>> {
    Ok(logits_forward(w, b, x)?.map(sigmoid))
}

// ───────────────────────────── binary cross-entropy ─────────────────────────────

/// ℓ(y, ŷ) = −[y ln ŷ + (1 − y) ln(1 − ŷ)] from a probability. Exact at the printed formula but
/// infinite when ŷ reaches 0 or 1 exactly; prefer [`bce_from_logit`].
pub fn bce<T: Float>(y: T, y_hat: T) -> T {
    -(y * y_hat.ln() + (T::one() - y) * (T::one() - y_hat).ln())
}

/// ℓ from the logit z instead of ŷ = σ(z): max(z, 0) − y·z + ln(1 + e^{−|z|}).
/// Finite and exact for any finite z (at z = ±1000 too), because ln ŷ = −ln(1 + e^{−z}) is never
/// formed from a rounded ŷ.
///
/// Written as (1 − y)·max(z, 0) + y·max(−z, 0) + ln(1 + e^{−|z|}) (the same sum, since
/// z = max(z, 0) − max(−z, 0)), with a term whose weight is 0 dropped rather than multiplied, so
/// an infinite logit gives the limit instead of ∞ − ∞: ℓ(1, +∞) = ℓ(0, −∞) = 0 and
/// ℓ(0, +∞) = ℓ(1, −∞) = +∞. A NaN in y or z propagates to a NaN loss (the batch function
/// [`bce_mean_from_logits`] refuses non-finite logits instead).
pub fn bce_from_logit<T: Float>(y: T, z: T) -> T {
    let weighted = |weight: T, part: T| if weight == T::zero() { T::zero() } else { weight * part };
    let wrong_side = weighted(T::one() - y, z.max(T::zero())) + weighted(y, (-z).max(T::zero()));
    if z.is_nan() { z } else { wrong_side + (-z.abs()).exp().ln_1p() }
}

/// Mean BCE over a batch, from logits. Errors on an empty batch, mismatched lengths, labels
/// outside {0, 1} or non-finite logits.
pub fn bce_mean_from_logits<T: Float>(z: &DVector<T>, y: &DVector<T>) -> Result<T> {
    if z.is_empty() {
        return Err(Error::Empty { op: "bce_mean_from_logits", arg: "z" });
    }
    check_labels("bce_mean_from_logits", y, z.len())?;
    if let Some(i) = z.iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFinite {
            op: "bce_mean_from_logits",
            arg: "z",
            at: format!("index {i}"),
        });
    }
    let n = T::of(z.len() as f64);
    Ok(z.iter().zip(y.iter()).map(|(&zi, &yi)| bce_from_logit(yi, zi)).sum::<T>() / n)
}

/// The Bernoulli probability of label y under ŷ: ŷ^y (1 − ŷ)^{1−y} (ŷ when y = 1, 1 − ŷ when y = 0).
pub fn bernoulli_likelihood<T: Float>(y: T, y_hat: T) -> T {
    y_hat.powf(y) * (T::one() - y_hat).powf(T::one() - y)
}

fn check_same_length<T: Float>(op: &'static str, y: &DVector<T>, y_hat: &DVector<T>) -> Result<()> {
    if y.len() == y_hat.len() {
        Ok(())
    } else {
        Err(shape_error(
            op,
            "y and y_hat",
            format!("y_hat of length {} (one probability per label)", y.len()),
            format!("{}", y_hat.len()),
        ))
    }
}

/// The likelihood of a batch: Πᵢ ŷᵢ^{yᵢ}(1 − ŷᵢ)^{1−yᵢ}. Equals exp(−N·BCE). Errors when y and
/// ŷ differ in length (an empty batch has likelihood 1).
pub fn batch_likelihood<T: Float>(y: &DVector<T>, y_hat: &DVector<T>) -> Result<T> {
    check_same_length("batch_likelihood", y, y_hat)?;
    Ok(y.iter()
        .zip(y_hat.iter())
        .map(|(&yi, &pi)| bernoulli_likelihood(yi, pi))
        .fold(T::one(), |a, b| a * b))
}

/// The log-likelihood Σᵢ [yᵢ ln ŷᵢ + (1 − yᵢ) ln(1 − ŷᵢ)], the negative of the summed loss.
/// Errors when y and ŷ differ in length.
pub fn log_likelihood<T: Float>(y: &DVector<T>, y_hat: &DVector<T>) -> Result<T> {
    check_same_length("log_likelihood", y, y_hat)?;
    Ok(y.iter().zip(y_hat.iter()).map(|(&yi, &pi)| -bce(yi, pi)).sum())
}

// ───────────────────────── the three chain-rule factors ─────────────────────────

/// Factor ①: ∂ℓ/∂ŷ = −(y/ŷ − (1 − y)/(1 − ŷ)) = (ŷ − y)/(ŷ(1 − ŷ)).
pub fn d_loss_d_yhat<T: Float>(y: T, y_hat: T) -> T {
    (y_hat - y) / (y_hat * (T::one() - y_hat))
}

/// Factor ②: ∂ŷ/∂z = ŷ(1 − ŷ).
pub fn d_yhat_d_z<T: Float>(y_hat: T) -> T {
    y_hat * (T::one() - y_hat)
}

/// Factor ③: ∂z/∂w = x (the input, not z), because z = wᵀx + b is linear in w.
pub fn d_z_d_w<T: Float>(x: &DVector<T>) -> DVector<T> {
    x.clone()
}

/// The product of the three factors for one sample: ∂ℓ/∂w = (ŷ − y)·x.
pub fn sample_gradient<T: Float>(w: &DVector<T>, b: T, x: &DVector<T>, y: T) -> Result<DVector<T>> {
    let xm = DMatrix::from_row_slice(1, x.len(), x.as_slice());
    let z = logits_forward(w, b, &xm)?[0];
    let y_hat = sigmoid(z);
    let factor = d_loss_d_yhat(y, y_hat) * d_yhat_d_z(y_hat);
    Ok(d_z_d_w(x) * factor)
}

/// The mean loss and its gradients over a batch:
/// L = (1/N) Σ ℓᵢ, ∇w L = (1/N) Σ (ŷᵢ − yᵢ) xᵢ, ∂L/∂b = (1/N) Σ (ŷᵢ − yᵢ).
pub fn loss_and_gradient<T: Float>(
    w: &DVector<T>,
    b: T,
    x: &DMatrix<T>,
    y: &DVector<T>,
) -> Result<(T, DVector<T>, T)> {
    let z = logits_forward(w, b, x)?;
    let loss = bce_mean_from_logits(&z, y)?;
    let n = T::of(x.nrows() as f64);
    // ℓ = bce_from_logit(y, z)  ⇒  ∂L/∂zᵢ = (σ(zᵢ) − yᵢ)/N
    let d_z = DVector::from_iterator(
        z.len(),
        z.iter().zip(y.iter()).map(|(&zi, &yi)| (sigmoid(zi) - yi) / n),
    );
    let g = logits_backward(x, w, &d_z)?;
    Ok((loss, g.d_w, g.d_b))
}

// ───────────────────────────── training ─────────────────────────────

/// How to train.
#[derive(Clone, Copy, Debug)]
pub struct TrainConfig {
    /// The learning rate α (finite, > 0).
    pub learning_rate: f64,
    /// Full-batch steps.
    pub steps: usize,
}

/// What training produced.
#[derive(Clone, Debug)]
pub struct Trained {
    /// Learned weights.
    pub w: DVector<f64>,
    /// Learned bias.
    pub b: f64,
    /// The loss before each step, then after the last: `steps + 1` values.
    pub losses: Vec<f64>,
}

impl Trained {
    /// The fraction of rows classified correctly by the 0.5 rule.
    pub fn accuracy(&self, x: &DMatrix<f64>, y: &DVector<f64>) -> Result<f64> {
        let p = predict_proba(&self.w, self.b, x)?;
        check_labels("Trained::accuracy", y, x.nrows())?;
        let right =
            p.iter().zip(y.iter()).filter(|&(&pi, &yi)| f64::from(classify(pi)) == yi).count();
        Ok(right as f64 / x.nrows() as f64)
    }
}

/// Full-batch gradient descent, w ← w − α∇w L, b ← b − α ∂L/∂b, from w = 0, b = 0.
pub fn train(x: &DMatrix<f64>, y: &DVector<f64>, config: TrainConfig) -> Result<Trained> {
    crate::optim::check_learning_rate("train", config.learning_rate)?;
    let mut w = DVector::zeros(x.ncols());
    let mut b = 0.0;
    let mut losses = Vec::with_capacity(config.steps + 1);
    for _ in 0..config.steps {
        let (loss, d_w, d_b) = loss_and_gradient(&w, b, x, y)?;
        losses.push(loss);
        w -= d_w * config.learning_rate;
        b -= config.learning_rate * d_b;
    }
    losses.push(loss_and_gradient(&w, b, x, y)?.0);
    Ok(Trained { w, b, losses })
}

/// The smoothness constant of the mean BCE in (w, b): L = λmax([X 1]ᵀ[X 1])/(4N).
/// Gradient descent with α ≤ 1/L never increases a convex L-smooth loss.
pub fn smoothness_bound(x: &DMatrix<f64>) -> f64 {
    augmented_gram_lambda_max(x) / (4.0 * x.nrows() as f64)
}

/// λmax([X 1]ᵀ[X 1]), the largest eigenvalue of the Gram matrix of the inputs with a column of
/// ones appended for the bias: the curvature of the linear part that every smoothness bound of a
/// linear model scales (chapter 2's softmax bound uses it too).
pub fn augmented_gram_lambda_max(x: &DMatrix<f64>) -> f64 {
    let n = x.nrows();
    let xa = DMatrix::from_fn(n, x.ncols() + 1, |r, c| if c < x.ncols() { x[(r, c)] } else { 1.0 });
    let gram = xa.transpose() * &xa;
    gram.symmetric_eigenvalues().iter().copied().fold(0.0, f64::max)
}

/// Two Gaussian clouds in the plane, `per_class` points each: class 0 around (−2, −1.5), class 1
/// around (2, 1.5), both with standard deviation 1, from `seed`. Rows alternate 0, 1, 0, 1 …
pub fn two_clouds(per_class: usize, seed: u64) -> (DMatrix<f64>, DVector<f64>) {
    let mut rng = Rng::new(seed);
    let centres = [(-2.0, -1.5), (2.0, 1.5)];
    let mut rows = Vec::with_capacity(2 * per_class * 2);
    let mut labels = Vec::with_capacity(2 * per_class);
    for _ in 0..per_class {
        for (k, (cx, cy)) in centres.iter().enumerate() {
            rows.push(cx + rng.normal());
            rows.push(cy + rng.normal());
            labels.push(k as f64);
        }
    }
    (DMatrix::from_row_slice(labels.len(), 2, &rows), DVector::from_vec(labels))
}

/// The data set, step size and step count the chapter trains with.
pub const DATA_SEED: u64 = 1;
/// Points per class.
pub const PER_CLASS: usize = 100;
/// Steps of full-batch gradient descent.
pub const STEPS: usize = 300;
/// α, checked against 1/L by a test.
pub const LEARNING_RATE: f64 = 0.5;

/// Trains the chapter's model on its data set.
pub fn chapter_model() -> Result<(DMatrix<f64>, DVector<f64>, Trained)> {
    let (x, y) = two_clouds(PER_CLASS, DATA_SEED);
    let t = train(&x, &y, TrainConfig { learning_rate: LEARNING_RATE, steps: STEPS })?;
    Ok((x, y, t))
}

// ───────────────────────────── errata, worked numbers ─────────────────────────────

/// This chapter's rows of the errata register.
pub const ERRATA: &[Erratum] = &[
    Erratum {
        document: D0,
        section: "Deriving BCE, factor ①",
        printed: "∂L/∂ŷ = (ŷ − y)/(y(1 − ŷ))",
        correct: "∂L/∂ŷ = (ŷ − y)/(ŷ(1 − ŷ))",
        why: "Putting −(y/ŷ − (1−y)/(1−ŷ)) over the common denominator ŷ(1−ŷ) gives (ŷ − y)/(ŷ(1−ŷ)); the printed denominator has y where ŷ belongs (it would divide by zero for every y = 0 sample).",
        test: "tests/ch01_logistic.rs::factor_1_has_denominator_yhat_times_one_minus_yhat",
    },
    Erratum {
        document: D0,
        section: "Deriving BCE, factor ③ and the result",
        printed: "∂z/∂w = z̄, so ∂J/∂w = z̄(ŷ − y), batch (1/N)Σ(ŷᵢ − yᵢ)zᵢ",
        correct: "∂z/∂w = x̄, so ∂ℓ/∂w = x̄(ŷ − y), batch (1/N)Σ(ŷᵢ − yᵢ)x̄ᵢ",
        why: "z = wᵀx + b is linear in w with coefficient vector x; z itself is a scalar and cannot be the gradient of a scalar with respect to the vector w.",
        test: "tests/ch01_logistic.rs::factor_3_is_the_input_x_not_z",
    },
    Erratum {
        document: D0,
        section: "Deriving BCE, log of the likelihood",
        printed: "log L = Σ log(yᵢ ŷᵢ (1 − ŷᵢ)^{1−yᵢ})",
        correct: "log L = Σ log(ŷᵢ^{yᵢ} (1 − ŷᵢ)^{1−yᵢ})",
        why: "The exponent yᵢ of ŷᵢ became a factor: for yᵢ = 0 the printed term is log 0 = −∞ instead of log(1 − ŷᵢ). The next printed line is right again.",
        test: "tests/ch01_logistic.rs::log_likelihood_is_minus_the_summed_loss",
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
    let loss_fig = Figure::Line(LineChart {
        title: format!("Training loss, full-batch gradient descent, α = {LEARNING_RATE}"),
        x_label: "step".into(),
        y_label: "mean BCE".into(),
        series: vec![Series::new(
            "training loss",
            t.losses.iter().enumerate().map(|(i, &l)| (i as f64, l)).collect(),
        )],
        markers: false,
    });
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
