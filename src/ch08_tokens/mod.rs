//! Chapter 8: tokens, byte-pair encoding and the empirical next-token predictor.

pub mod bpe;
pub mod chars;
pub mod corpus;
pub mod gpt2;
pub mod ngram;
pub mod unicode;

use crate::error::{Result, invalid};

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
            invalid("Tokenizer::decode", "ids", format!("the tokens' bytes are not valid UTF-8 at byte {}", e.utf8_error().valid_up_to()))
        })
    }

    /// Like [`Tokenizer::decode`], but invalid UTF-8 becomes U+FFFD instead of an error (for
    /// showing samples that may stop inside a character).
    fn decode_lossy(&self, ids: &[TokenId]) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids)?).into_owned())
    }
}
