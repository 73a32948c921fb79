//! The step of a finite difference: why the gradient checker uses central differences in f64
//! with h = 10⁻⁶.
//!
//! A difference quotient makes two errors. Truncation: Taylor's theorem gives
//! (f(x + h) − f(x))/h = f′(x) + h·f″(x)/2 + …, an error ∝ h, and
//! (f(x + h) − f(x − h))/2h = f′(x) + h²·f‴(x)/6 + …, ∝ h². Rounding: f(x ± h) are each computed
//! with a relative error up to about ε, and their difference, divided by h, carries an error
//! ∝ ε·|f(x)|/h that grows as h shrinks. Adding the two and minimising over h:
//!
//! ```text
//! forward:  h·|f″|/2 + 2ε|f|/h    smallest at h* = 2·(ε|f|/|f″|)^{1/2}     ∝ ε^{1/2}
//! central:  h²·|f‴|/6 + ε|f|/h    smallest at h* = (3ε|f|/|f‴|)^{1/3}      ∝ ε^{1/3}
//! ```
//!
//! so in f64 (ε = 2^{−52}) the best forward step is near 10⁻⁸ with error near 10⁻⁸, the best
//! central step near 10⁻⁵ with error near 10⁻¹¹; in f32 (ε = 2^{−23}) near 10⁻⁴ and 10⁻² with
//! errors near 10⁻⁴ and 10⁻⁵. [`step_errors`] measures the error against h on f(x) = sin x at
//! x = 1, whose derivative cos 1 is known.

use crate::error::{Result, invalid};
use crate::float::Float;

/// Which difference quotient.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Difference {
    /// (f(x + h) − f(x)) / h.
    Forward,
    /// (f(x + h) − f(x − h)) / 2h, what [`crate::gradcheck`] takes.
    Central,
}

impl Difference {
    /// Its name in tables and legends.
    pub fn name(self) -> &'static str {
        match self {
            Difference::Forward => "forward",
            Difference::Central => "central",
        }
    }

    /// The order p of its truncation error ∝ h^p: 1 forward, 2 central.
    pub fn order(self) -> i32 {
        match self {
            Difference::Forward => 1,
            Difference::Central => 2,
        }
    }

    /// The quotient at x with step h, every operation in T.
    pub fn quotient<T: Float>(self, f: impl Fn(T) -> T, x: T, h: T) -> T {
        match self {
            Difference::Forward => (f(x + h) - f(x)) / h,
            Difference::Central => (f(x + h) - f(x - h)) / (h + h),
        }
    }

    /// The order of magnitude of the step that balances truncation against rounding:
    /// ε^{1/(p+1)} for a truncation error of order p (ε^{1/2} forward, ε^{1/3} central), with ε
    /// the machine epsilon of the type computed in. The balanced step itself,
    /// 2·(ε|f|/|f″|)^{1/2} forward and (3ε|f|/|f‴|)^{1/3} central, is this times 2 or 3^{1/3} for a
    /// function whose value and derivatives are of order 1; the constants are dropped (the error
    /// near the minimum is flat: a quarter more forward, an eighth central). Errors naming
    /// `epsilon` unless 0 < ε < 1.
    pub fn balanced_step(self, epsilon: f64) -> Result<f64> {
        if !(epsilon > 0.0 && epsilon < 1.0) {
            return Err(invalid(
                "balanced_step",
                "epsilon",
                format!("{epsilon} is not a machine epsilon, between 0 and 1"),
            ));
        }
        Ok(epsilon.powf(1.0 / f64::from(self.order() + 1)))
    }
}

/// The point x = 1 of the measurement.
pub const POINT: f64 = 1.0;

/// The checker's default step, [`crate::gradcheck::Config`]'s `step`.
pub fn checker_step() -> f64 {
    crate::gradcheck::Config::default().step
}

/// The steps of the figure: 10^{−k/4} for k = 4 … 52, from 10⁻¹ down to 10⁻¹³, four a decade.
pub fn sweep() -> Vec<f64> {
    (4..=52).map(|k| 10f64.powf(-f64::from(k) / 4.0)).collect()
}

/// The relative error |q − cos 1| / |cos 1| of the `kind` quotient of sin at x = 1, computed in T
/// (x, h and every operation rounded to T; the error measured in f64), for each step in `steps`.
/// Errors naming `steps` when one is not positive and finite.
pub fn step_errors<T: Float>(kind: Difference, steps: &[f64]) -> Result<Vec<(f64, f64)>> {
    if let Some(bad) = steps.iter().find(|h| !(h.is_finite() && **h > 0.0)) {
        return Err(invalid("step_errors", "steps", format!("{bad} is not a positive step")));
    }
    let exact = POINT.cos();
    Ok(steps
        .iter()
        .map(|&h| {
            let q = kind.quotient(|v: T| v.sin(), T::of(POINT), T::of(h)).as_f64();
            (h, ((q - exact) / exact).abs())
        })
        .collect())
}

/// The step of `errors` with the smallest error (the first if several tie), and that error.
/// Errors naming `errors` when it is empty.
pub fn best_step(errors: &[(f64, f64)]) -> Result<(f64, f64)> {
    errors
        .iter()
        .copied()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .ok_or_else(|| invalid("best_step", "errors", "no step was measured"))
}
