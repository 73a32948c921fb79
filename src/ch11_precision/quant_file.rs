//! A stored model on disk: chapter 9's checkpoint (`config.json`, `model.safetensors`) with the
//! block matrices in bf16 or in blocks.
//!
//! The layout, for every weight matrix of the blocks W (d_in×d_out, GPT-2's name `N`, e.g.
//! `h.0.mlp.c_fc.weight`); every other tensor is chapter 9's, F32:
//!
//! ```text
//! bf16   N          BF16  [d_in, d_out]              row-major, as GPT-2 stores it in F32
//! int8   N          I8    [d_out, blocks, 32]         column j's blocks, one code a byte
//!        N.scales   F32   [d_out, blocks]             blocks = ⌈d_in/32⌉
//! q4     N          U8    [d_out, blocks, 16]         two codes a byte (q + 8, low nibble first)
//!        N.scales   F32   [d_out, blocks]
//! ```
//!
//! The storage's name is in `config.json` (key [`QUANTIZATION_KEY`]) and in the safetensors
//! metadata under the same key. A stored model is for generation only: its weights are not the
//! trained ones, so it carries no training state and is not trained further.

use super::bf16_weights::Bf16Matrix;
use super::format::{bf16_to_f32, f32_to_bf16};
use super::quant::{BLOCK, QuantMatrix, Storage, is_quantized, unpack};
use super::quant_step::{QuantGpt, SamplingModel, StoredMatrix};
use crate::ch09_gpt::checkpoint::{
    CONFIG_FILE, HEADS_METADATA, MODEL_FILE, check_header_against_config, config_to_json,
    model_from_safetensors,
};
use crate::ch09_gpt::config::{Config, Positions};
use crate::ch09_gpt::model::{Gpt, Params, Shape, full_name};
use crate::ch09_gpt::safetensors::{SafeTensors, TensorOut, serialize};
use crate::error::{Error, Result};
use nalgebra::DMatrix;

/// The key of `config.json` and of the safetensors metadata that names the storage.
pub const QUANTIZATION_KEY: &str = "quantization";

/// The suffix of a block matrix's scales tensor.
pub const SCALES_SUFFIX: &str = ".scales";

fn parse_error(file: &str, reason: impl Into<String>) -> Error {
    Error::Parse { file: file.to_string(), line: None, reason: reason.into() }
}

/// The files of `model` stored as `storage` (name, contents), not yet written: `config.json`
/// with [`QUANTIZATION_KEY`] and `model.safetensors` in the module's layout. Errors on a
/// non-finite weight.
pub fn stored_files(model: &Gpt<f32>, storage: Storage) -> Result<Vec<(String, Vec<u8>)>> {
    let tied = model.config.tied;
    let mut tensors = Vec::new();
    for ((s, l), m) in model.shape().order().into_iter().zip(model.params.iter()) {
        let name = full_name(s.name, l);
        let one_d = m.nrows() == 1 && !is_quantized(s, false, tied);
        if !is_quantized(s, false, tied) || storage == Storage::F32 {
            let shape = if one_d { vec![m.ncols()] } else { vec![m.nrows(), m.ncols()] };
            tensors.push(TensorOut::matrix(name, m, shape));
            continue;
        }
        tensors.extend(stored_matrix_tensors(name, m, storage, Bf16Layout::InOut)?);
    }
    let meta = vec![
        ("format".to_string(), "pt".to_string()),
        (HEADS_METADATA.to_string(), model.config.heads.to_string()),
        (QUANTIZATION_KEY.to_string(), storage.name().to_string()),
    ];
    Ok(vec![
        (MODEL_FILE.to_string(), serialize(&tensors, &meta)?),
        (CONFIG_FILE.to_string(), config_json(&model.config, storage).into_bytes()),
    ])
}

/// How a bf16 matrix W (d_in×d_out) lies in a file: GPT-2's Conv1D order or a `Linear`'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bf16Layout {
    /// [d_in, d_out], row-major (GPT-2's files).
    InOut,
    /// [d_out, d_in], row-major: W's columns one after another (Hugging Face's Llama files).
    OutIn,
}

/// The tensors of one weight matrix `m` (d_in×d_out) stored as `storage` under `name`: f32 or
/// bf16 in `layout`, or the codes `[d_out, blocks, per]` and `name.scales` `[d_out, blocks]`
/// (the module's layout, the same for either `layout`: column j's blocks are row j of the file).
/// Errors on a non-finite weight (blocks).
pub fn stored_matrix_tensors(
    name: String,
    m: &DMatrix<f32>,
    storage: Storage,
    layout: Bf16Layout,
) -> Result<Vec<TensorOut>> {
    let (d_in, d_out) = m.shape();
    // m is column-major: its values in order are row-major [d_out, d_in]; mᵀ's, [d_in, d_out].
    let (shape, values) = match layout {
        Bf16Layout::InOut => (vec![d_in, d_out], m.transpose().as_slice().to_vec()),
        Bf16Layout::OutIn => (vec![d_out, d_in], m.as_slice().to_vec()),
    };
    match storage {
        Storage::F32 => {
            let data = values.iter().flat_map(|x| x.to_le_bytes()).collect();
            Ok(vec![TensorOut { name, shape, dtype: "F32", data }])
        }
        Storage::Bf16 => {
            let data = values.iter().flat_map(|&x| f32_to_bf16(x).to_le_bytes()).collect();
            Ok(vec![TensorOut { name, shape, dtype: "BF16", data }])
        }
        Storage::Int8 | Storage::Q4 => {
            let q = QuantMatrix::quantize(m, storage)?;
            let (blocks, per) = (q.blocks(), storage.code_bytes_per_block());
            let dtype = if storage == Storage::Int8 { "I8" } else { "U8" };
            let scales = TensorOut {
                name: format!("{name}{SCALES_SUFFIX}"),
                shape: vec![q.cols, blocks],
                dtype: "F32",
                data: q.scales.iter().flat_map(|s| s.to_le_bytes()).collect(),
            };
            let codes = TensorOut { name, shape: vec![q.cols, blocks, per], dtype, data: q.codes };
            Ok(vec![codes, scales])
        }
    }
}

/// Weight matrix `name` (d_in×d_out = `shape`) of `f` as [`stored_matrix_tensors`] wrote it in
/// `storage` (bf16 or blocks) and `layout`: dtypes, shapes, byte counts and values checked
/// (finite bf16 values; blocks as [`sampling_model_from_stored`] checks them, the scales
/// tensor's name pushed to `expected`). Errors in one line naming the tensor.
pub fn stored_matrix_of(
    f: &SafeTensors,
    name: &str,
    storage: Storage,
    shape: (usize, usize),
    layout: Bf16Layout,
    expected: &mut Vec<String>,
) -> Result<StoredMatrix> {
    let (rows, cols) = shape;
    if storage != Storage::Bf16 {
        return Ok(StoredMatrix::Blocks(blocks_of(f, name, storage, rows, cols, expected)?));
    }
    let file_shape = match layout {
        Bf16Layout::InOut => [rows, cols],
        Bf16Layout::OutIn => [cols, rows],
    };
    let raw = tensor(f, name, "BF16", &file_shape, 2)?;
    let patterns: Vec<u16> =
        raw.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    if patterns.iter().any(|&b| !bf16_to_f32(b).is_finite()) {
        return Err(parse_error(&f.file, format!("tensor {name} holds NaN or ±∞")));
    }
    // The step reads column after column, which [d_out, d_in] row-major already is.
    let bits = match layout {
        Bf16Layout::InOut => {
            (0..rows * cols).map(|k| patterns[(k % rows) * cols + k / rows]).collect()
        }
        Bf16Layout::OutIn => patterns,
    };
    Ok(StoredMatrix::Bf16(Bf16Matrix { rows, cols, bits }))
}

/// Checks that the storage `f`'s metadata names (f32 when it names none) is `named`, the one
/// `config.json` names. Errors in one line naming the file.
pub fn check_file_storage(f: &SafeTensors, named: Storage) -> Result<()> {
    let storage = match f.meta(QUANTIZATION_KEY) {
        None => Storage::F32,
        Some(name) => Storage::parse(name)
            .map_err(|_| parse_error(&f.file, format!("unknown {QUANTIZATION_KEY} {name:?}")))?,
    };
    if storage != named {
        let why = format!(
            "the file holds {} weights but config.json names {}",
            storage.name(),
            named.name()
        );
        return Err(parse_error(&f.file, why));
    }
    Ok(())
}

/// Chapter 9's `config.json` text with `"quantization": <storage>` added.
pub fn config_json(config: &Config, storage: Storage) -> String {
    with_quantization(&config_to_json(config), storage)
}

/// A `config.json`'s `text` (a JSON object) with `"quantization": <storage>` added, indented.
pub fn with_quantization(text: &str, storage: Storage) -> String {
    let mut value: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        map.insert(QUANTIZATION_KEY.into(), storage.name().into());
    }
    let mut out = serde_json::to_string_pretty(&value).unwrap_or_else(|_| text.to_string());
    out.push('\n');
    out
}

/// The storage a `config.json` names (f32 when it names none). Errors on an unknown name or on
/// text that is not a JSON object; `file` names it.
pub fn storage_of_config(bytes: &[u8], file: &str) -> Result<Storage> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| parse_error(file, format!("not JSON: {e}")))?;
    match value.get(QUANTIZATION_KEY) {
        None => Ok(Storage::F32),
        Some(serde_json::Value::String(name)) => Storage::parse(name)
            .map_err(|_| parse_error(file, format!("unknown {QUANTIZATION_KEY} {name:?}"))),
        Some(other) => Err(parse_error(file, format!("{QUANTIZATION_KEY} is {other}, not a name"))),
    }
}

/// The model of a checkpoint folder, f32 or stored, as generation runs it: `config` read from
/// its `config.json` (`config_bytes`, named `config_file` in errors), `f` its parsed
/// `model.safetensors`. In this order: the storage the config names ([`storage_of_config`]); for
/// f32, the header against the config (chapter 9's check); `check_size(&config, storage)` (a
/// memory budget) before anything is built; then every tensor ([`sampling_model_from_stored`]).
/// Errors as each step does.
pub fn model_from_checkpoint(
    config: Config,
    config_bytes: &[u8],
    config_file: &str,
    f: &SafeTensors,
    check_size: impl FnOnce(&Config, Storage) -> Result<()>,
) -> Result<SamplingModel> {
    // A stored model's block matrices hold other shapes than the config's f32 ones.
    let stored = storage_of_config(config_bytes, config_file)?;
    if stored == Storage::F32 {
        check_header_against_config(&config, f)?;
    }
    check_size(&config, stored)?;
    sampling_model_from_stored(config, stored, f)
}

/// The model a stored file holds, widened to f32 (ŵ for the block matrices): the stored model
/// [`sampling_model_from_stored`] reads, every stored matrix widened
/// ([`QuantGpt::widened`]). For `gpt quantize`'s input and for tests; sampling runs the stored
/// model as it is. Errors as [`sampling_model_from_stored`].
pub fn model_from_stored(config: Config, named: Storage, f: &SafeTensors) -> Result<Gpt<f32>> {
    Ok(match sampling_model_from_stored(config, named, f)? {
        SamplingModel::F32(m) => m,
        SamplingModel::Stored(q) => q.widened(),
    })
}

/// The model a stored file holds, as generation runs it, `named` the storage `config.json`
/// names ([`storage_of_config`]), which the file's metadata must name too: chapter 9's loader
/// for f32; else every tensor read in the module's layout (dtypes, shapes and byte counts
/// checked, every value finite), the block matrices kept as stored ([`StoredMatrix`]: bf16
/// patterns or blocks, never widened to f32) and every other tensor in f32 ([`QuantGpt`]). The
/// header is compared with `config` before anything is built. Errors in one line naming the
/// tensor.
pub fn sampling_model_from_stored(
    config: Config,
    named: Storage,
    f: &SafeTensors,
) -> Result<SamplingModel> {
    check_file_storage(f, named)?;
    let storage = named;
    if storage == Storage::F32 {
        return model_from_safetensors(config, f).map(SamplingModel::F32);
    }
    config.validate()?;
    let tied = config.tied;
    let shape = Shape::of_config(&config);
    let mut expected = Vec::new();
    // Every tensor is read (its shape checked against the file's, so nothing larger than the
    // file is allocated) before the model of `config` is built.
    let mut kept = Vec::new();
    let mut matrices = Vec::new();
    for (s, l) in shape.order() {
        let name = full_name(s.name, l);
        let (rows, cols) = (s.rows.of(&config), s.cols.of(&config));
        expected.push(name.clone());
        if !is_quantized(s, false, tied) {
            let m = f.matrix::<f32>(&name, rows, cols)?;
            if m.iter().any(|x| !x.is_finite()) {
                return Err(parse_error(&f.file, format!("tensor {name} holds NaN or ±∞")));
            }
            kept.push(m);
            matrices.push(None);
            continue;
        }
        let stored =
            stored_matrix_of(f, &name, storage, (rows, cols), Bf16Layout::InOut, &mut expected)?;
        kept.push(DMatrix::zeros(0, 0));
        matrices.push(Some(stored));
    }
    if let Some(t) = f.tensors.iter().find(|t| !expected.contains(&t.name)) {
        let why =
            format!("tensor {} is not part of a {} GPT-2 with this config", t.name, storage.name());
        return Err(parse_error(&f.file, why));
    }
    let mut tensors = kept.into_iter();
    let params = Params::from_fn(&config, shape, |_, _, _, _| {
        tensors.next().unwrap_or_else(|| DMatrix::zeros(0, 0))
    });
    let fixed_positions = match config.positions {
        Positions::Learned => DMatrix::zeros(0, 0),
        Positions::Sinusoidal => crate::ch05_positions::sinusoidal(config.context, config.width)?,
    };
    let rest = Gpt::with_params(config, params, fixed_positions)?;
    QuantGpt::from_parts(rest, storage, false, matrices).map(SamplingModel::Stored)
}

/// The blocks of block matrix `name` (d_in = `rows`, d_out = `cols`) in `f`: its codes and its
/// scales tensor (whose name is pushed to `expected`), checked: shapes, non-negative finite
/// scales, and no code without a positive twin (a sign of a damaged file).
fn blocks_of(
    f: &SafeTensors,
    name: &str,
    storage: Storage,
    rows: usize,
    cols: usize,
    expected: &mut Vec<String>,
) -> Result<QuantMatrix> {
    let blocks = rows.div_ceil(BLOCK);
    let per = storage.code_bytes_per_block();
    let dtype = if storage == Storage::Int8 { "I8" } else { "U8" };
    let codes = tensor(f, name, dtype, &[cols, blocks, per], 1)?.to_vec();
    let scales_name = format!("{name}{SCALES_SUFFIX}");
    expected.push(scales_name.clone());
    let raw = tensor(f, &scales_name, "F32", &[cols, blocks], 4)?;
    let scales: Vec<f32> =
        raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    if scales.iter().any(|s| !s.is_finite() || *s < 0.0) {
        let why = format!("tensor {scales_name} holds a negative or non-finite scale");
        return Err(parse_error(&f.file, why));
    }
    // Both storages are symmetric (q = round(w/s) lies in −127 … 127, or −7 … 7): the one code
    // without a positive twin, −128 or −8, is never written, and is refused in either as a sign
    // of a damaged file.
    let (lowest, range) =
        if storage == Storage::Int8 { (i8::MIN, "−127 … 127") } else { (-8, "−7 … 7") };
    if codes.chunks(per).any(|b| unpack(b, storage).contains(&lowest)) {
        let why =
            format!("{name} holds code {}, not in {range}", lowest.to_string().replace('-', "−"));
        return Err(parse_error(&f.file, why));
    }
    Ok(QuantMatrix { storage, rows, cols, scales, codes })
}

/// The raw bytes of tensor `name`, which must have `dtype`, `shape` and `size`-byte elements.
fn tensor<'f>(
    f: &'f SafeTensors,
    name: &str,
    dtype: &str,
    shape: &[usize],
    size: usize,
) -> Result<&'f [u8]> {
    let t =
        f.info(name).ok_or_else(|| parse_error(&f.file, format!("tensor {name} is missing")))?;
    if t.dtype != dtype || t.shape != shape {
        return Err(parse_error(
            &f.file,
            format!(
                "tensor {name} is {} {:?} but {dtype} {shape:?} was expected",
                t.dtype, t.shape
            ),
        ));
    }
    let bytes = f.bytes(name).unwrap_or_default();
    if bytes.len() != shape.iter().product::<usize>() * size {
        return Err(parse_error(&f.file, format!("tensor {name} has {} bytes", bytes.len())));
    }
    Ok(bytes)
}
