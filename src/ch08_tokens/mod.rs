//! Chapter 8: tokens, byte-pair encoding and the empirical next-token predictor.
//!
//! From a text file to token ids, and the first model of what comes next:
//! - [`corpus`]: the frozen default corpus `data/corpus.txt` (written by the grammar in that
//!   module), loading a replacement, the training/validation split;
//! - [`chars`]: one token per character; [`bpe`]: byte-level BPE trained from a corpus;
//!   [`gpt2`]: GPT-2's `vocab.json` + `merges.txt` and its byte-to-character map;
//!   [`pretokenize`]: GPT-2's pre-tokenization split, which both BPEs use; all behind the
//!   [`Tokenizer`] trait;
//! - [`ngram`]: n-gram models from counts, P(x | c) = #(c, x)/#(c), add-k smoothing, backoff,
//!   Shannon-style samples and the validation cross-entropy baseline;
//! - [`book`]: the errata, the worked numbers, the walk-through, the figure, `CHAPTER`.
//!
//! The prose is [`chapters/ch08_tokens.md`](../../chapters/ch08_tokens.md); the tests are
//! `tests/ch08_tokens.rs`; `cargo bench --bench ch08_bpe` times BPE on 1 MB.

pub mod book;
pub mod bpe;
pub mod chars;
pub mod corpus;
pub mod gpt2;
pub mod ngram;
pub mod pretokenize;
pub mod unicode;

use crate::error::{Result, invalid};
use crate::rng::Rng;
use chars::CharTokenizer;
use ngram::{BaselineRow, NGramModel, WordVocab};

/// A token id: an index into a tokenizer's vocabulary (and, in chapter 9, a row of the embedding).
pub type TokenId = u32;

/// Text ↔ token ids. Implemented by [`chars::CharTokenizer`], [`bpe::Bpe`] and
/// [`gpt2::Gpt2Tokenizer`]; chapter 9 takes any of them as `&dyn Tokenizer`.
pub trait Tokenizer {
    /// The number of ids; every id is below it.
    fn vocab_size(&self) -> usize;

    /// The ids of `text`. Errors when the text holds something the vocabulary cannot express
    /// (only possible for [`chars::CharTokenizer`]; byte-level tokenizers encode any text).
    fn encode(&self, text: &str) -> Result<Vec<TokenId>>;

    /// The bytes the ids stand for. Errors on an id not below [`Tokenizer::vocab_size`].
    fn decode_bytes(&self, ids: &[TokenId]) -> Result<Vec<u8>>;

    /// The bytes one token stands for, or `None` for an id outside the vocabulary.
    fn token_bytes(&self, id: TokenId) -> Option<Vec<u8>>;

    /// The text the ids stand for. Errors on an unknown id, and when the bytes are not valid
    /// UTF-8 (a byte-level token sequence can stop inside a multi-byte character).
    fn decode(&self, ids: &[TokenId]) -> Result<String> {
        String::from_utf8(self.decode_bytes(ids)?).map_err(|e| {
            invalid(
                "Tokenizer::decode",
                "ids",
                format!(
                    "the tokens' bytes are not valid UTF-8 at byte {}",
                    e.utf8_error().valid_up_to()
                ),
            )
        })
    }

    /// Like [`Tokenizer::decode`], but invalid UTF-8 becomes U+FFFD instead of an error (for
    /// showing samples that may stop inside a character).
    fn decode_lossy(&self, ids: &[TokenId]) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids)?).into_owned())
    }
}

/// The bytes of `ids`, one token after another: the decoding loop the three tokenizers share.
/// `vocab` holds one entry per id and `append` writes an entry's bytes; an id not below
/// `vocab.len()` is an error naming `op`, the id and its position in `ids`.
fn decode_with<T>(
    op: &'static str,
    vocab: &[T],
    ids: &[TokenId],
    append: impl Fn(&T, &mut Vec<u8>),
) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for (i, &id) in ids.iter().enumerate() {
        let entry = vocab.get(id as usize).ok_or_else(|| {
            invalid(
                op,
                "ids",
                format!("ids[{i}] = {id} is not below the vocabulary size {}", vocab.len()),
            )
        })?;
        append(entry, &mut out);
    }
    Ok(out)
}

// ───────────────────────────── the chapter's computations ─────────────────────────────

/// Characters in ASCII: codes 0‥127, seven bits.
pub const ASCII_SIZE: usize = 128;
/// GPT-2's (and GPT-3's) number of merges.
pub const GPT2_MERGES: usize = 50_000;
/// GPT-2's special tokens: `<|endoftext|>` only.
pub const GPT2_SPECIAL_TOKENS: usize = 1;
/// GPT-3's embedding width, from the explainer.
pub const GPT3_EMBEDDING_WIDTH: usize = 12_288;

/// The vocabulary size of the BPE the chapter trains on the default corpus.
pub const CHAPTER_BPE_VOCAB: usize = 512;
/// The largest n of the baseline table.
pub const MAX_N: usize = 5;
/// k of the add-k rows of the baseline table.
pub const ADD_K: f64 = 0.01;
/// The seed of every sample the chapter draws.
pub const SAMPLE_SEED: u64 = 8;
/// Characters per character-level sample.
pub const CHAR_SAMPLE_LENGTH: usize = 160;
/// Words per word-level sample.
pub const WORD_SAMPLE_LENGTH: usize = 40;

/// GPT-2's vocabulary size from its parts: 256 bytes, 50,000 merges, one special token.
pub fn gpt2_vocab_size() -> usize {
    bpe::BYTE_VOCAB + GPT2_MERGES + GPT2_SPECIAL_TOKENS
}

/// The default corpus, character-tokenized and split: (tokenizer, training ids, validation ids).
pub fn char_data() -> Result<(CharTokenizer, Vec<TokenId>, Vec<TokenId>)> {
    let text = corpus::default_corpus();
    let tok = CharTokenizer::from_text(text)?;
    let (train, validation) = corpus::split(text);
    Ok((tok.clone(), tok.encode(train)?, tok.encode(validation)?))
}

/// The character baseline table of this chapter: character n-grams, n = 1 … [`MAX_N`], on the
/// default corpus, add-k with k = [`ADD_K`] and backoff with d = [`ngram::DEFAULT_DISCOUNT`].
/// (Chapter 9 is held to the best n-gram on its own BPE tokens, `ch09_gpt::best_baseline`.)
pub fn char_baseline() -> Result<Vec<BaselineRow>> {
    let (tok, train, validation) = char_data()?;
    ngram::baseline(&train, &validation, tok.vocab_size(), MAX_N, ADD_K, ngram::DEFAULT_DISCOUNT)
}

/// Shannon's series on the default corpus: (label, text) for the zero-, first-, second- and
/// third-order character approximations and the first- and second-order word approximations, all
/// from [`SAMPLE_SEED`]. A k-th order approximation is an n-gram model with n = k.
pub fn shannon_samples() -> Result<Vec<(String, String)>> {
    let text = corpus::default_corpus();
    let (train, _) = corpus::split(text);
    let tok = CharTokenizer::from_text(text)?;
    let ids = tok.encode(train)?;
    let mut rng = Rng::new(SAMPLE_SEED);
    let show = |ids: &[TokenId]| -> Result<String> { Ok(tok.decode(ids)?.replace('\n', " ¶ ")) };
    let mut out = vec![(
        "zero-order characters (uniform)".to_string(),
        show(&ngram::sample_uniform(tok.vocab_size(), CHAR_SAMPLE_LENGTH, &mut rng))?,
    )];
    for (k, name) in [(1, "first"), (2, "second"), (3, "third")] {
        let m = NGramModel::fit(&ids, k, tok.vocab_size())?;
        out.push((
            format!("{name}-order characters ({k}-gram)"),
            show(&m.sample(CHAR_SAMPLE_LENGTH, &mut rng))?,
        ));
    }
    let words = WordVocab::from_text(text)?;
    let word_ids = words.encode(train)?;
    for (k, name) in [(1, "first"), (2, "second")] {
        let m = NGramModel::fit(&word_ids, k, words.len())?;
        out.push((
            format!("{name}-order words ({k}-gram)"),
            words.render(&m.sample(WORD_SAMPLE_LENGTH, &mut rng)),
        ));
    }
    Ok(out)
}
