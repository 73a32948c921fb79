//! A straight line against an MLP on sin(x): the closed-form least-squares line, and a small ReLU
//! network trained by mini-batch gradient descent on the same 100 points.

use super::activations::Activation;
use super::dense::mse;
use super::mlp::{Mlp, TrainConfig, train};
use crate::error::{Result, invalid, shape_error};
use crate::rng::Rng;
use nalgebra::DMatrix;

// ───────────────────────────── a line versus an MLP on sin(x) ─────────────────────────────

/// `n` evenly spaced points from `lo` to `hi` inclusive.
pub fn linspace(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    match n {
        0 => vec![],
        1 => vec![lo],
        _ => (0..n).map(|i| lo + (hi - lo) * i as f64 / (n - 1) as f64).collect(),
    }
}

/// The least-squares line y ≈ slope·x + intercept in closed form:
/// slope = Σ(x − x̄)(y − ȳ)/Σ(x − x̄)², intercept = ȳ − slope·x̄.
/// Errors on fewer than two points, mismatched lengths, NaN, or all x equal.
pub fn least_squares_line(x: &[f64], y: &[f64]) -> Result<(f64, f64)> {
    const OP: &str = "least_squares_line";
    if x.len() < 2 {
        return Err(invalid(OP, "x", format!("need at least 2 points, got {}", x.len())));
    }
    if x.len() != y.len() {
        return Err(shape_error(
            OP,
            "x and y",
            format!("{} values of y", x.len()),
            format!("{}", y.len()),
        ));
    }
    crate::float::ensure_finite_slice(OP, "x", x)?;
    crate::float::ensure_finite_slice(OP, "y", y)?;
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let sxx: f64 = x.iter().map(|v| (v - mx) * (v - mx)).sum();
    if sxx == 0.0 {
        return Err(invalid(OP, "x", "all x are equal: the slope is undetermined"));
    }
    let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let slope = sxy / sxx;
    Ok((slope, my - slope * mx))
}

/// Points of the sin(x) data set: 100 evenly spaced x in [−10, 10], as in the document.
pub const SIN_POINTS: usize = 100;
/// The MLP fitted to sin(x): 1 input, two hidden ReLU layers, one linear output.
pub const SIN_SIZES: [usize; 4] = [1, 32, 32, 1];
/// The seed of its initial weights and of the mini-batch shuffle.
pub const SIN_SEED: u64 = 3;
/// The standard deviation of its initial biases (the weights are He-initialised).
pub const SIN_BIAS_STD: f64 = 0.5;
/// Its training schedule.
pub const SIN_TRAIN: TrainConfig =
    TrainConfig { learning_rate: 0.05, epochs: 1000, batch_size: 10, seed: SIN_SEED };
/// The input is fed to the network as x/10, so it lies in [−1, 1] like its initial weights expect.
pub const SIN_INPUT_SCALE: f64 = 10.0;

/// The outcome of fitting sin(x) both ways.
#[derive(Clone, Debug)]
pub struct SinFits {
    /// The x values.
    pub x: Vec<f64>,
    /// sin(x).
    pub y: Vec<f64>,
    /// The least-squares line's slope and intercept.
    pub line: (f64, f64),
    /// The line's predictions.
    pub line_fit: Vec<f64>,
    /// The MLP's predictions.
    pub mlp_fit: Vec<f64>,
    /// The line's mean squared error.
    pub line_mse: f64,
    /// The MLP's mean squared error.
    pub mlp_mse: f64,
    /// The MLP's training cost before training and after each epoch.
    pub costs: Vec<f64>,
}

/// Fits sin(x) on [−10, 10] with the closed-form line and with our MLP trained by mini-batch
/// gradient descent from [`SIN_SEED`] for `epochs` epochs.
pub fn fit_sin(epochs: usize) -> Result<SinFits> {
    let x = linspace(-10.0, 10.0, SIN_POINTS);
    let y: Vec<f64> = x.iter().map(|v| v.sin()).collect();
    let line = least_squares_line(&x, &y)?;
    let line_fit: Vec<f64> = x.iter().map(|v| line.0 * v + line.1).collect();
    let xm = DMatrix::from_iterator(x.len(), 1, x.iter().map(|v| v / SIN_INPUT_SCALE));
    let ym = DMatrix::from_column_slice(y.len(), 1, &y);
    let mut rng = Rng::new(SIN_SEED);
    let mut mlp = Mlp::<f64>::random(&SIN_SIZES, Activation::Relu, None, SIN_BIAS_STD, &mut rng)?;
    let costs = train(&mut mlp, &xm, &ym, TrainConfig { epochs, ..SIN_TRAIN })?;
    let pred = mlp.predict(&xm)?;
    let mlp_fit: Vec<f64> = pred.iter().copied().collect();
    let n = x.len() as f64;
    let line_mse = line_fit.iter().zip(&y).map(|(p, t)| (p - t) * (p - t)).sum::<f64>() / n;
    let mlp_mse = mse(&pred, &ym)?;
    Ok(SinFits { x, y, line, line_fit, mlp_fit, line_mse, mlp_mse, costs })
}
