//! Optimisers: how a gradient becomes a change of the parameters.
//!
//! Plain gradient descent lives here now (θ ← θ − α∇θ); Adam and AdamW join it with chapters 7
//! and 9. Every optimiser takes the parameters and their gradients as parallel lists of matrices
//! and checks that they pair up.

use crate::error::{Error, Result, invalid, shape_error};
use crate::float::Float;
use nalgebra::DMatrix;

/// Checks a learning rate: finite and strictly positive.
pub fn check_learning_rate(op: &'static str, lr: f64) -> Result<()> {
    if lr.is_finite() && lr > 0.0 { Ok(()) } else { Err(invalid(op, "learning rate α", format!("must be finite and > 0, got {lr}"))) }
}

fn check_pairs<T: Float>(op: &'static str, params: &[&mut DMatrix<T>], grads: &[&DMatrix<T>]) -> Result<()> {
    if params.len() != grads.len() {
        return Err(invalid(op, "gradients", format!("{} parameter tensors but {} gradients", params.len(), grads.len())));
    }
    for (i, (p, g)) in params.iter().zip(grads).enumerate() {
        if p.shape() != g.shape() {
            return Err(shape_error(
                op,
                "parameter and gradient",
                format!("gradient {i} to be {}×{}", p.nrows(), p.ncols()),
                format!("{}×{}", g.nrows(), g.ncols()),
            ));
        }
        if g.iter().any(|x| !x.is_finite()) {
            return Err(Error::NonFinite { op, arg: "gradient", at: format!("tensor {i}") });
        }
    }
    Ok(())
}

/// Plain gradient descent: θ ← θ − α·∇θ.
#[derive(Clone, Copy, Debug)]
pub struct Sgd {
    /// The learning rate α.
    pub learning_rate: f64,
}

impl Sgd {
    /// Gradient descent with learning rate α (finite, > 0).
    pub fn new(learning_rate: f64) -> Result<Self> {
        check_learning_rate("Sgd::new", learning_rate)?;
        Ok(Sgd { learning_rate })
    }

    /// One step over every parameter tensor. Shapes must pair up; gradients must be finite.
    pub fn step<T: Float>(&self, params: &mut [&mut DMatrix<T>], grads: &[&DMatrix<T>]) -> Result<()> {
        check_pairs("Sgd::step", params, grads)?;
        let lr = T::of(self.learning_rate);
        for (p, g) in params.iter_mut().zip(grads) {
            p.zip_apply(*g, |w, dw| *w -= lr * dw);
        }
        Ok(())
    }
}
