//! The learning rate over time, and gradient-norm clipping.
//!
//! Warm-up then cosine: for step s (counted from 0),
//! α(s) = α_max·(s + 1)/w while s < w (a linear ramp over the first w steps),
//! α(s) = α_min + ½(α_max − α_min)(1 + cos(π·(s − w)/(S − w))) for w ≤ s < S,
//! and α_min from S on. The ramp keeps Adam's first, poorly estimated steps small; the cosine
//! lets the last steps settle.
//!
//! Clipping: with g the concatenation of every gradient tensor and ‖g‖ its Euclidean norm, every
//! gradient is multiplied by c/(‖g‖ + 10⁻⁶) when ‖g‖ > c, which caps the norm at (about) c
//! without changing the direction.

use crate::error::{Error, Result, invalid};
use crate::float::Float;
use nalgebra::DMatrix;

/// Warm-up and cosine decay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    /// α_max, reached at the end of the warm-up.
    pub max_lr: f64,
    /// α_min, the floor after the decay.
    pub min_lr: f64,
    /// w, the warm-up steps.
    pub warmup: usize,
    /// S, the step at which the decay reaches α_min.
    pub decay_steps: usize,
}

/// The added term that keeps the clipping factor finite when the norm is 0.
pub const CLIP_EPSILON: f64 = 1e-6;

impl Schedule {
    /// A checked schedule: 0 < α_min ≤ α_max (both finite) and w ≤ S.
    pub fn new(max_lr: f64, min_lr: f64, warmup: usize, decay_steps: usize) -> Result<Schedule> {
        const OP: &str = "Schedule::new";
        crate::optim::check_learning_rate(OP, max_lr)?;
        if !(min_lr.is_finite() && min_lr >= 0.0 && min_lr <= max_lr) {
            return Err(invalid(
                OP,
                "min_lr",
                format!("must lie in [0, max_lr = {max_lr}], got {min_lr}"),
            ));
        }
        if warmup > decay_steps {
            return Err(invalid(
                OP,
                "warmup",
                format!("{warmup} warm-up steps exceed the {decay_steps} decay steps"),
            ));
        }
        Ok(Schedule { max_lr, min_lr, warmup, decay_steps })
    }

    /// A constant rate (no warm-up, no decay).
    pub fn constant(lr: f64) -> Result<Schedule> {
        Schedule::new(lr, lr, 0, 0)
    }

    /// α at step s.
    pub fn at(&self, step: usize) -> f64 {
        if step < self.warmup {
            return self.max_lr * (step + 1) as f64 / self.warmup as f64;
        }
        if step >= self.decay_steps {
            return self.min_lr;
        }
        let progress = (step - self.warmup) as f64 / (self.decay_steps - self.warmup) as f64;
        self.min_lr
            + 0.5 * (self.max_lr - self.min_lr) * (1.0 + (std::f64::consts::PI * progress).cos())
    }
}

/// Lanes of independent partial sums in [`sum_of_squares`]: enough for the compiler to keep
/// vector registers of f64 busy. The order of the additions is fixed by this number, not by the
/// machine, so the norm is reproducible.
pub const NORM_LANES: usize = 8;

/// Σ x² over one tensor's entries, in f64, summed in [`NORM_LANES`] interleaved partial sums.
pub fn sum_of_squares<T: Float>(g: &[T]) -> f64 {
    let mut lanes = [0.0f64; NORM_LANES];
    let chunks = g.chunks_exact(NORM_LANES);
    let tail: f64 = chunks.remainder().iter().map(|x| x.as_f64() * x.as_f64()).sum();
    for c in chunks {
        for (l, x) in lanes.iter_mut().zip(c) {
            *l += x.as_f64() * x.as_f64();
        }
    }
    lanes.iter().sum::<f64>() + tail
}

/// The Euclidean norm of all tensors together, √(Σ g²), accumulated in f64 tensor by tensor
/// ([`sum_of_squares`]).
pub fn global_norm<T: Float>(grads: &[&DMatrix<T>]) -> f64 {
    grads.iter().map(|g| sum_of_squares(g.as_slice())).sum::<f64>().sqrt()
}

/// Scales every gradient by c/(‖g‖ + 10⁻⁶) when ‖g‖ > c; returns ‖g‖ before clipping.
/// Errors on a non-finite norm (a NaN or ∞ gradient: the step must not be taken) or c ≤ 0.
pub fn clip_global_norm<T: Float>(grads: &mut [&mut DMatrix<T>], max_norm: f64) -> Result<f64> {
    const OP: &str = "clip_global_norm";
    if !(max_norm.is_finite() && max_norm > 0.0) {
        return Err(invalid(OP, "max_norm", format!("must be finite and > 0, got {max_norm}")));
    }
    let norm = grads.iter().map(|g| sum_of_squares(g.as_slice())).sum::<f64>().sqrt();
    if !norm.is_finite() {
        let at = grads
            .iter()
            .position(|g| g.iter().any(|x| !x.is_finite()))
            .map_or("overflow of the sum".to_string(), |i| format!("tensor {i}"));
        return Err(Error::NonFinite { op: OP, arg: "gradients", at });
    }
    if norm > max_norm {
        let scale = T::of(max_norm / (norm + CLIP_EPSILON));
        for g in grads.iter_mut() {
            g.as_mut_slice().iter_mut().for_each(|x| *x *= scale);
        }
    }
    Ok(norm)
}
