//! Generation from quantized weights: chapter 9's cached step ([`Gpt::step`]) with its weight
//! products read from int8 or 4-bit blocks ([`QuantMatrix`]), the activations in f32.
//!
//! One token reads every weight once, so the step's time is the time to stream the weights: 4
//! bytes a weight in f32, 36/32 in int8 blocks, 20/32 in 4-bit blocks (codes and an f32 scale
//! per 32). Output j of y = xW is a sum over the blocks of column j:
//!
//! ```text
//! y_j = Σ_b s_{b,j} · Σ_{i<32} q_{i,b,j} · x_{32b+i}
//! ```
//!
//! each block's codes widened to f32 and multiplied by the activations with fused multiply-adds,
//! the block's sum scaled once. [`column_dot_reference`] is that sum in plain Rust in a fixed
//! order (8 lanes, as one AVX2 register holds); the AVX2 path in the SIMD module sums in the same
//! order, so the two agree bit for bit (a test holds every path to the reference). A column is
//! one thread's work whatever the thread count, so any count gives the same bits.
//!
//! The step itself is chapter 9's: [`QuantGpt`] implements the step's one seam for its weights
//! ([`StepWeights`]) with these products and hands itself to [`Gpt::step_with`]; everything else
//! (LayerNorms, biases, attention, the embedding rows) is read from the stored model
//! ([`QuantGpt::model`]), whose quantized tensors hold ŵ.

use super::quant::{BLOCK, QuantMatrix, Storage, is_quantized, stored_model};
use crate::ch09_gpt::data::Token;
use crate::ch09_gpt::fast::StepWeights;
use crate::ch09_gpt::model::{Gpt, KvCache, Param, Part};
use crate::error::{Result, shape_error};
use crate::matmul::{MatMut, MatRef};
use crate::simd::Kernel;
use crate::simd::active_kernel;
use crate::threads::share_pieces;
use std::ops::Range;

/// Bytes of an f32.
const F32_BYTES: usize = 4;

/// Lanes of [`column_dot_reference`]'s partial sums (one AVX2 register of f32).
pub const DOT_LANES: usize = 8;

/// Σ_b s_b·(Σ_i q_{b,i}·x_{b,i}) for one column: `x` holds 32 values per scale, `codes` the
/// blocks' bytes ([`Storage::code_bytes_per_block`] each). The order, which every path keeps:
/// in lane l (0 … 7) the block's partial sum t_l = q_l·x_l, then t_l ← q_{8c+l}·x_{8c+l} + t_l for
/// c = 1, 2, 3, then acc_l ← t_l·s_b + acc_l, each a fused multiply-add; at the end
/// ((acc₀ + acc₁) + (acc₂ + acc₃)) + ((acc₄ + acc₅) + (acc₆ + acc₇)). Callers pass matching
/// lengths ([`quant_row_product`] checks them).
pub fn column_dot_reference(x: &[f32], scales: &[f32], codes: &[u8], storage: Storage) -> f32 {
    let per = storage.code_bytes_per_block();
    let mut acc = [0.0f32; DOT_LANES];
    for (b, &s) in scales.iter().enumerate() {
        let q = super::quant::unpack(&codes[b * per..][..per], storage);
        let x = &x[b * BLOCK..][..BLOCK];
        for (l, a) in acc.iter_mut().enumerate() {
            let mut t = f32::from(q[l]) * x[l];
            for c in 1..BLOCK / DOT_LANES {
                t = f32::from(q[DOT_LANES * c + l]).mul_add(x[DOT_LANES * c + l], t);
            }
            *a = t.mul_add(s, *a);
        }
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}

/// out_j = the column sum of column j by `kernel` (the SIMD dot where the dispatcher runs one for
/// it, else [`column_dot_reference`]), for a run of columns: `scales` B per column and `codes` B
/// blocks per column, column after column, `x` 32·B values.
fn columns_dot(
    kernel: Kernel,
    x: &[f32],
    scales: &[f32],
    codes: &[u8],
    storage: Storage,
    out: &mut [f32],
) {
    if crate::simd::quant_columns_dot(kernel, x, scales, codes, storage == Storage::Q4, out) {
        return;
    }
    let blocks = x.len() / BLOCK;
    let per = blocks * storage.code_bytes_per_block();
    for (j, o) in out.iter_mut().enumerate() {
        let (s, c) = (&scales[j * blocks..][..blocks], &codes[j * per..][..per]);
        *o = column_dot_reference(x, s, c, storage);
    }
}

/// y = x·Ŵ for one row x (length d_in) and a quantized W (d_in×d_out): y_j by `kernel` over column
/// j's blocks, the columns cut into one run per thread (`threads`, the caller's included). A
/// d_in that is not a multiple of 32 is padded: x is copied into whole blocks with zeros after
/// it, matching the zero codes of the matrix's padding. Errors when x's length is not d_in.
pub fn quant_row_product(
    kernel: Kernel,
    x: &[f32],
    w: &QuantMatrix,
    threads: usize,
) -> Result<Vec<f32>> {
    if x.len() != w.rows {
        return Err(shape_error(
            "quant_row_product",
            "x and W (x's length must equal W's rows)",
            format!("x of length {}", w.rows),
            format!("{}", x.len()),
        ));
    }
    let blocks = w.blocks();
    let mut padded = x.to_vec();
    padded.resize(blocks * BLOCK, 0.0);
    let per = w.storage.code_bytes_per_block();
    let parts = threads.clamp(1, w.cols.max(1));
    let per_part = w.cols.div_ceil(parts);
    let runs: Vec<Range<usize>> = (0..parts)
        .map(|p| p * per_part..((p + 1) * per_part).min(w.cols))
        .filter(|r| !r.is_empty())
        .collect();
    let sums = share_pieces(&mut vec![(); runs.len().max(1)], runs, |(), r| {
        let mut out = vec![0.0f32; r.len()];
        let scales = &w.scales[r.start * blocks..r.end * blocks];
        let codes = &w.codes[r.start * blocks * per..r.end * blocks * per];
        columns_dot(kernel, &padded, scales, codes, w.storage, &mut out);
        out
    });
    Ok(sums.into_iter().flatten().collect())
}

/// A model whose weight matrices are stored in int8 or 4-bit blocks (or bf16, or f32), and the
/// cached step that reads them.
#[derive(Clone, Debug)]
pub struct QuantGpt {
    /// The stored model: the f32 model with ŵ in place of every quantized tensor. The reference
    /// path (chapter 9's functions on these values) and the source of every tensor the blocks do
    /// not hold.
    model: Gpt<f32>,
    storage: Storage,
    head: bool,
    /// The blocks, in the parameter table's order: `Some` for each tensor [`is_quantized`]
    /// names (a block matrix d_in×d_out as it is; W_U, V×d, as its transpose d×V, so that the
    /// blocks run along the width).
    matrices: Vec<Option<QuantMatrix>>,
    kernel: Kernel,
}

impl QuantGpt {
    /// `model` stored as `storage`, the unembedding quantized too when `head`; the fastest
    /// column path of this CPU. Errors on a non-finite weight.
    pub fn new(model: &Gpt<f32>, storage: Storage, head: bool) -> Result<QuantGpt> {
        let tied = model.config.tied;
        let blocks = storage.max_level().is_some();
        let matrices = model
            .shape()
            .order()
            .into_iter()
            .zip(model.params.iter())
            .map(|((s, _), m)| match (blocks && is_quantized(s, head, tied), s.part) {
                (false, _) => Ok(None),
                (true, Part::Block) => QuantMatrix::quantize(m, storage).map(Some),
                (true, _) => QuantMatrix::quantize(&m.transpose(), storage).map(Some),
            })
            .collect::<Result<Vec<_>>>()?;
        let model = stored_model(model, storage, head)?;
        Ok(QuantGpt { model, storage, head, matrices, kernel: active_kernel() })
    }

    /// The same blocks summed by `kernel` ([`Kernel::Scalar`]: the reference, to compare).
    pub fn with_kernel(self, kernel: Kernel) -> QuantGpt {
        QuantGpt { kernel, ..self }
    }

    /// The stored model (ŵ in place of the quantized tensors).
    pub fn model(&self) -> &Gpt<f32> {
        &self.model
    }

    /// How the weight matrices are stored.
    pub fn storage(&self) -> Storage {
        self.storage
    }

    /// Whether the unembedding is quantized too.
    pub fn head(&self) -> bool {
        self.head
    }

    /// The blocks of tensor `param` (of block `layer`), if it is quantized.
    pub fn matrix(&self, param: Param, layer: usize) -> Option<&QuantMatrix> {
        let i = self.model.shape().index(param, layer)?;
        self.matrices.get(i)?.as_ref()
    }

    /// Bytes of weights one step reads: every block matrix and the unembedding, blocks as stored
    /// (codes and scales), the rest in f32 (4 bytes a weight: the bf16 storage is computed from
    /// f32 copies of its values); the biases, the LayerNorms and one row of each embedding are
    /// left out (under 1 % of a block's bytes for d ≥ 100).
    pub fn weight_bytes_per_token(&self) -> usize {
        let tied = self.model.config.tied;
        let unembedding = if tied { Param::Wte } else { Param::LmHead };
        self.model
            .shape()
            .order()
            .into_iter()
            .zip(self.model.params.iter())
            .zip(&self.matrices)
            .filter(|(((s, _), _), _)| {
                (s.part == Part::Block && s.rows != crate::ch09_gpt::model::Dim::One)
                    || s.param == unembedding
            })
            .map(|((_, m), q)| match q {
                Some(q) => q.bytes(),
                None => F32_BYTES * m.len(),
            })
            .sum()
    }

    /// Feeds one token at the next position of the cache and returns its logits (length V):
    /// [`Gpt::step`] with the quantized products. Errors as [`Gpt::step`] does.
    pub fn step(&self, cache: &mut KvCache<f32>, token: Token) -> Result<Vec<f32>> {
        self.model.step_with(cache, token, self)
    }

    /// An empty key/value cache for [`QuantGpt::step`].
    pub fn new_kv_cache(&self) -> KvCache<f32> {
        self.model.new_kv_cache()
    }
}

/// The step's weight products from the blocks: each quantized matrix by [`quant_row_product`]
/// on the stored model's [`Gpt::step_threads`] threads, every other matrix by the stored model's
/// own products.
impl StepWeights<f32> for QuantGpt {
    fn add_product(
        &self,
        (param, layer): (Param, usize),
        x: MatRef<f32>,
        mut y: MatMut<f32>,
    ) -> Result<()> {
        let Some(w) = self.matrix(param, layer) else {
            return self.model.add_product((param, layer), x, y);
        };
        let threads = self.model.step_threads();
        let sums = quant_row_product(self.kernel, &x.as_slice()[..x.cols()], w, threads)?;
        let ld = y.ld().max(1);
        for (out, s) in y.as_mut_slice().iter_mut().step_by(ld).zip(sums) {
            *out += s;
        }
        Ok(())
    }

    fn unembed(&self, h: MatRef<f32>, mut z: MatMut<f32>) -> Result<()> {
        let unembedding = if self.model.config.tied { Param::Wte } else { Param::LmHead };
        let Some(w) = self.matrix(unembedding, 0) else {
            return self.model.unembed(h, z);
        };
        let threads = self.model.step_threads();
        let sums = quant_row_product(self.kernel, &h.as_slice()[..h.cols()], w, threads)?;
        let ld = z.ld().max(1);
        for (out, s) in z.as_mut_slice().iter_mut().step_by(ld).zip(sums) {
            *out = s;
        }
        Ok(())
    }
}
