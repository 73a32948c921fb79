//! Checkpoints in GPT-2's format, and the training state beside them.
//!
//! A checkpoint folder holds:
//! - `config.json`: the hyper-parameters under GPT-2's keys (`vocab_size`, `n_positions`,
//!   `n_embd`, `n_layer`, `n_head`, `layer_norm_epsilon`, `activation_function`,
//!   `tie_word_embeddings`). The head count cannot be read from the tensors' shapes (12 heads of
//!   64 and 6 heads of 128 hold the same matrices), so the file is required.
//! - `model.safetensors`: the weights under Hugging Face GPT-2's names. GPT-2's linear layers are
//!   `Conv1D` modules whose weight is stored in×out, the orientation of our y = xW + b, so they
//!   are saved as they are (a PyTorch `nn.Linear` would store out×in). The query, key and value
//!   maps are one fused matrix `attn.c_attn.weight` of shape d×3d: columns 0…d−1 are W_Q, then
//!   W_K, then W_V; its bias likewise. Biases and LayerNorm parameters are 1-D.
//! - `training_state.safetensors` (written by training): AdamW's first and second moments for
//!   every tensor, and in its metadata the step, Adam's step count, the generator's state, the
//!   weight decay, and the history of the run (as tensors).
//!
//! These functions read and write a plain folder, each file atomically (temporary file, then
//! rename). A training run saves all its files together as one generation of its folder
//! ([`crate::workshop::folder`]: generation folders and a pointer switched by one rename), so an
//! interrupted save never mixes two steps; the model and the training state still both record
//! the step they belong to, and a plain folder whose two files disagree is refused on resume.
//! Before any model is built, the config's sizes are compared with the shapes in the file's
//! header ([`check_header_against_config`]).
//!
//! Loading accepts what Hugging Face's own files contain: an optional `transformer.` prefix, and
//! the causal-mask buffers `h.N.attn.bias` / `h.N.attn.masked_bias`, which are not parameters and
//! are skipped (their byte ranges are still validated). Any other unknown tensor, any missing
//! one, a wrong shape or dtype, or a config the tensors contradict is an error naming it.

#![deny(clippy::unwrap_used, clippy::expect_used)]

use super::config::{Config, GPT2_LAYER_NORM_EPSILON, Positions};
use super::model::{Gpt, Param, Shape, full_name, gpt2_layout, spec_of};
use super::safetensors::{SafeTensors, TensorOut, serialize, write_atomic};
use crate::error::from_json_object;
use crate::error::{Error, Result};
use crate::float::Float;
use nalgebra::DMatrix;
use serde::{Deserialize, Serialize};
use std::path::Path;

mod bounded;
mod state;
pub use bounded::{TooLong, read_at_most};
pub use state::*;

/// The weights' file name.
pub const MODEL_FILE: &str = "model.safetensors";
/// The configuration's file name.
pub const CONFIG_FILE: &str = "config.json";
/// The training state's file name.
pub const STATE_FILE: &str = "training_state.safetensors";
/// The metadata key of our `model.safetensors` that records the head count (no shape shows it).
pub const HEADS_METADATA: &str = "n_head";
/// The activation GPT-2's config names for GELU in its tanh form.
pub const GELU_TANH_NAMES: [&str; 2] = ["gelu_new", "gelu_pytorch_tanh"];

fn parse_error(file: &str, reason: impl Into<String>) -> Error {
    Error::Parse { file: file.to_string(), line: None, reason: reason.into() }
}

fn io_error(path: &Path, source: std::io::Error) -> Error {
    Error::Io { path: path.display().to_string(), source }
}

// ───────────────────────────── config.json ─────────────────────────────

/// `config.json` as we write it: GPT-2's keys in GPT-2's order (plus `position_embedding_type`,
/// which GPT-2 does not have and other readers ignore).
#[derive(Serialize)]
struct ConfigOut {
    model_type: &'static str,
    architectures: [&'static str; 1],
    vocab_size: usize,
    n_positions: usize,
    n_ctx: usize,
    n_embd: usize,
    n_layer: usize,
    n_head: usize,
    n_inner: Option<usize>,
    activation_function: &'static str,
    layer_norm_epsilon: f64,
    tie_word_embeddings: bool,
    position_embedding_type: &'static str,
}

/// The keys of `config.json` we read; the many others GPT-2's files hold (dropout rates, token
/// ids, …) are ignored. A key given twice is refused by serde; `null` counts as absent.
#[derive(Deserialize)]
struct ConfigIn {
    vocab_size: Option<usize>,
    n_positions: Option<usize>,
    n_ctx: Option<usize>,
    n_embd: Option<usize>,
    n_layer: Option<usize>,
    n_head: Option<usize>,
    n_inner: Option<usize>,
    activation_function: Option<String>,
    layer_norm_epsilon: Option<f64>,
    tie_word_embeddings: Option<bool>,
    position_embedding_type: Option<String>,
}

/// The configuration as GPT-2's `config.json` writes it (indented JSON text).
pub fn config_to_json(c: &Config) -> String {
    let out = ConfigOut {
        model_type: "gpt2",
        architectures: ["GPT2LMHeadModel"],
        vocab_size: c.vocab_size,
        n_positions: c.context,
        n_ctx: c.context,
        n_embd: c.width,
        n_layer: c.layers,
        n_head: c.heads,
        n_inner: None,
        activation_function: GELU_TANH_NAMES[0],
        layer_norm_epsilon: c.layer_norm_epsilon,
        tie_word_embeddings: c.tied,
        position_embedding_type: match c.positions {
            Positions::Learned => "learned",
            Positions::Sinusoidal => "sinusoidal",
        },
    };
    // Plain fields of plain types: serialising them cannot fail.
    let mut text = serde_json::to_string_pretty(&out).unwrap_or_default();
    text.push('\n');
    text
}

/// Reads a configuration from the text of a `config.json` with GPT-2's keys; `file` names it in
/// errors. Required: `vocab_size`, `n_embd`, `n_layer`, `n_head`, and `n_positions` (or
/// `n_ctx`). Optional: `layer_norm_epsilon` (10⁻⁵), `tie_word_embeddings` (true),
/// `position_embedding_type` (learned), `activation_function` (must be GELU's tanh form),
/// `n_inner` (null or 4·n_embd). Every other key is ignored.
pub fn config_from_json(bytes: &[u8], file: &str) -> Result<Config> {
    let j: ConfigIn = from_json_object(bytes, file)?;
    let need = |key: &str, v: Option<usize>| -> Result<usize> {
        v.ok_or_else(|| parse_error(file, format!("{key} is missing")))
    };
    let context = match j.n_positions {
        Some(n) => n,
        None => need("n_ctx", j.n_ctx)?,
    };
    let width = need("n_embd", j.n_embd)?;
    let mut c = Config::new(
        need("vocab_size", j.vocab_size)?,
        context,
        need("n_layer", j.n_layer)?,
        need("n_head", j.n_head)?,
        width,
    );
    c.layer_norm_epsilon = j.layer_norm_epsilon.unwrap_or(GPT2_LAYER_NORM_EPSILON);
    if let Some(t) = j.tie_word_embeddings {
        c.tied = t;
    }
    if let Some(p) = j.position_embedding_type {
        c.positions = match p.as_str() {
            "learned" | "absolute" => Positions::Learned,
            "sinusoidal" => Positions::Sinusoidal,
            _ => {
                return Err(parse_error(
                    file,
                    format!("position_embedding_type {p:?} must be \"learned\" or \"sinusoidal\""),
                ));
            }
        };
    }
    if let Some(a) = j.activation_function
        && !GELU_TANH_NAMES.contains(&a.as_str())
    {
        return Err(parse_error(
            file,
            format!(
                "activation_function {a:?} is not GELU's tanh form (gelu_new); this model only \
                    implements that one"
            ),
        ));
    }
    if let Some(inner) = j.n_inner
        && inner != 4 * width
    {
        return Err(parse_error(
            file,
            format!("n_inner = {inner}, but this model's MLP is 4 × n_embd = {}", 4 * width),
        ));
    }
    c.validate().map_err(|e| parse_error(file, e.to_string().replace("Config::validate: ", "")))?;
    super::config::check_epsilon(c.layer_norm_epsilon)
        .map_err(|reason| parse_error(file, reason))?;
    Ok(c)
}

/// The most bytes [`read_config`] reads of a `config.json` (GPT-2's is under a kilobyte).
pub const CONFIG_MAX_BYTES: u64 = 1 << 20;

/// Reads `config.json` from a folder: at most [`CONFIG_MAX_BYTES`], its size checked before it is
/// read.
pub fn read_config(dir: &Path) -> Result<Config> {
    let path = dir.join(CONFIG_FILE);
    let name = path.display().to_string();
    let bytes = read_at_most(&path, CONFIG_MAX_BYTES)?.map_err(|_| {
        let most = CONFIG_MAX_BYTES;
        parse_error(&name, format!("holds more than {most} bytes, more than any config.json"))
    })?;
    config_from_json(&bytes, &name)
}

// ───────────────────────────── the weights ─────────────────────────────

/// The model's tensors under GPT-2's names and layouts, ready to serialise: the store's tensors
/// in its order ([`gpt2_layout`]: the model holds GPT-2's layout), a tensor of one row 1-D.
pub fn gpt2_tensors<T: Float>(model: &Gpt<T>) -> Vec<TensorOut> {
    gpt2_layout(&model.config, model.shape())
        .into_iter()
        .zip(model.params.iter())
        .map(|(t, m)| {
            let shape = if t.one_d { vec![m.ncols()] } else { vec![m.nrows(), m.ncols()] };
            TensorOut::matrix(t.name, m, shape)
        })
        .collect()
}

/// Whether `name` is one of the causal-mask buffers GPT-2's files carry (not a parameter).
fn is_mask_buffer(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("h.") else { return false };
    let mut parts = rest.splitn(2, '.');
    let layer_ok =
        parts.next().is_some_and(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()));
    layer_ok && matches!(parts.next(), Some("attn.bias") | Some("attn.masked_bias"))
}

/// Compares the sizes of `config` with the shapes in the file's header before anything is
/// built: the layer count with the blocks the file holds, `wte` (and `wpe` with learned
/// positions) and the last block's MLP with the config's vocabulary, context and width. Once
/// they agree, every size of the config is bounded by the tensors actually in the file. The head
/// count, which no shape shows, is compared with [`HEADS_METADATA`] where the file records it.
pub fn check_header_against_config(config: &Config, f: &SafeTensors) -> Result<()> {
    let prefixed = f.tensors.iter().any(|t| t.name.starts_with("transformer."));
    let bare = |n: &str| if prefixed { format!("transformer.{n}") } else { n.to_string() };
    let mut layers: Vec<usize> = f
        .tensors
        .iter()
        .filter_map(|t| {
            let rest = t.name.strip_prefix("transformer.").unwrap_or(&t.name).strip_prefix("h.")?;
            rest.split('.').next()?.parse::<usize>().ok()
        })
        .collect();
    layers.sort_unstable();
    layers.dedup();
    super::config::check_heads(config, f.meta(HEADS_METADATA))
        .map_err(|reason| parse_error(&f.file, reason))?;
    if layers.len() != config.layers || layers.last().is_some_and(|&l| l + 1 != layers.len()) {
        return Err(parse_error(
            &f.file,
            format!("{} blocks, but config.json n_layer = {}", layers.len(), config.layers),
        ));
    }
    // The shapes that bound the config's sizes, from the parameter table: the embeddings
    // (vocabulary, context, width) and the last block's MLP (width, layers).
    let bounding = [
        full_name(spec_of(Param::Wte).name, None),
        full_name(spec_of(Param::W1).name, Some(config.layers - 1)),
        full_name(spec_of(Param::Wpe).name, None),
    ];
    let layout = gpt2_layout(config, Shape::of_config(config));
    let want: Vec<(String, Vec<usize>)> = bounding
        .iter()
        .filter_map(|n| layout.iter().find(|t| t.name == *n))
        .map(|t| (t.name.clone(), vec![t.rows, t.cols]))
        .collect();
    for (name, shape) in want {
        let reason = match f.info(&bare(&name)).map(|t| t.shape.clone()) {
            Some(found) if found == shape => continue,
            Some(found) => format!("{name} is {found:?}, config.json wants {shape:?}"),
            None => format!("tensor {name} is missing"),
        };
        return Err(parse_error(&f.file, reason));
    }
    Ok(())
}

/// Builds a model of `config` from a parsed safetensors file with GPT-2's names. The config's
/// sizes are compared with the file's header first ([`check_header_against_config`]), so a
/// config that asks for more than the file holds is refused before anything is allocated.
pub fn model_from_safetensors<T: Float>(config: Config, f: &SafeTensors) -> Result<Gpt<T>> {
    config.validate()?;
    check_header_against_config(&config, f)?;
    let file = f.file.clone();
    // Hugging Face files saved from GPT2LMHeadModel prefix the body with "transformer.".
    let prefixed = f.tensors.iter().any(|t| t.name.starts_with("transformer."));
    let head_name = spec_of(Param::LmHead).name;
    let name_of = |n: &str| {
        if prefixed && n != head_name { format!("transformer.{n}") } else { n.to_string() }
    };
    let mut expected: Vec<String> = Vec::new();
    let mut get = |name: &str, rows: usize, cols: usize| -> Result<DMatrix<T>> {
        let full = name_of(name);
        expected.push(full.clone());
        f.matrix::<T>(&full, rows, cols).map_err(|e| match e {
            Error::Parse { reason, .. } => parse_error(
                &file,
                format!(
                    "{reason} (config.json: n_embd = {}, n_layer = {}, vocab_size = {})",
                    config.width, config.layers, config.vocab_size
                ),
            ),
            other => other,
        })
    };
    let mut model = Gpt::<T>::new(config, 0)?;
    let (d, v) = (config.width, config.vocab_size);
    // Every tensor of the parameter table, under its GPT-2 name, into the store in its order.
    for (t, slot) in gpt2_layout(&config, model.shape()).into_iter().zip(model.params.iter_mut()) {
        *slot = get(&t.name, t.rows, t.cols)?;
    }
    if config.tied && f.info(head_name).is_some() {
        // A tied model may still carry the shared matrix under its second name; it must be W_E.
        let head: DMatrix<T> = get(head_name, v, d)?;
        if &head != model.wte() {
            return Err(parse_error(
                &file,
                "config.json says the unembedding is tied to wte, but lm_head.weight differs from \
                    wte.weight",
            ));
        }
    }
    for t in &f.tensors {
        let bare = t.name.strip_prefix("transformer.").unwrap_or(&t.name);
        if !expected.contains(&t.name) && !is_mask_buffer(bare) {
            let hint = if bare == spec_of(Param::Wpe).name {
                " (config.json says the positions are sinusoidal)"
            } else {
                ""
            };
            return Err(parse_error(
                &file,
                format!("tensor {} is not part of a GPT-2 with this config{hint}", t.name),
            ));
        }
    }
    for (name, m) in model.tensors() {
        crate::float::ensure_finite("load_model", "tensor", m)
            .map_err(|_| parse_error(&file, format!("tensor {name} holds NaN or ±∞")))?;
    }
    Ok(model)
}

/// The files of a model (name, contents): `model.safetensors` with `metadata` in its header (we
/// record the step there) and `config.json`, not yet written.
pub fn model_files<T: Float>(
    model: &Gpt<T>,
    metadata: &[(String, String)],
) -> Result<Vec<(String, Vec<u8>)>> {
    let mut meta = vec![
        ("format".to_string(), "pt".to_string()),
        (HEADS_METADATA.to_string(), model.config.heads.to_string()),
    ];
    meta.extend(metadata.iter().cloned());
    Ok(vec![
        (MODEL_FILE.to_string(), serialize(&gpt2_tensors(model), &meta)?),
        (CONFIG_FILE.to_string(), config_to_json(&model.config).into_bytes()),
    ])
}

/// Saves `config.json` and `model.safetensors` into `dir` (created if needed), each atomically.
/// `metadata` goes into the safetensors header (we record the step there). A run's folder is
/// saved as one unit instead ([`crate::workshop::folder`]); this writes a plain folder.
pub fn save_model<T: Float>(
    model: &Gpt<T>,
    dir: &Path,
    metadata: &[(String, String)],
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    for (name, bytes) in model_files(model, metadata)? {
        write_atomic(&dir.join(name), &bytes)?;
    }
    Ok(())
}

/// Loads `config.json` and `model.safetensors` from `dir` like [`load_model`], but first
/// compares the config with the file's header ([`check_header_against_config`]) and then lets
/// `check` refuse the config (a memory budget), before anything is built.
pub fn load_model_checked<T: Float>(
    dir: &Path,
    check: impl FnOnce(&Config) -> Result<()>,
) -> Result<Gpt<T>> {
    let config = read_config(dir)?;
    let f = SafeTensors::read(&dir.join(MODEL_FILE))?;
    check_header_against_config(&config, &f)?;
    check(&config)?;
    model_from_safetensors(config, &f)
}

/// Loads `config.json` and `model.safetensors` from `dir`.
pub fn load_model<T: Float>(dir: &Path) -> Result<Gpt<T>> {
    let config = read_config(dir)?;
    let f = SafeTensors::read(&dir.join(MODEL_FILE))?;
    model_from_safetensors(config, &f)
}

// The training state (AdamW's moments, the generator, the step, the history) is in
// `checkpoint/state.rs`; its items are this module's too.
