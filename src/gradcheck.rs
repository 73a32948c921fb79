//! Finite-difference gradient checks.
//!
//! Every backward function in the workbook is checked the same way: nudge one entry of one tensor
//! by ±h, evaluate the scalar loss twice, and compare the central difference
//! (L(θ + h) − L(θ − h)) / 2h with the analytic gradient entry. The comparison is the relative
//! error |a − n| / max(|a|, |n|, floor): relative where the gradient is large, absolute (against
//! the floor) where it is close to zero, so tiny gradients do not fail on rounding noise.

use nalgebra::DMatrix;
use std::fmt;

/// Step and tolerances of a check.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// The finite-difference step h.
    pub step: f64,
    /// The largest relative error that passes.
    pub tolerance: f64,
    /// The magnitude below which errors are measured absolutely.
    pub floor: f64,
}

impl Default for Config {
    /// h = 1e-6 balances truncation error (∝ h²) against cancellation (∝ ε/h) in f64.
    fn default() -> Self {
        Config { step: 1e-6, tolerance: 1e-6, floor: 1e-7 }
    }
}

/// The worst entry of one tensor.
#[derive(Clone, Debug)]
pub struct Worst {
    /// The tensor's name.
    pub tensor: String,
    /// Row and column of the worst entry.
    pub at: (usize, usize),
    /// The analytic gradient there.
    pub analytic: f64,
    /// The central difference there.
    pub numeric: f64,
    /// Their relative error.
    pub error: f64,
}

/// The result of a check: the worst entry of every tensor.
#[derive(Clone, Debug)]
pub struct Report {
    /// One row per tensor, in the order given.
    pub tensors: Vec<Worst>,
    /// Shape problems found before any difference was taken.
    pub problems: Vec<String>,
    /// The tolerance the report was judged against.
    pub tolerance: f64,
}

impl Report {
    /// True when there were no shape problems and every tensor's worst error is within tolerance.
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
            && self.tensors.iter().all(|w| w.error <= self.tolerance && w.error.is_finite())
    }

    /// The worst entry over all tensors.
    pub fn worst(&self) -> Option<&Worst> {
        self.tensors.iter().max_by(|a, b| a.error.total_cmp(&b.error))
    }

    /// Panics with the whole report unless [`Report::passed`]. For tests.
    #[track_caller]
    pub fn assert_passed(&self) {
        assert!(self.passed(), "gradient check failed:\n{self}");
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.problems {
            writeln!(f, "  problem: {p}")?;
        }
        writeln!(
            f,
            "  tensor            worst entry    analytic           numeric            rel. error"
        )?;
        for w in &self.tensors {
            let mark = if w.error <= self.tolerance { "ok" } else { "FAIL" };
            writeln!(
                f,
                "  {:<16}  ({:>3}, {:>3})     {:>+.10e}  {:>+.10e}  {:.3e} {mark}",
                w.tensor, w.at.0, w.at.1, w.analytic, w.numeric, w.error
            )?;
        }
        if let Some(w) = self.worst() {
            writeln!(f, "  worst: {} at {:?} (tolerance {:.1e})", w.tensor, w.at, self.tolerance)?;
        }
        Ok(())
    }
}

/// Checks `analytic[i]` against central differences of `loss` over every entry of `inputs[i]`.
///
/// `inputs` are the named tensors the loss depends on (inputs and parameters alike); `loss`
/// receives them all, with one entry nudged, and returns the scalar loss.
pub fn check<F>(
    config: Config,
    inputs: &[(&str, DMatrix<f64>)],
    analytic: &[DMatrix<f64>],
    mut loss: F,
) -> Report
where
    F: FnMut(&[DMatrix<f64>]) -> f64,
{
    let mut problems = Vec::new();
    if inputs.len() != analytic.len() {
        problems.push(format!(
            "{} tensors but {} analytic gradients",
            inputs.len(),
            analytic.len()
        ));
    }
    let mut tensors: Vec<DMatrix<f64>> = inputs.iter().map(|(_, t)| t.clone()).collect();
    let mut rows = Vec::new();
    for (i, ((name, _), grad)) in inputs.iter().zip(analytic).enumerate() {
        let shape = tensors[i].shape();
        if grad.shape() != shape {
            problems.push(format!(
                "{name}: tensor is {}×{} but its gradient is {}×{}",
                shape.0,
                shape.1,
                grad.nrows(),
                grad.ncols()
            ));
            continue;
        }
        let mut worst =
            Worst { tensor: name.to_string(), at: (0, 0), analytic: 0.0, numeric: 0.0, error: 0.0 };
        for c in 0..shape.1 {
            for r in 0..shape.0 {
                let original = tensors[i][(r, c)];
                tensors[i][(r, c)] = original + config.step;
                let plus = loss(&tensors);
                tensors[i][(r, c)] = original - config.step;
                let minus = loss(&tensors);
                tensors[i][(r, c)] = original;
                let numeric = (plus - minus) / (2.0 * config.step);
                let a = grad[(r, c)];
                let error = (a - numeric).abs() / a.abs().max(numeric.abs()).max(config.floor);
                let error = if error.is_nan() { f64::INFINITY } else { error };
                if error >= worst.error {
                    worst =
                        Worst { tensor: name.to_string(), at: (r, c), analytic: a, numeric, error };
                }
            }
        }
        rows.push(worst);
    }
    Report { tensors: rows, problems, tolerance: config.tolerance }
}

#[cfg(test)]
mod tests {
    use super::*;

    // L(A, B) = Σ (A·B)ᵢⱼ², with ∂L/∂A = 2(AB)Bᵀ and ∂L/∂B = 2Aᵀ(AB).
    fn setup() -> (DMatrix<f64>, DMatrix<f64>, DMatrix<f64>, DMatrix<f64>) {
        let a = DMatrix::from_row_slice(2, 3, &[0.5, -1.0, 2.0, 0.1, 0.3, -0.7]);
        let b = DMatrix::from_row_slice(3, 2, &[1.0, 0.2, -0.4, 0.9, 0.6, -1.1]);
        let c = &a * &b;
        (a.clone(), b.clone(), 2.0 * &c * b.transpose(), 2.0 * a.transpose() * &c)
    }

    #[test]
    fn a_correct_backward_passes() {
        let (a, b, da, db) = setup();
        let r = check(Config::default(), &[("A", a), ("B", b)], &[da, db], |t| {
            (&t[0] * &t[1]).map(|x| x * x).sum()
        });
        r.assert_passed();
        assert!(r.worst().is_some_and(|w| w.error < 1e-7));
    }

    #[test]
    fn a_wrong_backward_fails_and_names_the_worst_entry() {
        let (a, b, da, mut db) = setup();
        db[(2, 1)] += 1e-3;
        let r = check(Config::default(), &[("A", a), ("B", b)], &[da, db], |t| {
            (&t[0] * &t[1]).map(|x| x * x).sum()
        });
        assert!(!r.passed());
        let w = r.worst().unwrap();
        assert_eq!((w.tensor.as_str(), w.at), ("B", (2, 1)));
        assert!(r.to_string().contains("worst: B at (2, 1)"));
    }

    #[test]
    fn a_gradient_of_the_wrong_shape_is_reported() {
        let (a, b, da, _) = setup();
        let r = check(Config::default(), &[("A", a), ("B", b)], &[da, DMatrix::zeros(2, 2)], |t| {
            (&t[0] * &t[1]).sum()
        });
        assert!(!r.passed());
        assert!(r.problems[0].contains("B: tensor is 3×2 but its gradient is 2×2"));
    }
}
