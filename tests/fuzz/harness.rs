//! What each fuzz target does with one input. Shared, word for word, by the fuzz targets
//! (`tests/fuzz/fuzz_targets/*.rs`, run with cargo-fuzz) and by the corpus replay that
//! `cargo test` runs on stable Rust (`mod fuzz_corpus_replay` at the end of `tests/ch08_tokens.rs`
//! and `tests/ch09_gpt.rs`, which hand these functions to `replay_fuzz_corpus` in
//! `tests/common/mod.rs`), so a corpus file replays exactly what the fuzzer ran. Nothing here
//! reads the file system: the fuzz crate compiles this file too, from another manifest folder.
//!
//! Every function may see an `Err` from the code under test (bad input is expected); what it must
//! never see is a panic, a hang or an out-of-bounds access. The BPE target also asserts the round
//! trip decode(encode(text)) = text.
#![allow(dead_code)]

use llm_workbook::ch08_tokens::Tokenizer;
use llm_workbook::ch08_tokens::bpe::{self, Bpe, BpeConfig, PreTokenizer};
use llm_workbook::ch08_tokens::corpus;
use llm_workbook::ch08_tokens::gpt2::{Gpt2Tokenizer, to_gpt2_files};
use llm_workbook::ch09_gpt::checkpoint::{model_from_safetensors, trainer_from_safetensors};
use llm_workbook::ch09_gpt::config::Config;
use llm_workbook::ch09_gpt::model::Gpt;
use llm_workbook::ch09_gpt::safetensors::SafeTensors;
use llm_workbook::ch09_gpt::schedule::Schedule;
use llm_workbook::ch09_gpt::train::{TrainConfig, Trainer};
use std::sync::OnceLock;

/// The names of the three targets, which are also the corpus folders under `tests/fuzz/corpus/`.
pub const TARGETS: [&str; 3] = ["safetensors", "gpt2_files", "bpe_roundtrip"];

/// The small model every safetensors input is loaded into: vocabulary 16, context 8, 1 block,
/// 2 heads, width 8 (GPT-2's defaults otherwise: tied, learned positions).
pub fn fuzz_config() -> Config {
    Config::new(16, 8, 1, 2, 8)
}

/// The training settings of the fuzz trainer: batch 2, learning rate 10⁻³ constant over 4 steps.
pub fn fuzz_train_config() -> TrainConfig {
    TrainConfig::new(
        2,
        Schedule::new(1e-3, 1e-3, 1, 4).unwrap_or_else(|e| panic!("fuzz schedule: {e}")),
    )
}

/// A freshly initialised trainer for [`fuzz_config`] (seeds 0 and 1), the `fresh` argument of
/// [`trainer_from_safetensors`].
pub fn fuzz_fresh_trainer() -> Trainer<f32> {
    let model = Gpt::<f32>::new(fuzz_config(), 0).unwrap_or_else(|e| panic!("fuzz model: {e}"));
    Trainer::new(model, &fuzz_train_config(), 1).unwrap_or_else(|e| panic!("fuzz trainer: {e}"))
}

/// Splits `data` in two at a length prefix: the first 4 bytes (little-endian `u32`, clamped to
/// what is there) give the length of the first part; the second part is the rest. Inputs shorter
/// than 4 bytes are all first part.
pub fn split_at_prefix(data: &[u8]) -> (&[u8], &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<4>() else { return (data, &[]) };
    let n = (u32::from_le_bytes(*len) as usize).min(rest.len());
    rest.split_at(n)
}

/// The inverse of [`split_at_prefix`], to write seeds.
pub fn join_with_prefix(first: &[u8], second: &[u8]) -> Vec<u8> {
    let mut out = (first.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(first);
    out.extend_from_slice(second);
    out
}

/// Target `safetensors`: the input is a model file and a training-state file joined by
/// [`join_with_prefix`]. Each is parsed by `SafeTensors::parse`; the model file is loaded into a
/// [`fuzz_config`] model, and with the state file into a trainer, so the name, shape, dtype,
/// offset and metadata checks all run.
pub fn safetensors(data: &[u8]) {
    let (model_bytes, state_bytes) = split_at_prefix(data);
    let Ok(model_file) = SafeTensors::parse(model_bytes.to_vec(), "model.safetensors") else {
        return;
    };
    let model = model_from_safetensors::<f32>(fuzz_config(), &model_file);
    if model.is_err() || state_bytes.is_empty() {
        return;
    }
    let Ok(state) = SafeTensors::parse(state_bytes.to_vec(), "training_state.safetensors") else {
        return;
    };
    let _ = trainer_from_safetensors(fuzz_config(), &model_file, &state, &fuzz_fresh_trainer());
}

/// Target `gpt2_files`: the input is a `vocab.json` and a `merges.txt` joined by
/// [`join_with_prefix`], each read as UTF-8 (invalid bytes replaced, as the loader only ever sees
/// `&str`), then `Gpt2Tokenizer::from_texts`. A tokenizer that loads must also encode and decode
/// a short text without panicking.
pub fn gpt2_files(data: &[u8]) {
    let (vocab, merges) = split_at_prefix(data);
    let (vocab, merges) = (String::from_utf8_lossy(vocab), String::from_utf8_lossy(merges));
    if let Ok(t) = Gpt2Tokenizer::from_texts("vocab.json", &vocab, "merges.txt", &merges) {
        let text = "the cat's 12 hats  !?\n";
        if let Ok(ids) = t.encode(text) {
            assert_eq!(
                t.decode_bytes(&ids).ok().as_deref(),
                Some(text.as_bytes()),
                "a loaded tokenizer must round-trip"
            );
        }
    }
}

/// The tokenizers the BPE target encodes with, built once per process: BPE trained on the first
/// 4,000 bytes of the default corpus to 320 tokens with and without GPT-2's pre-tokenization, and
/// the first written to GPT-2's file format and read back as a [`Gpt2Tokenizer`].
pub fn fuzz_tokenizers() -> &'static (Bpe, Bpe, Gpt2Tokenizer) {
    static TOKENIZERS: OnceLock<(Bpe, Bpe, Gpt2Tokenizer)> = OnceLock::new();
    TOKENIZERS.get_or_init(|| {
        let text = corpus::default_corpus()
            .get(..4_000)
            .unwrap_or_else(|| panic!("the default corpus is shorter than 4,000 bytes"));
        let train = |pre| {
            bpe::train(text, BpeConfig { vocab_size: 320, pre_tokenizer: pre })
                .unwrap_or_else(|e| panic!("fuzz BPE: {e}"))
                .bpe
        };
        let (gpt2_split, whole) = (train(PreTokenizer::Gpt2), train(PreTokenizer::None));
        let (v, m) = to_gpt2_files(&gpt2_split).unwrap_or_else(|e| panic!("fuzz GPT-2 files: {e}"));
        let loaded = Gpt2Tokenizer::from_texts("vocab.json", &v, "merges.txt", &m)
            .unwrap_or_else(|e| panic!("fuzz GPT-2 load: {e}"));
        (gpt2_split, whole, loaded)
    })
}

/// Target `bpe_roundtrip`: the input as text (invalid UTF-8 replaced) is encoded by each of
/// [`fuzz_tokenizers`] and decoded, and must come back byte for byte; the two GPT-2-split
/// tokenizers must agree on the ids. The input's bytes read as little-endian `u32` ids are also
/// decoded (out-of-range ids must be an `Err`).
pub fn bpe_roundtrip(data: &[u8]) {
    let (gpt2_split, whole, loaded) = fuzz_tokenizers();
    let text = String::from_utf8_lossy(data);
    let mut split_ids = None;
    for t in [gpt2_split as &dyn Tokenizer, whole, loaded] {
        let ids = t.encode(&text).unwrap_or_else(|e| panic!("encode failed: {e}"));
        let back =
            t.decode_bytes(&ids).unwrap_or_else(|e| panic!("decode of encoded ids failed: {e}"));
        assert_eq!(back, text.as_bytes(), "decode(encode(text)) != text");
        if split_ids.is_none() {
            split_ids = Some(ids);
        }
    }
    let loaded_ids = loaded.encode(&text).unwrap_or_default();
    assert_eq!(split_ids, Some(loaded_ids), "Bpe and Gpt2Tokenizer with the same merges disagree");
    let raw: Vec<u32> =
        data.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    for t in [gpt2_split as &dyn Tokenizer, whole, loaded] {
        let decoded = t.decode_bytes(&raw);
        assert_eq!(
            decoded.is_ok(),
            raw.iter().all(|&id| (id as usize) < t.vocab_size()),
            "decode must refuse exactly the bad ids"
        );
    }
}
