//! Generation from a decoder whose projections are stored: the decoder's cached step
//! ([`Decoder::step_with`]) with its weight products read from chapter 11's int8 or 4-bit blocks
//! or bf16 patterns ([`StoredMatrix`]), the activations in f32.
//!
//! A Llama folder that `gpt quantize` wrote stores every block's seven projections (q, k, v, o,
//! gate, up, down) and keeps W_E, every γ and an untied W_U in f32. [`QuantDecoder`] holds them
//! that way: the seven matrices of each block as stored, never as f32, and everything else in a
//! decoder whose seven projections are 0×0. One step multiplies a row by each stored matrix with
//! chapter 11's row products (output j a sum over the blocks of column j, or a dot product that
//! widens each bf16 pattern as it reads it), so a token reads 36/32 bytes a weight in int8
//! blocks, 20/32 in 4-bit blocks and 2 in bf16, where the f32 step reads 4.
//!
//! The step is the decoder's: [`QuantDecoder`] implements its one seam ([`DecoderWeights`]) and
//! hands itself to [`Decoder::step_with`], so the norms, the rotation, the grouped-query cache
//! and the gated MLP's φ(a) ⊙ b are the f32 decoder's own code. Its logits are those of the f32
//! step on the widened weights ŵ ([`QuantDecoder::widened`]) up to the order of each dot
//! product's sum (a test holds the two within a stated bound and to the same greedy tokens).

use super::decoder::{Decoder, DecoderConfig, DecoderKv, DecoderWeights, Mlp, StepProduct};
use super::gqa::AttnProduct;
use super::llama::llama_refusal;
use crate::ch09_gpt::data::Token;
use crate::ch09_gpt::fast::ROW_TEAM_WEIGHTS_PER_THREAD;
use crate::ch09_gpt::safetensors::SafeTensors;
use crate::ch09_gpt::sample::Generator;
use crate::ch11_precision::quant::Storage;
use crate::ch11_precision::quant_step::StoredMatrix;
use crate::error::{Result, invalid};
use crate::simd::{Kernel, active_kernel};
use nalgebra::DMatrix;

/// Bytes of an f32.
const F32_BYTES: usize = 4;

/// A block's stored products, in the Llama layout's order (q, k, v, o, gate, up, down).
pub const STORED_PRODUCTS: [StepProduct; 7] = [
    StepProduct::Attn(AttnProduct::Q),
    StepProduct::Attn(AttnProduct::K),
    StepProduct::Attn(AttnProduct::V),
    StepProduct::Attn(AttnProduct::O),
    StepProduct::Gate,
    StepProduct::Up,
    StepProduct::Down,
];

/// A decoder (of a configuration the Llama layout holds) whose seven projections per block are
/// stored in bf16 or in int8 or 4-bit blocks, and the cached step that reads them.
#[derive(Clone, Debug)]
pub struct QuantDecoder {
    /// Every tensor but the projections, in f32; each projection 0×0.
    rest: Decoder<f32>,
    storage: Storage,
    /// For each block, its matrices in [`STORED_PRODUCTS`] order, each d_in×d_out (x·W).
    matrices: Vec<Vec<StoredMatrix>>,
    kernel: Kernel,
}

/// The f32 projection `which` of a block (d_in×d_out), or `None` for a GELU MLP's.
fn projection_of(
    layer: &mut super::decoder::DecoderLayer<f32>,
    which: StepProduct,
) -> Option<&mut DMatrix<f32>> {
    let a = &mut layer.attn;
    match (which, &mut layer.mlp) {
        (StepProduct::Attn(AttnProduct::Q), _) => Some(&mut a.w_q),
        (StepProduct::Attn(AttnProduct::K), _) => Some(&mut a.w_k),
        (StepProduct::Attn(AttnProduct::V), _) => Some(&mut a.w_v),
        (StepProduct::Attn(AttnProduct::O), _) => Some(&mut a.w_o),
        (StepProduct::Gate, Mlp::Gated(g)) => Some(&mut g.w_gate),
        (StepProduct::Up, Mlp::Gated(g)) => Some(&mut g.w_up),
        (StepProduct::Down, Mlp::Gated(g)) => Some(&mut g.w_down),
        (_, Mlp::Gelu(_)) => None,
    }
}

/// The shape (d_in, d_out) of the product `which` in a decoder of `c`.
fn shape_of_product(c: &DecoderConfig, which: StepProduct) -> (usize, usize) {
    let (d, f) = (c.width, c.hidden);
    let (q, kv) = (c.n_heads * c.head_dim(), c.n_kv_heads * c.head_dim());
    match which {
        StepProduct::Attn(AttnProduct::Q) => (d, q),
        StepProduct::Attn(AttnProduct::K | AttnProduct::V) => (d, kv),
        StepProduct::Attn(AttnProduct::O) => (q, d),
        StepProduct::Gate | StepProduct::Up => (d, f),
        StepProduct::Down => (f, d),
    }
}

impl QuantDecoder {
    /// `model`'s projections stored as `storage` (bf16, int8 or 4-bit), the fastest column path
    /// of this CPU. Errors on f32 storage, a decoder the Llama layout cannot hold
    /// ([`llama_refusal`]) and a non-finite weight.
    pub fn new(model: &Decoder<f32>, storage: Storage) -> Result<QuantDecoder> {
        let mut rest = model.clone();
        let mut matrices = Vec::with_capacity(rest.layers.len());
        for layer in &mut rest.layers {
            let mut stored = Vec::with_capacity(STORED_PRODUCTS.len());
            for which in STORED_PRODUCTS {
                let Some(w) = projection_of(layer, which) else {
                    return Err(invalid("QuantDecoder::new", "model", "has a GELU MLP"));
                };
                let m = StoredMatrix::store(w, storage)?.ok_or_else(|| {
                    invalid("QuantDecoder::new", "storage", "f32 keeps the decoder as it is")
                })?;
                stored.push(m);
                *w = DMatrix::zeros(0, 0);
            }
            matrices.push(stored);
        }
        QuantDecoder::from_parts(rest, storage, matrices)
    }

    /// The model of its parts: `rest`, every tensor but the projections (each projection 0×0),
    /// and for each block its seven stored matrices in [`STORED_PRODUCTS`] order, each of its
    /// d_in×d_out shape. What the loader of a stored Llama file builds
    /// ([`QuantDecoder::from_llama_file`]). Errors on f32 storage, a configuration the Llama
    /// layout cannot hold, and naming the first block or matrix that does not fit.
    pub fn from_parts(
        mut rest: Decoder<f32>,
        storage: Storage,
        matrices: Vec<Vec<StoredMatrix>>,
    ) -> Result<QuantDecoder> {
        const OP: &str = "QuantDecoder::from_parts";
        if storage == Storage::F32 {
            return Err(invalid(OP, "storage", "f32 keeps the decoder as it is"));
        }
        let c = rest.config;
        if let Some(why) = llama_refusal(&c) {
            return Err(invalid(OP, "rest", why));
        }
        if matrices.len() != rest.layers.len() {
            let why = format!("{} blocks given, the model has {}", matrices.len(), c.layers);
            return Err(invalid(OP, "matrices", why));
        }
        for (l, (layer, stored)) in rest.layers.iter_mut().zip(&matrices).enumerate() {
            if stored.len() != STORED_PRODUCTS.len() {
                let why = format!("block {l} has {} matrices, not 7", stored.len());
                return Err(invalid(OP, "matrices", why));
            }
            for (which, m) in STORED_PRODUCTS.into_iter().zip(stored) {
                let kept = projection_of(layer, which).map(|w| w.shape());
                let fits = m.shape() == shape_of_product(&c, which)
                    && kept == Some((0, 0))
                    && storage_of(m) == (storage == Storage::Bf16);
                if !fits {
                    let why =
                        format!("{which:?} of block {l} is not where {} keeps it", storage.name());
                    return Err(invalid(OP, "matrices", why));
                }
            }
        }
        Ok(QuantDecoder { rest, storage, matrices, kernel: active_kernel() })
    }

    /// The decoder of a stored Llama file `f` (of `config`, its `config.json` naming `storage`,
    /// bf16, int8 or 4-bit), its projections read and checked as
    /// [`decoder_from_stored_llama`](super::llama::decoder_from_stored_llama) reads them and kept
    /// as stored. Errors as that function does, and on f32 storage.
    pub fn from_llama_file(
        config: DecoderConfig,
        storage: Storage,
        f: &SafeTensors,
    ) -> Result<QuantDecoder> {
        if storage == Storage::F32 {
            let why = "the file is f32: decoder_from_llama reads it";
            return Err(invalid("QuantDecoder::from_llama_file", "storage", why));
        }
        let mut stored = Vec::new();
        let rest = super::llama::read_stored_llama::<f32>(config, storage, f, |m| {
            stored.push(m);
            DMatrix::zeros(0, 0)
        })?;
        let mut blocks = Vec::with_capacity(config.layers);
        let mut it = stored.into_iter();
        for _ in 0..config.layers {
            blocks.push(it.by_ref().take(STORED_PRODUCTS.len()).collect());
        }
        QuantDecoder::from_parts(rest, storage, blocks)
    }

    /// The same matrices summed by `kernel` ([`Kernel::Scalar`]: the reference, to compare).
    pub fn with_kernel(self, kernel: Kernel) -> QuantDecoder {
        QuantDecoder { kernel, ..self }
    }

    /// The decoder's configuration.
    pub fn config(&self) -> &DecoderConfig {
        &self.rest.config
    }

    /// How the projections are stored.
    pub fn storage(&self) -> Storage {
        self.storage
    }

    /// The stored matrix of `which` in block `layer` (d_in×d_out), if there is one.
    pub fn matrix(&self, which: StepProduct, layer: usize) -> Option<&StoredMatrix> {
        let k = STORED_PRODUCTS.iter().position(|&p| p == which)?;
        self.matrices.get(layer)?.get(k)
    }

    /// The stored decoder widened to f32: every projection ŵ (s·q, or the bf16 value), every
    /// other tensor as held. For references and tests: it builds the f32 decoder this type
    /// exists not to hold.
    pub fn widened(&self) -> Decoder<f32> {
        let mut out = self.rest.clone();
        for (layer, stored) in out.layers.iter_mut().zip(&self.matrices) {
            for (which, m) in STORED_PRODUCTS.into_iter().zip(stored) {
                if let Some(w) = projection_of(layer, which) {
                    *w = m.widen();
                }
            }
        }
        out
    }

    /// Bytes of weights the model holds: every projection as stored, every other tensor at 4
    /// bytes a value.
    pub fn resident_bytes(&self) -> usize {
        let stored: usize = self.matrices.iter().flatten().map(StoredMatrix::bytes).sum();
        stored + F32_BYTES * self.rest.parameter_count()
    }

    /// Bytes the same weights hold in f32 (4 a parameter), to compare.
    pub fn f32_bytes(&self) -> usize {
        let stored: usize = self.matrices.iter().flatten().map(|m| m.shape().0 * m.shape().1).sum();
        F32_BYTES * (stored + self.rest.parameter_count())
    }

    /// Bytes of weights one step reads: every projection as stored and W_U in f32 (the norms
    /// and one row of W_E left out).
    pub fn weight_bytes_per_token(&self) -> usize {
        let stored: usize = self.matrices.iter().flatten().map(StoredMatrix::bytes).sum();
        stored + F32_BYTES * self.rest.unembedding().len()
    }

    /// The threads of each row product: one per [`ROW_TEAM_WEIGHTS_PER_THREAD`] weights of the
    /// blocks, at most the crate's thread count, at least one (any count gives the same bits:
    /// a column is one thread's work).
    fn threads(&self) -> usize {
        let weights: usize =
            self.matrices.iter().flatten().map(|m| m.shape().0 * m.shape().1).sum();
        crate::threads::default_threads().min(weights / ROW_TEAM_WEIGHTS_PER_THREAD).max(1)
    }

    /// An empty cache for [`QuantDecoder::step`].
    pub fn new_kv(&self) -> DecoderKv<f32> {
        self.rest.new_kv()
    }

    /// Feeds one token at the next position of the cache and returns its logits (length V):
    /// [`Decoder::step_with`] with the stored products. Errors as [`Decoder::step`] does.
    pub fn step(&self, kv: &mut DecoderKv<f32>, token: Token) -> Result<Vec<f32>> {
        self.rest.step_with(kv, token, self)
    }

    /// A cache of `tokens` (at least one, at most n_ctx) and every position's logits, one
    /// [`QuantDecoder::step`] a token (T×V, row t the logits after token t).
    pub fn prompt_logits(&self, tokens: &[Token]) -> Result<(DecoderKv<f32>, DMatrix<f32>)> {
        if tokens.is_empty() {
            return Err(crate::error::Error::Empty { op: "QuantDecoder::prefill", arg: "tokens" });
        }
        let mut kv = self.new_kv();
        let v = self.rest.config.vocab_size;
        let mut z = DMatrix::zeros(tokens.len(), v);
        for (t, &u) in tokens.iter().enumerate() {
            let row = self.step(&mut kv, u)?;
            z.row_mut(t).copy_from_slice(&row);
        }
        Ok((kv, z))
    }
}

/// Whether a stored matrix is bf16 (else blocks).
fn storage_of(m: &StoredMatrix) -> bool {
    matches!(m, StoredMatrix::Bf16(_))
}

/// The step's products from the stored matrices: each by [`StoredMatrix::row_product`]; the
/// unembedding (f32 in a stored Llama folder) by the decoder's own.
impl DecoderWeights<f32> for QuantDecoder {
    fn product(
        &self,
        (which, layer): (StepProduct, usize),
        x: &DMatrix<f32>,
    ) -> Result<DMatrix<f32>> {
        let Some(w) = self.matrix(which, layer) else {
            let why = format!("{which:?} of block {layer} is not stored");
            return Err(invalid("QuantDecoder::product", "which", why));
        };
        let y = w.row_product(self.kernel, x.as_slice(), self.threads())?;
        Ok(DMatrix::from_row_slice(1, y.len(), &y))
    }

    fn unembed(&self, h: &DMatrix<f32>) -> Result<Vec<f32>> {
        self.rest.unembed(h)
    }
}

/// Generation reads the stored matrices: a prompt fills the cache one step a token, as does
/// every rebuild once the window slides.
impl Generator<f32> for &QuantDecoder {
    type Cache = DecoderKv<f32>;

    fn vocab_size(&self) -> usize {
        self.rest.config.vocab_size
    }

    fn context(&self) -> usize {
        self.rest.config.context
    }

    fn cache_len(cache: &DecoderKv<f32>) -> usize {
        cache.len
    }

    fn prefill(&mut self, tokens: &[Token]) -> Result<(DecoderKv<f32>, Vec<f32>)> {
        let (kv, z) = self.prompt_logits(tokens)?;
        let last = z.row(z.nrows() - 1).iter().copied().collect();
        Ok((kv, last))
    }

    fn last_logits(&mut self, tokens: &[Token]) -> Result<Vec<f32>> {
        Ok(Generator::prefill(self, tokens)?.1)
    }

    fn step(&mut self, cache: &mut DecoderKv<f32>, token: Token) -> Result<Vec<f32>> {
        QuantDecoder::step(self, cache, token)
    }
}

// ───────────────────────────── what sampling loads ─────────────────────────────

/// The decoder a Llama folder holds, as generation runs it: the f32 decoder, or a stored one
/// (bf16, int8, 4-bit) read as stored.
#[derive(Clone, Debug)]
pub enum SamplingDecoder {
    /// An f32 folder: the decoder's own step.
    F32(Decoder<f32>),
    /// A `gpt quantize` output: the stored step ([`QuantDecoder`]).
    Stored(QuantDecoder),
}

impl SamplingDecoder {
    /// The decoder's configuration.
    pub fn config(&self) -> &DecoderConfig {
        match self {
            SamplingDecoder::F32(m) => &m.config,
            SamplingDecoder::Stored(q) => q.config(),
        }
    }

    /// How its projections are stored.
    pub fn storage(&self) -> Storage {
        match self {
            SamplingDecoder::F32(_) => Storage::F32,
            SamplingDecoder::Stored(q) => q.storage(),
        }
    }

    /// Bytes of weights the model holds ([`QuantDecoder::resident_bytes`]; 4 a weight for f32).
    pub fn resident_bytes(&self) -> usize {
        match self {
            SamplingDecoder::F32(m) => F32_BYTES * m.parameter_count(),
            SamplingDecoder::Stored(q) => q.resident_bytes(),
        }
    }

    /// [`generate_with`](crate::ch09_gpt::sample::generate_with) on whichever decoder it is,
    /// with the cache. Errors as it does.
    pub fn generate(
        &self,
        prompt: &[Token],
        max_new: usize,
        decoding: &crate::ch09_gpt::sample::Decoding,
        rng: &mut crate::rng::Rng,
    ) -> Result<crate::ch09_gpt::sample::Generated> {
        use crate::ch09_gpt::sample::generate_with;
        match self {
            SamplingDecoder::F32(m) => {
                generate_with(&mut &*m, prompt, max_new, decoding, rng, true)
            }
            SamplingDecoder::Stored(q) => {
                generate_with(&mut &*q, prompt, max_new, decoding, rng, true)
            }
        }
    }

    /// The logits of every position of `tokens` (T×V): one full forward pass of the f32
    /// decoder ([`Decoder::logits`]), or one stored step a token. Errors as they do.
    pub fn prompt_logits(&self, tokens: &[Token]) -> Result<DMatrix<f32>> {
        match self {
            SamplingDecoder::F32(m) => m.logits(tokens, tokens.len()),
            SamplingDecoder::Stored(q) => Ok(q.prompt_logits(tokens)?.1),
        }
    }
}
