//! Superposition: random directions in high dimensions are nearly perpendicular, the Welch bound
//! limits how many can be, and unit vectors packed by optimisation approach that bound.

use crate::error::{Result, invalid};
use crate::rng::Rng;
use nalgebra::DMatrix;

// ───────────────────────────── superposition ─────────────────────────────

/// The half-width of the "nearly perpendicular" window of the document: angles in 89°–91°.
pub const NEAR_ORTHOGONAL_DEGREES: f64 = 1.0;

/// `n` random unit vectors in `d` dimensions, one per row (Gaussian vectors normalised, which are
/// uniform on the sphere).
pub fn random_unit_vectors(n: usize, d: usize, rng: &mut Rng) -> Result<DMatrix<f64>> {
    if n == 0 || d == 0 {
        return Err(invalid(
            "random_unit_vectors",
            "n and d",
            format!("need n ≥ 1 and d ≥ 1, got n = {n}, d = {d}"),
        ));
    }
    let mut v = rng.normal_matrix::<f64>(n, d, 1.0);
    normalize_rows(&mut v);
    Ok(v)
}

fn normalize_rows(v: &mut DMatrix<f64>) {
    for mut r in v.row_iter_mut() {
        let norm = r.norm();
        if norm > 0.0 {
            r /= norm;
        }
    }
}

/// The cosines of all pairs i < j of the rows of `v` (rows assumed unit length), via the Gram
/// matrix V Vᵀ.
pub fn pairwise_cosines(v: &DMatrix<f64>) -> Result<Vec<f64>> {
    let g = crate::matmul::matmul_nt(v, v)?;
    let n = v.nrows();
    let mut out = Vec::with_capacity(n * n.saturating_sub(1) / 2);
    for j in 0..n {
        for i in 0..j {
            out.push(g[(i, j)].clamp(-1.0, 1.0));
        }
    }
    Ok(out)
}

/// The largest |cos| over all pairs: the coherence of the set.
pub fn coherence(v: &DMatrix<f64>) -> Result<f64> {
    Ok(pairwise_cosines(v)?.iter().fold(0.0, |m, c| m.max(c.abs())))
}

/// The Welch lower bound on the coherence of N unit vectors in d dimensions:
/// max |cos| ≥ √((N − d)/(d(N − 1))) (0 when N ≤ d: then they can be exactly orthogonal).
pub fn welch_bound(n: usize, d: usize) -> f64 {
    if n <= d || n < 2 { 0.0 } else { ((n - d) as f64 / (d as f64 * (n - 1) as f64)).sqrt() }
}

/// The most vectors the Welch bound allows with every |cos| ≤ ε in d dimensions:
/// ⌊d(1 − ε²)/(1 − dε²)⌋ while dε² < 1; `None` (no limit from this bound) once dε² ≥ 1.
pub fn welch_capacity(d: usize, eps: f64) -> Option<u64> {
    let de2 = d as f64 * eps * eps;
    if de2 >= 1.0 {
        None
    } else {
        Some((d as f64 * (1.0 - eps * eps) / (1.0 - de2)).floor() as u64)
    }
}

/// The probability that two independent uniformly random unit vectors in d ≥ 2 dimensions meet at
/// an angle within `half_width_degrees` of 90°. The cosine t of their angle has density
/// ∝ (1 − t²)^{(d−3)/2} on (−1, 1); the probability is integrated numerically (Simpson's rule,
/// in the angle θ, where the density is ∝ sin^{d−2} θ and has no endpoint singularity).
/// In d = 1 two unit vectors are parallel or opposite, so the probability is 0; a half-width of
/// 90° or more covers every angle.
pub fn near_orthogonal_probability(d: usize, half_width_degrees: f64) -> f64 {
    if d < 2 || half_width_degrees.is_nan() || half_width_degrees <= 0.0 {
        return 0.0;
    }
    if half_width_degrees >= 90.0 {
        return 1.0;
    }
    let k = d as f64 - 2.0;
    // ∫ sin^k θ dθ over [a, b] by Simpson's rule, in log space so sin^k never underflows badly.
    let integral = |a: f64, b: f64| {
        let m = 20_000;
        let h = (b - a) / m as f64;
        (0..=m)
            .map(|i| {
                let t = a + i as f64 * h;
                let w = if i == 0 || i == m {
                    1.0
                } else if i % 2 == 1 {
                    4.0
                } else {
                    2.0
                };
                let s = t.sin();
                w * if k == 0.0 {
                    1.0
                } else if s <= 0.0 {
                    0.0
                } else {
                    (k * s.ln()).exp()
                }
            })
            .sum::<f64>()
            * h
            / 3.0
    };
    let half = std::f64::consts::FRAC_PI_2;
    let w = half_width_degrees.to_radians();
    // The density is symmetric about 90°, so integrate one half of each.
    integral(half - w, half) / integral(0.0, half)
}

/// One panel of the angle histograms: the pairwise angles of `n` random unit vectors in `d`
/// dimensions, in degrees.
#[derive(Clone, Debug)]
pub struct AngleSample {
    /// The dimension.
    pub d: usize,
    /// Every pairwise angle in degrees.
    pub angles: Vec<f64>,
    /// The fraction of them within 89°–91°.
    pub near_orthogonal: f64,
    /// That fraction's exact expectation, [`near_orthogonal_probability`].
    pub expected: f64,
}

/// The dimensions the chapter measures, up to GPT-3's 12,288.
pub const ANGLE_DIMS: [usize; 6] = [2, 3, 10, 100, 1_000, 12_288];
/// Random vectors per dimension (so 19,900 pairs each).
pub const ANGLE_VECTORS: usize = 200;
/// The seed of the angle histograms.
pub const ANGLE_SEED: u64 = 5;

/// Pairwise angles of `n` random unit vectors in each of the dimensions `dims`, from `seed`.
pub fn angle_samples(dims: &[usize], n: usize, seed: u64) -> Result<Vec<AngleSample>> {
    let mut rng = Rng::new(seed);
    dims.iter()
        .map(|&d| {
            let v = random_unit_vectors(n, d, &mut rng)?;
            let angles: Vec<f64> =
                pairwise_cosines(&v)?.iter().map(|c| c.acos().to_degrees()).collect();
            let inside =
                angles.iter().filter(|a| (*a - 90.0).abs() <= NEAR_ORTHOGONAL_DEGREES).count();
            let near_orthogonal = inside as f64 / angles.len() as f64;
            Ok(AngleSample {
                d,
                angles,
                near_orthogonal,
                expected: near_orthogonal_probability(d, NEAR_ORTHOGONAL_DEGREES),
            })
        })
        .collect()
}

/// Two orthonormal bases at once: the standard basis and the rows of a Sylvester–Hadamard
/// matrix divided by √d (d a power of two). Every cross pair has |cos| = 1/√d exactly, so these
/// 2d vectors all meet at angles within arccos(1/√d) of 90°: twice as many vectors as
/// dimensions, all nearly perpendicular. Errors unless d is a power of two.
pub fn two_bases(d: usize) -> Result<DMatrix<f64>> {
    if d == 0 || !d.is_power_of_two() {
        return Err(invalid("two_bases", "d", format!("must be a power of two, got {d}")));
    }
    let scale = 1.0 / (d as f64).sqrt();
    // Sylvester: H[i][j] = (−1)^{popcount(i AND j)}.
    Ok(DMatrix::from_fn(2 * d, d, |r, c| {
        if r < d {
            if r == c { 1.0 } else { 0.0 }
        } else if ((r - d) & c).count_ones().is_multiple_of(2) {
            scale
        } else {
            -scale
        }
    }))
}

/// The result of packing unit vectors.
#[derive(Clone, Debug)]
pub struct Packing {
    /// N, the number of vectors.
    pub n: usize,
    /// d, the dimension.
    pub d: usize,
    /// The largest |cos| of the random start.
    pub start_coherence: f64,
    /// The largest |cos| after optimisation.
    pub coherence: f64,
    /// The Welch lower bound for (N, d).
    pub welch: f64,
    /// The largest |cos| after each step (index 0: the start).
    pub history: Vec<f64>,
    /// The optimised vectors, one per row.
    pub vectors: DMatrix<f64>,
}

/// How far the most-moved vector travels in one packing step, relative to the current worst
/// overlap (0.1 and 1.0 were slower to settle on N = 1000, d = 100).
pub const PACK_STEP: f64 = 0.3;
/// Packing steps in the main job (the test runs [`PACK_TEST_STEPS`]).
pub const PACK_STEPS: usize = 400;
/// Packing steps in the test: the same N = 1000, d = 100, fewer steps.
pub const PACK_TEST_STEPS: usize = 50;
/// N and d of the packing experiment: N = 10·d.
pub const PACK_N: usize = 1000;
/// See [`PACK_N`].
pub const PACK_D: usize = 100;
/// The seed of the packing's random start.
pub const PACK_SEED: u64 = 1;

/// Packs `n` unit vectors in `d` dimensions so that their largest |cos| is small: projected
/// gradient descent on the energy Σ_{i≠j} (vᵢ·vⱼ)^{2p} (which, for large p, is dominated by the
/// worst pairs), renormalising every vector after every step. The exponent p doubles from 2 to 32
/// over the run. Starts from seeded random unit vectors; keeps the best set seen.
pub fn pack_unit_vectors(n: usize, d: usize, steps: usize, seed: u64) -> Result<Packing> {
    const OP: &str = "pack_unit_vectors";
    if n < 2 || d == 0 {
        return Err(invalid(OP, "n and d", format!("need n ≥ 2 and d ≥ 1, got n = {n}, d = {d}")));
    }
    let mut rng = Rng::new(seed);
    let mut v = random_unit_vectors(n, d, &mut rng)?;
    let mut history = Vec::with_capacity(steps + 1);
    let mut best = (f64::INFINITY, v.clone());
    let stages = [2i32, 4, 8, 16, 32];
    for s in 0..=steps {
        let g = crate::matmul::matmul_nt(&v, &v)?;
        let worst = (0..n)
            .flat_map(|j| (0..j).map(move |i| (i, j)))
            .fold(0.0f64, |m, (i, j)| m.max(g[(i, j)].abs()));
        history.push(worst);
        if worst < best.0 {
            best = (worst, v.clone());
        }
        if s == steps || worst == 0.0 {
            break;
        }
        let p = stages[(s * stages.len() / steps).min(stages.len() - 1)];
        // ∂/∂vᵢ Σ_{j≠i} (gᵢⱼ/c)^{2p} ∝ Σⱼ (gᵢⱼ/c)^{2p−1} vⱼ, with c the current worst overlap.
        let mut weights = g.map(|x| (x / worst).powi(2 * p - 1));
        weights.fill_diagonal(0.0);
        let grad = crate::matmul::matmul(&weights, &v)?;
        let largest = grad.row_iter().map(|r| r.norm()).fold(0.0f64, f64::max);
        // The vector that moves most moves by PACK_STEP times the worst overlap.
        v -= grad * (PACK_STEP * worst / largest.max(f64::MIN_POSITIVE));
        normalize_rows(&mut v);
    }
    Ok(Packing {
        n,
        d,
        start_coherence: history[0],
        coherence: best.0,
        welch: welch_bound(n, d),
        history,
        vectors: best.1,
    })
}
