//! LoRA: a frozen weight plus a trainable low-rank update (Hu et al. 2021).
//!
//! Chapter 9's linear maps multiply rows on the left, y = xW with W of shape d_in×d_out (GPT-2's
//! `c_attn`, `c_fc` …). The paper writes h = W₀x for a column x, so its W₀ is our Wᵀ, and its
//! update BA (B d_out×r, A r×d_in) is, in our orientation, (BA)ᵀ = AᵀBᵀ:
//!
//! ```text
//! u = x Aᵀ                      (N×r: the input projected onto r directions)
//! y = x W + (α/r) u Bᵀ          (N×d_out)  =  x (W + (α/r) AᵀBᵀ)
//! ```
//!
//! A starts random and B at zero, so the layer starts equal to W exactly and ∂L/∂B ≠ 0 on the
//! first step (while ∂L/∂A = 0 until B moves). W is frozen: the backward has no ∂L/∂W. After
//! training, [`Lora::merged`] folds the update into W and the adapter costs nothing at inference.

use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::ensure_finite;
use crate::matmul::{matmul, matmul_nt, matmul_tn};
use crate::rng::Rng;
use nalgebra::DMatrix;

/// A linear map with a frozen weight W and a LoRA adapter (A, B, α).
#[derive(Clone, Debug, PartialEq)]
pub struct Lora {
    /// W, d_in×d_out, frozen (chapter 9's orientation: y = xW).
    pub w: DMatrix<f64>,
    /// A, r×d_in, trainable, random at the start.
    pub a: DMatrix<f64>,
    /// B, d_out×r, trainable, zero at the start.
    pub b: DMatrix<f64>,
    /// α, the scale: the update is multiplied by α/r.
    pub alpha: f64,
}

impl Lora {
    /// An adapter of rank r on W (d_in×d_out): A ~ N(0, 1/d_in) entrywise, seeded (Kaiming-like:
    /// u = xAᵀ keeps the variance of x's entries), B = 0, so the layer starts as y = xW. Errors
    /// on an empty or non-finite W, r = 0 or r > min(d_in, d_out), α not finite and > 0.
    pub fn new(w: DMatrix<f64>, rank: usize, alpha: f64, seed: u64) -> Result<Self> {
        const OP: &str = "Lora::new";
        if w.is_empty() {
            return Err(Error::Empty { op: OP, arg: "w" });
        }
        let (d_in, d_out) = w.shape();
        if rank == 0 || rank > d_in.min(d_out) {
            let reason = format!("r must be in 1..={}; got {rank}", d_in.min(d_out));
            return Err(invalid(OP, "rank", reason));
        }
        let mut rng = Rng::new(seed);
        let a = rng.normal_matrix(rank, d_in, 1.0 / (d_in as f64).sqrt());
        let layer = Lora { w, a, b: DMatrix::zeros(d_out, rank), alpha };
        layer.validate(OP)?;
        Ok(layer)
    }

    /// r, the adapter's rank.
    pub fn rank(&self) -> usize {
        self.a.nrows()
    }

    /// α/r, the factor on the update.
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank() as f64
    }

    /// Checks the shapes (W d_in×d_out, A r×d_in, B d_out×r, r ≥ 1), finiteness and α.
    pub fn validate(&self, op: &'static str) -> Result<()> {
        if self.w.is_empty() {
            return Err(Error::Empty { op, arg: "w" });
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Err(invalid(
                op,
                "alpha",
                format!("α must be finite and > 0; got {}", self.alpha),
            ));
        }
        let (d_in, d_out) = self.w.shape();
        let r = self.a.nrows();
        if r == 0 || self.a.ncols() != d_in {
            return Err(shape_error(
                op,
                "a (r×d_in)",
                format!("r×{d_in}, r ≥ 1"),
                shape_of(&self.a),
            ));
        }
        if self.b.shape() != (d_out, r) {
            return Err(shape_error(op, "b (d_out×r)", format!("{d_out}×{r}"), shape_of(&self.b)));
        }
        ensure_finite(op, "w", &self.w)?;
        ensure_finite(op, "a", &self.a)?;
        ensure_finite(op, "b", &self.b)
    }

    /// W + (α/r) AᵀBᵀ, d_in×d_out: one plain weight with the same outputs as the adapted layer.
    pub fn merged(&self) -> Result<DMatrix<f64>> {
        self.validate("Lora::merged")?;
        let update = matmul(&self.b, &self.a)?.transpose(); // (BA)ᵀ = AᵀBᵀ
        Ok(&self.w + update * self.scale())
    }
}

/// What [`lora_backward`] needs.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraCache {
    /// x, N×d_in.
    pub x: DMatrix<f64>,
    /// u = xAᵀ, N×r.
    pub u: DMatrix<f64>,
}

/// Gradients of the adapted layer: no ∂L/∂W, W is frozen.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraGrads {
    /// ∂L/∂x, N×d_in.
    pub d_x: DMatrix<f64>,
    /// ∂L/∂A, r×d_in.
    pub d_a: DMatrix<f64>,
    /// ∂L/∂B, d_out×r.
    pub d_b: DMatrix<f64>,
}

/// y = xW + (α/r)(xAᵀ)Bᵀ. Shapes: x N×d_in → y N×d_out. Errors on an invalid layer, no rows,
/// x's width not d_in, non-finite x.
pub fn lora_forward(layer: &Lora, x: &DMatrix<f64>) -> Result<(DMatrix<f64>, LoraCache)> {
    const OP: &str = "lora_forward";
    layer.validate(OP)?;
    if x.nrows() == 0 {
        return Err(Error::Empty { op: OP, arg: "x" });
    }
    if x.ncols() != layer.w.nrows() {
        let expected = format!("N×{} (d_in)", layer.w.nrows());
        return Err(shape_error(OP, "x", expected, shape_of(x)));
    }
    ensure_finite(OP, "x", x)?;
    let u = matmul_nt(x, &layer.a)?; //                                 u = x Aᵀ
    let y = matmul(x, &layer.w)? + matmul_nt(&u, &layer.b)? * layer.scale(); // y = xW + (α/r) u Bᵀ
    Ok((y, LoraCache { x: x.clone(), u }))
}

/// Backward of [`lora_forward`]. With s = α/r:
///
/// ```text
/// ∂L/∂B = s (∂L/∂y)ᵀ u            (d_out×r)
/// ∂L/∂u = s (∂L/∂y) B             (N×r)
/// ∂L/∂A = (∂L/∂u)ᵀ x              (r×d_in)
/// ∂L/∂x = (∂L/∂y) Wᵀ + (∂L/∂u) A  (N×d_in)
/// ```
pub fn lora_backward(layer: &Lora, cache: &LoraCache, d_y: &DMatrix<f64>) -> Result<LoraGrads> {
    const OP: &str = "lora_backward";
    layer.validate(OP)?;
    let expected = (cache.x.nrows(), layer.w.ncols());
    if d_y.shape() != expected || cache.x.ncols() != layer.w.nrows() {
        let e = format!("{}×{}", expected.0, expected.1);
        return Err(shape_error(OP, "d_y (shape of the forward output)", e, shape_of(d_y)));
    }
    ensure_finite(OP, "d_y", d_y)?;
    let s = layer.scale();
    // y = xW + s u Bᵀ  ⇒  ∂L/∂B = s (∂L/∂y)ᵀ u,  ∂L/∂u = s (∂L/∂y) B,  ∂L/∂x ∋ (∂L/∂y) Wᵀ
    let d_b = matmul_tn(d_y, &cache.u)? * s;
    let d_u = matmul(d_y, &layer.b)? * s;
    // u = x Aᵀ  ⇒  ∂L/∂A = (∂L/∂u)ᵀ x,  ∂L/∂x ∋ (∂L/∂u) A
    let d_a = matmul_tn(&d_u, &cache.x)?;
    let d_x = matmul_nt(d_y, &layer.w)? + matmul(&d_u, &layer.a)?;
    Ok(LoraGrads { d_x, d_a, d_b })
}

/// AdamW keeps two moments (m and v) for every trainable parameter.
pub const ADAMW_MOMENTS: u64 = 2;

/// Bytes of one f32, how optimizer state is usually kept.
pub const BYTES_PER_F32: usize = 4;

/// What fine-tuning a set of matrices trains and what its optimizer keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FineTuneCost {
    /// Trainable parameters: Σ d_in·d_out in full fine-tuning, Σ r(d_in + d_out) with LoRA.
    pub trainable: u64,
    /// AdamW's state: 2 moments × trainable × bytes per value.
    pub optimizer_bytes: u64,
}

/// The trainable parameters and AdamW-state bytes of fine-tuning the matrices `shapes`
/// ((d_in, d_out) each): rank 0 means full fine-tuning (d_in·d_out each), rank r ≥ 1 a LoRA
/// adapter on each (A r×d_in and B d_out×r: r(d_in + d_out)). Errors on no matrices, a zero
/// dimension, a rank above min(d_in, d_out), bytes_per_value 0, or a count overflowing a `u64`.
pub fn fine_tuning_cost(
    shapes: &[(usize, usize)],
    rank: usize,
    bytes_per_value: usize,
) -> Result<FineTuneCost> {
    const OP: &str = "fine_tuning_cost";
    if shapes.is_empty() {
        return Err(Error::Empty { op: OP, arg: "shapes" });
    }
    if bytes_per_value == 0 {
        return Err(invalid(OP, "bytes_per_value", "must be ≥ 1"));
    }
    let overflow = || invalid(OP, "shapes", "the parameter count overflows a u64");
    let mut trainable: u64 = 0;
    for (i, &(d_in, d_out)) in shapes.iter().enumerate() {
        if d_in == 0 || d_out == 0 {
            return Err(invalid(OP, "shapes", format!("matrix {i} is {d_in}×{d_out}")));
        }
        if rank > d_in.min(d_out) {
            let reason =
                format!("{rank} exceeds min(d_in, d_out) = {} of matrix {i}", d_in.min(d_out));
            return Err(invalid(OP, "rank", reason));
        }
        let count = if rank == 0 {
            (d_in as u64).checked_mul(d_out as u64) //            full: d_in·d_out
        } else {
            (rank as u64).checked_mul(d_in as u64 + d_out as u64) // LoRA: r(d_in + d_out)
        };
        trainable = count.and_then(|c| trainable.checked_add(c)).ok_or_else(overflow)?;
    }
    let optimizer_bytes =
        trainable.checked_mul(ADAMW_MOMENTS * bytes_per_value as u64).ok_or_else(overflow)?;
    Ok(FineTuneCost { trainable, optimizer_bytes })
}

/// The adapter's gradients from the gradient of its merged weight. A model that runs the merged
/// W' = W + s AᵀBᵀ (s = α/r) as a plain weight gets ∂L/∂W' (d_in×d_out, call it G) from its
/// usual backward; since dW' = s (dA)ᵀBᵀ + s Aᵀ(dB)ᵀ,
///
/// ```text
/// ∂L/∂A = s BᵀGᵀ     (r×d_in)
/// ∂L/∂B = s GᵀAᵀ     (d_out×r)
/// ```
///
/// the same as [`lora_backward`]'s, whose G is xᵀ(∂L/∂y). Returns (∂L/∂A, ∂L/∂B). Errors on an
/// invalid layer, a G of another shape than W, a non-finite G.
pub fn lora_weight_backward(
    layer: &Lora,
    d_merged: &DMatrix<f64>,
) -> Result<(DMatrix<f64>, DMatrix<f64>)> {
    const OP: &str = "lora_weight_backward";
    layer.validate(OP)?;
    if d_merged.shape() != layer.w.shape() {
        let (r, c) = layer.w.shape();
        return Err(shape_error(
            OP,
            "d_merged (shape of w)",
            format!("{r}×{c}"),
            shape_of(d_merged),
        ));
    }
    ensure_finite(OP, "d_merged", d_merged)?;
    let s = layer.scale();
    // W' = W + s AᵀBᵀ  ⇒  ∂L/∂A = s BᵀGᵀ = s (GB)ᵀ,  ∂L/∂B = s GᵀAᵀ = s (AG)ᵀ
    let d_a = matmul(d_merged, &layer.b)?.transpose() * s;
    let d_b = matmul(&layer.a, d_merged)?.transpose() * s;
    Ok((d_a, d_b))
}
