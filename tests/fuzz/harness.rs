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

/// The names of the targets, which are also the corpus folders under `tests/fuzz/corpus/`.
pub const TARGETS: [&str; 4] = ["safetensors", "gpt2_files", "bpe_roundtrip", "checkpoint_folder"];

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

// ───────────────────────────── a checkpoint folder, built from its structure ─────────────────────

/// The memory budget the `checkpoint_folder` target loads under: 64 MiB, so no input may make
/// the loader allocate more than a small model.
pub const FUZZ_BUDGET: u64 = 64 << 20;

/// The sizes a fuzzed `config.json` or tensor header takes (one input byte picks one): small
/// sizes a model is built from, the BPE tokenizer's vocabulary, and the sizes of issue 21.
pub const FUZZ_SIZES: [usize; 16] = [
    0,
    1,
    2,
    3,
    4,
    5,
    7,
    8,
    16,
    264,
    65_537,
    1_000_000_000,
    1 << 32,
    1_000_000_000_000_000_000,
    usize::MAX / 2,
    usize::MAX,
];

/// The `layer_norm_epsilon` values a fuzzed `config.json` holds, as JSON text (one input byte
/// picks one): GPT-2's, the ends of the accepted range and just beyond, and nonsense.
pub const FUZZ_EPSILONS: [&str; 8] = ["1e-5", "1e-12", "1e-2", "1e-13", "0.5", "0", "-1", "1e300"];

/// Reads an input from the front; zeros once it is used up.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else { return 0 };
        self.0 = rest;
        b
    }

    fn size(&mut self) -> usize {
        FUZZ_SIZES[usize::from(self.byte()) % FUZZ_SIZES.len()]
    }

    fn sizes(&mut self) -> [usize; 5] {
        [self.size(), self.size(), self.size(), self.size(), self.size()]
    }

    /// Up to 8 edits (offset, byte) applied to `bytes`.
    fn edit(&mut self, bytes: &mut [u8]) {
        for _ in 0..self.byte() % 9 {
            let at = usize::from(u16::from_le_bytes([self.byte(), self.byte()]));
            let value = self.byte();
            if !bytes.is_empty() {
                let n = bytes.len();
                bytes[at % n] = value;
            }
        }
    }
}

/// The BPE tokenizer's files the target's BPE folders hold: 264 tokens (256 bytes, 8 merges)
/// trained on the start of the default corpus, built once per process.
pub fn fuzz_bpe_files() -> &'static (String, String) {
    static FILES: OnceLock<(String, String)> = OnceLock::new();
    FILES.get_or_init(|| {
        let text = corpus::default_corpus().get(..2_000).unwrap_or("the cat sat on the mat");
        let bpe =
            bpe::train(text, BpeConfig { vocab_size: 264, pre_tokenizer: PreTokenizer::Gpt2 })
                .unwrap_or_else(|e| panic!("fuzz BPE: {e}"))
                .bpe;
        to_gpt2_files(&bpe).unwrap_or_else(|e| panic!("fuzz GPT-2 files: {e}"))
    })
}

/// A `config.json` with GPT-2's keys for sizes [vocab, context, layers, heads, width].
fn config_text(s: [usize; 5], epsilon: &str, tied: bool, sinusoidal: bool) -> String {
    let positions = if sinusoidal { "sinusoidal" } else { "learned" };
    format!(
        "{{\"vocab_size\": {}, \"n_positions\": {}, \"n_layer\": {}, \"n_head\": {}, \
         \"n_embd\": {}, \"layer_norm_epsilon\": {epsilon}, \"tie_word_embeddings\": {tied}, \
         \"position_embedding_type\": \"{positions}\", \"activation_function\": \"gelu_new\"}}",
        s[0], s[1], s[2], s[3], s[4]
    )
}

/// A `model.safetensors` for sizes `s`: a real model's file when the model is small, else a
/// header that describes the tensors of those sizes (at most 3 blocks of them) over 64 bytes.
fn model_bytes(s: [usize; 5], tied: bool, sinusoidal: bool) -> Vec<u8> {
    use llm_workbook::ch09_gpt::config::Positions;
    let positions = if sinusoidal { Positions::Sinusoidal } else { Positions::Learned };
    let config = Config { tied, positions, ..Config::new(s[0], s[1], s[2], s[3], s[4]) };
    let small = s.iter().all(|&x| x <= 264) && s[2] <= 4 && config.validate().is_ok();
    if small && let Ok(model) = Gpt::<f32>::new(config, 1) {
        let meta = [("step".to_string(), "1".to_string())];
        if let Ok(files) = llm_workbook::ch09_gpt::checkpoint::model_files(&model, &meta) {
            return files.into_iter().next().map(|f| f.1).unwrap_or_default();
        }
    }
    // A config that describes no model has no tensor list: its embedding alone.
    let few = Config { layers: config.layers.min(3), ..config };
    let shapes = if few.validate().is_ok() {
        few.tensor_shapes()
    } else {
        vec![("wte.weight".to_string(), s[0], s[4])]
    };
    let mut header = String::from("{");
    let mut at = 0usize;
    for (name, r, c) in shapes {
        let end = at.saturating_add(r.saturating_mul(c).saturating_mul(4));
        header.push_str(&format!(
            "\"{name}\":{{\"dtype\":\"F32\",\"shape\":[{r},{c}],\"data_offsets\":[{at},{end}]}},"
        ));
        at = end;
    }
    header.push_str("\"__metadata__\":{\"step\":\"1\"}}");
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&[0u8; 64]);
    out
}

/// Target `checkpoint_folder`: the input describes a checkpoint folder by its structure, which
/// is built and loaded through `run::checkpoint_from_files`, the loader `gpt sample` uses. A
/// flags byte (tied, sinusoidal, a `train.json` with the tokenizer's fingerprint or a wrong
/// one, a BPE or a character tokenizer or both, tensors of other sizes than the config, a file
/// left out), the config's five sizes, the tensors' five sizes, the epsilon, then byte edits to
/// the model file and to the config's text. The load must give a model or a one-line error,
/// and never panic, abort or allocate past [`FUZZ_BUDGET`].
pub fn checkpoint_folder(data: &[u8]) {
    if let Err(line) = checkpoint_folder_outcome(data) {
        assert!(!line.contains('\n'), "an error is one line: {line}");
    }
}

/// What [`checkpoint_folder`] loads: the model's vocabulary size, or the error's line.
pub fn checkpoint_folder_outcome(data: &[u8]) -> Result<usize, String> {
    use llm_workbook::workshop::run::{self, CHARS_FILE, RUN_FILE};
    let mut input = Input(data);
    let flags = input.byte();
    let (tied, sinusoidal) = (flags & 1 == 0, flags & 2 != 0);
    let config_sizes = input.sizes();
    let header_sizes = input.sizes();
    let header_sizes = if flags & 16 != 0 { header_sizes } else { config_sizes };
    let epsilon = FUZZ_EPSILONS[usize::from(input.byte()) % FUZZ_EPSILONS.len()];
    let mut model = model_bytes(header_sizes, tied, sinusoidal);
    input.edit(&mut model);
    let mut config = config_text(config_sizes, epsilon, tied, sinusoidal).into_bytes();
    input.edit(&mut config);
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    if flags & 8 == 0 || flags & 64 != 0 {
        let chars: String =
            "abcdefghijklmnopqrstuvwxyz .,;:!?".chars().take(config_sizes[0].min(33)).collect();
        files.push((CHARS_FILE.to_string(), chars.into_bytes()));
    }
    if flags & 8 != 0 {
        let (v, m) = fuzz_bpe_files();
        files.push(("vocab.json".to_string(), v.clone().into_bytes()));
        files.push(("merges.txt".to_string(), m.clone().into_bytes()));
    }
    if flags & 4 != 0 {
        let path = std::path::Path::new("t.txt");
        let settings = run::run_file(path, &fuzz_train_config(), 8, 4, 1);
        let mut settings = run::run_json_with_tokenizer(settings, &files);
        if flags & 32 != 0 {
            settings.tokenizer_fnv1a64 = Some("0123456789abcdef".into());
        }
        files.push((RUN_FILE.to_string(), run::run_text(&settings).into_bytes()));
    }
    files.push(("config.json".to_string(), config));
    files.push(("model.safetensors".to_string(), model));
    if flags & 128 != 0 {
        let which = usize::from(input.byte()) % files.len();
        files.remove(which);
    }
    let dir = std::path::Path::new("fuzz-checkpoint");
    match run::checkpoint_from_files(dir, files, FUZZ_BUDGET) {
        Ok((tok, model)) => {
            assert!(tok.vocab_size() <= model.config().vocab_size, "a loaded tokenizer fits");
            Ok(model.config().vocab_size)
        }
        Err(e) => Err(e.to_string()),
    }
}
