//! The XOR data set, the 0.5 rule that reads a network's output as a class, and accuracy.

use crate::ch03_mlp::Mlp;
use crate::error::{Result, invalid, shape_error, shape_of};
use crate::float::ensure_finite;
use nalgebra::DMatrix;

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
