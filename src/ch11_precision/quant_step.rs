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
//! bf16 weights are kept as their 2-byte patterns ([`Bf16Matrix`]) and widened to f32 by the dot
//! product that reads them ([`super::bf16_weights`]): half of f32's bytes a token.
//!
//! The step itself is chapter 9's: [`QuantGpt`] implements the step's one seam for its weights
//! ([`StepWeights`]) with these products and hands itself to [`Gpt::step_with`]; everything else
//! (LayerNorms, biases, attention, the embedding rows) is read from the f32 tensors it keeps
//! beside its stored matrices, which it never holds in f32. [`SamplingModel`] is what `gpt
//! sample` loads: chapter 9's f32 model, or a [`QuantGpt`] built from a stored file's blocks.

use super::bf16_weights::{Bf16Matrix, bf16_row_product, by_column_runs};
use super::quant::{BLOCK, QuantMatrix, Storage, is_quantized, stored_model};
use crate::ch09_gpt::data::Token;
use crate::ch09_gpt::fast::StepWeights;
use crate::ch09_gpt::model::{Gpt, KvCache, Param, Part};
use crate::ch09_gpt::sample::{Decoding, Generated, Generator, generate, generate_with};
use crate::error::{Result, invalid, shape_error};
use crate::matmul::{MatMut, MatRef};
use crate::rng::Rng;
use crate::simd::Kernel;
use crate::simd::active_kernel;
use nalgebra::DMatrix;

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
    Ok(by_column_runs(w.cols, threads, |r| {
        let mut out = vec![0.0f32; r.len()];
        let scales = &w.scales[r.start * blocks..r.end * blocks];
        let codes = &w.codes[r.start * blocks * per..r.end * blocks * per];
        columns_dot(kernel, &padded, scales, codes, w.storage, &mut out);
        out
    }))
}

// ───────────────────────────── the stored model ─────────────────────────────

/// One weight matrix as a storage keeps it: bf16 patterns, or int8 or 4-bit blocks.
#[derive(Clone, Debug, PartialEq)]
pub enum StoredMatrix {
    /// bf16, widened per dot.
    Bf16(Bf16Matrix),
    /// int8 or 4-bit blocks of 32 along each column.
    Blocks(QuantMatrix),
}

impl StoredMatrix {
    /// `w` (d_in×d_out) as `storage` keeps it; `None` for f32, which keeps it as it is. Errors
    /// on a non-finite weight (blocks).
    pub fn store(w: &DMatrix<f32>, storage: Storage) -> Result<Option<StoredMatrix>> {
        Ok(match storage {
            Storage::F32 => None,
            Storage::Bf16 => Some(StoredMatrix::Bf16(Bf16Matrix::round(w))),
            Storage::Int8 | Storage::Q4 => {
                Some(StoredMatrix::Blocks(QuantMatrix::quantize(w, storage)?))
            }
        })
    }

    /// (d_in, d_out).
    pub fn shape(&self) -> (usize, usize) {
        match self {
            StoredMatrix::Bf16(m) => (m.rows, m.cols),
            StoredMatrix::Blocks(m) => (m.rows, m.cols),
        }
    }

    /// Bytes it occupies (what one product reads): patterns, or codes and scales.
    pub fn bytes(&self) -> usize {
        match self {
            StoredMatrix::Bf16(m) => m.bytes(),
            StoredMatrix::Blocks(m) => m.bytes(),
        }
    }

    /// Ŵ in f32: the patterns widened, or s·q for every weight (for references and tests; the
    /// step never builds it).
    pub fn widen(&self) -> DMatrix<f32> {
        match self {
            StoredMatrix::Bf16(m) => m.widen(),
            StoredMatrix::Blocks(m) => m.dequantize(),
        }
    }

    /// The largest |ŵ|, read without widening the matrix (a block's is its scale times L).
    pub fn largest_magnitude(&self) -> f32 {
        match self {
            StoredMatrix::Bf16(m) => {
                m.bits.iter().fold(0f32, |a, &b| a.max(super::format::bf16_to_f32(b).abs()))
            }
            StoredMatrix::Blocks(m) => {
                let l = m.storage.max_level().unwrap_or(1) as f32;
                m.scales.iter().fold(0f32, |a, &s| a.max(s * l))
            }
        }
    }

    /// y = x·Ŵ for one row (length d_in): [`bf16_row_product`] or [`quant_row_product`] by
    /// `kernel`, on `threads` threads.
    pub fn row_product(&self, kernel: Kernel, x: &[f32], threads: usize) -> Result<Vec<f32>> {
        match self {
            StoredMatrix::Bf16(m) => bf16_row_product(x, m, threads),
            StoredMatrix::Blocks(m) => quant_row_product(kernel, x, m, threads),
        }
    }
}

/// A model whose weight matrices are stored in bf16 or in int8 or 4-bit blocks (or kept in
/// f32), and the cached step that reads them.
///
/// It holds each stored matrix once, as stored: the block matrices (and with `head` the
/// unembedding) as [`StoredMatrix`], never as f32. What the step reads besides them stays f32:
/// the token and position embeddings, the LayerNorms and the biases (and, when the unembedding
/// is stored, its f32 values ŵ too, V×d, which the embedding rows and the step's shape checks
/// read). A model of width d, l blocks and vocabulary V thus holds 12ld² weights as stored and
/// about (V + n_ctx)·d + 13ld in f32.
#[derive(Clone, Debug)]
pub struct QuantGpt {
    /// Every tensor the stored matrices do not hold, in f32; a 0×0 matrix in the place of each
    /// block matrix that is stored.
    rest: Gpt<f32>,
    storage: Storage,
    head: bool,
    /// The stored matrices, in the parameter table's order: `Some` for each tensor
    /// [`is_quantized`] names when the storage is not f32 (a block matrix d_in×d_out as it is;
    /// W_U, V×d, as its transpose d×V, so that the blocks run along the width).
    matrices: Vec<Option<StoredMatrix>>,
    kernel: Kernel,
}

impl QuantGpt {
    /// `model` stored as `storage`, the unembedding stored too when `head`; the fastest
    /// column path of this CPU. Errors on a non-finite weight.
    pub fn new(model: &Gpt<f32>, storage: Storage, head: bool) -> Result<QuantGpt> {
        let tied = model.config.tied;
        let mut rest = stored_model(model, storage, head)?;
        let order = model.shape().order();
        let mut matrices = Vec::with_capacity(order.len());
        for ((s, _), (m, kept)) in
            order.into_iter().zip(model.params.iter().zip(rest.params.iter_mut()))
        {
            if storage == Storage::F32 || !is_quantized(s, head, tied) {
                matrices.push(None);
                continue;
            }
            if s.part == Part::Block {
                matrices.push(StoredMatrix::store(m, storage)?);
                *kept = DMatrix::zeros(0, 0);
            } else {
                matrices.push(StoredMatrix::store(&m.transpose(), storage)?);
            }
        }
        QuantGpt::from_parts(rest, storage, head, matrices)
    }

    /// The model of its parts: `rest`, every tensor the stored `matrices` do not hold (a 0×0
    /// matrix in the place of a stored block matrix; the unembedding's ŵ when it is stored), and
    /// `matrices` in the parameter table's order, `Some` exactly where `storage` acts
    /// ([`is_quantized`] with `head`), each of the table's shape (W_U as its transpose). What
    /// the loader of a stored file builds ([`crate::ch11_precision::quant_file`]). Errors naming
    /// the first tensor that does not fit.
    pub fn from_parts(
        rest: Gpt<f32>,
        storage: Storage,
        head: bool,
        matrices: Vec<Option<StoredMatrix>>,
    ) -> Result<QuantGpt> {
        const OP: &str = "QuantGpt::from_parts";
        let (c, tied) = (&rest.config, rest.config.tied);
        let order = rest.shape().order();
        if matrices.len() != order.len() {
            let why = format!("{} given, the model has {} tensors", matrices.len(), order.len());
            return Err(invalid(OP, "matrices", why));
        }
        for (((s, l), m), kept) in order.into_iter().zip(&matrices).zip(rest.params.iter()) {
            let name = crate::ch09_gpt::model::full_name(s.name, l);
            let (rows, cols) = (s.rows.of(c), s.cols.of(c));
            let stored = storage != Storage::F32 && is_quantized(s, head, tied);
            let want = if s.part == Part::Block { (rows, cols) } else { (cols, rows) };
            let fits = match m {
                None => !stored && kept.shape() == (rows, cols),
                Some(m) => {
                    let kept_shape = if s.part == Part::Block { (0, 0) } else { (rows, cols) };
                    stored && m.shape() == want && kept.shape() == kept_shape
                }
            };
            if !fits {
                let why = format!("{name} is not where {} storage keeps it", storage.name());
                return Err(invalid(OP, "matrices", why));
            }
        }
        Ok(QuantGpt { rest, storage, head, matrices, kernel: active_kernel() })
    }

    /// The same matrices summed by `kernel` ([`Kernel::Scalar`]: the reference, to compare).
    pub fn with_kernel(self, kernel: Kernel) -> QuantGpt {
        QuantGpt { kernel, ..self }
    }

    /// The model's configuration.
    pub fn config(&self) -> &crate::ch09_gpt::config::Config {
        &self.rest.config
    }

    /// How the weight matrices are stored.
    pub fn storage(&self) -> Storage {
        self.storage
    }

    /// Whether the unembedding is stored too.
    pub fn head(&self) -> bool {
        self.head
    }

    /// The stored tensor `param` (of block `layer`), if the storage acts on it.
    pub fn matrix(&self, param: Param, layer: usize) -> Option<&StoredMatrix> {
        let i = self.rest.shape().index(param, layer)?;
        self.matrices.get(i)?.as_ref()
    }

    /// The stored model widened to f32: every tensor with the values the step reads (ŵ for the
    /// stored ones), [`stored_model`] of the f32 model it came from, bit for bit. For references
    /// and tests: it builds the f32 model this type exists not to hold.
    pub fn widened(&self) -> Gpt<f32> {
        let mut out = self.rest.clone();
        let tensors = self.rest.shape().order().into_iter().zip(out.params.iter_mut());
        for (((s, _), t), m) in tensors.zip(&self.matrices) {
            if let Some(m) = m {
                *t = if s.part == Part::Block { m.widen() } else { m.widen().transpose() };
            }
        }
        out
    }

    /// Bytes of weights the model holds: every stored matrix as stored, every other tensor
    /// (`rest`) at 4 bytes a value.
    pub fn resident_bytes(&self) -> usize {
        let stored: usize = self.matrices.iter().flatten().map(StoredMatrix::bytes).sum();
        let rest: usize = self.rest.params.iter().map(|m| F32_BYTES * m.len()).sum();
        stored + rest + F32_BYTES * self.rest.fixed_positions.len()
    }

    /// The largest |w| of every tensor and the tensor's name (`None` for a model without
    /// weights): where to look when finite weights give NaN or ±∞. No matrix is widened.
    pub fn largest_weight(&self) -> Option<(String, f32)> {
        let largest = |m: &DMatrix<f32>| m.iter().fold(0f32, |a, &x| a.max(x.abs()));
        let names = self.rest.params.named().map(|(n, _)| n);
        let sizes = self.rest.params.iter().zip(&self.matrices).map(|(t, m)| match m {
            Some(m) => m.largest_magnitude(),
            None => largest(t),
        });
        names.zip(sizes).max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Bytes of weights one step reads: every block matrix and the unembedding, as stored
    /// (bf16 patterns: 2 bytes a weight; blocks: codes and scales), else in f32 (4 bytes a
    /// weight); the biases, the LayerNorms and one row of each embedding are left out (under
    /// 1 % of a block's bytes for d ≥ 100).
    pub fn weight_bytes_per_token(&self) -> usize {
        let tied = self.rest.config.tied;
        let unembedding = if tied { Param::Wte } else { Param::LmHead };
        self.rest
            .shape()
            .order()
            .into_iter()
            .zip(self.rest.params.iter())
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
    /// [`Gpt::step`] with the stored products. Errors as [`Gpt::step`] does.
    pub fn step(&self, cache: &mut KvCache<f32>, token: Token) -> Result<Vec<f32>> {
        self.rest.step_with(cache, token, self)
    }

    /// An empty key/value cache for [`QuantGpt::step`].
    pub fn new_kv_cache(&self) -> KvCache<f32> {
        self.rest.new_kv_cache()
    }

    /// A cache of `tokens` (at least one, at most n_ctx) and the logits of the last, one
    /// [`QuantGpt::step`] a token: the products read the stored matrices once a token, as
    /// generation does.
    pub fn prefill(&self, tokens: &[Token]) -> Result<(KvCache<f32>, Vec<f32>)> {
        if tokens.is_empty() {
            return Err(crate::error::Error::Empty { op: "QuantGpt::prefill", arg: "tokens" });
        }
        let mut cache = self.new_kv_cache();
        let mut logits = Vec::new();
        for &t in tokens {
            logits = self.step(&mut cache, t)?;
        }
        Ok((cache, logits))
    }
}

/// The step's weight products from the stored matrices: each by [`StoredMatrix::row_product`]
/// on the model's [`Gpt::step_threads`] threads, every other matrix by chapter 9's product on
/// the f32 tensor.
impl StepWeights<f32> for QuantGpt {
    fn add_product(
        &self,
        (param, layer): (Param, usize),
        x: MatRef<f32>,
        mut y: MatMut<f32>,
    ) -> Result<()> {
        let Some(w) = self.matrix(param, layer) else {
            return self.rest.add_product((param, layer), x, y);
        };
        let threads = self.rest.step_threads();
        let sums = w.row_product(self.kernel, &x.as_slice()[..x.cols()], threads)?;
        let ld = y.ld().max(1);
        for (out, s) in y.as_mut_slice().iter_mut().step_by(ld).zip(sums) {
            *out += s;
        }
        Ok(())
    }

    fn unembed(&self, h: MatRef<f32>, mut z: MatMut<f32>) -> Result<()> {
        let unembedding = if self.rest.config.tied { Param::Wte } else { Param::LmHead };
        let Some(w) = self.matrix(unembedding, 0) else {
            return self.rest.unembed(h, z);
        };
        let threads = self.rest.step_threads();
        let sums = w.row_product(self.kernel, &h.as_slice()[..h.cols()], threads)?;
        let ld = z.ld().max(1);
        for (out, s) in z.as_mut_slice().iter_mut().step_by(ld).zip(sums) {
            *out = s;
        }
        Ok(())
    }
}

/// Generation reads the stored matrices: a prompt fills the cache one step a token
/// ([`QuantGpt::prefill`]), as does every rebuild once the window slides (the step's cost times
/// n_ctx, where the f32 model runs one blocked forward pass).
impl Generator<f32> for &QuantGpt {
    type Cache = KvCache<f32>;

    fn vocab_size(&self) -> usize {
        self.rest.config.vocab_size
    }

    fn context(&self) -> usize {
        self.rest.config.context
    }

    fn cache_len(cache: &KvCache<f32>) -> usize {
        cache.len
    }

    fn prefill(&mut self, tokens: &[Token]) -> Result<(KvCache<f32>, Vec<f32>)> {
        QuantGpt::prefill(self, tokens)
    }

    fn last_logits(&mut self, tokens: &[Token]) -> Result<Vec<f32>> {
        Ok(QuantGpt::prefill(self, tokens)?.1)
    }

    fn step(&mut self, cache: &mut KvCache<f32>, token: Token) -> Result<Vec<f32>> {
        QuantGpt::step(self, cache, token)
    }
}

// ───────────────────────────── what sampling loads ─────────────────────────────

/// The model a checkpoint folder holds, as generation runs it: chapter 9's f32 model, or a
/// stored one (bf16, int8, 4-bit) read as stored.
#[derive(Clone, Debug)]
pub enum SamplingModel {
    /// An f32 checkpoint: chapter 9's step.
    F32(Gpt<f32>),
    /// A stored checkpoint: the stored step ([`QuantGpt`]).
    Stored(QuantGpt),
}

impl SamplingModel {
    /// The model's configuration.
    pub fn config(&self) -> &crate::ch09_gpt::config::Config {
        match self {
            SamplingModel::F32(m) => &m.config,
            SamplingModel::Stored(q) => q.config(),
        }
    }

    /// How its weight matrices are stored.
    pub fn storage(&self) -> Storage {
        match self {
            SamplingModel::F32(_) => Storage::F32,
            SamplingModel::Stored(q) => q.storage(),
        }
    }

    /// Bytes of weights one cached step reads ([`QuantGpt::weight_bytes_per_token`]; for f32,
    /// the same count at 4 bytes a weight).
    pub fn weight_bytes_per_token(&self) -> usize {
        match self {
            SamplingModel::F32(m) => {
                let unembedding = if m.config.tied { Param::Wte } else { Param::LmHead };
                let tensors = m.shape().order().into_iter().zip(m.params.iter());
                tensors
                    .filter(|((s, _), _)| {
                        (s.part == Part::Block && s.rows != crate::ch09_gpt::model::Dim::One)
                            || s.param == unembedding
                    })
                    .map(|(_, t)| F32_BYTES * t.len())
                    .sum()
            }
            SamplingModel::Stored(q) => q.weight_bytes_per_token(),
        }
    }

    /// Bytes of weights the model holds ([`QuantGpt::resident_bytes`]; 4 a weight for f32).
    pub fn resident_bytes(&self) -> usize {
        match self {
            SamplingModel::F32(m) => F32_BYTES * (m.parameter_count() + m.fixed_positions.len()),
            SamplingModel::Stored(q) => q.resident_bytes(),
        }
    }

    /// The largest |w| and its tensor's name ([`QuantGpt::largest_weight`]).
    pub fn largest_weight(&self) -> Option<(String, f32)> {
        match self {
            SamplingModel::F32(m) => {
                let largest = |t: &DMatrix<f32>| t.iter().fold(0f32, |a, &x| a.max(x.abs()));
                let sizes = m.params.named().map(|(n, t)| (n, largest(t)));
                sizes.max_by(|a, b| a.1.total_cmp(&b.1))
            }
            SamplingModel::Stored(q) => q.largest_weight(),
        }
    }

    /// [`generate`] on whichever model it is: chapter 9's step for f32, the stored step
    /// ([`generate_with`] on the [`QuantGpt`]) otherwise. Errors as they do.
    pub fn generate(
        &self,
        prompt: &[Token],
        max_new: usize,
        decoding: &Decoding,
        rng: &mut Rng,
    ) -> Result<Generated> {
        match self {
            SamplingModel::F32(m) => generate(m, prompt, max_new, decoding, rng, true),
            SamplingModel::Stored(q) => {
                generate_with(&mut &*q, prompt, max_new, decoding, rng, true)
            }
        }
    }
}
