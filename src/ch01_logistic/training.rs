//! Training: full-batch gradient descent on the mean BCE, its safe step size, and the chapter's
//! data set of two Gaussian clouds.

use super::gradient::loss_and_gradient;
use super::loss::check_labels;
use super::neuron::{classify, predict_proba};
use crate::error::Result;
use crate::rng::Rng;
use nalgebra::{DMatrix, DVector};

/// How to train by full-batch gradient descent: the step size α and the number of steps.
///
/// Chapter 2's softmax regression trains with the same two settings and uses this type
/// (`crate::ch02_softmax::TrainConfig` is this one). Each `train` checks α with
/// [`check_learning_rate`](crate::optim::check_learning_rate) before the first step.
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
    /// Learned weights, one per input column (length D).
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
