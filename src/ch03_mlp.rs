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
use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::{Float, ensure_finite};
use crate::matmul::map_f32;
use crate::optim::Sgd;
use crate::plot::{Figure, LineChart, Series};
use crate::report::{Chapter, Walk, Worked};
use crate::rng::Rng;
use crate::snapshot::fixed;
use crate::sources::{D0, D1, D4};
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};

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
/// Denominator coefficients β₀, β₂, β₄, β₆ of the even polynomial q(x) (Eigen), used rounded to f32.
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

// ───────────────────────────── the dense layer ─────────────────────────────

/// y = xW + b, the dense (fully connected) layer.
///
/// Shapes: x N×in (one sample per row), w in×out, b 1×out (added to every row) → N×out.
/// In the document's column notation this is z = Wa + b with W = wᵀ. Errors on an empty batch,
/// widths that do not chain, a bias of the wrong shape, and NaN or infinite entries.
pub fn dense_forward<T: Float>(
    x: &DMatrix<T>,
    w: &DMatrix<T>,
    b: &DMatrix<T>,
) -> Result<DMatrix<T>> {
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
        return Err(shape_error(
            OP,
            "b",
            format!("1×{} (one bias per output)", w.ncols()),
            shape_of(b),
        ));
    }
    ensure_finite(OP, "x", x)?;
    ensure_finite(OP, "w", w)?;
    ensure_finite(OP, "b", b)?;
    let mut y = crate::matmul::matmul(x, w)?;
    // Every row gets b; walked column by column, the order y is stored in.
    for (mut column, &bias) in y.column_iter_mut().zip(b.iter()) {
        column.iter_mut().for_each(|v| *v += bias);
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
pub fn dense_backward<T: Float>(
    x: &DMatrix<T>,
    w: &DMatrix<T>,
    d_y: &DMatrix<T>,
) -> Result<DenseGrads<T>> {
    const OP: &str = "dense_backward";
    if x.ncols() != w.nrows() {
        return Err(shape_error(
            OP,
            "x and w",
            format!("x N×{}", w.nrows()),
            format!("x {}, w {}", shape_of(x), shape_of(w)),
        ));
    }
    if d_y.nrows() != x.nrows() || d_y.ncols() != w.ncols() {
        return Err(shape_error(
            OP,
            "d_y",
            format!("{}×{} (rows of x × columns of w)", x.nrows(), w.ncols()),
            shape_of(d_y),
        ));
    }
    ensure_finite(OP, "d_y", d_y)?;
    let d_w = crate::matmul::matmul_tn(x, d_y)?; // y = xW     ⇒ ∂C/∂W = xᵀ ∂C/∂y
    let d_x = crate::matmul::matmul_nt(d_y, w)?; // y = xW     ⇒ ∂C/∂x = ∂C/∂y Wᵀ
    let d_b = DMatrix::from_fn(1, d_y.ncols(), |_, c| d_y.column(c).iter().copied().sum()); // y = … + b (every row) ⇒ ∂C/∂b = Σ_rows ∂C/∂y
    Ok(DenseGrads { d_x, d_w, d_b })
}

// ───────────────────────────── the cost ─────────────────────────────

fn check_same_shape<T: Float>(op: &'static str, a: &DMatrix<T>, y: &DMatrix<T>) -> Result<()> {
    if a.nrows() == 0 || a.ncols() == 0 {
        return Err(Error::Empty { op, arg: "a (the predictions)" });
    }
    if a.shape() != y.shape() {
        return Err(shape_error(
            op,
            "a and y",
            format!("y {} like a", shape_of(a)),
            format!("a {}, y {}", shape_of(a), shape_of(y)),
        ));
    }
    ensure_finite(op, "a", a)?;
    ensure_finite(op, "y", y)
}

/// The squared-error cost of the document: C = (1/N) Σₖ Cₖ with Cₖ = Σⱼ (aⱼ − yⱼ)², the sum of
/// squared differences of one sample averaged over the N samples (rows). For one output column
/// this is the usual mean squared error. Shapes: a and y both N×K.
pub fn mse<T: Float>(a: &DMatrix<T>, y: &DMatrix<T>) -> Result<T> {
    check_same_shape("mse", a, y)?;
    let n = T::of(a.nrows() as f64);
    Ok(a.zip_map(y, |ai, yi| (ai - yi) * (ai - yi)).sum() / n)
}

/// Backward of [`mse`]: ∂C/∂a = 2(a − y)/N, N×K.
pub fn mse_backward<T: Float>(a: &DMatrix<T>, y: &DMatrix<T>) -> Result<DMatrix<T>> {
    check_same_shape("mse_backward", a, y)?;
    let scale = T::of(2.0 / a.nrows() as f64);
    Ok(a.zip_map(y, |ai, yi| scale * (ai - yi))) // C = (1/N) Σ (a − y)²  ⇒  ∂C/∂a = 2(a − y)/N
}

// ───────────────────────────── the multi-layer perceptron ─────────────────────────────

/// One layer: z = xW + b, then a = f(z) (or a = z for a linear layer).
#[derive(Clone, Debug, PartialEq)]
pub struct Layer<T: Float> {
    /// in×out weights (the document's W transposed: one column per neuron of this layer).
    pub w: DMatrix<T>,
    /// 1×out biases, one per neuron.
    pub b: DMatrix<T>,
    /// The nonlinearity, or `None` for a linear (identity) layer such as a regression output.
    pub activation: Option<Activation>,
}

/// The gradients of one layer's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerGrads<T: Float> {
    /// ∂C/∂W, in×out.
    pub d_w: DMatrix<T>,
    /// ∂C/∂b, 1×out.
    pub d_b: DMatrix<T>,
}

/// What the forward pass keeps for the backward pass: each layer's input and pre-activation.
#[derive(Clone, Debug)]
pub struct Trace<T: Float> {
    /// a⁽ˡ⁻¹⁾ for every layer l (the first is the batch itself).
    pub inputs: Vec<DMatrix<T>>,
    /// z⁽ˡ⁾ = a⁽ˡ⁻¹⁾W⁽ˡ⁾ + b⁽ˡ⁾ for every layer.
    pub pre: Vec<DMatrix<T>>,
    /// The network's output a⁽ᴸ⁾.
    pub output: DMatrix<T>,
}

/// A multi-layer perceptron of any depth and width: layers applied in order, each a dense layer
/// and an optional activation. The layer widths are checked to chain when it is built.
#[derive(Clone, Debug, PartialEq)]
pub struct Mlp<T: Float> {
    layers: Vec<Layer<T>>,
}

impl<T: Float> Mlp<T> {
    /// An MLP from given layers. Errors when there are none, when a layer's W is empty, when
    /// consecutive widths do not chain (W⁽ˡ⁾ has as many rows as W⁽ˡ⁻¹⁾ has columns), when a bias is
    /// not 1×out, or when any parameter is NaN or infinite.
    pub fn from_layers(layers: Vec<Layer<T>>) -> Result<Self> {
        const OP: &str = "Mlp::from_layers";
        if layers.is_empty() {
            return Err(Error::Empty { op: OP, arg: "layers" });
        }
        for (l, layer) in layers.iter().enumerate() {
            if layer.w.nrows() == 0 || layer.w.ncols() == 0 {
                return Err(Error::Empty { op: OP, arg: "a layer's w" });
            }
            if layer.b.nrows() != 1 || layer.b.ncols() != layer.w.ncols() {
                return Err(shape_error(
                    OP,
                    "a layer's b",
                    format!("layer {l}: b 1×{} for w {}", layer.w.ncols(), shape_of(&layer.w)),
                    format!("b {}", shape_of(&layer.b)),
                ));
            }
            if l > 0 && layers[l - 1].w.ncols() != layer.w.nrows() {
                return Err(shape_error(
                    OP,
                    "consecutive layers (widths do not chain)",
                    format!(
                        "layer {l}'s w to have {} rows (layer {}'s outputs)",
                        layers[l - 1].w.ncols(),
                        l - 1
                    ),
                    format!(
                        "layer {}: w {}, layer {l}: w {}",
                        l - 1,
                        shape_of(&layers[l - 1].w),
                        shape_of(&layer.w)
                    ),
                ));
            }
            ensure_finite(OP, "a layer's w", &layer.w)?;
            ensure_finite(OP, "a layer's b", &layer.b)?;
        }
        Ok(Mlp { layers })
    }

    /// A randomly initialised MLP with the given widths `[in, h₁, …, out]`: weights
    /// N(0, gain/fan_in) with gain 2 for ReLU and GELU hidden layers (He) and 1 for sigmoid
    /// (Xavier-like), biases N(0, bias_std²). Hidden layers use `hidden`, the last layer `output`.
    pub fn random(
        sizes: &[usize],
        hidden: Activation,
        output: Option<Activation>,
        bias_std: f64,
        rng: &mut Rng,
    ) -> Result<Self> {
        const OP: &str = "Mlp::random";
        if sizes.len() < 2 {
            return Err(invalid(
                OP,
                "sizes",
                format!("need at least an input and an output width, got {sizes:?}"),
            ));
        }
        if let Some(i) = sizes.iter().position(|&s| s == 0) {
            return Err(invalid(OP, "sizes", format!("width {i} is zero in {sizes:?}")));
        }
        if !(bias_std.is_finite() && bias_std >= 0.0) {
            return Err(invalid(OP, "bias_std", format!("must be finite and ≥ 0, got {bias_std}")));
        }
        let gain = if hidden == Activation::Sigmoid { 1.0 } else { 2.0 };
        let last = sizes.len() - 2;
        let layers = sizes
            .windows(2)
            .enumerate()
            .map(|(l, pair)| Layer {
                w: rng.normal_matrix(pair[0], pair[1], (gain / pair[0] as f64).sqrt()),
                b: rng.normal_matrix(1, pair[1], bias_std),
                activation: if l == last { output } else { Some(hidden) },
            })
            .collect();
        Mlp::from_layers(layers)
    }

    /// The layers, first to last.
    pub fn layers(&self) -> &[Layer<T>] {
        &self.layers
    }

    /// The widths `[in, h₁, …, out]`.
    pub fn sizes(&self) -> Vec<usize> {
        std::iter::once(self.layers[0].w.nrows())
            .chain(self.layers.iter().map(|l| l.w.ncols()))
            .collect()
    }

    /// The number of weights and biases.
    pub fn parameter_count(&self) -> usize {
        self.layers.iter().map(|l| l.w.len() + l.b.len()).sum()
    }

    /// The forward pass, keeping what the backward pass needs. x: N×in → output N×out.
    /// Errors on an empty batch, a wrong input width, or NaN inputs (through [`dense_forward`]).
    pub fn forward(&self, x: &DMatrix<T>) -> Result<Trace<T>> {
        let mut inputs = Vec::with_capacity(self.layers.len());
        let mut pre = Vec::with_capacity(self.layers.len());
        let mut a = x.clone();
        for layer in &self.layers {
            let z = dense_forward(&a, &layer.w, &layer.b)?; // z⁽ˡ⁾ = a⁽ˡ⁻¹⁾W⁽ˡ⁾ + b⁽ˡ⁾
            let next = match layer.activation {
                Some(act) => activation_forward(act, &z), // a⁽ˡ⁾ = f(z⁽ˡ⁾)
                None => z.clone(),
            };
            inputs.push(a);
            pre.push(z);
            a = next;
        }
        Ok(Trace { inputs, pre, output: a })
    }

    /// The output only.
    pub fn predict(&self, x: &DMatrix<T>) -> Result<DMatrix<T>> {
        Ok(self.forward(x)?.output)
    }

    /// Backpropagation: from ∂C/∂a⁽ᴸ⁾ (N×out) to every layer's (∂C/∂W, ∂C/∂b), and ∂C/∂x.
    pub fn backward(
        &self,
        trace: &Trace<T>,
        d_out: &DMatrix<T>,
    ) -> Result<(Vec<LayerGrads<T>>, DMatrix<T>)> {
        if d_out.shape() != trace.output.shape() {
            return Err(shape_error(
                "Mlp::backward",
                "d_out",
                shape_of(&trace.output),
                shape_of(d_out),
            ));
        }
        let mut grads = Vec::with_capacity(self.layers.len());
        let mut d_a = d_out.clone();
        for (l, layer) in self.layers.iter().enumerate().rev() {
            let d_z = match layer.activation {
                Some(act) => activation_backward(act, &trace.pre[l], &d_a)?, // a = f(z) ⇒ ∂C/∂z = f′(z) ⊙ ∂C/∂a
                None => d_a,
            };
            let g = dense_backward(&trace.inputs[l], &layer.w, &d_z)?; // z = a⁽ˡ⁻¹⁾W + b
            grads.push(LayerGrads { d_w: g.d_w, d_b: g.d_b });
            d_a = g.d_x; // the previous layer's ∂C/∂a
        }
        grads.reverse();
        Ok((grads, d_a))
    }

    /// The cost [`mse`] on (x, y) and the gradient of every layer's parameters.
    pub fn loss_and_gradients(
        &self,
        x: &DMatrix<T>,
        y: &DMatrix<T>,
    ) -> Result<(T, Vec<LayerGrads<T>>)> {
        let trace = self.forward(x)?;
        let cost = mse(&trace.output, y)?;
        let (grads, _) = self.backward(&trace, &mse_backward(&trace.output, y)?)?;
        Ok((cost, grads))
    }

    /// One gradient-descent step W ← W − α ∂C/∂W, b ← b − α ∂C/∂b on every layer.
    pub fn step(&mut self, grads: &[LayerGrads<T>], sgd: &Sgd) -> Result<()> {
        if grads.len() != self.layers.len() {
            return Err(invalid(
                "Mlp::step",
                "grads",
                format!("{} layers but {} gradients", self.layers.len(), grads.len()),
            ));
        }
        let mut params: Vec<&mut DMatrix<T>> =
            self.layers.iter_mut().flat_map(|l| [&mut l.w, &mut l.b]).collect();
        let g: Vec<&DMatrix<T>> = grads.iter().flat_map(|g| [&g.d_w, &g.d_b]).collect();
        sgd.step(&mut params, &g)
    }
}

/// How to train an MLP by mini-batch gradient descent.
#[derive(Clone, Copy, Debug)]
pub struct TrainConfig {
    /// The learning rate α (finite, > 0).
    pub learning_rate: f64,
    /// Passes over the data.
    pub epochs: usize,
    /// Samples per gradient step (≥ 1; the last batch of an epoch may be smaller). A batch size
    /// of at least N is full-batch gradient descent.
    pub batch_size: usize,
    /// Seed of the per-epoch shuffle.
    pub seed: u64,
}

/// Mini-batch gradient descent on the cost [`mse`]: every epoch shuffles the rows, cuts them into
/// batches and takes one step per batch on that batch's average gradient. Returns the cost on
/// the whole data set before training and after every epoch (`epochs + 1` values).
pub fn train<T: Float>(
    mlp: &mut Mlp<T>,
    x: &DMatrix<T>,
    y: &DMatrix<T>,
    config: TrainConfig,
) -> Result<Vec<f64>> {
    const OP: &str = "train";
    let sgd = Sgd::new(config.learning_rate)?;
    if config.batch_size == 0 {
        return Err(invalid(OP, "batch_size", "must be at least 1"));
    }
    if x.nrows() != y.nrows() {
        return Err(shape_error(
            OP,
            "x and y",
            format!("y with {} rows (one per sample)", x.nrows()),
            format!("x {}, y {}", shape_of(x), shape_of(y)),
        ));
    }
    let mut costs = vec![mse(&mlp.predict(x)?, y)?.as_f64()];
    let mut rng = Rng::new(config.seed);
    let mut order: Vec<usize> = (0..x.nrows()).collect();
    let full = config.batch_size >= x.nrows();
    for _ in 0..config.epochs {
        if full {
            let (_, grads) = mlp.loss_and_gradients(x, y)?;
            mlp.step(&grads, &sgd)?;
        } else {
            rng.shuffle(&mut order);
            for batch in order.chunks(config.batch_size) {
                let xb = x.select_rows(batch);
                let yb = y.select_rows(batch);
                let (_, grads) = mlp.loss_and_gradients(&xb, &yb)?;
                mlp.step(&grads, &sgd)?;
            }
        }
        let cost = mse(&mlp.predict(x)?, y)?.as_f64();
        if !cost.is_finite() {
            return Err(invalid(
                OP,
                "learning rate α",
                format!("training diverged (cost {cost}) at α = {}", config.learning_rate),
            ));
        }
        costs.push(cost);
    }
    Ok(costs)
}

// ───────────────── the document's chain of one-neuron layers ─────────────────

/// A chain of one-neuron sigmoid layers: a⁽ˡ⁾ = σ(z⁽ˡ⁾), z⁽ˡ⁾ = w⁽ˡ⁾a⁽ˡ⁻¹⁾ + b⁽ˡ⁾ for l = 1 … L,
/// a⁽⁰⁾ the input. `w[l − 1]` and `b[l − 1]` hold w⁽ˡ⁾ and b⁽ˡ⁾.
#[derive(Clone, Debug, PartialEq)]
pub struct Chain {
    /// w⁽¹⁾ … w⁽ᴸ⁾.
    pub w: Vec<f64>,
    /// b⁽¹⁾ … b⁽ᴸ⁾.
    pub b: Vec<f64>,
}

/// Every z⁽ˡ⁾ and a⁽ˡ⁾ of one pass through a [`Chain`]; `a[0]` is the input.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainTrace {
    /// z⁽¹⁾ … z⁽ᴸ⁾ (index l − 1).
    pub z: Vec<f64>,
    /// a⁽⁰⁾ … a⁽ᴸ⁾ (index l).
    pub a: Vec<f64>,
}

/// The gradient of C₀ with respect to every weight and bias of a chain, and to its input.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainGrads {
    /// ∂C₀/∂w⁽ˡ⁾ for l = 1 … L.
    pub d_w: Vec<f64>,
    /// ∂C₀/∂b⁽ˡ⁾ for l = 1 … L.
    pub d_b: Vec<f64>,
    /// ∂C₀/∂a⁽⁰⁾.
    pub d_input: f64,
}

impl Chain {
    /// A chain from its weights and biases; errors when the lengths differ, are zero, or hold NaN.
    pub fn new(w: Vec<f64>, b: Vec<f64>) -> Result<Self> {
        if w.is_empty() {
            return Err(Error::Empty { op: "Chain::new", arg: "w" });
        }
        if w.len() != b.len() {
            return Err(shape_error(
                "Chain::new",
                "w and b",
                format!("{} biases (one per weight)", w.len()),
                format!("{}", b.len()),
            ));
        }
        crate::float::ensure_finite_slice("Chain::new", "w", &w)?;
        crate::float::ensure_finite_slice("Chain::new", "b", &b)?;
        Ok(Chain { w, b })
    }

    /// L, the number of layers after the input.
    pub fn depth(&self) -> usize {
        self.w.len()
    }

    /// The forward pass from a⁽⁰⁾ = `input`.
    pub fn forward(&self, input: f64) -> ChainTrace {
        let mut a = vec![input];
        let mut z = Vec::with_capacity(self.depth());
        for (w, b) in self.w.iter().zip(&self.b) {
            let zl = w * a[a.len() - 1] + b;
            z.push(zl);
            a.push(crate::ch01_logistic::sigmoid(zl));
        }
        ChainTrace { z, a }
    }

    /// C₀ = (a⁽ᴸ⁾ − y)² for one training example.
    pub fn cost(&self, input: f64, y: f64) -> f64 {
        let out = self.forward(input).a[self.depth()];
        (out - y) * (out - y)
    }

    /// Backpropagation down the chain, one layer at a time:
    /// ∂C₀/∂w⁽ˡ⁾ = a⁽ˡ⁻¹⁾ σ′(z⁽ˡ⁾) ∂C₀/∂a⁽ˡ⁾, ∂C₀/∂b⁽ˡ⁾ = σ′(z⁽ˡ⁾) ∂C₀/∂a⁽ˡ⁾,
    /// ∂C₀/∂a⁽ˡ⁻¹⁾ = w⁽ˡ⁾ σ′(z⁽ˡ⁾) ∂C₀/∂a⁽ˡ⁾, starting from ∂C₀/∂a⁽ᴸ⁾ = 2(a⁽ᴸ⁾ − y).
    pub fn gradients(&self, input: f64, y: f64) -> ChainGrads {
        let t = self.forward(input);
        let l_max = self.depth();
        let mut d_a = d_c0_d_a_last(t.a[l_max], y);
        let (mut d_w, mut d_b) = (vec![0.0; l_max], vec![0.0; l_max]);
        for l in (1..=l_max).rev() {
            let s = crate::ch01_logistic::sigmoid_derivative(t.z[l - 1]);
            d_w[l - 1] = t.a[l - 1] * s * d_a; // z⁽ˡ⁾ = w⁽ˡ⁾a⁽ˡ⁻¹⁾ + b⁽ˡ⁾ ⇒ ∂z/∂w = a⁽ˡ⁻¹⁾
            d_b[l - 1] = s * d_a; //                                  ∂z/∂b = 1
            d_a *= self.w[l - 1] * s; //                              ∂z/∂a⁽ˡ⁻¹⁾ = w⁽ˡ⁾
        }
        ChainGrads { d_w, d_b, d_input: d_a }
    }

    /// The cost over several training examples, C = (1/n) Σₖ Cₖ, and its gradient
    /// ∂C/∂w⁽ˡ⁾ = (1/n) Σₖ ∂Cₖ/∂w⁽ˡ⁾ (likewise for b). Errors on no examples or mismatched lengths.
    pub fn average_gradients(&self, inputs: &[f64], ys: &[f64]) -> Result<ChainAverage> {
        if inputs.is_empty() {
            return Err(Error::Empty { op: "Chain::average_gradients", arg: "inputs" });
        }
        if inputs.len() != ys.len() {
            return Err(shape_error(
                "Chain::average_gradients",
                "inputs and ys",
                format!("{} targets", inputs.len()),
                format!("{}", ys.len()),
            ));
        }
        crate::float::ensure_finite_slice("Chain::average_gradients", "inputs", inputs)?;
        crate::float::ensure_finite_slice("Chain::average_gradients", "ys", ys)?;
        let n = inputs.len() as f64;
        let mut avg =
            ChainAverage { cost: 0.0, d_w: vec![0.0; self.depth()], d_b: vec![0.0; self.depth()] };
        for (&x, &y) in inputs.iter().zip(ys) {
            let g = self.gradients(x, y);
            avg.cost += self.cost(x, y) / n;
            for l in 0..self.depth() {
                avg.d_w[l] += g.d_w[l] / n;
                avg.d_b[l] += g.d_b[l] / n;
            }
        }
        Ok(avg)
    }
}

/// The cost of a [`Chain`] averaged over training examples, and its gradient.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainAverage {
    /// C = (1/n) Σₖ Cₖ.
    pub cost: f64,
    /// ∂C/∂w⁽ˡ⁾ = (1/n) Σₖ ∂Cₖ/∂w⁽ˡ⁾ for l = 1 … L.
    pub d_w: Vec<f64>,
    /// ∂C/∂b⁽ˡ⁾ = (1/n) Σₖ ∂Cₖ/∂b⁽ˡ⁾ for l = 1 … L.
    pub d_b: Vec<f64>,
}

/// ∂C₀/∂a⁽ᴸ⁾ = 2(a⁽ᴸ⁾ − y), the derivative of C₀ = (a⁽ᴸ⁾ − y)² (the document prints a z where the 2 belongs).
pub fn d_c0_d_a_last(a_last: f64, y: f64) -> f64 {
    2.0 * (a_last - y)
}

/// ∂C₀/∂w⁽ᴸ⁾ = a⁽ᴸ⁻¹⁾ · σ′(z⁽ᴸ⁾) · 2(a⁽ᴸ⁾ − y), the three chain-rule factors of the last layer.
pub fn d_c0_d_w_last(trace: &ChainTrace, y: f64) -> f64 {
    let l = trace.z.len();
    trace.a[l - 1]
        * crate::ch01_logistic::sigmoid_derivative(trace.z[l - 1])
        * d_c0_d_a_last(trace.a[l], y)
}

/// ∂C₀/∂b⁽ᴸ⁾ = 1 · σ′(z⁽ᴸ⁾) · 2(a⁽ᴸ⁾ − y).
pub fn d_c0_d_b_last(trace: &ChainTrace, y: f64) -> f64 {
    let l = trace.z.len();
    crate::ch01_logistic::sigmoid_derivative(trace.z[l - 1]) * d_c0_d_a_last(trace.a[l], y)
}

/// ∂C₀/∂a⁽ᴸ⁻¹⁾ = w⁽ᴸ⁾ · σ′(z⁽ᴸ⁾) · 2(a⁽ᴸ⁾ − y): how the last weight carries the error one layer back.
pub fn d_c0_d_a_prev(chain: &Chain, trace: &ChainTrace, y: f64) -> f64 {
    let l = trace.z.len();
    chain.w[l - 1]
        * crate::ch01_logistic::sigmoid_derivative(trace.z[l - 1])
        * d_c0_d_a_last(trace.a[l], y)
}

/// The multi-neuron form, written as the document's sum over the neurons j of layer L:
/// ∂C₀/∂aₖ⁽ᴸ⁻¹⁾ = Σⱼ₌₀^{n_L − 1} wⱼₖ⁽ᴸ⁾ σ′(zⱼ⁽ᴸ⁾) 2(aⱼ⁽ᴸ⁾ − yⱼ), for a sigmoid layer
/// a⁽ᴸ⁾ = σ(W a⁽ᴸ⁻¹⁾ + b) with W of n_L rows (document orientation: one row per neuron of layer L).
/// Shapes: `w_rows` n_L×n_{L−1}, `b` and `y` length n_L, `a_prev` length n_{L−1}; returns length n_{L−1}.
pub fn d_c0_d_a_prev_sum(
    w_rows: &DMatrix<f64>,
    b: &[f64],
    a_prev: &[f64],
    y: &[f64],
) -> Result<Vec<f64>> {
    const OP: &str = "d_c0_d_a_prev_sum";
    let (n_l, n_prev) = w_rows.shape();
    if a_prev.len() != n_prev || b.len() != n_l || y.len() != n_l {
        return Err(shape_error(
            OP,
            "w_rows, b, a_prev, y",
            format!("b and y of length {n_l}, a_prev of length {n_prev} for W {n_l}×{n_prev}"),
            format!("b {}, a_prev {}, y {}", b.len(), a_prev.len(), y.len()),
        ));
    }
    let mut out = vec![0.0; n_prev];
    for (k, o) in out.iter_mut().enumerate() {
        for j in 0..n_l {
            let zj: f64 = (0..n_prev).map(|i| w_rows[(j, i)] * a_prev[i]).sum::<f64>() + b[j];
            let aj = crate::ch01_logistic::sigmoid(zj);
            *o += w_rows[(j, k)] * crate::ch01_logistic::sigmoid_derivative(zj) * 2.0 * (aj - y[j]);
        }
    }
    Ok(out)
}

/// The chapter's four-layer chain (the document's "4 layers with one neuron": a⁽⁰⁾ and three
/// sigmoid layers), its input and its target.
pub fn chapter_chain() -> (Chain, f64, f64) {
    (Chain { w: vec![1.5, -2.0, 0.8], b: vec![0.1, 0.3, -0.2] }, 0.6, 0.2)
}

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
    let mut mlp = Mlp::<f64>::random(&SIN_SIZES, Activation::Relu, None, 0.5, &mut rng)?;
    let costs = train(&mut mlp, &xm, &ym, TrainConfig { epochs, ..SIN_TRAIN })?;
    let pred = mlp.predict(&xm)?;
    let mlp_fit: Vec<f64> = pred.iter().copied().collect();
    let n = x.len() as f64;
    let line_mse = line_fit.iter().zip(&y).map(|(p, t)| (p - t) * (p - t)).sum::<f64>() / n;
    let mlp_mse = mse(&pred, &ym)?;
    Ok(SinFits { x, y, line, line_fit, mlp_fit, line_mse, mlp_mse, costs })
}

// ───────────────────────────── an MLP that stores a fact ─────────────────────────────

/// The named directions of the toy embedding space, in the order they are built.
pub const FACT_DIRECTIONS: [&str; 6] = [
    "first name Michael",
    "last name Jordan",
    "basketball",
    "first name Alexis",
    "last name Phelps",
    "swimming",
];
/// The width of the toy embedding space (room for the six directions and two spare ones).
pub const FACT_DIM: usize = 8;

/// The fact-storing MLP: unit directions in a small embedding space and an MLP whose first neuron
/// is an AND gate for "Michael" and "Jordan" that writes "basketball", and whose second neuron does
/// the same for "Michael" and "Phelps" → "swimming".
#[derive(Clone, Debug)]
pub struct FactMlp {
    /// Orthonormal directions, one row each, in the order of [`FACT_DIRECTIONS`] (6×8).
    pub directions: DMatrix<f64>,
    /// Up-projection (8×2 here; the document's matrix with rows M + J and M + P, transposed),
    /// bias −1 on both neurons, ReLU, then the down-projection (2×8) whose rows are the
    /// basketball and swimming directions (the document's columns).
    pub mlp: Mlp<f64>,
}

impl FactMlp {
    /// The direction with this name.
    pub fn direction(&self, name: &str) -> Result<DMatrix<f64>> {
        let i = FACT_DIRECTIONS.iter().position(|d| *d == name).ok_or_else(|| {
            invalid(
                "FactMlp::direction",
                "name",
                format!("no direction {name:?}; known: {FACT_DIRECTIONS:?}"),
            )
        })?;
        Ok(self.directions.rows(i, 1).into_owned())
    }

    /// The sum of the named directions: how a vector encoding these features looks (1×d).
    pub fn encode(&self, names: &[&str]) -> Result<DMatrix<f64>> {
        let mut e = DMatrix::zeros(1, FACT_DIM);
        for n in names {
            e += self.direction(n)?;
        }
        Ok(e)
    }

    /// The up-projection's pre-activations (one row per input, one column per neuron):
    /// E·(M + J) − 1 and E·(M + P) − 1.
    pub fn neuron_inputs(&self, e: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        let up = &self.mlp.layers()[0];
        dense_forward(e, &up.w, &up.b)
    }

    /// The residual block: E + MLP(E).
    pub fn block(&self, e: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        Ok(e + self.mlp.predict(e)?)
    }
}

/// Orthonormal rows by Gram–Schmidt on seeded Gaussian vectors: `n` unit vectors in `d`
/// dimensions, pairwise exactly orthogonal up to rounding. Errors when n > d (impossible).
pub fn orthonormal_rows(n: usize, d: usize, seed: u64) -> Result<DMatrix<f64>> {
    if n > d {
        return Err(invalid(
            "orthonormal_rows",
            "n",
            format!("at most d = {d} vectors can be orthonormal in {d} dimensions, asked for {n}"),
        ));
    }
    let mut rng = Rng::new(seed);
    let mut q: DMatrix<f64> = DMatrix::zeros(n, d);
    for i in 0..n {
        let mut v = rng.normal_matrix::<f64>(1, d, 1.0);
        // Twice, for orthogonality to the last bit (classical Gram–Schmidt, reorthogonalised).
        for _ in 0..2 {
            for j in 0..i {
                let qj = q.row(j).into_owned();
                let proj = v.dot(&qj);
                v -= qj * proj;
            }
        }
        let norm = v.norm();
        q.row_mut(i).copy_from(&(v / norm));
    }
    Ok(q)
}

/// An activation above this counts as firing: partial names sit exactly on the ReLU's kink
/// (ReLU(1 − 1) = 0), where rounding of the random directions can leave ~1e-16.
pub const FIRING: f64 = 1e-12;

/// Builds the chapter's fact-storing MLP from seeded random orthonormal directions.
pub fn fact_mlp() -> Result<FactMlp> {
    let directions = orthonormal_rows(FACT_DIRECTIONS.len(), FACT_DIM, 2024)?;
    let row = |i: usize| directions.row(i).into_owned();
    let (m, j, ball, p, swim) = (row(0), row(1), row(2), row(4), row(5));
    let mut w_up = DMatrix::zeros(FACT_DIM, 2);
    w_up.column_mut(0).copy_from(&(&m + &j).transpose()); // neuron 0 asks: Michael and Jordan?
    w_up.column_mut(1).copy_from(&(&m + &p).transpose()); // neuron 1 asks: Michael and Phelps?
    let mut w_down = DMatrix::zeros(2, FACT_DIM);
    w_down.row_mut(0).copy_from(&ball); // neuron 0 writes basketball
    w_down.row_mut(1).copy_from(&swim); // neuron 1 writes swimming
    let mlp = Mlp::from_layers(vec![
        Layer { w: w_up, b: DMatrix::from_element(1, 2, -1.0), activation: Some(Activation::Relu) },
        Layer { w: w_down, b: DMatrix::zeros(1, FACT_DIM), activation: None },
    ])?;
    Ok(FactMlp { directions, mlp })
}

/// The MLP read as an unnormalised key–value memory: FF(e) = Σᵢ f(kᵢ·e + bᵢ) vᵢ with the keys kᵢ
/// the columns of the up-projection and the values vᵢ the rows of the down-projection.
/// Returns FF(e) computed key by key (1×d), for comparison with the matrix form.
pub fn key_value_read(mlp: &Mlp<f64>, e: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    let [up, down] = mlp.layers() else {
        return Err(invalid(
            "key_value_read",
            "mlp",
            format!("needs exactly two layers, got {}", mlp.layers().len()),
        ));
    };
    if e.nrows() != 1 || e.ncols() != up.w.nrows() {
        return Err(shape_error("key_value_read", "e", format!("1×{}", up.w.nrows()), shape_of(e)));
    }
    if down.activation.is_some() {
        return Err(invalid(
            "key_value_read",
            "mlp",
            "the second layer must be linear (no activation) to read as a memory",
        ));
    }
    let mut out = down.b.clone();
    for i in 0..up.w.ncols() {
        let score = (e * up.w.column(i))[(0, 0)] + up.b[(0, i)];
        let strength = up.activation.map_or(score, |f| f.apply(score));
        out += down.w.row(i) * strength;
    }
    Ok(out)
}

/// The normalised memory of the lecture slides: NM(e) = Σᵢ softmax(K̃ᵀe)ᵢ vᵢ, whose weights always
/// sum to one, so it always writes some mixture of the values even when no key matches.
pub fn softmax_memory_read(mlp: &Mlp<f64>, e: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    let [up, down] = mlp.layers() else {
        return Err(invalid(
            "softmax_memory_read",
            "mlp",
            format!("needs exactly two layers, got {}", mlp.layers().len()),
        ));
    };
    if e.nrows() != 1 || e.ncols() != up.w.nrows() {
        return Err(shape_error(
            "softmax_memory_read",
            "e",
            format!("1×{}", up.w.nrows()),
            shape_of(e),
        ));
    }
    let scores = crate::matmul::matmul(e, &up.w)?;
    let max = scores.max();
    let ex = scores.map(|s| (s - max).exp());
    let p = &ex / ex.sum();
    crate::matmul::matmul(&p, &down.w)
}

// ───────────────────────────── GPT-3's MLPs, counted ─────────────────────────────

/// The sizes that determine GPT-3's MLP blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlpShape {
    /// d_embed, the width of the residual stream.
    pub d_embed: u64,
    /// n_neurons / d_embed, the widening of the up-projection.
    pub expansion: u64,
    /// Transformer blocks, each with one MLP.
    pub n_layers: u64,
}

/// GPT-3 175B: d_embed = 12,288, four times as many neurons, 96 layers.
pub const GPT3_MLP: MlpShape = MlpShape { d_embed: 12_288, expansion: 4, n_layers: 96 };
/// GPT-3's total parameter count as the documents round it.
pub const GPT3_TOTAL_PARAMETERS: f64 = 175e9;

impl MlpShape {
    /// The up-projection's rows (neurons, "questions asked"): expansion · d_embed.
    pub fn neurons(&self) -> u64 {
        self.expansion * self.d_embed
    }
    /// Weights of one up-projection: neurons × d_embed.
    pub fn up_weights(&self) -> u64 {
        self.neurons() * self.d_embed
    }
    /// Weights of one down-projection: d_embed × neurons (the up-projection's shape transposed).
    pub fn down_weights(&self) -> u64 {
        self.d_embed * self.neurons()
    }
    /// Biases of one MLP: one per neuron plus one per output dimension.
    pub fn biases(&self) -> u64 {
        self.neurons() + self.d_embed
    }
    /// Weights of one MLP (both projections, no biases).
    pub fn weights_per_block(&self) -> u64 {
        self.up_weights() + self.down_weights()
    }
    /// Weights of all the MLPs.
    pub fn weights_total(&self) -> u64 {
        self.weights_per_block() * self.n_layers
    }
}

pub use crate::report::with_commas;

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

// ───────────────────────────── errata, worked numbers ─────────────────────────────

/// This chapter's rows of the errata register.
pub const ERRATA: &[Erratum] = &[
    Erratum {
        document: D0,
        section: "Backpropagation, chain of one-neuron layers: ∂C₀/∂a⁽ᴸ⁾ and the two results built on it",
        printed: "∂C₀/∂a⁽ᴸ⁾ = z(a⁽ᴸ⁾ − y); ∂C₀/∂w⁽ᴸ⁾ = a⁽ᴸ⁻¹⁾·σ′(z⁽ᴸ⁾)·z(a⁽ᴸ⁾ − y); ∂C₀/∂b⁽ᴸ⁾ = 1·σ′(z⁽ᴸ⁾)·z(a⁽ᴸ⁾ − y)",
        correct: "∂C₀/∂a⁽ᴸ⁾ = 2(a⁽ᴸ⁾ − y), and the factor 2(a⁽ᴸ⁾ − y) in ∂C₀/∂w⁽ᴸ⁾ and ∂C₀/∂b⁽ᴸ⁾",
        why: "C₀ = (a⁽ᴸ⁾ − y)² has derivative 2(a⁽ᴸ⁾ − y) by the power rule; no z enters C₀. The document writes 2(a⁽ᴸ⁾ − y) itself a few lines later in ∂C₀/∂a⁽ᴸ⁻¹⁾, so the z is a misread 2. Read as z⁽ᴸ⁾ it gives a wrong value and even a wrong sign (see the worked table).",
        test: "tests/ch03_mlp.rs::d_cost_d_output_is_2_times_error_not_z_times_error",
    },
    Erratum {
        document: D0,
        section: "Backpropagation, the gradient vector ∇C",
        printed: "∇C = (∂C/∂w⁽⁰⁾, ∂C/∂b⁽¹⁾, …, ∂C/∂w⁽ᴸ⁾, ∂C/∂b⁽ᴸ⁾)",
        correct: "∇C = (∂C/∂w⁽¹⁾, ∂C/∂b⁽¹⁾, …, ∂C/∂w⁽ᴸ⁾, ∂C/∂b⁽ᴸ⁾)",
        why: "Layer 0 is the input a⁽⁰⁾ and owns no weight: the first weight is w⁽¹⁾ in z⁽¹⁾ = w⁽¹⁾a⁽⁰⁾ + b⁽¹⁾, and it pairs with b⁽¹⁾. A chain of L layers has 2L parameters, w⁽¹⁾…w⁽ᴸ⁾ and b⁽¹⁾…b⁽ᴸ⁾.",
        test: "tests/ch03_mlp.rs::gradient_has_one_weight_and_one_bias_for_each_layer_1_to_l",
    },
    Erratum {
        document: D0,
        section: "Backpropagation, the multi-neuron generalisation",
        printed: "∂C₀/∂aₑ⁽ᴸ⁻¹⁾ = Σ_{j=0}^{n_{L−1}} (∂zⱼ⁽ᴸ⁾/∂aₑ⁽ᴸ⁻¹⁾)(∂aⱼ⁽ᴸ⁾/∂zⱼ⁽ᴸ⁾)(∂C₀/∂aⱼ⁽ᴸ⁾)",
        correct: "Σ_{j=0}^{n_L − 1}: j runs over the n_L neurons of layer L",
        why: "j indexes zⱼ⁽ᴸ⁾ and aⱼ⁽ᴸ⁾, the neurons of layer L, numbered 0 … n_L − 1. The printed upper limit n_{L−1} is the width of the previous layer (and one too many): with 3 neurons feeding 2 it would sum over 4 output neurons, 2 of which do not exist.",
        test: "tests/ch03_mlp.rs::multi_neuron_sum_runs_over_the_neurons_of_layer_l",
    },
    Erratum {
        document: D0,
        section: "Neural Networks, the matrix form ā⁽¹⁾ = σ(Wā⁽⁰⁾ + b)",
        printed: "W with rows w_{0,·} … w_{L,·}, ā⁽⁰⁾ = (a₀ … aₙ), b̄ = (b₀ … bₙ)",
        correct: "W has one row per neuron of the new layer, say k + 1 rows; b̄ = (b₀ … b_k) has one entry per row of W",
        why: "Wā⁽⁰⁾ has as many entries as W has rows, so the bias added to it must too; the printed b̄ has as many entries as the input ā⁽⁰⁾ (n + 1), which only works when the layer keeps its width. The row index L also collides with the layer superscript (L).",
        test: "tests/ch03_mlp.rs::bias_has_one_entry_per_output_neuron",
    },
    Erratum {
        document: D0,
        section: "Multilayer Perceptron, the Michael Jordan toy example",
        printed: "if Ē·(last name Jordan) = Ē·(first name Michael), the vector encodes both first name Michael and last name Jordan",
        correct: "the vector encodes both when both dot products are ≈ 1, i.e. Ē·(M + J) ≈ 2 (document 004: 2 for the full name, 1 or less otherwise)",
        why: "Equal dot products are not a conjunction: a vector that encodes neither name (both products 0) or only half of each satisfies the equality. The AND is made by the bias −1 and the ReLU acting on the sum.",
        test: "tests/ch03_mlp.rs::equal_dot_products_do_not_mean_both_names",
    },
];

/// The chapter's worked numbers, recomputed.
pub fn worked() -> Result<Vec<Worked>> {
    let (chain, x0, y) = chapter_chain();
    let t = chain.forward(x0);
    let l = chain.depth();
    let h = 1e-6;
    let fd_a = ((t.a[l] + h - y).powi(2) - (t.a[l] - h - y).powi(2)) / (2.0 * h);
    let fact = fact_mlp()?;
    let mj = fact.encode(&["first name Michael", "last name Jordan"])?;
    let mp = fact.encode(&["first name Michael", "last name Phelps"])?;
    let aj = fact.encode(&["first name Alexis", "last name Jordan"])?;
    let ap = fact.encode(&["first name Alexis", "last name Phelps"])?;
    let probe =
        (&fact.direction("first name Michael")? + &fact.direction("last name Jordan")?).transpose();
    let dot = |e: &DMatrix<f64>| (e * &probe)[(0, 0)];
    let fires: Vec<&str> = [
        ("Michael Jordan", &mj),
        ("Michael Phelps", &mp),
        ("Alexis Jordan", &aj),
        ("Alexis Phelps", &ap),
    ]
    .iter()
    .filter(|(_, e)| {
        fact.mlp
            .forward(e)
            .map(|tr| activation_forward(Activation::Relu, &tr.pre[0])[(0, 0)] > FIRING)
            .unwrap_or(false)
    })
    .map(|(n, _)| *n)
    .collect();
    let g = GPT3_MLP;
    let share = g.weights_total() as f64 / GPT3_TOTAL_PARAMETERS;
    let gates = |m: &str, j: &str| Ok::<_, Error>(dot(&fact.encode(&[m, j])?));
    // Three neurons feeding two: the sum over j (2 terms) against the matrix form of backprop.
    let w_rows = DMatrix::from_row_slice(2, 3, &[0.5, -1.0, 0.3, 0.2, 0.4, -0.7]);
    let (b2, a_prev, y2) = ([0.1, -0.2], [0.3, 0.6, 0.9], [1.0, 0.0]);
    let by_sum = d_c0_d_a_prev_sum(&w_rows, &b2, &a_prev, &y2)?;
    let by_matrix = multi_neuron_matrix_form(&w_rows, &b2, &a_prev, &y2)?;
    let gap = by_sum.iter().zip(by_matrix.iter()).map(|(p, q)| (p - q).abs()).fold(0.0, f64::max);
    Ok(vec![
        Worked::erratum(
            "d_cost_d_output_is_2_times_error_not_z_times_error",
            D0,
            format!(
                "∂C₀/∂a⁽ᴸ⁾ for the chapter's chain (a⁽ᴸ⁾ = {:.4}, y = {y}, z⁽ᴸ⁾ = {:.4}); central difference {fd_a:.4}",
                t.a[l],
                t.z[l - 1]
            ),
            "z(a⁽ᴸ⁾ − y)",
            format!(
                "2(a⁽ᴸ⁾ − y) = {:.4}; z⁽ᴸ⁾(a⁽ᴸ⁾ − y) = {:.4}",
                d_c0_d_a_last(t.a[l], y),
                t.z[l - 1] * (t.a[l] - y)
            ),
        ),
        Worked::erratum(
            "gradient_has_one_weight_and_one_bias_for_each_layer_1_to_l",
            D0,
            "the first two entries of ∇C for a chain a⁽⁰⁾ → a⁽¹⁾ → … → a⁽ᴸ⁾",
            "∂C/∂w⁽⁰⁾, ∂C/∂b⁽¹⁾",
            format!(
                "∂C/∂w⁽¹⁾, ∂C/∂b⁽¹⁾ ({} entries for L = {l})",
                chain.gradients(x0, y).d_w.len() + chain.gradients(x0, y).d_b.len()
            ),
        ),
        Worked::erratum(
            "multi_neuron_sum_runs_over_the_neurons_of_layer_l",
            D0,
            "terms in the sum over j for a layer of 2 neurons fed by 3",
            "n_{L−1} + 1 = 4",
            format!(
                "n_L = {} (the sum then equals the matrix form (σ′(z) ⊙ 2(a − y))W; largest gap {gap:.1e})",
                w_rows.nrows()
            ),
        ),
        Worked::erratum(
            "bias_has_one_entry_per_output_neuron",
            D0,
            "entries of b̄ for a layer of 2 neurons fed by 3 inputs",
            "n + 1 = 3 (one per input)",
            format!(
                "{} (one per neuron); a 1×3 bias is {}",
                2,
                if dense_forward(
                    &DMatrix::<f64>::zeros(1, 3),
                    &DMatrix::zeros(3, 2),
                    &DMatrix::zeros(1, 3)
                )
                .is_err()
                {
                    "rejected"
                } else {
                    "accepted"
                }
            ),
        ),
        Worked::erratum(
            "equal_dot_products_do_not_mean_both_names",
            D0,
            "Alexis Phelps: Ē·J and Ē·M (equal), and Ē·(M + J) − 1 before the ReLU",
            "equal ⇒ encodes both names",
            format!(
                "Ē·J = {} = Ē·M = {}, yet Ē·(M + J) − 1 = {}: the neuron stays off",
                fixed((&ap * fact.direction("last name Jordan")?.transpose())[(0, 0)], 1),
                fixed((&ap * fact.direction("first name Michael")?.transpose())[(0, 0)], 1),
                fixed(dot(&ap) - 1.0, 1)
            ),
        ),
        Worked::number(
            "full_name_gives_dot_product_2",
            D4,
            "Ē·(M + J) for Michael Jordan",
            "2",
            gates("first name Michael", "last name Jordan")?,
        ),
        Worked::number(
            "partial_names_give_dot_product_1_or_less",
            D4,
            "Ē·(M + J) for Michael Phelps",
            "1",
            dot(&mp),
        ),
        Worked::number(
            "partial_names_give_dot_product_1_or_less",
            D4,
            "Ē·(M + J) for Alexis Jordan",
            "1",
            dot(&aj),
        ),
        Worked::text(
            "neuron_fires_only_for_the_full_name",
            D1,
            "with bias −1 and ReLU, the Michael-Jordan neuron is active for",
            "Michael Jordan",
            fires.join(", "),
        ),
        Worked::text(
            "gpt3_mlp_has_49152_neurons",
            D1,
            "rows of GPT-3's up-projection, 4 × 12,288",
            "49,152",
            with_commas(g.neurons()),
        ),
        Worked::text(
            "gpt3_mlp_has_49152_neurons",
            D4,
            "the same count, in words",
            "just under 50,000",
            if g.neurons() < 50_000 && g.neurons() > 45_000 { "just under 50,000" } else { "no" },
        ),
        Worked::number(
            "gpt3_mlp_block_has_1_2_billion_weights",
            D1,
            format!(
                "weights in one MLP, up + down ({}), in billions",
                with_commas(g.weights_per_block())
            ),
            "1.2",
            g.weights_per_block() as f64 / 1e9,
        ),
        Worked::number(
            "gpt3_mlp_block_has_1_2_billion_weights",
            D1,
            "MLP blocks in GPT-3",
            "96",
            g.n_layers as f64,
        ),
        Worked::text(
            "gpt3_mlps_hold_two_thirds_of_the_weights",
            D1,
            format!(
                "96 MLPs: {} weights, as a share of 175 billion ({share:.3})",
                with_commas(g.weights_total())
            ),
            "about 2/3",
            if (share - 2.0 / 3.0).abs() < 0.01 {
                "about 2/3".to_string()
            } else {
                format!("{share:.3}")
            },
        ),
    ])
}

/// ∂C₀/∂a⁽ᴸ⁻¹⁾ for one sigmoid layer by the matrix route of [`Mlp::backward`]: the layer as a
/// dense layer (our orientation, W transposed), C₀ = Σⱼ (aⱼ − yⱼ)², [`mse_backward`] with N = 1,
/// [`activation_backward`], [`dense_backward`]. The same shapes as [`d_c0_d_a_prev_sum`].
pub fn multi_neuron_matrix_form(
    w_rows: &DMatrix<f64>,
    b: &[f64],
    a_prev: &[f64],
    y: &[f64],
) -> Result<Vec<f64>> {
    let x = DMatrix::from_row_slice(1, a_prev.len(), a_prev);
    let layer = Mlp::from_layers(vec![Layer {
        w: w_rows.transpose(),
        b: DMatrix::from_row_slice(1, b.len(), b),
        activation: Some(Activation::Sigmoid),
    }])?;
    let trace = layer.forward(&x)?;
    let target = DMatrix::from_row_slice(1, y.len(), y);
    let (_, d_x) = layer.backward(&trace, &mse_backward(&trace.output, &target)?)?;
    Ok(d_x.iter().copied().collect())
}

// ───────────────────────────── walk-through and plots ─────────────────────────────

/// The chapter in the order the document derives it.
pub fn walk(out: &mut Walk) -> Result<()> {
    out.step("1. Activations and their derivatives")?;
    for act in Activation::ALL {
        for z in [-2.0, 0.5, 2.0] {
            out.scalar(&format!("{}({z})", act.name()), act.apply(z))?;
            out.scalar(&format!("{}′({z})", act.name()), act.derivative(z))?;
        }
    }
    out.scalar(
        "largest |GELU_erf − GELU_tanh| on [−8, 8]",
        (0..=1600)
            .map(|i| -8.0 + i as f64 / 100.0)
            .map(|z| (Activation::GeluErf.apply(z) - Activation::GeluTanh.apply(z)).abs())
            .fold(0.0, f64::max),
    )?;

    out.step("2. A dense layer y = xW + b and its backward pass")?;
    let x = DMatrix::from_row_slice(2, 3, &[1.0, 2.0, 3.0, -1.0, 0.0, 0.5]);
    let w = DMatrix::from_row_slice(3, 2, &[0.1, -0.2, 0.3, 0.4, -0.5, 0.6]);
    let b = DMatrix::from_row_slice(1, 2, &[0.05, -0.05]);
    let y = dense_forward(&x, &w, &b)?;
    out.matrix("x", &x)?;
    out.matrix("W", &w)?;
    out.matrix("y = xW + b", &y)?;
    let g = dense_backward(&x, &w, &DMatrix::from_element(2, 2, 1.0))?;
    out.say("with ∂C/∂y = all ones:")?;
    out.matrix("∂C/∂W = xᵀ ∂C/∂y", &g.d_w)?;
    out.matrix("∂C/∂b = column sums of ∂C/∂y", &g.d_b)?;
    out.matrix("∂C/∂x = ∂C/∂y Wᵀ", &g.d_x)?;

    out.step("3. The document's chain of one-neuron layers, a⁽⁰⁾ → a⁽¹⁾ → a⁽²⁾ → a⁽³⁾")?;
    let (chain, x0, yt) = chapter_chain();
    let t = chain.forward(x0);
    for l in 1..=chain.depth() {
        let (s, p) = (sup(l), sup(l - 1));
        out.scalar(
            &format!(
                "z⁽{s}⁾ = w⁽{s}⁾a⁽{p}⁾ + b⁽{s}⁾ (w = {}, b = {})",
                chain.w[l - 1],
                chain.b[l - 1]
            ),
            t.z[l - 1],
        )?;
        out.scalar(&format!("a⁽{s}⁾ = σ(z⁽{s}⁾)"), t.a[l])?;
    }
    out.scalar(&format!("C₀ = (a⁽³⁾ − y)², y = {yt}"), chain.cost(x0, yt))?;
    out.scalar("∂C₀/∂a⁽ᴸ⁾ = 2(a⁽ᴸ⁾ − y)", d_c0_d_a_last(t.a[3], yt))?;
    out.scalar("∂C₀/∂w⁽ᴸ⁾ = a⁽ᴸ⁻¹⁾ σ′(z⁽ᴸ⁾) 2(a⁽ᴸ⁾ − y)", d_c0_d_w_last(&t, yt))?;
    out.scalar("∂C₀/∂b⁽ᴸ⁾ = σ′(z⁽ᴸ⁾) 2(a⁽ᴸ⁾ − y)", d_c0_d_b_last(&t, yt))?;
    out.scalar("∂C₀/∂a⁽ᴸ⁻¹⁾ = w⁽ᴸ⁾ σ′(z⁽ᴸ⁾) 2(a⁽ᴸ⁾ − y)", d_c0_d_a_prev(&chain, &t, yt))?;
    let grads = chain.gradients(x0, yt);
    for l in 1..=chain.depth() {
        out.scalar(&format!("∂C₀/∂w⁽{}⁾", sup(l)), grads.d_w[l - 1])?;
        out.scalar(&format!("∂C₀/∂b⁽{}⁾", sup(l)), grads.d_b[l - 1])?;
    }
    let avg = chain.average_gradients(&[0.6, -1.0, 2.0], &[0.2, 0.9, 0.5])?;
    let cost = avg.cost;
    out.say("averaged over three examples (x, y) = (0.6, 0.2), (−1, 0.9), (2, 0.5):")?;
    out.scalar("C = (1/n) Σ Cₖ", cost)?;
    out.scalar("∂C/∂w⁽³⁾ = (1/n) Σ ∂Cₖ/∂w⁽³⁾", avg.d_w[2])?;

    out.step("4. A line and an MLP fitted to sin(x), 100 points in [−10, 10]")?;
    let fits = fit_sin(SIN_TRAIN.epochs)?;
    out.scalar("least-squares slope", fits.line.0)?;
    out.scalar("least-squares intercept", fits.line.1)?;
    out.scalar("line MSE", fits.line_mse)?;
    out.scalar(&format!("MLP {SIN_SIZES:?} MSE after {} epochs", SIN_TRAIN.epochs), fits.mlp_mse)?;
    out.scalar("ratio", fits.line_mse / fits.mlp_mse)?;

    out.step("5. An MLP that stores \"Michael Jordan plays basketball\"")?;
    let fact = fact_mlp()?;
    out.matrix(
        "orthonormal directions (rows: Michael, Jordan, basketball, Alexis, Phelps, swimming)",
        &fact.directions,
    )?;
    for (who, names) in [
        ("Michael Jordan", ["first name Michael", "last name Jordan"]),
        ("Michael Phelps", ["first name Michael", "last name Phelps"]),
        ("Alexis Jordan", ["first name Alexis", "last name Jordan"]),
        ("Alexis Phelps", ["first name Alexis", "last name Phelps"]),
    ] {
        let e = fact.encode(&names)?;
        let pre = fact.neuron_inputs(&e)?;
        let gained = &fact.block(&e)? - &e;
        out.say(&format!("{who}:"))?;
        out.matrix("   neuron inputs Ē·(M + J) − 1, Ē·(M + P) − 1", &pre)?;
        out.scalar(
            "   basketball gained, (out − Ē)·B",
            (&gained * fact.direction("basketball")?.transpose())[(0, 0)],
        )?;
        out.scalar(
            "   swimming gained, (out − Ē)·S",
            (&gained * fact.direction("swimming")?.transpose())[(0, 0)],
        )?;
    }
    let nobody = fact.encode(&["first name Alexis"])?;
    out.matrix(
        "key–value reading FF(Alexis) (nothing fires)",
        &key_value_read(&fact.mlp, &nobody)?,
    )?;
    out.matrix(
        "softmax memory NM(Alexis) (must mix the values anyway)",
        &softmax_memory_read(&fact.mlp, &nobody)?,
    )?;

    out.step("6. GPT-3's MLPs, counted")?;
    let g = GPT3_MLP;
    out.say(&format!(
        "neurons per MLP: {} = {} × {}",
        with_commas(g.neurons()),
        g.expansion,
        with_commas(g.d_embed)
    ))?;
    out.say(&format!(
        "weights per MLP: {} (+ {} biases)",
        with_commas(g.weights_per_block()),
        with_commas(g.biases())
    ))?;
    out.say(&format!("weights in all {} MLPs: {}", g.n_layers, with_commas(g.weights_total())))?;
    out.scalar("share of 175 billion", g.weights_total() as f64 / GPT3_TOTAL_PARAMETERS)?;

    out.step("7. Superposition: nearly perpendicular directions")?;
    for s in angle_samples(&ANGLE_DIMS, ANGLE_VECTORS, ANGLE_SEED)? {
        out.say(&format!(
            "d = {:>6}: {:.4} of {} random pairs within 89°–91° (exact expectation {:.4})",
            s.d,
            s.near_orthogonal,
            s.angles.len(),
            s.expected
        ))?;
    }
    let eps = NEAR_ORTHOGONAL_DEGREES.to_radians().sin();
    for d in [100, 1000, 3000, 4096] {
        let cap =
            welch_capacity(d, eps).map_or("no limit from this bound".to_string(), with_commas);
        out.say(&format!("Welch: most vectors in d = {d} with every angle in 89°–91°: {cap}"))?;
    }
    let bases = two_bases(1024)?;
    let c = coherence(&bases)?;
    out.say(&format!(
        "standard ∪ Hadamard basis, d = 1,024: {} vectors, largest |cos| measured {c:.5} (angles {:.2}°–{:.2}°)",
        with_commas(bases.nrows() as u64),
        c.acos().to_degrees(),
        180.0 - c.acos().to_degrees()
    ))?;
    let c4096 = 1.0 / 4096f64.sqrt();
    out.say(&format!(
        "the same construction in d = 4,096: 8,192 vectors, largest |cos| 1/√4096 = {c4096:.5} (angles {:.2}°–{:.2}°)",
        c4096.acos().to_degrees(),
        180.0 - c4096.acos().to_degrees()
    ))?;
    let p = pack_unit_vectors(PACK_N, PACK_D, PACK_STEPS, PACK_SEED)?;
    out.say(&format!("packing N = {} unit vectors in d = {} ({} steps):", p.n, p.d, PACK_STEPS))?;
    out.scalar("   largest |cos|, random start", p.start_coherence)?;
    out.scalar("   largest |cos|, optimised", p.coherence)?;
    out.scalar("   Welch lower bound", p.welch)?;
    Ok(())
}

/// A layer index as superscript digits, for the walk-through (3 → "³").
fn sup(n: usize) -> String {
    const DIGITS: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];
    n.to_string().chars().map(|c| c.to_digit(10).map_or(c, |d| DIGITS[d as usize])).collect()
}

/// The seed of the angle histograms.
pub const ANGLE_SEED: u64 = 5;

/// A histogram as a step line: bins of `width` from `lo` to `hi`, heights the fraction of
/// `values` in each bin.
pub fn histogram_steps(values: &[f64], lo: f64, hi: f64, width: f64) -> Vec<(f64, f64)> {
    let bins = ((hi - lo) / width).round().max(1.0) as usize;
    let mut counts = vec![0usize; bins];
    for v in values {
        let i = ((v - lo) / width).floor();
        if i >= 0.0 && (i as usize) < bins {
            counts[i as usize] += 1;
        } else if *v == hi {
            counts[bins - 1] += 1;
        }
    }
    let n = values.len().max(1) as f64;
    let mut pts = vec![(lo, 0.0)];
    for (i, c) in counts.iter().enumerate() {
        let (a, b) = (lo + i as f64 * width, lo + (i + 1) as f64 * width);
        pts.push((a, *c as f64 / n));
        pts.push((b, *c as f64 / n));
    }
    pts.push((hi, 0.0));
    pts
}

/// The chapter's light figures as data (activations, the sin fits and loss, the angle
/// histograms); the packing figures come from [`packing_figures`].
pub fn figures() -> Result<Vec<(String, Figure)>> {
    let grid: Vec<f64> = (0..=240).map(|i| -4.0 + 8.0 * i as f64 / 240.0).collect();
    let curve = |f: &dyn Fn(f64) -> f64| grid.iter().map(|&z| (z, f(z))).collect::<Vec<_>>();
    let values = Figure::Line(LineChart {
        title: "Activation functions".into(),
        x_label: "z".into(),
        y_label: "f(z)".into(),
        series: Activation::ALL
            .iter()
            .map(|&a| Series::new(a.name(), curve(&|z| a.apply(z))))
            .collect(),
        markers: false,
    });
    let slopes = Figure::Line(LineChart {
        title: "Their derivatives".into(),
        x_label: "z".into(),
        y_label: "f′(z)".into(),
        series: Activation::ALL
            .iter()
            .map(|&a| Series::new(format!("{}′", a.name()), curve(&|z| a.derivative(z))))
            .collect(),
        markers: false,
    });
    let fits = fit_sin(SIN_TRAIN.epochs)?;
    let pts = |ys: &[f64]| fits.x.iter().copied().zip(ys.iter().copied()).collect::<Vec<_>>();
    let sin_fig = Figure::Line(LineChart {
        title: format!(
            "sin(x) at 100 points: line MSE {:.3}, MLP MSE {:.4}",
            fits.line_mse, fits.mlp_mse
        ),
        x_label: "x".into(),
        y_label: "y".into(),
        series: vec![
            Series::new("sin(x)", pts(&fits.y)),
            Series::new("least-squares line", pts(&fits.line_fit)),
            Series::new(format!("MLP {SIN_SIZES:?}, ReLU"), pts(&fits.mlp_fit)),
        ],
        markers: true,
    });
    let loss = Figure::Line(LineChart {
        title: format!(
            "Training the sin(x) MLP: mini-batch GD, α = {}, batch {}",
            SIN_TRAIN.learning_rate, SIN_TRAIN.batch_size
        ),
        x_label: "epoch".into(),
        y_label: "log₁₀ MSE".into(),
        series: vec![
            Series::new(
                "MLP",
                fits.costs.iter().enumerate().map(|(i, c)| (i as f64, c.log10())).collect(),
            ),
            Series::new(
                "least-squares line",
                vec![
                    (0.0, fits.line_mse.log10()),
                    (fits.costs.len() as f64 - 1.0, fits.line_mse.log10()),
                ],
            ),
        ],
        markers: false,
    });
    let samples = angle_samples(&ANGLE_DIMS, ANGLE_VECTORS, ANGLE_SEED)?;
    let top = samples
        .iter()
        .flat_map(|s| histogram_steps(&s.angles, 0.0, 180.0, 1.0))
        .map(|p| p.1)
        .fold(0.0, f64::max);
    let mut series: Vec<Series> = samples
        .iter()
        .map(|s| {
            Series::new(
                format!("d = {}", with_commas(s.d as u64)),
                histogram_steps(&s.angles, 0.0, 180.0, 1.0),
            )
        })
        .collect();
    series.push(Series::new("89°–91°", vec![(89.0, 0.0), (89.0, top), (91.0, top), (91.0, 0.0)]));
    let hist = Figure::Line(LineChart {
        title: format!("Angles between {ANGLE_VECTORS} random unit vectors (fraction per 1° bin)"),
        x_label: "angle (degrees)".into(),
        y_label: "fraction of pairs".into(),
        series,
        markers: false,
    });
    let frac = Figure::Line(LineChart {
        title: "Share of random pairs within 89°–91°".into(),
        x_label: "log₁₀ d".into(),
        y_label: "fraction".into(),
        series: vec![
            Series::new(
                "measured",
                samples.iter().map(|s| ((s.d as f64).log10(), s.near_orthogonal)).collect(),
            ),
            Series::new(
                "exact",
                samples.iter().map(|s| ((s.d as f64).log10(), s.expected)).collect(),
            ),
        ],
        markers: true,
    });
    Ok(vec![
        ("ch03_activations".into(), values),
        ("ch03_activation_derivatives".into(), slopes),
        ("ch03_sin_fits".into(), sin_fig),
        ("ch03_sin_loss".into(), loss),
        ("ch03_angle_histograms".into(), hist),
        ("ch03_near_orthogonal_share".into(), frac),
    ])
}

/// The packing figures: the largest |cos| step by step against the Welch bound, and the angle
/// histograms of the random start and the optimised set.
pub fn packing_figures(p: &Packing) -> Result<Vec<(String, Figure)>> {
    let last = p.history.len() as f64 - 1.0;
    let curve = Figure::Line(LineChart {
        title: format!("Packing N = {} unit vectors in d = {}: largest |cos|", p.n, p.d),
        x_label: "step".into(),
        y_label: "max |cos|".into(),
        series: vec![
            Series::new(
                "optimised",
                p.history.iter().enumerate().map(|(i, c)| (i as f64, *c)).collect(),
            ),
            Series::new("Welch lower bound", vec![(0.0, p.welch), (last, p.welch)]),
        ],
        markers: false,
    });
    let mut rng = Rng::new(PACK_SEED);
    let start = random_unit_vectors(p.n, p.d, &mut rng)?;
    let to_deg = |v: &DMatrix<f64>| {
        pairwise_cosines(v).map(|c| c.iter().map(|x| x.acos().to_degrees()).collect::<Vec<_>>())
    };
    let welch_deg = p.welch.acos().to_degrees();
    let (a0, a1) = (to_deg(&start)?, to_deg(&p.vectors)?);
    let top = histogram_steps(&a1, 40.0, 140.0, 0.5).iter().map(|q| q.1).fold(0.0, f64::max);
    let hist = Figure::Line(LineChart {
        title: format!("Angles of all pairs, N = {} in d = {}", p.n, p.d),
        x_label: "angle (degrees)".into(),
        y_label: "fraction of pairs per 0.5° bin".into(),
        series: vec![
            Series::new("random start", histogram_steps(&a0, 40.0, 140.0, 0.5)),
            Series::new("optimised", histogram_steps(&a1, 40.0, 140.0, 0.5)),
            Series::new(
                "Welch window",
                vec![
                    (welch_deg, 0.0),
                    (welch_deg, top),
                    (180.0 - welch_deg, top),
                    (180.0 - welch_deg, 0.0),
                ],
            ),
        ],
        markers: false,
    });
    Ok(vec![("ch03_packing".into(), curve), ("ch03_packing_angles".into(), hist)])
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut figs = figures()?;
    figs.extend(packing_figures(&pack_unit_vectors(PACK_N, PACK_D, PACK_STEPS, PACK_SEED)?)?);
    let mut out = Vec::new();
    for (stem, f) in figs {
        out.extend(f.save(dir, &stem)?);
    }
    Ok(out)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter = Chapter {
    number: 3,
    stem: "ch03_mlp",
    title: "The multi-layer perceptron, backpropagation, and how an MLP stores a fact",
    worked,
    walk,
    plots,
    errata: ERRATA,
};
