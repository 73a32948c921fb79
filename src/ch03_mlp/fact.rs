//! How an MLP could store a fact: unit directions for names and sports, a neuron that is an AND
//! gate (bias −1 and a ReLU on E·(M + J)) writing "basketball", the block read as a key–value
//! memory, and the size of GPT-3's MLPs.

use super::activations::Activation;
use super::dense::dense_forward;
use super::mlp::{Layer, Mlp};
use crate::error::{Result, invalid, shape_error, shape_of};
use crate::rng::Rng;
use nalgebra::DMatrix;

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
/// The seed of the Gaussian vectors the orthonormal directions are made from.
pub const FACT_SEED: u64 = 2024;

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
    let directions = orthonormal_rows(FACT_DIRECTIONS.len(), FACT_DIM, FACT_SEED)?;
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
