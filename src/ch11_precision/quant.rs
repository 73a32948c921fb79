//! Weight quantization: a block of 32 weights stored as small integers and one f32 scale.
//!
//! A weight matrix W of y = xW is d_in×d_out, stored column-major, so column j (the weights that
//! output j reads) is contiguous. Output j is the dot product x · W\[:, j\], and the blocks run
//! along that column: block b of column j is W\[32b … 32b + 31, j\], 32 consecutive weights of the
//! input dimension. A block is then one contiguous run of the column a dot product reads, and its
//! one scale multiplies one partial sum. With L the largest level (127 for int8, 7 for 4-bit):
//!
//! ```text
//! s = max_i |w_i| / L                              the scale (absmax: the largest magnitude)
//! q_i = round(w_i / s),  −L ≤ q_i ≤ L              round to nearest, ties away from zero
//! ŵ_i = s·q_i                                      the dequantized weight
//! |w_i − ŵ_i| ≤ s/2                                half a step, the rounding's bound
//! ```
//!
//! A block of zeros has s = 0 and every q_i = 0 (no division by zero). The levels are symmetric:
//! −L and L are both used, 0 is exact. llama.cpp's 4-bit blocks (`Q4_0`) use all sixteen codes
//! −8 … 7 and set the scale from the signed weight of largest magnitude m as s = m/(−8), so that
//! weight lands exactly on −8 and the other side reaches only 7·|s|: one more level, no symmetry.
//! Here both formats are symmetric, and the 4-bit one leaves its sixteenth code unused.
//!
//! Storage, per column, block after block: int8 keeps each q_i as one byte (two's complement),
//! 32 bytes a block; 4-bit packs two codes per byte, q_i + 8 (1 … 15) in the low four bits of
//! byte i and q_{i+16} + 8 in its high four bits, 16 bytes a block (llama.cpp's order: the low
//! halves are the first 16 weights). A column whose length d_in is not a multiple of 32 is
//! padded with zeros to whole blocks; the padding quantizes to 0 and adds nothing to a dot.

use crate::ch09_gpt::config::Config;
use crate::ch09_gpt::model::{Dim, Gpt, PARAMETERS, Param, Part, Shape, Spec};
use crate::ch11_precision::format::round_to_bf16;
use crate::error::{Result, invalid};
use nalgebra::DMatrix;

/// Weights per block (one scale each).
pub const BLOCK: usize = 32;

/// How a model's weight matrices are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// f32, as trained.
    F32,
    /// bf16: each weight rounded to the nearest bf16 (chapter 11's conversion).
    Bf16,
    /// Blocks of 32 one-byte codes −127 … 127 and an f32 scale.
    Int8,
    /// Blocks of 32 four-bit codes −7 … 7 and an f32 scale.
    Q4,
}

/// The four storages, widest first.
pub const STORAGES: [Storage; 4] = [Storage::F32, Storage::Bf16, Storage::Int8, Storage::Q4];

impl Storage {
    /// How the command line and `config.json` name it: `f32`, `bf16`, `int8`, `q4`.
    pub fn name(self) -> &'static str {
        match self {
            Storage::F32 => "f32",
            Storage::Bf16 => "bf16",
            Storage::Int8 => "int8",
            Storage::Q4 => "q4",
        }
    }

    /// The storage named `name`; errors on another name.
    pub fn parse(name: &str) -> Result<Storage> {
        STORAGES.into_iter().find(|s| s.name() == name).ok_or_else(|| {
            invalid("Storage::parse", "format", format!("{name:?}: expected f32, bf16, int8 or q4"))
        })
    }

    /// The largest level L of a block storage (127, 7); `None` for f32 and bf16.
    pub fn max_level(self) -> Option<i32> {
        match self {
            Storage::Int8 => Some(127),
            Storage::Q4 => Some(7),
            Storage::F32 | Storage::Bf16 => None,
        }
    }

    /// Bytes of codes per block of 32 weights (32, 16); 0 for f32 and bf16.
    pub fn code_bytes_per_block(self) -> usize {
        match self {
            Storage::Int8 => BLOCK,
            Storage::Q4 => BLOCK / 2,
            Storage::F32 | Storage::Bf16 => 0,
        }
    }

    /// Bytes per weight, scales included: 4, 2, 36/32 and 20/32 (an f32 scale per 32 weights).
    pub fn bytes_per_weight(self) -> f64 {
        const SCALE_BYTES: f64 = 4.0;
        match self {
            Storage::F32 => 4.0,
            Storage::Bf16 => 2.0,
            _ => (self.code_bytes_per_block() as f64 + SCALE_BYTES) / BLOCK as f64,
        }
    }
}

/// One block quantized: its scale s and its codes q (the padding's codes are 0).
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    /// s = max|w_i| / L.
    pub scale: f32,
    /// q_i = round(w_i / s), in −L … L.
    pub codes: [i8; BLOCK],
}

/// s = max_i |w_i| / L for the weights `w` of one block: the absmax over the block divided by the
/// largest level (0 for a block of zeros).
pub fn block_scale(w: &[f32], max_level: i32) -> f32 {
    w.iter().fold(0.0f32, |m, x| m.max(x.abs())) / max_level as f32
}

/// q = round(w / s), clamped to −L … L: round to nearest, ties away from zero (`f32::round`).
/// 0 when s = 0. The clamp only guards the last bit of s (max|w|/s may round to L + 10⁻⁶).
pub fn quantize_value(w: f32, scale: f32, max_level: i32) -> i8 {
    if scale == 0.0 {
        return 0;
    }
    let l = max_level as f32;
    (w / scale).round().clamp(-l, l) as i8
}

/// Quantizes one block of at most 32 weights with largest level L (`storage`'s): the scale and
/// the codes, the missing weights of a short block counted as zeros. Errors on more than 32
/// weights, on a non-finite weight and on a storage without blocks.
pub fn quantize_block(w: &[f32], storage: Storage) -> Result<Block> {
    const OP: &str = "quantize_block";
    let Some(l) = storage.max_level() else {
        return Err(invalid(OP, "storage", format!("{} has no blocks", storage.name())));
    };
    if w.len() > BLOCK {
        return Err(invalid(OP, "w", format!("{} weights; a block holds {BLOCK}", w.len())));
    }
    crate::float::ensure_finite_slice(OP, "w", w)?;
    let scale = block_scale(w, l);
    let mut codes = [0i8; BLOCK];
    for (q, &x) in codes.iter_mut().zip(w) {
        *q = quantize_value(x, scale, l);
    }
    Ok(Block { scale, codes })
}

/// ŵ_i = s·q_i for the 32 codes of a block.
pub fn dequantize_block(b: &Block) -> [f32; BLOCK] {
    b.codes.map(|q| b.scale * f32::from(q))
}

/// A weight matrix W (d_in×d_out) in blocks of 32 along each column (the module's layout).
#[derive(Clone, Debug, PartialEq)]
pub struct QuantMatrix {
    /// Int8 or Q4.
    pub storage: Storage,
    /// d_in, W's rows (the length of the dot products).
    pub rows: usize,
    /// d_out, W's columns.
    pub cols: usize,
    /// The scales, column after column: s of block b of column j at j·blocks + b (d_out·blocks).
    pub scales: Vec<f32>,
    /// The codes in the same order, [`Storage::code_bytes_per_block`] bytes a block.
    pub codes: Vec<u8>,
}

impl QuantMatrix {
    /// Blocks per column: ⌈d_in / 32⌉.
    pub fn blocks(&self) -> usize {
        self.rows.div_ceil(BLOCK)
    }

    /// Quantizes every column of `w` (d_in×d_out) block by block. Errors as [`quantize_block`].
    pub fn quantize(w: &DMatrix<f32>, storage: Storage) -> Result<QuantMatrix> {
        let (rows, cols) = w.shape();
        let blocks = rows.div_ceil(BLOCK);
        let per = storage.code_bytes_per_block();
        let (mut scales, mut codes) =
            (Vec::with_capacity(cols * blocks), Vec::with_capacity(cols * blocks * per));
        for column in w.column_iter() {
            let column = column.as_slice();
            for chunk in column.chunks(BLOCK) {
                let b = quantize_block(chunk, storage)?;
                scales.push(b.scale);
                codes.extend(pack(&b.codes, storage));
            }
        }
        Ok(QuantMatrix { storage, rows, cols, scales, codes })
    }

    /// Block b of column j.
    pub fn block(&self, j: usize, b: usize) -> Block {
        let k = j * self.blocks() + b;
        let per = self.storage.code_bytes_per_block();
        Block { scale: self.scales[k], codes: unpack(&self.codes[k * per..][..per], self.storage) }
    }

    /// Ŵ, the dequantized matrix (d_in×d_out): ŵ = s·q for every weight.
    pub fn dequantize(&self) -> DMatrix<f32> {
        let mut w = DMatrix::zeros(self.rows, self.cols);
        for (j, mut column) in w.column_iter_mut().enumerate() {
            for (b, chunk) in column.as_mut_slice().chunks_mut(BLOCK).enumerate() {
                let values = dequantize_block(&self.block(j, b));
                chunk.copy_from_slice(&values[..chunk.len()]);
            }
        }
        w
    }

    /// Bytes the matrix occupies: codes and scales.
    pub fn bytes(&self) -> usize {
        self.codes.len() + 4 * self.scales.len()
    }
}

/// The stored bytes of one block's codes: one byte each (int8), or two per byte (4-bit: q_i + 8
/// low, q_{i+16} + 8 high).
pub fn pack(codes: &[i8; BLOCK], storage: Storage) -> Vec<u8> {
    match storage {
        Storage::Q4 => (0..BLOCK / 2)
            .map(|i| ((codes[i] + 8) as u8) | (((codes[i + BLOCK / 2] + 8) as u8) << 4))
            .collect(),
        _ => codes.iter().map(|&q| q as u8).collect(),
    }
}

/// The codes of one block from its stored bytes (the inverse of [`pack`]).
pub fn unpack(bytes: &[u8], storage: Storage) -> [i8; BLOCK] {
    let mut q = [0i8; BLOCK];
    match storage {
        Storage::Q4 => {
            for (i, &b) in bytes.iter().enumerate().take(BLOCK / 2) {
                q[i] = (b & 0x0f) as i8 - 8;
                q[i + BLOCK / 2] = (b >> 4) as i8 - 8;
            }
        }
        _ => {
            for (x, &b) in q.iter_mut().zip(bytes) {
                *x = b as i8;
            }
        }
    }
    q
}

// ───────────────────────────── which tensors, in a model ─────────────────────────────

/// Whether the storage acts on the tensor of row `s`: every weight matrix of the blocks (W_QKV,
/// W_O, W₁, W₂: the 12d² weights a block reads per token), and with `head` the unembedding too
/// (W_U; tied, that is W_E, quantized along the width: the embedding reads the same values). The
/// biases, the LayerNorms and the positions stay f32.
pub fn is_quantized(s: &Spec, head: bool, tied: bool) -> bool {
    let block_matrix = s.part == Part::Block && s.rows != Dim::One;
    let unembedding = match s.param {
        Param::LmHead => true,
        Param::Wte => tied,
        _ => false,
    };
    block_matrix || (head && unembedding)
}

/// The bytes the weights of a model of `config` occupy stored as `storage` (the unembedding kept
/// in f32, as a stored file keeps it): each block matrix d_in×d_out as stored (bf16: 2 bytes a
/// weight; blocks: ⌈d_in/32⌉ blocks a column of codes and a 4-byte scale), every other tensor at
/// 4 bytes a value, the sinusoidal positions included. Saturating: an absurd config gives a huge
/// number, never an overflow.
pub fn stored_bytes(config: &Config, storage: Storage) -> u128 {
    const F32_BYTES: u128 = 4;
    const SCALE_BYTES: u128 = 4;
    let sinusoid = if config.positions == crate::ch09_gpt::config::Positions::Sinusoidal {
        (config.context as u128).saturating_mul(config.width as u128)
    } else {
        0
    };
    let shape = Shape::of_config(config);
    let rows_of_table = PARAMETERS.iter().filter(|s| shape.has(s)).map(|s| {
        let (rows, cols) = (s.rows.of(config) as u128, s.cols.of(config) as u128);
        let copies = if s.part == Part::Block { config.layers as u128 } else { 1 };
        let bytes = if !is_quantized(s, false, config.tied) {
            rows.saturating_mul(cols).saturating_mul(F32_BYTES)
        } else {
            match storage {
                Storage::F32 => rows.saturating_mul(cols).saturating_mul(F32_BYTES),
                Storage::Bf16 => rows.saturating_mul(cols).saturating_mul(2),
                Storage::Int8 | Storage::Q4 => {
                    let per_block = storage.code_bytes_per_block() as u128 + SCALE_BYTES;
                    cols.saturating_mul(rows.div_ceil(BLOCK as u128)).saturating_mul(per_block)
                }
            }
        };
        copies.saturating_mul(bytes)
    });
    rows_of_table.fold(sinusoid.saturating_mul(F32_BYTES), u128::saturating_add)
}

/// Ŵ for one tensor: rounded to bf16, or quantized and dequantized. A block matrix is quantized
/// along its columns (the input dimension); W_E and W_U (V×d) along their rows, the width, which
/// is the input dimension of the logits' dot products z_v = h·W_U\[v, :\].
pub fn round_trip(m: &DMatrix<f32>, storage: Storage, along_rows: bool) -> Result<DMatrix<f32>> {
    Ok(match storage {
        Storage::F32 => m.clone(),
        Storage::Bf16 => m.map(round_to_bf16),
        _ if along_rows => QuantMatrix::quantize(&m.transpose(), storage)?.dequantize().transpose(),
        _ => QuantMatrix::quantize(m, storage)?.dequantize(),
    })
}

/// The model with its weights as `storage` keeps them: every tensor [`is_quantized`] names
/// replaced by its round trip ([`round_trip`]), walked in the parameter table's order. Its loss
/// is the loss of the stored model (the products of the quantized step sum the same ŵ in
/// another order). Errors on a non-finite weight.
pub fn stored_model(model: &Gpt<f32>, storage: Storage, head: bool) -> Result<Gpt<f32>> {
    let mut out = model.clone();
    let tied = model.config.tied;
    let order = model.shape().order();
    for ((s, _), t) in order.into_iter().zip(out.params.iter_mut()) {
        if is_quantized(s, head, tied) {
            let along_rows = s.part != Part::Block;
            *t = round_trip(t, storage, along_rows)?;
        }
    }
    Ok(out)
}

/// The mean next-token loss (nats per token, chapter 9's [`mean_loss`]) over `batches` of the
/// model stored each way of [`STORAGES`], with the unembedding quantized (`head`) or kept f32:
/// (storage, loss), widest first.
///
/// [`mean_loss`]: crate::ch09_gpt::train::mean_loss
pub fn storage_losses(
    model: &Gpt<f32>,
    batches: &[crate::ch09_gpt::data::Batch],
    head: bool,
) -> Result<Vec<(Storage, f64)>> {
    STORAGES
        .into_iter()
        .map(|s| {
            let m = stored_model(model, s, head)?;
            Ok((s, crate::ch09_gpt::train::mean_loss(&m, batches)?))
        })
        .collect()
}
