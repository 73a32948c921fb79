//! Multinomial (softmax) regression: Z = XW + 1bᵀ, its backward pass, the mean cross-entropy's
//! gradient, and full-batch gradient descent on three clouds of points.

use super::loss::{check_targets, cross_entropy_from_logits_with_gradient};
use super::probabilities::{argmax_rows, softmax_rows_forward};
use crate::error::{Error, Result, shape_error, shape_of};
use crate::float::{Float, ensure_finite};
use crate::rng::Rng;
use nalgebra::{DMatrix, DVector};

/// Training's two settings, α and the number of steps: chapter 1's type, used here as well.
pub use crate::ch01_logistic::TrainConfig;

fn check_regression<T: Float>(
    op: &'static str,
    w: &DMatrix<T>,
    b: &DMatrix<T>,
    x: &DMatrix<T>,
) -> Result<()> {
    if x.nrows() == 0 {
        return Err(Error::Empty { op, arg: "x (the batch)" });
    }
    if w.nrows() != x.ncols() || w.ncols() == 0 {
        return Err(shape_error(
            op,
            "w and x",
            format!("w with {} rows (one per column of x) and ≥ 1 column", x.ncols()),
            format!("w {}, x {}", shape_of(w), shape_of(x)),
        ));
    }
    if b.nrows() != 1 || b.ncols() != w.ncols() {
        return Err(shape_error(
            op,
            "b",
            format!("1×{} (one bias per class)", w.ncols()),
            shape_of(b),
        ));
    }
    ensure_finite(op, "x", x)?;
    ensure_finite(op, "w", w)?;
    ensure_finite(op, "b", b)
}

/// Z = XW + 1bᵀ: one row of K class logits per sample. Shapes: x N×D, w D×K, b 1×K, Z N×K.
/// (D0 writes the weights as K×D, one row per class: our W is its transpose.)
pub fn regression_logits<T: Float>(
    w: &DMatrix<T>,
    b: &DMatrix<T>,
    x: &DMatrix<T>,
) -> Result<DMatrix<T>> {
    check_regression("regression_logits", w, b, x)?;
    let mut z = crate::matmul::matmul(x, w)?;
    for c in 0..z.ncols() {
        let bc = b[(0, c)];
        z.column_mut(c).iter_mut().for_each(|v| *v += bc);
    }
    Ok(z)
}

/// Backward of [`regression_logits`]: from ∂L/∂Z (N×K) to (∂L/∂X = ∂L/∂Z·Wᵀ, N×D;
/// ∂L/∂W = Xᵀ·∂L/∂Z, D×K; ∂L/∂b = column sums of ∂L/∂Z, 1×K).
pub fn regression_logits_backward<T: Float>(
    w: &DMatrix<T>,
    x: &DMatrix<T>,
    d_z: &DMatrix<T>,
) -> Result<(DMatrix<T>, DMatrix<T>, DMatrix<T>)> {
    const OP: &str = "regression_logits_backward";
    if d_z.nrows() != x.nrows() || d_z.ncols() != w.ncols() {
        return Err(shape_error(
            OP,
            "d_z",
            format!("{}×{} (rows of x × columns of w)", x.nrows(), w.ncols()),
            shape_of(d_z),
        ));
    }
    if w.nrows() != x.ncols() {
        return Err(shape_error(
            OP,
            "w and x",
            format!("w with {} rows", x.ncols()),
            format!("w {}, x {}", shape_of(w), shape_of(x)),
        ));
    }
    let d_x = crate::matmul::matmul_nt(d_z, w)?; // Z = XW       ⇒ ∂L/∂X = ∂L/∂Z Wᵀ
    let d_w = crate::matmul::matmul_tn(x, d_z)?; // Z = XW       ⇒ ∂L/∂W = Xᵀ ∂L/∂Z
    // Z = … + 1bᵀ ⇒ ∂L/∂b = 1ᵀ ∂L/∂Z, the column sums
    let d_b = DMatrix::from_fn(1, d_z.ncols(), |_, c| d_z.column(c).sum());
    Ok((d_x, d_w, d_b))
}

/// The mean cross-entropy of the model and its gradients:
/// L = (1/N) Σᵢ −ln softmax(xᵢᵀW + bᵀ)_{tᵢ}, ∂L/∂W = (1/N) Σᵢ xᵢ(ŷᵢ − yᵢ)ᵀ,
/// ∂L/∂b = (1/N) Σᵢ (ŷᵢ − yᵢ)ᵀ.
pub fn regression_loss_and_gradient<T: Float>(
    w: &DMatrix<T>,
    b: &DMatrix<T>,
    x: &DMatrix<T>,
    targets: &[usize],
) -> Result<(T, DMatrix<T>, DMatrix<T>)> {
    let z = regression_logits(w, b, x)?;
    let (loss, d_z) = cross_entropy_from_logits_with_gradient(&z, targets)?;
    let (_, d_w, d_b) = regression_logits_backward(w, x, &d_z)?;
    Ok((loss, d_w, d_b))
}

/// D0's form of the weight gradient, written as it is printed: the gradient of the
/// *summed* loss, Σᵢ (ŷᵢ − yᵢ)xᵢᵀ, one row per class (K×D), accumulated sample by sample. It is
/// N·(∂L/∂W)ᵀ of [`regression_loss_and_gradient`].
pub fn summed_weight_gradient(
    w: &DMatrix<f64>,
    b: &DMatrix<f64>,
    x: &DMatrix<f64>,
    targets: &[usize],
) -> Result<DMatrix<f64>> {
    let z = regression_logits(w, b, x)?;
    check_targets("summed_weight_gradient", targets, x.nrows(), w.ncols())?;
    let p = softmax_rows_forward(&z)?;
    let mut g = DMatrix::zeros(w.ncols(), x.ncols());
    for (i, &t) in targets.iter().enumerate() {
        let residual =
            DVector::from_fn(w.ncols(), |k, _| p[(i, k)] - if k == t { 1.0 } else { 0.0 });
        let xi = x.row(i).transpose();
        g += residual * xi.transpose();
    }
    Ok(g)
}

/// What training produced: chapter 1's [`Trained`](crate::ch01_logistic::Trained) for K classes,
/// with a weight matrix and a bias row where one neuron had a weight vector and a number.
#[derive(Clone, Debug)]
pub struct Trained {
    /// Learned weights, D×K.
    pub w: DMatrix<f64>,
    /// Learned biases, 1×K.
    pub b: DMatrix<f64>,
    /// The loss before each step, then after the last: `steps + 1` values.
    pub losses: Vec<f64>,
}

impl Trained {
    /// The predicted class of every row of x: the argmax of its logits (= of its probabilities).
    pub fn predict(&self, x: &DMatrix<f64>) -> Result<Vec<usize>> {
        Ok(argmax_rows(&regression_logits(&self.w, &self.b, x)?))
    }

    /// The fraction of rows whose predicted class is the target.
    pub fn accuracy(&self, x: &DMatrix<f64>, targets: &[usize]) -> Result<f64> {
        check_targets("Trained::accuracy", targets, x.nrows(), self.w.ncols())?;
        let predicted = self.predict(x)?;
        Ok(predicted.iter().zip(targets).filter(|(p, t)| p == t).count() as f64 / x.nrows() as f64)
    }
}

/// Full-batch gradient descent from W = 0, b = 0: W ← W − α ∂L/∂W, b ← b − α ∂L/∂b.
pub fn train(
    x: &DMatrix<f64>,
    targets: &[usize],
    classes: usize,
    config: TrainConfig,
) -> Result<Trained> {
    let sgd = crate::optim::Sgd::new(config.learning_rate)?;
    if classes == 0 {
        return Err(Error::Empty { op: "train", arg: "classes" });
    }
    let mut w = DMatrix::zeros(x.ncols(), classes);
    let mut b = DMatrix::zeros(1, classes);
    let mut losses = Vec::with_capacity(config.steps + 1);
    for _ in 0..config.steps {
        let (loss, d_w, d_b) = regression_loss_and_gradient(&w, &b, x, targets)?;
        losses.push(loss);
        sgd.step(&mut [&mut w, &mut b], &[&d_w, &d_b])?;
    }
    losses.push(regression_loss_and_gradient(&w, &b, x, targets)?.0);
    Ok(Trained { w, b, losses })
}

/// The smoothness constant of the mean softmax cross-entropy in (W, b):
/// L = λmax([X 1]ᵀ[X 1])/(2N), because the softmax's Hessian diag(ŷ) − ŷŷᵀ has no eigenvalue
/// above 1/2. Gradient descent with α ≤ 1/L never increases the (convex) loss.
pub fn smoothness_bound(x: &DMatrix<f64>) -> f64 {
    crate::ch01_logistic::augmented_gram_lambda_max(x) / (2.0 * x.nrows() as f64)
}

/// Radius of the circle the class centres sit on.
pub const CENTRE_RADIUS: f64 = 3.0;

/// Three Gaussian clouds in the plane, `per_class` points each, standard deviation 1, centred on
/// a circle of radius [`CENTRE_RADIUS`] at 90°, 210° and 330°; rows cycle through classes 0, 1, 2.
pub fn three_clouds(per_class: usize, seed: u64) -> (DMatrix<f64>, Vec<usize>) {
    let mut rng = Rng::new(seed);
    let centres: Vec<(f64, f64)> = [90.0_f64, 210.0, 330.0]
        .iter()
        .map(|deg| (CENTRE_RADIUS * deg.to_radians().cos(), CENTRE_RADIUS * deg.to_radians().sin()))
        .collect();
    let mut rows = Vec::with_capacity(3 * per_class * 2);
    let mut targets = Vec::with_capacity(3 * per_class);
    for _ in 0..per_class {
        for (k, (cx, cy)) in centres.iter().enumerate() {
            rows.push(cx + rng.normal());
            rows.push(cy + rng.normal());
            targets.push(k);
        }
    }
    (DMatrix::from_row_slice(targets.len(), 2, &rows), targets)
}

/// The data set's seed.
pub const DATA_SEED: u64 = 2;
/// Points per class.
pub const PER_CLASS: usize = 100;
/// The number of classes.
pub const CLASSES: usize = 3;
/// Steps of full-batch gradient descent.
pub const STEPS: usize = 300;
/// α, checked against 1/L by a test.
pub const LEARNING_RATE: f64 = 0.2;

/// Trains the chapter's model on its data set.
pub fn chapter_model() -> Result<(DMatrix<f64>, Vec<usize>, Trained)> {
    let (x, t) = three_clouds(PER_CLASS, DATA_SEED);
    let trained =
        train(&x, &t, CLASSES, TrainConfig { learning_rate: LEARNING_RATE, steps: STEPS })?;
    Ok((x, t, trained))
}
