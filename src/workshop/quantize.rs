//! `gpt quantize`: a checkpoint folder's f32 model stored as bf16, int8 or 4-bit blocks
//! (chapter 11's [`quant_file`] layout) in a new folder that `gpt sample` reads and runs as
//! stored: a GPT-2 run, or a Llama folder (chapter 12's decoder,
//! [`llama_stored_files`](crate::ch12_modern::llama::llama_stored_files)).

use super::budget;
use super::folder;
use super::run;
use crate::ch09_gpt::checkpoint::CONFIG_FILE;
use crate::ch11_precision::quant::Storage;
use crate::ch11_precision::quant_file;
use crate::ch11_precision::quant_step::SamplingModel;
use crate::error::{Error, Result, invalid};
use std::path::{Path, PathBuf};

/// The command's name in its errors.
const OP: &str = "gpt quantize";

/// Bytes of an f32 weight.
const F32_BYTES: usize = 4;

/// The tokenizer's files copied beside the stored model.
const TOKENIZER_FILES: [&str; 3] = [run::CHARS_FILE, "vocab.json", "merges.txt"];

/// The storage the `config.json` of a checkpoint's files in `here` names, read within the
/// memory `budget` (its size checked before it is read); `None` when there is no `config.json`.
pub fn storage_of(here: &Path, budget: u64) -> Result<Option<Storage>> {
    let config = here.join(CONFIG_FILE);
    let bytes = match budget::read_checkpoint_file(&config, budget) {
        Ok(bytes) => bytes,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    quant_file::storage_of_config(&bytes, &config.display().to_string()).map(Some)
}

/// What [`quantize`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quantized {
    /// The generation folder inside `out` that holds the files.
    pub generation: PathBuf,
    /// Bytes written: the stored model, its `config.json` and the tokenizer's files.
    pub written: usize,
    /// Bytes of the model's weights in f32 (4 a parameter), to compare.
    pub f32_bytes: usize,
}

/// Stores the f32 model of the checkpoint folder `checkpoint` as `storage` in the new folder
/// `out` (which must hold nothing yet), with the tokenizer's files, as one generation; every
/// file read within the memory `budget`. A GPT-2 checkpoint's block matrices are stored
/// ([`quant_file::stored_files`]), a Llama folder's projections
/// ([`llama_stored_files`](crate::ch12_modern::llama::llama_stored_files)). Refuses a
/// checkpoint that is already stored, and an `out` that is not empty (checked again once its
/// lock is taken). Errors in one line naming the flag (`--checkpoint`, `--out`).
pub fn quantize(checkpoint: &Path, storage: Storage, out: &Path, budget: u64) -> Result<Quantized> {
    let source = folder::resolve(checkpoint)?.path;
    let config = source.join(CONFIG_FILE);
    let Some(already) = storage_of(&source, budget)? else {
        let e = format!("{} does not exist", config.display());
        return Err(invalid(OP, "--checkpoint", e));
    };
    let refuse = |stored: Storage| {
        let why = format!(
            "{}: already stored as {}; give the f32 checkpoint",
            checkpoint.display(),
            stored.name()
        );
        invalid(OP, "--checkpoint", why)
    };
    if already != Storage::F32 {
        return Err(refuse(already));
    }
    let (mut files, f32_bytes, resolved) = if super::arch::holds_llama(&source, budget)? {
        let (_, model, stored, resolved) = run::load_llama_for_sampling(checkpoint, budget)?;
        let crate::ch12_modern::quant_decoder::SamplingDecoder::F32(model) = model else {
            // Saved anew between the two reads.
            return Err(refuse(stored));
        };
        let files = crate::ch12_modern::llama::llama_stored_files(&model, storage)?;
        (files, F32_BYTES * model.parameter_count(), resolved)
    } else {
        let (_, model, resolved) = run::load_for_sampling(checkpoint, budget)?;
        let model = match model {
            SamplingModel::F32(m) => m,
            // Saved anew between the two reads.
            SamplingModel::Stored(q) => return Err(refuse(q.storage())),
        };
        let files = quant_file::stored_files(&model, storage)?;
        (files, F32_BYTES * model.parameter_count(), resolved)
    };
    for name in TOKENIZER_FILES {
        match budget::read_checkpoint_file(&resolved.path.join(name), budget) {
            Ok(b) => files.push((name.to_string(), b)),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    // One writer a folder, as `gpt train`; the files saved as one generation.
    let _lock = folder::Lock::take(out, OP)?;
    if folder::holds_checkpoint(out) || !folder::foreign_entries(out).is_empty() {
        return Err(invalid(
            OP,
            "--out",
            format!("{} is not empty; give a new folder", out.display()),
        ));
    }
    let generation = folder::save_generation(&mut folder::Disk, out, &files)?;
    let written = files.iter().map(|f| f.1.len()).sum();
    Ok(Quantized { generation, written, f32_bytes })
}
