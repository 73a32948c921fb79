//! The files of a run's folder besides the trainer's: the tokenizer ([`CHARS_FILE`], or GPT-2's
//! `vocab.json` and `merges.txt`), checked against the fingerprint `train.json` records, and
//! loading a folder for sampling from its files ([`checkpoint_from_files`]). Part of
//! [`super::run`], which re-exports every item.

use super::folder::io;
use super::folder::{self, Resolved};
use super::settings::{RUN_FILE, RunFile, read_tokenizer_hash};
use crate::ch08_tokens::Tokenizer;
use crate::ch08_tokens::bpe::{self, BpeConfig, PreTokenizer};
use crate::ch08_tokens::chars::CharTokenizer;
use crate::ch08_tokens::gpt2::{Gpt2Tokenizer, to_gpt2_files};
use crate::ch09_gpt::checkpoint::{CONFIG_FILE, MODEL_FILE};
use crate::ch09_gpt::safetensors::SafeTensors;
use crate::ch11_precision::quant::{Storage, stored_bytes};
use crate::ch11_precision::quant_file;
use crate::ch11_precision::quant_step::SamplingModel;
use crate::error::{Error, Result, from_json_object, invalid};
use std::path::Path;

// ───────────────────────────── tokenizers in a folder ─────────────────────────────

/// The character tokenizer's vocabulary, saved as one line of text.
pub const CHARS_FILE: &str = "tokenizer_chars.txt";

/// How text becomes tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKind {
    /// One token per character of the text.
    Char,
    /// Byte-level BPE trained on the text.
    Bpe,
}

/// The tokenizer's files in a checkpoint's folder (name, contents): [`CHARS_FILE`], or
/// `vocab.json` and `merges.txt`, each read within the memory `budget`. A folder with both is
/// refused: one of them is stale.
pub fn read_tokenizer_files(dir: &Path, budget: u64) -> Result<Vec<(String, Vec<u8>)>> {
    let read = |name: &str| -> Result<(String, Vec<u8>)> {
        let path = dir.join(name);
        Ok((name.to_string(), super::budget::read_checkpoint_file(&path, budget)?))
    };
    let exists = |name: &str| dir.join(name).exists();
    select_tokenizer_files(dir, exists, read)
}

/// Which tokenizer files a folder (`dir`, in messages) holds, given which `exists` and how to
/// `read` one: [`CHARS_FILE`], or `vocab.json` and `merges.txt`, never both.
fn select_tokenizer_files(
    dir: &Path,
    exists: impl Fn(&str) -> bool,
    read: impl Fn(&str) -> Result<(String, Vec<u8>)>,
) -> Result<Vec<(String, Vec<u8>)>> {
    let chars = exists(CHARS_FILE);
    let bpe = exists("vocab.json") && exists("merges.txt");
    match (chars, bpe) {
        (true, true) => Err(Error::Parse {
            file: dir.display().to_string(),
            line: None,
            reason: format!("two tokenizers ({CHARS_FILE}, vocab.json + merges.txt): one is stale"),
        }),
        (true, false) => Ok(vec![read(CHARS_FILE)?]),
        (false, true) => Ok(vec![read("vocab.json")?, read("merges.txt")?]),
        (false, false) => Err(invalid(
            "load_tokenizer",
            "checkpoint",
            format!("{} holds neither {CHARS_FILE} nor vocab.json + merges.txt", dir.display()),
        )),
    }
}

/// The tokenizer its files (from [`read_tokenizer_files`] or [`build_tokenizer`]) describe;
/// `dir` names them in errors.
pub fn tokenizer_from_files(dir: &Path, files: &[(String, Vec<u8>)]) -> Result<Box<dyn Tokenizer>> {
    let text = |name: &str| -> Result<String> {
        let bytes = files.iter().find(|f| f.0 == name).map(|f| f.1.clone()).unwrap_or_default();
        String::from_utf8(bytes).map_err(|_| Error::Parse {
            file: dir.join(name).display().to_string(),
            line: None,
            reason: "is not UTF-8".into(),
        })
    };
    if files.iter().any(|f| f.0 == CHARS_FILE) {
        return Ok(Box::new(CharTokenizer::from_text(&text(CHARS_FILE)?)?));
    }
    let (v, m) = (dir.join("vocab.json"), dir.join("merges.txt"));
    let (v, m) = (v.display().to_string(), m.display().to_string());
    let merges = text("merges.txt")?;
    let tok = Gpt2Tokenizer::from_texts(&v, &text("vocab.json")?, &m, &merges)?;
    check_merges(&tok, &merges, &m)?;
    Ok(Box::new(tok))
}

/// The first line of a `merges.txt` as GPT-2 and our BPE write it.
pub const MERGES_VERSION: &str = "#version";

/// A checkpoint's `merges.txt` (`file` in errors) beside the tokenizer read from it: it must
/// start with its [`MERGES_VERSION`] line, hold at least one merge, and account for every token
/// of `vocab.json`, which is the 256 bytes, one token per merge, and special tokens written
/// `<|…|>` (GPT-2's `<|endoftext|>`). A file cut short at a line boundary leaves tokens that no
/// merge makes, and is refused here.
pub fn check_merges(tok: &Gpt2Tokenizer, merges: &str, file: &str) -> Result<()> {
    let fail = |reason: String| Err(Error::Parse { file: file.to_string(), line: None, reason });
    if !merges.starts_with(MERGES_VERSION) {
        return fail(format!(
            "the first line is not its {MERGES_VERSION} line (an empty or cut file?)"
        ));
    }
    let n = tok.merge_count();
    if n == 0 {
        return fail("holds no merge".into());
    }
    let stray: Vec<&str> = tok
        .special_tokens()
        .iter()
        .map(|(s, _)| s.as_str())
        .filter(|s| !(s.starts_with("<|") && s.ends_with("|>")))
        .collect();
    if let Some(first) = stray.first() {
        return fail(format!(
            "{n} merges leave {} of vocab.json's {} tokens unmade ({first:?} first): cut short?",
            stray.len(),
            tok.vocab_size()
        ));
    }
    Ok(())
}

/// Whichever tokenizer a checkpoint folder holds (see [`read_tokenizer_files`]).
pub fn load_tokenizer(dir: &Path, budget: u64) -> Result<Box<dyn Tokenizer>> {
    tokenizer_from_files(dir, &read_tokenizer_files(dir, budget)?)
}

/// Refuses a tokenizer whose fingerprint ([`folder::files_hash`]) is not the one `train.json`
/// (read within the memory `budget`) recorded for the model (a checkpoint written before
/// fingerprints were recorded passes).
pub fn check_tokenizer(dir: &Path, files: &[(String, Vec<u8>)], budget: u64) -> Result<()> {
    check_tokenizer_against(dir, read_tokenizer_hash(dir, budget)?, files)
}

/// The work of [`check_tokenizer`] with the fingerprint `recorded` already read.
pub fn check_tokenizer_against(
    dir: &Path,
    recorded: Option<String>,
    files: &[(String, Vec<u8>)],
) -> Result<()> {
    let Some(recorded) = recorded else { return Ok(()) };
    let found = folder::files_hash(files);
    if found != recorded {
        let names = files.iter().map(|f| f.0.as_str()).collect::<Vec<_>>().join(" + ");
        let reason = format!("{names} is not the one this model was trained with");
        return Err(Error::Parse { file: dir.display().to_string(), line: None, reason });
    }
    Ok(())
}

/// A tokenizer and the files that hold it (file name, contents), not yet written.
pub type BuiltTokenizer = (Box<dyn Tokenizer>, Vec<(&'static str, String)>);

/// The tokenizer `kind` builds from `text` (a BPE of `bpe_vocab` tokens: 256 bytes plus merges),
/// and its files: `gpt train` writes them only once every setting has been checked.
pub fn build_tokenizer(
    kind: TokenizerKind,
    text: &str,
    bpe_vocab: usize,
) -> Result<BuiltTokenizer> {
    match kind {
        TokenizerKind::Char => {
            let t = CharTokenizer::from_text(text)?;
            let line = t.chars().iter().collect::<String>();
            Ok((Box::new(t), vec![(CHARS_FILE, line)]))
        }
        TokenizerKind::Bpe => {
            let trained = bpe::train(
                text,
                BpeConfig { vocab_size: bpe_vocab, pre_tokenizer: PreTokenizer::Gpt2 },
            )?;
            let (v, m) = to_gpt2_files(&trained.bpe)?;
            let tok = Gpt2Tokenizer::from_texts("vocab.json", &v, "merges.txt", &m)?;
            Ok((Box::new(tok), vec![("vocab.json", v), ("merges.txt", m)]))
        }
    }
}

// ───────────────────────────── sample ─────────────────────────────

/// The tokenizer and model of a checkpoint folder (ours, or GPT-2's with its `vocab.json` and
/// `merges.txt`), refused if the tokenizer is not the one the run recorded or has ids the model
/// has no row for, or if the model would not fit the memory `budget` in bytes. Also returns where
/// the files were found.
pub fn load_for_sampling(
    dir: &Path,
    budget: u64,
) -> Result<(Box<dyn Tokenizer>, SamplingModel, Resolved)> {
    // A save may switch the folder's generation while its files are read: then they are read
    // again from the new one.
    folder::read_consistent(dir, |resolved| {
        let here = resolved.path.as_path();
        let mut files = Vec::new();
        for name in CHECKPOINT_FILES {
            let path = here.join(name);
            match super::budget::read_checkpoint_file(&path, budget) {
                Ok(bytes) => files.push((name.to_string(), bytes)),
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        let (tok, model) = checkpoint_from_files(here, files, budget)?;
        Ok((tok, model, resolved.clone()))
    })
}

/// The files of a checkpoint folder that [`checkpoint_from_files`] reads.
pub const CHECKPOINT_FILES: [&str; 6] =
    [CHARS_FILE, "vocab.json", "merges.txt", RUN_FILE, CONFIG_FILE, MODEL_FILE];

/// The work of [`load_for_sampling`] on a folder's files already read (name, contents; `dir`
/// names them in errors): the tokenizer (one, checked against the fingerprint `train.json`
/// records, if there is one), `config.json` (its sizes compared with `model.safetensors`'
/// header, then with the memory `budget` in bytes, before anything is built), the model, and
/// the tokenizer's ids against the model's rows. The one entry point of loading a folder, which
/// the fuzz target `checkpoint_folder` drives with made-up folders.
pub fn checkpoint_from_files(
    dir: &Path,
    mut files: Vec<(String, Vec<u8>)>,
    budget: u64,
) -> Result<(Box<dyn Tokenizer>, SamplingModel)> {
    let missing = |name: &str| {
        let path = dir.join(name);
        io(&path)(std::io::Error::from(std::io::ErrorKind::NotFound))
    };
    let find = |files: &[(String, Vec<u8>)], name: &str| files.iter().position(|f| f.0 == name);
    let tok_files = select_tokenizer_files(
        dir,
        |name| find(&files, name).is_some(),
        |name| {
            let i = find(&files, name).ok_or_else(|| missing(name))?;
            Ok(files[i].clone())
        },
    )?;
    let run = find(&files, RUN_FILE).map(|i| files[i].1.as_slice());
    let tok = recorded_tokenizer(dir, &tok_files, run)?;
    let config_at = find(&files, CONFIG_FILE).ok_or_else(|| missing(CONFIG_FILE))?;
    let config_name = dir.join(CONFIG_FILE).display().to_string();
    let config = crate::ch09_gpt::checkpoint::config_from_json(&files[config_at].1, &config_name)?;
    let model_at = find(&files, MODEL_FILE).ok_or_else(|| missing(MODEL_FILE))?;
    let model_bytes = std::mem::take(&mut files[model_at].1);
    let f = SafeTensors::parse(model_bytes, &dir.join(MODEL_FILE).display().to_string())?;
    // An f32 checkpoint or a stored one (bf16, int8 or 4-bit block matrices, chapter 11),
    // loaded as stored: the budget counts the weights as stored, never widened.
    let size = |c: &crate::ch09_gpt::config::Config, storage: Storage| {
        super::budget::check_sampling(c, storage.name(), stored_bytes(c, storage), budget)
    };
    let model =
        quant_file::model_from_checkpoint(config, &files[config_at].1, &config_name, &f, size)?;
    vocabulary_fits(tok.as_ref(), model.config().vocab_size)?;
    Ok((tok, model))
}

/// The tokenizer of a folder `dir`'s tokenizer files `tok_files`, checked against the
/// fingerprint its `train.json` (`run`, when there is one) records.
fn recorded_tokenizer(
    dir: &Path,
    tok_files: &[(String, Vec<u8>)],
    run: Option<&[u8]>,
) -> Result<Box<dyn Tokenizer>> {
    let recorded = match run {
        Some(bytes) => {
            let name = dir.join(RUN_FILE).display().to_string();
            from_json_object::<RunFile>(bytes, &name)?.tokenizer_fnv1a64
        }
        None => None,
    };
    check_tokenizer_against(dir, recorded, tok_files)?;
    tokenizer_from_files(dir, tok_files)
}

/// Refuses a tokenizer with ids the model has no row for (`vocab_size` rows).
fn vocabulary_fits(tok: &dyn Tokenizer, vocab_size: usize) -> Result<()> {
    if tok.vocab_size() > vocab_size {
        let why = format!(
            "the tokenizer has {} tokens but the model only {vocab_size}",
            tok.vocab_size()
        );
        return Err(invalid("gpt sample", "checkpoint", why));
    }
    Ok(())
}

/// [`load_for_sampling`] for a folder of chapter 12's decoder in the Llama layout (`gpt train
/// --arch llama`, or its `gpt quantize` output): the tokenizer (checked against the fingerprint
/// `train.json` records, if any), the Llama `config.json` and the storage it names (its memory
/// estimated as the GPT of the same sizes in that storage, and checked against the `budget`
/// before anything is built), the decoder (f32, or a stored one kept as stored,
/// [`QuantDecoder::from_llama_file`][from_llama_file]), and the tokenizer's ids against its
/// rows. Also returns the storage and where the files were found.
///
/// [from_llama_file]: crate::ch12_modern::quant_decoder::QuantDecoder::from_llama_file
pub fn load_llama_for_sampling(dir: &Path, budget: u64) -> Result<LlamaForSampling> {
    use super::arch::gpt_estimate_of;
    use crate::ch12_modern::llama::{decoder_from_llama, llama_config_from_json};
    use crate::ch12_modern::quant_decoder::{QuantDecoder, SamplingDecoder};
    folder::read_consistent(dir, |resolved| {
        let here = resolved.path.as_path();
        let read = |name: &str| super::budget::read_checkpoint_file(&here.join(name), budget);
        let name = |file: &str| here.join(file).display().to_string();
        let files = read_tokenizer_files(here, budget)?;
        let run = match read(RUN_FILE) {
            Ok(bytes) => Some(bytes),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let tok = recorded_tokenizer(here, &files, run.as_deref())?;
        let config_bytes = read(CONFIG_FILE)?;
        let storage = quant_file::storage_of_config(&config_bytes, &name(CONFIG_FILE))?;
        let config = llama_config_from_json(&config_bytes, &name(CONFIG_FILE))?;
        let estimate = gpt_estimate_of(&config);
        let bytes = stored_bytes(&estimate, storage);
        super::budget::check_sampling(&estimate, storage.name(), bytes, budget)?;
        let f = SafeTensors::parse(read(MODEL_FILE)?, &name(MODEL_FILE))?;
        let model = match storage {
            Storage::F32 => SamplingDecoder::F32(decoder_from_llama(config, &f)?),
            _ => SamplingDecoder::Stored(QuantDecoder::from_llama_file(config, storage, &f)?),
        };
        vocabulary_fits(tok.as_ref(), model.config().vocab_size)?;
        Ok((tok, model, storage, resolved.clone()))
    })
}

/// What [`load_llama_for_sampling`] returns: the tokenizer, the decoder (f32 or stored), the
/// storage its folder names, and where the files were found.
pub type LlamaForSampling =
    (Box<dyn Tokenizer>, crate::ch12_modern::quant_decoder::SamplingDecoder, Storage, Resolved);
