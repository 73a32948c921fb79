//! The decoder in Hugging Face's Llama file layout, and the decoder as chapter 9's trainer and
//! checkpoint code take it ([`Trainable`]).
//!
//! A Llama checkpoint folder holds `config.json` with `LlamaConfig`'s keys and
//! `model.safetensors` with these tensors (C the width, F the MLP's, d_h the head's, V the
//! vocabulary, H and H_kv the heads):
//!
//! ```text
//! model.embed_tokens.weight                        V×C        W_E as it is
//! model.layers.{i}.input_layernorm.weight          C          γ of Norm₁
//! model.layers.{i}.self_attn.q_proj.weight         H·d_h×C    W_Qᵀ
//! model.layers.{i}.self_attn.k_proj.weight         H_kv·d_h×C W_Kᵀ   (v_proj: W_Vᵀ)
//! model.layers.{i}.self_attn.o_proj.weight         C×H·d_h    W_Oᵀ
//! model.layers.{i}.post_attention_layernorm.weight C          γ of Norm₂
//! model.layers.{i}.mlp.gate_proj.weight            F×C        W_gateᵀ (up_proj: W_upᵀ)
//! model.layers.{i}.mlp.down_proj.weight            C×F        W_downᵀ
//! model.norm.weight                                C          γ of Norm_f
//! lm_head.weight                                   V×C        W_U (left out when tied)
//! ```
//!
//! A `Linear` there computes y = x Wᵀ, so each of our x·W matrices is stored transposed. The
//! files rotate in the halves pairing (`rotate_half`): a decoder built in adjacent pairs has
//! the columns of each head of W_Q and W_K permuted on the way out
//! ([`halves_from_adjacent`]), which gives the same scores; read back, it is a halves decoder.
//! The layout has no place for LayerNorm's β, learned positions, QK-norm or biases: a decoder
//! with any of them is refused ([`llama_refusal`]).

use super::decoder::{Decoder, DecoderConfig, MlpKind, NormKind, PositionKind};
use super::glu::Gate;
use super::rope::{Pairing, halves_from_adjacent, permute_head_columns};
use crate::ch09_gpt::checkpoint::{CONFIG_FILE, MODEL_FILE};
use crate::ch09_gpt::data::Batch;
use crate::ch09_gpt::fast::FusedStep;
use crate::ch09_gpt::model::{Param, spec_of};
use crate::ch09_gpt::safetensors::{SafeTensors, TensorOut, serialize};
use crate::ch09_gpt::trainable::{StepPath, Trainable};
use crate::ch11_precision::quant::Storage;
use crate::ch11_precision::quant_file::{
    Bf16Layout, QUANTIZATION_KEY, check_file_storage, stored_matrix_of, stored_matrix_tensors,
    with_quantization,
};
use crate::error::{Error, Result, from_json_object};
use crate::float::Float;
use nalgebra::DMatrix;
use serde::{Deserialize, Serialize};

/// The untied unembedding's name: Hugging Face names it `lm_head.weight` in the Llama layout as in
/// GPT-2's, so it is taken from chapter 9's table, where that name is written once.
fn lm_head_name() -> &'static str {
    spec_of(Param::LmHead).name
}

/// `model_type` of a Llama `config.json`.
pub const LLAMA_MODEL_TYPE: &str = "llama";
/// The class `transformers` builds from the folder.
pub const LLAMA_ARCHITECTURE: &str = "LlamaForCausalLM";
/// `hidden_act` of SwiGLU (SiLU is Swish with β = 1).
pub const SILU_NAME: &str = "silu";
/// `hidden_act` of GeGLU in GELU's tanh form.
pub const GELU_TANH_NAME: &str = "gelu_pytorch_tanh";
/// The weights' data type the files record.
pub const LLAMA_DTYPE: &str = "float32";

fn parse_error(file: &str, reason: impl Into<String>) -> Error {
    Error::Parse { file: file.to_string(), line: None, reason: reason.into() }
}

/// Why the Llama layout cannot hold a decoder of `c`, or `None` when it can: it has RMSNorm
/// only (no β), rotary positions only, a gated MLP only, no QK-norm and no biases.
pub fn llama_refusal(c: &DecoderConfig) -> Option<&'static str> {
    if c.positions == PositionKind::Learned {
        Some("learned positions (the Llama layout has no W_P)")
    } else if c.norm == NormKind::Layer {
        Some("LayerNorm (the Llama layout has no β)")
    } else if c.mlp == MlpKind::Gelu {
        Some("the 4× GELU MLP (the Llama layout's MLP is gated)")
    } else if c.qk_norm {
        Some("QK-norm (the Llama layout has none)")
    } else if c.biases {
        Some("biases (the Llama layout has none)")
    } else {
        None
    }
}

/// `config.json` as a Llama folder holds it: `LlamaConfig`'s keys.
#[derive(Serialize, Deserialize)]
struct LlamaJson {
    architectures: Vec<String>,
    model_type: String,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    hidden_act: String,
    rms_norm_eps: f64,
    rope_theta: f64,
    max_position_embeddings: usize,
    tie_word_embeddings: bool,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    torch_dtype: Option<String>,
}

/// The text of `config.json` for a decoder of `c` (indented JSON). Errors, naming `config`,
/// on a configuration the layout cannot hold ([`llama_refusal`]).
pub fn llama_config_json(c: &DecoderConfig) -> Result<String> {
    if let Some(why) = llama_refusal(c) {
        return Err(crate::error::invalid("llama_config_json", "config", why));
    }
    let (PositionKind::Rotary { base, .. }, MlpKind::Gated(gate)) = (c.positions, c.mlp) else {
        return Err(crate::error::invalid("llama_config_json", "config", "not a Llama decoder"));
    };
    let j = LlamaJson {
        architectures: vec![LLAMA_ARCHITECTURE.into()],
        model_type: LLAMA_MODEL_TYPE.into(),
        vocab_size: c.vocab_size,
        hidden_size: c.width,
        intermediate_size: c.hidden,
        num_hidden_layers: c.layers,
        num_attention_heads: c.n_heads,
        num_key_value_heads: Some(c.n_kv_heads),
        head_dim: Some(c.head_dim()),
        hidden_act: match gate {
            Gate::Swish => SILU_NAME,
            Gate::Gelu => GELU_TANH_NAME,
        }
        .into(),
        rms_norm_eps: c.eps,
        rope_theta: base,
        max_position_embeddings: c.context,
        tie_word_embeddings: c.tied,
        attention_bias: Some(false),
        mlp_bias: Some(false),
        torch_dtype: Some(LLAMA_DTYPE.into()),
    };
    // Plain fields of plain types: serialising them cannot fail.
    let mut text = serde_json::to_string_pretty(&j).unwrap_or_default();
    text.push('\n');
    Ok(text)
}

/// Whether the text of a `config.json` names the Llama architecture (`model_type` "llama").
pub fn is_llama_config(bytes: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Kind {
        model_type: Option<String>,
    }
    serde_json::from_slice::<Kind>(bytes)
        .is_ok_and(|k| k.model_type.as_deref() == Some(LLAMA_MODEL_TYPE))
}

/// The decoder configuration of a Llama `config.json` (rotary halves, RMSNorm, the gated MLP
/// `hidden_act` names, no QK-norm, no biases); `file` names it in errors. A `head_dim` other
/// than C/H, biases, or another activation is refused.
pub fn llama_config_from_json(bytes: &[u8], file: &str) -> Result<DecoderConfig> {
    let j: LlamaJson = from_json_object(bytes, file)
        .map_err(|e| parse_error(file, format!("not a Llama config.json ({e})")))?;
    if j.model_type != LLAMA_MODEL_TYPE {
        return Err(parse_error(file, format!("model_type {:?} is not \"llama\"", j.model_type)));
    }
    let gate = match j.hidden_act.as_str() {
        SILU_NAME => Gate::Swish,
        GELU_TANH_NAME => Gate::Gelu,
        other => return Err(parse_error(file, format!("hidden_act {other:?} is not silu"))),
    };
    if j.attention_bias == Some(true) || j.mlp_bias == Some(true) {
        return Err(parse_error(file, "attention_bias or mlp_bias is true; this decoder has none"));
    }
    let c = DecoderConfig {
        vocab_size: j.vocab_size,
        context: j.max_position_embeddings,
        layers: j.num_hidden_layers,
        n_heads: j.num_attention_heads,
        n_kv_heads: j.num_key_value_heads.unwrap_or(j.num_attention_heads),
        width: j.hidden_size,
        hidden: j.intermediate_size,
        positions: PositionKind::Rotary { base: j.rope_theta, pairing: Pairing::Halves },
        norm: NormKind::Rms,
        mlp: MlpKind::Gated(gate),
        qk_norm: false,
        biases: false,
        tied: j.tie_word_embeddings,
        eps: j.rms_norm_eps,
    };
    c.validate().map_err(|e| parse_error(file, e.to_string()))?;
    if let Some(d) = j.head_dim
        && d != c.head_dim()
    {
        let why = format!("head_dim {d} is not hidden_size / num_attention_heads");
        return Err(parse_error(file, why));
    }
    Ok(c)
}

/// Which way a stored tensor relates to ours.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stored {
    /// As it is (embeddings, W_U).
    Same,
    /// Transposed (a `Linear`'s out×in).
    Transposed,
    /// A 1×n γ stored 1-D.
    Vector,
}

/// The Llama name and storage of each of the decoder's tensors, in
/// [`Decoder::tensors_mut`] order (for a decoder the layout holds).
fn llama_names(c: &DecoderConfig) -> Vec<(String, Stored)> {
    let mut out = vec![("model.embed_tokens.weight".to_string(), Stored::Same)];
    for i in 0..c.layers {
        let p = |s: &str| format!("model.layers.{i}.{s}.weight");
        out.push((p("input_layernorm"), Stored::Vector));
        for s in ["q_proj", "k_proj", "v_proj", "o_proj"] {
            out.push((p(&format!("self_attn.{s}")), Stored::Transposed));
        }
        out.push((p("post_attention_layernorm"), Stored::Vector));
        for s in ["gate_proj", "up_proj", "down_proj"] {
            out.push((p(&format!("mlp.{s}")), Stored::Transposed));
        }
    }
    out.push(("model.norm.weight".to_string(), Stored::Vector));
    if !c.tied {
        out.push((lm_head_name().to_string(), Stored::Same));
    }
    out
}

/// The decoder's tensors under Llama's names and layouts, ready to serialise; W_Q and W_K
/// permuted into the halves pairing when the decoder rotates adjacent pairs. Errors on a
/// decoder the layout cannot hold.
pub fn llama_tensors<T: Float>(model: &Decoder<T>) -> Result<Vec<TensorOut>> {
    let copy = in_file_pairing(model)?;
    let c = &model.config;
    Ok(llama_names(c)
        .into_iter()
        .zip(copy.tensors())
        .map(|((name, how), (_, m))| match how {
            Stored::Same => TensorOut::matrix(name, &m, vec![m.nrows(), m.ncols()]),
            Stored::Transposed => {
                TensorOut::matrix(name, &m.transpose(), vec![m.ncols(), m.nrows()])
            }
            Stored::Vector => TensorOut::matrix(name, &m, vec![m.ncols()]),
        })
        .collect())
}

/// A copy of `model` as the files hold it: W_Q and W_K permuted into the halves pairing when it
/// rotates adjacent pairs. Errors on a decoder the layout cannot hold.
fn in_file_pairing<T: Float>(model: &Decoder<T>) -> Result<Decoder<T>> {
    let c = &model.config;
    llama_config_json(c)?;
    let mut copy = model.clone();
    if let PositionKind::Rotary { pairing: Pairing::Adjacent, .. } = c.positions {
        let perm = halves_from_adjacent(c.head_dim())?;
        for layer in &mut copy.layers {
            layer.attn.w_q = permute_head_columns(&layer.attn.w_q, &perm)?;
            layer.attn.w_k = permute_head_columns(&layer.attn.w_k, &perm)?;
        }
    }
    Ok(copy)
}

/// The files of a decoder in the Llama layout (name, contents): `model.safetensors` with
/// `metadata` in its header and `config.json`.
pub fn llama_files<T: Float>(
    model: &Decoder<T>,
    metadata: &[(String, String)],
) -> Result<Vec<(String, Vec<u8>)>> {
    let mut meta = vec![("format".to_string(), "pt".to_string())];
    meta.extend(metadata.iter().cloned());
    Ok(vec![
        (MODEL_FILE.to_string(), serialize(&llama_tensors(model)?, &meta)?),
        (CONFIG_FILE.to_string(), llama_config_json(&model.config)?.into_bytes()),
    ])
}

/// The files of a decoder in the Llama layout with its projections (q, k, v, o, gate, up and
/// down: every `Linear`) stored as `storage`, `gpt quantize`'s output: chapter 11's
/// [`stored_matrix_tensors`] (bf16 `[out, in]` as a `Linear` holds it; int8 or 4-bit codes
/// `[out, blocks, per]` and `.scales` `[out, blocks]`, the blocks along the input). The token
/// embedding, every γ and an untied `lm_head.weight` stay f32, as chapter 11 keeps GPT-2's
/// embeddings, norms and W_U. `config.json` and the file's metadata gain `"quantization"`.
/// Such a folder is this crate's, not Hugging Face's: `transformers` does not read the blocks.
/// Errors on a decoder the layout cannot hold or a non-finite weight.
pub fn llama_stored_files(
    model: &Decoder<f32>,
    storage: Storage,
) -> Result<Vec<(String, Vec<u8>)>> {
    let copy = in_file_pairing(model)?;
    let mut tensors = Vec::new();
    for ((name, how), (_, m)) in llama_names(&model.config).into_iter().zip(copy.tensors()) {
        tensors.extend(match how {
            Stored::Same => vec![TensorOut::matrix(name, &m, vec![m.nrows(), m.ncols()])],
            Stored::Vector => vec![TensorOut::matrix(name, &m, vec![m.ncols()])],
            Stored::Transposed => stored_matrix_tensors(name, &m, storage, Bf16Layout::OutIn)?,
        });
    }
    let meta = [("format", "pt"), (QUANTIZATION_KEY, storage.name())]
        .map(|(k, v)| (k.to_string(), v.to_string()));
    let config = with_quantization(&llama_config_json(&model.config)?, storage);
    Ok(vec![
        (MODEL_FILE.to_string(), serialize(&tensors, &meta)?),
        (CONFIG_FILE.to_string(), config.into_bytes()),
    ])
}

/// The decoder of `config` (a Llama configuration, [`llama_config_from_json`]) from a parsed
/// safetensors file in the Llama layout: every tensor of the layout at its shape (the shapes
/// are checked before a matrix is built), nothing else but a tied `lm_head.weight` equal to
/// W_E. Errors name the file and the tensor.
pub fn decoder_from_llama<T: Float>(config: DecoderConfig, f: &SafeTensors) -> Result<Decoder<T>> {
    decoder_from_stored_llama(config, Storage::F32, f)
}

/// [`decoder_from_llama`] for a file of [`llama_stored_files`] whose `config.json` names
/// `storage` (the file's metadata must name it too): each projection read as stored (dtype,
/// shape, bytes and codes checked as chapter 11 checks GPT-2's) and widened, ŵ = s·q or the bf16
/// value, so that the decoder computes what the stored weights give. Errors in one line naming
/// the file and the tensor.
pub fn decoder_from_stored_llama<T: Float>(
    config: DecoderConfig,
    storage: Storage,
    f: &SafeTensors,
) -> Result<Decoder<T>> {
    read_stored_llama(config, storage, f, |m| m.widen().map(|x| T::of(f64::from(x))))
}

/// [`decoder_from_stored_llama`] with each stored projection (in the layout's order, q, k, v,
/// o, gate, up, down of each block; none for f32) handed to `keep`, whose answer the decoder
/// holds in its place: ŵ for the widened decoder, a 0×0 matrix for one that keeps the stored
/// matrices ([`QuantDecoder`](super::quant_decoder::QuantDecoder)).
pub(crate) fn read_stored_llama<T: Float>(
    config: DecoderConfig,
    storage: Storage,
    f: &SafeTensors,
    mut keep: impl FnMut(crate::ch11_precision::quant_step::StoredMatrix) -> DMatrix<T>,
) -> Result<Decoder<T>> {
    let file = f.file.clone();
    check_file_storage(f, storage)?;
    let mut model = Decoder::<T>::zeros(config)?;
    let names = llama_names(&config);
    let mut expected: Vec<String> = names.iter().map(|(n, _)| n.clone()).collect();
    for ((name, how), (_, slot)) in names.iter().zip(model.tensors_mut()) {
        let (r, c) = slot.shape();
        *slot = match how {
            Stored::Transposed if storage != Storage::F32 => {
                let layout = Bf16Layout::OutIn;
                keep(stored_matrix_of(f, name, storage, (r, c), layout, &mut expected)?)
            }
            Stored::Transposed => f.matrix::<T>(name, c, r)?.transpose(),
            Stored::Same | Stored::Vector => f.matrix::<T>(name, r, c)?,
        };
    }
    for t in &f.tensors {
        if expected.contains(&t.name) {
            continue;
        }
        if config.tied && t.name == lm_head_name() {
            let (v, d) = (config.vocab_size, config.width);
            if f.matrix::<T>(&t.name, v, d)? != model.wte {
                let why = "tie_word_embeddings is true but lm_head.weight differs from W_E";
                return Err(parse_error(&file, why));
            }
            continue;
        }
        let why = format!("tensor {} is not part of a Llama decoder with this config", t.name);
        return Err(parse_error(&file, why));
    }
    for (name, m) in model.tensors() {
        crate::float::ensure_finite("decoder_from_llama", "tensor", &m)
            .map_err(|_| parse_error(&file, format!("tensor {name} holds NaN or ±∞")))?;
    }
    Ok(model)
}

/// Reads a Llama folder's `config.json` and `model.safetensors`.
pub fn load_llama<T: Float>(dir: &std::path::Path) -> Result<Decoder<T>> {
    let path = dir.join(CONFIG_FILE);
    let name = path.display().to_string();
    let most = crate::ch09_gpt::checkpoint::CONFIG_MAX_BYTES;
    let bytes = crate::ch09_gpt::checkpoint::read_at_most(&path, most)?
        .map_err(|_| parse_error(&name, format!("holds more than {most} bytes")))?;
    let config = llama_config_from_json(&bytes, &name)?;
    decoder_from_llama(config, &SafeTensors::read(&dir.join(MODEL_FILE))?)
}

/// Whether AdamW decays the decoder's tensor `name` ([`Decoder::tensors_mut`]'s names): every
/// matrix, no γ, β or bias.
pub fn decays(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    !(last == "gamma" || last == "beta" || last.starts_with("b_") || last == "b1" || last == "b2")
}

/// The decoder as chapter 9's trainer takes it: its tensors in [`Decoder::tensors_mut`] order,
/// its kept-buffer step ([`DecoderStep`]) where it covers the configuration ([`supports`]) and
/// the reference pass ([`Decoder::loss_and_grads`]) elsewhere, AdamW decaying every matrix
/// (W_E, W_P, the projections, W_U) and no γ, β or bias ([`decays`]), as chapter 9 decays
/// GPT-2's; its files in the Llama layout.
///
/// [`DecoderStep`]: super::decoder::fast::DecoderStep
/// [`supports`]: super::decoder::fast::supports
impl<T: Float> Trainable<T> for Decoder<T> {
    type Workspace = super::decoder::fast::DecoderStep<T>;

    fn parameter_names(&self) -> Vec<String> {
        self.tensors().into_iter().map(|(n, _)| n).collect()
    }

    fn parameters_mut(&mut self) -> Vec<&mut DMatrix<T>> {
        self.tensors_mut().into_iter().map(|(_, m)| m).collect()
    }

    fn parameters_mut_and_decays(&mut self) -> (Vec<&mut DMatrix<T>>, Vec<bool>) {
        self.tensors_mut().into_iter().map(|(n, m)| (m, decays(&n))).unzip()
    }

    fn step_path(&self) -> StepPath {
        if super::decoder::fast::supports(self) { StepPath::Own } else { StepPath::Reference }
    }

    fn loss_and_grads_in<'w>(
        &self,
        batch: &Batch,
        fused: &'w mut FusedStep<T>,
        own: &'w mut Self::Workspace,
        scratch: &'w mut Vec<DMatrix<T>>,
    ) -> Result<(f64, &'w mut [DMatrix<T>])> {
        if super::decoder::fast::supports(self) {
            return own.loss_and_grads(self, batch, fused.settings());
        }
        let r = self.loss_and_grads(batch)?;
        let mut grads = r.grads;
        *scratch = grads
            .tensors_mut()
            .into_iter()
            .map(|(_, m)| std::mem::replace(m, DMatrix::zeros(0, 0)))
            .collect();
        Ok((r.loss, scratch.as_mut_slice()))
    }

    fn batch_loss(&self, batch: &Batch) -> Result<f64> {
        self.loss(batch)
    }

    fn model_files(&self, metadata: &[(String, String)]) -> Result<Vec<(String, Vec<u8>)>> {
        llama_files(self, metadata)
    }
}
