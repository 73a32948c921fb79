//! The nonlinearities a layer applies elementwise, a = f(z), and their derivatives f′(z):
//! sigmoid, ReLU, GELU(z) = z Φ(z) through the error function erf (written here, since `std` has
//! none), and GPT-2's tanh approximation of GELU, with a fast single-precision path.

use crate::error::{Result, shape_error, shape_of};
use crate::float::Float;
use crate::simd_map::map_f32;
use nalgebra::DMatrix;

// ───────────────────────────── the error function ─────────────────────────────

/// 2/√π, the factor in front of every series and integral for erf.
const TWO_OVER_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;
/// 1/√(2π), the peak of the standard normal density φ.
const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;
/// Below this |x| erf comes from its power series, above it erfc from its continued fraction.
const ERF_SWITCH: f64 = 2.5;

/// erf(x) for |x| < [`ERF_SWITCH`] from the series
/// erf(x) = (2/√π) e^{−x²} Σₙ 2ⁿ x^{2n+1} / (1·3·5⋯(2n+1)),
/// whose terms are all of one sign (no cancellation); each term is the previous times 2x²/(2n+1).
fn erf_series(x: f64) -> f64 {
    let x2 = x * x;
    let mut term = x;
    let mut sum = x;
    let mut n = 0.0;
    while term.abs() > 1e-17 * sum.abs() {
        n += 1.0;
        term *= 2.0 * x2 / (2.0 * n + 1.0);
        sum += term;
    }
    TWO_OVER_SQRT_PI * (-x2).exp() * sum
}

/// erfc(x) for x ≥ [`ERF_SWITCH`] from the continued fraction
/// erfc(x) = (e^{−x²}/√π) · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ⋯))))),
/// evaluated from a fixed depth upwards. Relative accuracy ~1e-16 at x = 2.5 and better beyond.
fn erfc_continued_fraction(x: f64) -> f64 {
    const DEPTH: usize = 90;
    let mut tail = x;
    for k in (1..=DEPTH).rev() {
        tail = x + (k as f64 / 2.0) / tail;
    }
    (-x * x).exp() * (TWO_OVER_SQRT_PI / 2.0) / tail
}

/// The error function erf(x) = (2/√π) ∫₀ˣ e^{−t²} dt, to about 1e-15 relative accuracy in f64
/// (not in `std`; written here). Odd: erf(−x) = −erf(x). NaN gives NaN.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let v = if a < ERF_SWITCH { erf_series(a) } else { 1.0 - erfc_continued_fraction(a) };
    v.copysign(x)
}

/// The complementary error function erfc(x) = 1 − erf(x), accurate relative to its own (tiny)
/// size for large positive x, where 1 − erf(x) would lose every digit.
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        x
    } else if x >= ERF_SWITCH {
        erfc_continued_fraction(x)
    } else {
        1.0 - erf(x)
    }
}

/// The standard normal distribution function Φ(x) = ½ erfc(−x/√2) = ½(1 + erf(x/√2)).
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

/// The standard normal density φ(x) = e^{−x²/2}/√(2π), the derivative of Φ.
pub fn normal_pdf(x: f64) -> f64 {
    INV_SQRT_2PI * (-0.5 * x * x).exp()
}

// ───────────────────────────── activations ─────────────────────────────

/// √(2/π), the slope of the tanh approximation's inner polynomial.
pub const GELU_TANH_SCALE: f64 = 0.797_884_560_802_865_4;
/// The cubic coefficient of the tanh approximation of GELU.
pub const GELU_TANH_CUBIC: f64 = 0.044_715;

/// The nonlinearities a layer can apply elementwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// σ(z) = 1/(1 + e^{−z}); σ′ = σ(1 − σ).
    Sigmoid,
    /// max(0, z); derivative 1 for z > 0 and 0 for z ≤ 0 (the value at the kink is a convention).
    Relu,
    /// GELU(z) = z Φ(z) = ½ z (1 + erf(z/√2)); derivative Φ(z) + z φ(z).
    GeluErf,
    /// GPT-2's approximation ½ z (1 + tanh(√(2/π)(z + 0.044715 z³))), with its exact derivative.
    GeluTanh,
}

impl Activation {
    /// All four, in the order the chapter plots them.
    pub const ALL: [Activation; 4] =
        [Activation::Sigmoid, Activation::Relu, Activation::GeluErf, Activation::GeluTanh];

    /// The name used in plots and tables.
    pub fn name(self) -> &'static str {
        match self {
            Activation::Sigmoid => "sigmoid",
            Activation::Relu => "ReLU",
            Activation::GeluErf => "GELU (erf)",
            Activation::GeluTanh => "GELU (tanh approx.)",
        }
    }

    /// f(z) for one number.
    pub fn apply(self, z: f64) -> f64 {
        match self {
            Activation::Sigmoid => crate::ch01_logistic::sigmoid(z),
            Activation::Relu => z.max(0.0),
            Activation::GeluErf => z * normal_cdf(z),
            Activation::GeluTanh => {
                0.5 * z * (1.0 + (GELU_TANH_SCALE * (z + GELU_TANH_CUBIC * z * z * z)).tanh())
            }
        }
    }

    /// f′(z) for one number.
    pub fn derivative(self, z: f64) -> f64 {
        match self {
            Activation::Sigmoid => crate::ch01_logistic::sigmoid_derivative(z),
            Activation::Relu => {
                if z > 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
            // d/dz [z Φ(z)] = Φ(z) + z φ(z)
            Activation::GeluErf => normal_cdf(z) + z * normal_pdf(z),
            // u = √(2/π)(z + c z³), t = tanh u:  d/dz [½ z (1 + t)] = ½(1 + t) + ½ z (1 − t²) u′
            Activation::GeluTanh => {
                let u = GELU_TANH_SCALE * (z + GELU_TANH_CUBIC * z * z * z);
                let t = u.tanh();
                let du = GELU_TANH_SCALE * (1.0 + 3.0 * GELU_TANH_CUBIC * z * z);
                0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * du
            }
        }
    }
}

// ───────────────────── GELU (tanh form) in single precision, fast ─────────────────────
//
// [`Activation::apply`] and [`Activation::derivative`] are the reference: f64 and the C library's
// tanh. A GPT runs GELU on every hidden unit of every token (4d per token per layer, forward and
// backward), and in f32 the round trip through f64 and the library's tanh, one value at a time,
// cost more than the products around it. The f32 path below evaluates tanh as a ratio of two
// polynomials instead: no branch and no call, so the compiler turns the loop into vector
// instructions. `tests/ch03_mlp.rs` checks it against the reference.

/// Beyond ±this, tanh rounds to ±1 in f32; the rational fit below is made for |x| ≤ it. (The
/// clamp and the coefficients are those of the Eigen library's single-precision `tanh`.)
pub const TANH_F32_CLAMP: f32 = 7.905_311;
/// Numerator coefficients α₁, α₃, …, α₁₃ of the odd polynomial p(x) of tanh x ≈ p(x)/q(x) (Eigen),
/// used rounded to f32.
pub const TANH_F32_NUMERATOR: [f64; 7] = [
    4.893_524_558_917_86e-3,
    6.372_619_288_754_36e-4,
    1.485_722_357_179_79e-5,
    5.122_297_090_371_14e-8,
    -8.604_671_522_137_35e-11,
    2.000_187_904_824_77e-13,
    -2.760_768_477_423_55e-16,
];
/// Denominator coefficients β₀, β₂, β₄, β₆ of the even polynomial q(x) (Eigen), used rounded to
/// f32.
pub const TANH_F32_DENOMINATOR: [f64; 4] = [
    4.893_525_185_543_85e-3,
    2.268_434_632_439e-3,
    1.185_347_056_866_54e-4,
    1.198_258_394_667_02e-6,
];
/// The largest |tanh_f32(x) − tanh(x)| found on a grid of step 5·10⁻⁵ over [−10, 10]
/// (`tests/ch03_mlp.rs` checks a bound of twice this).
pub const TANH_F32_MAX_ERROR: f64 = 3.95e-7;

/// tanh x in f32 as p(x)/q(x) after clamping x to ±[`TANH_F32_CLAMP`] (NaN stays NaN).
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    let [a1, a3, a5, a7, a9, a11, a13] = TANH_F32_NUMERATOR.map(|v| v as f32);
    let [b0, b2, b4, b6] = TANH_F32_DENOMINATOR.map(|v| v as f32);
    let x = x.clamp(-TANH_F32_CLAMP, TANH_F32_CLAMP);
    let x2 = x * x;
    let p = x * (a1 + x2 * (a3 + x2 * (a5 + x2 * (a7 + x2 * (a9 + x2 * (a11 + x2 * a13))))));
    let q = b0 + x2 * (b2 + x2 * (b4 + x2 * b6));
    p / q
}

/// GELU (tanh form) in f32 with [`tanh_f32`]: ½ z (1 + tanh(√(2/π)(z + 0.044715 z³))).
#[inline(always)]
pub fn gelu_tanh_f32(z: f32) -> f32 {
    let (s, c) = (GELU_TANH_SCALE as f32, GELU_TANH_CUBIC as f32);
    0.5 * z * (1.0 + tanh_f32(s * (z + c * z * z * z)))
}

/// The derivative of GELU (tanh form) in f32 with [`tanh_f32`], the same formula as
/// [`Activation::derivative`]: ½(1 + t) + ½ z (1 − t²) u′.
#[inline(always)]
pub fn gelu_tanh_derivative_f32(z: f32) -> f32 {
    let (s, c) = (GELU_TANH_SCALE as f32, GELU_TANH_CUBIC as f32);
    let t = tanh_f32(s * (z + c * z * z * z));
    let du = s * (1.0 + 3.0 * c * z * z);
    0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * du
}

/// Elementwise a = f(z). Shapes: z N×C → a N×C. Computed in f64 by the reference
/// [`Activation::apply`] and rounded back to `T`, except GELU (tanh form) in f32, which takes
/// [`gelu_tanh_f32`].
pub fn activation_forward<T: Float>(act: Activation, z: &DMatrix<T>) -> DMatrix<T> {
    let mut a = DMatrix::zeros(z.nrows(), z.ncols());
    activation_forward_into(act, z.as_slice(), a.as_mut_slice());
    a
}

/// [`activation_forward`] on slices: aᵢ = f(zᵢ) for every i (the slices have equal lengths;
/// extra entries of the longer one are left alone). Chapter 9's fused step writes into buffers it
/// keeps, so this form allocates nothing.
pub fn activation_forward_into<T: Float>(act: Activation, z: &[T], a: &mut [T]) {
    let n = z.len().min(a.len());
    let (z, a) = (&z[..n], &mut a[..n]);
    if act == Activation::GeluTanh
        && let (Some(z32), Some(a32)) = (T::as_f32_slice(z), T::as_f32_slice_mut(a))
        && map_f32(z32, a32, |z, _| gelu_tanh_f32(z)).is_ok()
    {
        // gelu_tanh_f32 on every entry, in the widest registers the CPU has (chapter 10's
        // run-time choice; the same bits as the plain loop).
        return;
    }
    for (a, &z) in a.iter_mut().zip(z) {
        *a = T::of(act.apply(z.as_f64()));
    }
}

/// Elementwise d_z = f′(z) ⊙ d_a, the backward of [`activation_forward`].
/// Shapes: z and d_a both N×C. Errors when they differ.
pub fn activation_backward<T: Float>(
    act: Activation,
    z: &DMatrix<T>,
    d_a: &DMatrix<T>,
) -> Result<DMatrix<T>> {
    if z.shape() != d_a.shape() {
        return Err(shape_error("activation_backward", "z and d_a", shape_of(z), shape_of(d_a)));
    }
    let mut d = d_a.clone();
    activation_backward_in_place(act, z.as_slice(), d.as_mut_slice());
    Ok(d)
}

/// [`activation_backward`] on slices, in place: dᵢ ← f′(zᵢ)·dᵢ, turning ∂C/∂a into ∂C/∂z.
pub fn activation_backward_in_place<T: Float>(act: Activation, z: &[T], d: &mut [T]) {
    let n = z.len().min(d.len());
    let (z, d) = (&z[..n], &mut d[..n]);
    // a = f(z)  ⇒  ∂C/∂z = f′(z) ∂C/∂a
    if act == Activation::GeluTanh
        && let (Some(z32), Some(d32)) = (T::as_f32_slice(z), T::as_f32_slice_mut(d))
        && map_f32(z32, d32, |z, d| gelu_tanh_derivative_f32(z) * d).is_ok()
    {
        return;
    }
    for (d, &z) in d.iter_mut().zip(z) {
        *d = T::of(act.derivative(z.as_f64())) * *d;
    }
}
