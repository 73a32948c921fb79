//! Chapter 3: the multi-layer perceptron, backpropagation by hand, and how an MLP can store a fact.
//!
//! A dense layer computes z = xW + b for a batch x (N×in, one sample per row), an activation
//! a = f(z) bends it, and stacking the two gives the multi-layer perceptron. Backpropagation is the
//! chain rule applied layer by layer from the cost back to the input. The prose is
//! [`chapters/ch03_mlp.md`](../../chapters/ch03_mlp.md); the tests are `tests/ch03_mlp.rs`.
//!
//! The dense layer and the activations ([`dense_forward`], [`dense_backward`], [`Activation`],
//! [`activation_forward`], [`activation_backward`]) are the contract later chapters (XOR, the
//! transformer block, the GPT) are built on.

use crate::errata::Erratum;
use crate::error::{Error, Result, shape_error, shape_of};
use crate::float::{Float, ensure_finite};
use crate::plot::{Figure, LineChart, Series};
use crate::report::{Chapter, Walk, Worked};
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};

/// The document that derives backpropagation through a chain of one-neuron layers.
pub const DOC_BACKPROP: &str = "000_ecafa82feab4bef6.txt";

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
    pub const ALL: [Activation; 4] = [Activation::Sigmoid, Activation::Relu, Activation::GeluErf, Activation::GeluTanh];

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
            Activation::GeluTanh => 0.5 * z * (1.0 + (GELU_TANH_SCALE * (z + GELU_TANH_CUBIC * z * z * z)).tanh()),
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

/// Elementwise a = f(z). Shapes: z N×C → a N×C. Computed in f64 and rounded back to `T`.
pub fn activation_forward<T: Float>(act: Activation, z: &DMatrix<T>) -> DMatrix<T> {
    z.map(|v| T::of(act.apply(v.as_f64())))
}

/// Elementwise d_z = f′(z) ⊙ d_a, the backward of [`activation_forward`].
/// Shapes: z and d_a both N×C. Errors when they differ.
pub fn activation_backward<T: Float>(act: Activation, z: &DMatrix<T>, d_a: &DMatrix<T>) -> Result<DMatrix<T>> {
    if z.shape() != d_a.shape() {
        return Err(shape_error("activation_backward", "z and d_a", shape_of(z), shape_of(d_a)));
    }
    // a = f(z)  ⇒  ∂C/∂z = f′(z) ∂C/∂a
    Ok(z.zip_map(d_a, |zv, g| T::of(act.derivative(zv.as_f64())) * g))
}

// ───────────────────────────── the dense layer ─────────────────────────────

/// y = xW + b, the dense (fully connected) layer.
///
/// Shapes: x N×in (one sample per row), w in×out, b 1×out (added to every row) → N×out.
/// In the document's column notation this is z = Wa + b with W = wᵀ. Errors on an empty batch,
/// widths that do not chain, a bias of the wrong shape, and NaN or infinite entries.
pub fn dense_forward<T: Float>(x: &DMatrix<T>, w: &DMatrix<T>, b: &DMatrix<T>) -> Result<DMatrix<T>> {
    const OP: &str = "dense_forward";
    if x.nrows() == 0 {
        return Err(Error::Empty { op: OP, arg: "x (the batch)" });
    }
    if w.nrows() == 0 || w.ncols() == 0 {
        return Err(Error::Empty { op: OP, arg: "w" });
    }
    if x.ncols() != w.nrows() {
        return Err(shape_error(
            OP,
            "x and w (x's width must equal w's rows)",
            format!("x N×{} for w {}", w.nrows(), shape_of(w)),
            format!("x {}, w {}", shape_of(x), shape_of(w)),
        ));
    }
    if b.nrows() != 1 || b.ncols() != w.ncols() {
        return Err(shape_error(OP, "b", format!("1×{} (one bias per output)", w.ncols()), shape_of(b)));
    }
    ensure_finite(OP, "x", x)?;
    ensure_finite(OP, "w", w)?;
    ensure_finite(OP, "b", b)?;
    let mut y = crate::matmul::matmul(x, w)?;
    for mut row in y.row_iter_mut() {
        row += b;
    }
    Ok(y)
}

/// The gradients of the cost with respect to the three arguments of [`dense_forward`].
#[derive(Clone, Debug, PartialEq)]
pub struct DenseGrads<T: Float> {
    /// ∂C/∂x = d_y Wᵀ, N×in.
    pub d_x: DMatrix<T>,
    /// ∂C/∂W = xᵀ d_y, in×out.
    pub d_w: DMatrix<T>,
    /// ∂C/∂b = the column sums of d_y, 1×out.
    pub d_b: DMatrix<T>,
}

/// Backward of [`dense_forward`]: from d_y = ∂C/∂y (N×out) to the gradients of x, W and b.
/// Errors when x, w and d_y do not chain or d_y holds NaN.
pub fn dense_backward<T: Float>(x: &DMatrix<T>, w: &DMatrix<T>, d_y: &DMatrix<T>) -> Result<DenseGrads<T>> {
    const OP: &str = "dense_backward";
    if x.ncols() != w.nrows() {
        return Err(shape_error(OP, "x and w", format!("x N×{}", w.nrows()), format!("x {}, w {}", shape_of(x), shape_of(w))));
    }
    if d_y.nrows() != x.nrows() || d_y.ncols() != w.ncols() {
        return Err(shape_error(OP, "d_y", format!("{}×{} (rows of x × columns of w)", x.nrows(), w.ncols()), shape_of(d_y)));
    }
    ensure_finite(OP, "d_y", d_y)?;
    let d_w = crate::matmul::matmul_tn(x, d_y)?; // y = xW     ⇒ ∂C/∂W = xᵀ ∂C/∂y
    let d_x = crate::matmul::matmul_nt(d_y, w)?; // y = xW     ⇒ ∂C/∂x = ∂C/∂y Wᵀ
    let d_b = DMatrix::from_fn(1, d_y.ncols(), |_, c| d_y.column(c).iter().copied().sum()); // y = … + b (every row) ⇒ ∂C/∂b = Σ_rows ∂C/∂y
    Ok(DenseGrads { d_x, d_w, d_b })
}

// ───────────────────────────── errata, worked numbers ─────────────────────────────

/// This chapter's rows of the errata register.
pub const ERRATA: &[Erratum] = &[];

/// The document with the worked XOR networks.
pub const DOC_XOR: &str = "003_c14ec70d95c4a8c1.txt";

/// The chapter's worked numbers, recomputed.
pub fn worked() -> Result<Vec<Worked>> {
    // One ReLU unit of the document's XOR network: y = ReLU(h₁·1 + h₂·1 − 0.5) at h = (0, 1).
    let h = DMatrix::from_row_slice(1, 2, &[0.0, 1.0]);
    let w = DMatrix::from_row_slice(2, 1, &[1.0, 1.0]);
    let b = DMatrix::from_row_slice(1, 1, &[-0.5]);
    let y = activation_forward(Activation::Relu, &dense_forward(&h, &w, &b)?);
    Ok(vec![Worked::number("relu_unit_on_hidden_0_1_gives_0_5", DOC_XOR, "ReLU(0×1 + 1×1 − 0.5)", "0.5", y[(0, 0)])])
}

// ───────────────────────────── walk-through and plots ─────────────────────────────

/// The chapter in the order the document derives it.
pub fn walk(out: &mut Walk) -> Result<()> {
    out.step("1. The activations and their derivatives at a few points")?;
    for act in Activation::ALL {
        for z in [-2.0, 0.5, 2.0] {
            out.scalar(&format!("{}({z})", act.name()), act.apply(z))?;
            out.scalar(&format!("{}′({z})", act.name()), act.derivative(z))?;
        }
    }
    Ok(())
}

/// The chapter's figures as data: (file stem, figure).
pub fn figures() -> Result<Vec<(String, Figure)>> {
    let grid: Vec<f64> = (0..=240).map(|i| -4.0 + 8.0 * i as f64 / 240.0).collect();
    let curve = |f: &dyn Fn(f64) -> f64| grid.iter().map(|&z| (z, f(z))).collect::<Vec<_>>();
    let values = Figure::Line(LineChart {
        title: "Activation functions".into(),
        x_label: "z".into(),
        y_label: "f(z)".into(),
        series: Activation::ALL.iter().map(|&a| Series::new(a.name(), curve(&|z| a.apply(z)))).collect(),
        markers: false,
    });
    let slopes = Figure::Line(LineChart {
        title: "Their derivatives".into(),
        x_label: "z".into(),
        y_label: "f′(z)".into(),
        series: Activation::ALL.iter().map(|&a| Series::new(format!("{}′", a.name()), curve(&|z| a.derivative(z)))).collect(),
        markers: false,
    });
    Ok(vec![("ch03_activations".into(), values), ("ch03_activation_derivatives".into(), slopes)])
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for (stem, f) in figures()? {
        out.extend(f.save(dir, &stem)?);
    }
    Ok(out)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter =
    Chapter { number: 3, stem: "ch03_mlp", title: "The multi-layer perceptron and backpropagation", worked, walk, plots, errata: ERRATA };
