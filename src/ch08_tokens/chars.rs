//! The character-level tokenizer: one token per Unicode character of the corpus.

use super::{TokenId, Tokenizer};
use crate::error::{Error, Result, invalid};
use std::collections::HashMap;

/// One id per distinct character of the corpus, in code-point order: id i is the i-th smallest
/// character that occurs.
///
/// **Unknown characters** (ones the corpus never contains) are an error: [`Tokenizer::encode`]
/// returns [`Error::InvalidValue`] naming the character, its code point and its position. There is
/// no reserved "unknown" id, so decoding always gives back exactly the text that was encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CharTokenizer {
    chars: Vec<char>,
    ids: HashMap<char, TokenId>,
}

impl CharTokenizer {
    /// The vocabulary of `text`: its distinct characters, sorted. Errors on an empty text.
    pub fn from_text(text: &str) -> Result<Self> {
        if text.is_empty() {
            return Err(Error::Empty { op: "CharTokenizer::from_text", arg: "text" });
        }
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        let ids = chars.iter().enumerate().map(|(i, &c)| (c, i as TokenId)).collect();
        Ok(CharTokenizer { chars, ids })
    }

    /// The vocabulary, in id order.
    pub fn chars(&self) -> &[char] {
        &self.chars
    }

    /// The id of `c`, if it is in the vocabulary.
    pub fn id(&self, c: char) -> Option<TokenId> {
        self.ids.get(&c).copied()
    }
}

impl Tokenizer for CharTokenizer {
    fn vocab_size(&self) -> usize {
        self.chars.len()
    }

    fn encode(&self, text: &str) -> Result<Vec<TokenId>> {
        // Exactly one id per character, allocated once: a long text's ids are 4 bytes a
        // character, never a doubled buffer.
        let mut out = Vec::with_capacity(text.chars().count());
        for (i, c) in text.chars().enumerate() {
            out.push(self.id(c).ok_or_else(|| {
                invalid(
                    "CharTokenizer::encode",
                    "text",
                    format!(
                        "character {c:?} (U+{:04X}) at character {i} is not in the vocabulary of \
                         {} characters built from the corpus",
                        c as u32,
                        self.chars.len()
                    ),
                )
            })?);
        }
        Ok(out)
    }

    fn decode_bytes(&self, ids: &[TokenId]) -> Result<Vec<u8>> {
        super::decode_with("CharTokenizer::decode", &self.chars, ids, |c, out| {
            out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes())
        })
    }

    fn token_bytes(&self, id: TokenId) -> Option<Vec<u8>> {
        self.chars.get(id as usize).map(|c| c.to_string().into_bytes())
    }
}
