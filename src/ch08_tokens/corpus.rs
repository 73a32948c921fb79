//! The default corpus: where it comes from, how to load it, and how to load a replacement.
//!
//! The crate owns its training text. `data/corpus.txt` was written once by [`generate`] (seed
//! [`CORPUS_SEED`]) from a small English grammar, and is committed, so every number
//! the chapter prints (merges, losses, samples) is computed from that frozen file; a test checks
//! that the grammar still reproduces it byte for byte. Nothing in it is copied from anywhere: the
//! word lists (`corpus/words.rs`) and sentence frames (`corpus/grammar.rs`) were written for this
//! crate (MIT, like the code).
//!
//! The grammar is built to have structure at several distances, so that a model with a long
//! context can beat one with a short one:
//! - inside a word and a sentence (spelling, agreement of *a*/*an*, punctuation);
//! - across a paragraph: a story introduces a person, a pet, a place and an object, and keeps
//!   referring back to them by name and by the right pronoun; a question-and-answer piece asks
//!   about facts stated a few lines earlier; sums and calendars give an answer fixed by the
//!   numbers or days named before it.
//!
//! Any UTF-8 text file can replace the default: [`load`] reads it and refuses invalid UTF-8 (with
//! the line and byte offset) and empty files.

mod grammar;
mod words;

pub use grammar::generate;
pub use words::number_words;

use crate::error::{Error, Result};
use std::path::Path;

/// The frozen default corpus, `data/corpus.txt`, as compiled into the crate.
pub const DEFAULT_CORPUS: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/corpus.txt"));

/// The seed [`generate`] was called with to write `data/corpus.txt`.
pub const CORPUS_SEED: u64 = 2025;

/// [`generate`] adds pieces until the text holds at least this many bytes.
pub const TARGET_BYTES: usize = 250_000;

/// The share of the corpus (at its end, from a piece boundary on) held out for validation.
pub const VALIDATION_FRACTION: f64 = 0.1;

/// The default corpus.
pub fn default_corpus() -> &'static str {
    DEFAULT_CORPUS
}

/// Reads a UTF-8 text file to use as a corpus instead of the default.
///
/// Errors: [`Error::Io`] when the file cannot be read; [`Error::Parse`] naming the file, the
/// 1-based line and the byte offset of the first byte that is not valid UTF-8;
/// [`Error::InvalidValue`] when the file is empty.
#[deny(clippy::unwrap_used, clippy::expect_used)]
pub fn load(path: impl AsRef<Path>) -> Result<String> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| Error::Io { path: name.clone(), source })?;
    from_bytes(&name, bytes)
}

/// Checks raw bytes as a corpus: valid UTF-8 and not empty. `name` names the source in errors.
#[deny(clippy::unwrap_used, clippy::expect_used)]
pub fn from_bytes(name: &str, bytes: Vec<u8>) -> Result<String> {
    if bytes.is_empty() {
        return Err(Error::Parse {
            file: name.to_string(),
            line: None,
            reason: "the corpus is empty".into(),
        });
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let line = 1 + bytes.iter().take(at).filter(|&&b| b == b'\n').count();
        // `valid_up_to` is the offset of a byte that exists (the one that broke the decoding).
        let byte =
            bytes.get(at).map_or_else(|| "end of input".to_string(), |b| format!("0x{b:02X}"));
        Error::Parse {
            file: name.to_string(),
            line: Some(line),
            reason: format!("byte {at} ({byte}) is not valid UTF-8; a corpus must be UTF-8 text"),
        }
    })
}

/// Splits a corpus into a training part and a validation part: the last
/// [`VALIDATION_FRACTION`] of the bytes, moved forward to the start of the next line so no word or
/// line is cut. Texts without a suitable line break are split at the nearest character boundary.
/// Both parts are non-empty for any text of two or more characters.
pub fn split(text: &str) -> (&str, &str) {
    let n = text.len();
    let mut cut = ((n as f64) * (1.0 - VALIDATION_FRACTION)).round() as usize;
    cut = cut.min(n);
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    if let Some(nl) = text[cut..].find('\n') {
        let after = cut + nl + 1;
        if after < n {
            cut = after;
        }
    }
    if cut >= n {
        // No room after the cut: hold out the last character.
        cut = text.char_indices().last().map_or(0, |(i, _)| i);
    }
    if cut == 0 {
        // Keep at least one character for training.
        cut = text.chars().next().map_or(0, char::len_utf8);
    }
    (&text[..cut], &text[cut..])
}
