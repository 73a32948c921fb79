//! GPT-2's tokenizer files, read and used exactly as GPT-2 uses them.
//!
//! GPT-2 (and GPT-3, whose vocabulary is the same 50,257 tokens) ships two files:
//! - `vocab.json` (called `encoder.json` in OpenAI's release): a flat JSON object from token
//!   strings to ids;
//! - `merges.txt` (called `vocab.bpe`): an optional `#version` line, then one merge per line, the
//!   two token strings separated by one space, in rank order.
//!
//! The token strings are not raw bytes: every byte is shown as one printable character by
//! [`byte_to_char`] (printable Latin-1 bytes stand for themselves; the 68 others, space and
//! control bytes among them, are moved to U+0100 onwards, so a space is `Ġ` and a newline `Ċ`).
//!
//! Before merging, text is cut into pieces by [`split`], a hand-written form of GPT-2's
//! pattern: contractions, words with one optional leading space, numbers likewise, runs of other
//! symbols likewise, and whitespace runs, the last of which leave their final character to the
//! following word. Each piece is merged on its own by [`super::bpe::encode_pieces`], lowest
//! merge rank first.
//!
//! Point the loader at the real files with
//! [`Gpt2Tokenizer::from_files`]`("vocab.json", "merges.txt")`.
#![deny(clippy::unwrap_used, clippy::expect_used)]

use super::bpe::{BYTE_VOCAB, Bpe, encode_pieces};
pub use super::pretokenize::{CONTRACTIONS, piece_end, split};
use super::{TokenId, Tokenizer};
use crate::error::json_error;
use crate::error::{Error, Result, invalid};
use serde::Serializer;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use std::cell::Cell;
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

// ───────────────────────────── bytes as printable characters ─────────────────────────────

/// Whether byte `b` is shown as the character with the same number: `!`‥`~` (33‥126),
/// `¡`‥`¬` (161‥172) and `®`‥`ÿ` (174‥255).
pub fn byte_is_shown_as_itself(b: u8) -> bool {
    matches!(b, 33..=126 | 161..=172 | 174..=255)
}

/// GPT-2's byte → character map: bytes that [`byte_is_shown_as_itself`] keep their code point;
/// the other 68, in increasing order, get U+0100, U+0101, … (so 0x00 → `Ā`, space 0x20 → `Ġ`,
/// newline 0x0A → `Ċ`).
pub fn byte_to_char() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut moved = 0u32;
    for b in 0..=255u8 {
        table[b as usize] = if byte_is_shown_as_itself(b) {
            char::from(b)
        } else {
            moved += 1;
            char::from_u32(255 + moved).unwrap_or('\u{FFFD}')
        };
    }
    table
}

/// The inverse of [`byte_to_char`].
pub fn char_to_byte() -> HashMap<char, u8> {
    byte_to_char().iter().enumerate().map(|(b, &c)| (c, b as u8)).collect()
}

/// Bytes shown as a GPT-2 token string.
pub fn bytes_to_token_string(bytes: &[u8]) -> String {
    let table = byte_to_char();
    bytes.iter().map(|&b| table[b as usize]).collect()
}

// ───────────────────────────── vocab.json: a flat JSON object ─────────────────────────────

/// Reads a JSON object whose values are all non-negative integers, as `vocab.json` is, with
/// serde_json. Returns the (key, value, line) triples in file order. Errors name `file` and the
/// line; a key given twice is refused (serde_json alone would keep the last one).
pub fn parse_string_to_int_json(file: &str, text: &str) -> Result<Vec<(String, u64, usize)>> {
    // serde_json reads through `io::Read` one byte at a time, so counting the newlines handed
    // over tells the line of each key as it is read.
    let newlines = Rc::new(Cell::new(0));
    let reader = LineCounter { rest: text.as_bytes(), newlines: Rc::clone(&newlines) };
    let mut de = serde_json::Deserializer::from_reader(reader);
    let bad_id = Rc::new(Cell::new(None));
    let visitor = VocabVisitor { newlines, bad_id: Rc::clone(&bad_id) };
    let entries = de.deserialize_map(visitor).and_then(|entries| de.end().map(|()| entries));
    // A bad id is reported at its key's line: serde_json's own position is past the number and
    // the character it peeked at, which may be on the next line.
    if let Some((line, reason)) = bad_id.take() {
        return Err(Error::Parse { file: file.to_string(), line: Some(line), reason });
    }
    entries.map_err(|e| json_error(file, &e))
}

/// The bytes of a text, handed to serde_json while counting the newlines among them.
struct LineCounter<'a> {
    rest: &'a [u8],
    newlines: Rc<Cell<usize>>,
}

impl std::io::Read for LineCounter<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.rest.len());
        let (now, later) = self.rest.split_at(n);
        buf[..n].copy_from_slice(now);
        self.newlines.set(self.newlines.get() + now.iter().filter(|&&b| b == b'\n').count());
        self.rest = later;
        Ok(n)
    }
}

/// `vocab.json`'s object: each key with its id and the line the key is on, no key twice.
struct VocabVisitor {
    newlines: Rc<Cell<usize>>,
    /// The first id that is a number but not a token id: its key's line and what is wrong.
    bad_id: Rc<Cell<Option<(usize, String)>>>,
}

impl<'de> Visitor<'de> for VocabVisitor {
    type Value = Vec<(String, u64, usize)>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("one JSON object, starting with '{'")
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(map.size_hint().unwrap_or(0));
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            // The key has just been read to its closing quote: this is its line.
            let line = 1 + self.newlines.get();
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("token {key:?} appears twice")));
            }
            match map.next_value_seed(IdSeed { key: &key })? {
                Ok(id) => out.push((key, id, line)),
                Err(reason) => {
                    self.bad_id.set(Some((line, reason.clone())));
                    return Err(de::Error::custom(reason));
                }
            }
        }
        Ok(out)
    }
}

/// A token id: a JSON integer from 0 to 2⁶⁴ − 1. Another number is `Ok(Err(what is wrong))`, so
/// the caller can name the key's line; a value of another kind is an error naming the key.
struct IdSeed<'k> {
    key: &'k str,
}

/// What [`IdSeed`] reads: an id, or why the number is none.
type IdRead = std::result::Result<u64, String>;

impl<'de> DeserializeSeed<'de> for IdSeed<'_> {
    type Value = IdRead;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<IdRead, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for IdSeed<'_> {
    type Value = IdRead;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "a token id (a non-negative integer) as the value of {:?}", self.key)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<IdRead, E> {
        Ok(Ok(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<IdRead, E> {
        Ok(u64::try_from(v).map_err(|_| {
            format!("the id {v} of {:?} is negative; token ids are non-negative integers", self.key)
        }))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<IdRead, E> {
        // serde_json reads an integer past u64 as a float.
        Ok(Err(if v.fract() == 0.0 && v >= 18_446_744_073_709_551_616.0 {
            format!("the id {v} of {:?} is too large", self.key)
        } else {
            format!("the id {v} of {:?}: token ids must be whole numbers", self.key)
        }))
    }
}

// ───────────────────────────── the tokenizer ─────────────────────────────

/// A GPT-2-style byte-level BPE tokenizer loaded from `vocab.json` and `merges.txt`.
#[derive(Clone, Debug)]
pub struct Gpt2Tokenizer {
    /// The id of each single-byte token.
    byte_ids: [TokenId; 256],
    /// pair → (rank, merged id).
    ranks: HashMap<(TokenId, TokenId), (u32, TokenId)>,
    /// The bytes of each token, by id.
    vocab: Vec<Vec<u8>>,
    /// Token strings that are neither a byte nor made by a merge (`<|endoftext|>`), with ids.
    specials: Vec<(String, TokenId)>,
    merge_count: usize,
}

impl Gpt2Tokenizer {
    /// Loads `vocab.json` and `merges.txt` from disk. See [`Gpt2Tokenizer::from_texts`] for what is
    /// checked.
    pub fn from_files(vocab_json: impl AsRef<Path>, merges_txt: impl AsRef<Path>) -> Result<Self> {
        let read = |p: &Path| {
            let name = p.display().to_string();
            let bytes =
                std::fs::read(p).map_err(|source| Error::Io { path: name.clone(), source })?;
            let text = super::corpus::from_bytes(&name, bytes)?;
            Ok::<_, Error>((name, text))
        };
        let (vn, vt) = read(vocab_json.as_ref())?;
        let (mn, mt) = read(merges_txt.as_ref())?;
        Self::from_texts(&vn, &vt, &mn, &mt)
    }

    /// Builds the tokenizer from the two files' contents; the names are used in errors.
    ///
    /// Checked, each failure an [`Error::Parse`] naming the file and, where there is one, the line:
    /// the JSON syntax; no key or id twice; ids 0‥N−1 without gaps; every key made only of
    /// characters of [`byte_to_char`]; a token for each of the 256 bytes; every merge line two
    /// tokens separated by one space, both in the vocabulary and each either a byte or made by an
    /// earlier merge, their concatenation in the vocabulary too, and no merge twice.
    pub fn from_texts(
        vocab_name: &str,
        vocab_text: &str,
        merges_name: &str,
        merges_text: &str,
    ) -> Result<Self> {
        let entries = parse_string_to_int_json(vocab_name, vocab_text)?;
        let to_byte = char_to_byte();
        let perr = |file: &str, line: Option<usize>, reason: String| Error::Parse {
            file: file.to_string(),
            line,
            reason,
        };
        let mut ids: HashMap<String, TokenId> = HashMap::with_capacity(entries.len());
        let mut vocab: Vec<Option<Vec<u8>>> = vec![None; entries.len()];
        for (key, id, line) in &entries {
            if *id as usize >= entries.len() {
                return Err(perr(
                    vocab_name,
                    Some(*line),
                    format!(
                        "id {id} of {key:?} is out of range: {} tokens need ids 0‥{}",
                        entries.len(),
                        entries.len() - 1
                    ),
                ));
            }
            let bytes: Option<Vec<u8>> = key.chars().map(|c| to_byte.get(&c).copied()).collect();
            let Some(bytes) = bytes else {
                let bad = key.chars().find(|c| !to_byte.contains_key(c)).unwrap_or('?');
                return Err(perr(
                    vocab_name,
                    Some(*line),
                    format!(
                        "token {key:?} holds {bad:?} (U+{:04X}), which stands for no byte in \
                            GPT-2's byte-to-character map",
                        bad as u32
                    ),
                ));
            };
            if ids.insert(key.clone(), *id as TokenId).is_some() {
                return Err(perr(vocab_name, Some(*line), format!("token {key:?} appears twice")));
            }
            let slot = &mut vocab[*id as usize];
            if slot.is_some() {
                return Err(perr(
                    vocab_name,
                    Some(*line),
                    format!("id {id} is given to two tokens"),
                ));
            }
            *slot = Some(bytes);
        }
        let vocab: Vec<Vec<u8>> = vocab.into_iter().map(Option::unwrap_or_default).collect();
        let table = byte_to_char();
        let mut byte_ids = [0; 256];
        for b in 0..BYTE_VOCAB {
            let s = table[b].to_string();
            byte_ids[b] = *ids.get(&s).ok_or_else(|| {
                perr(
                    vocab_name,
                    None,
                    format!(
                        "there is no token for byte 0x{b:02X} (written {s:?}); a byte-level \
                            vocabulary needs all 256"
                    ),
                )
            })?;
        }

        let mut available: Vec<bool> = vec![false; vocab.len()];
        for &id in &byte_ids {
            available[id as usize] = true;
        }
        let mut ranks = HashMap::new();
        let mut rank = 0u32;
        for (i, raw) in merges_text.split('\n').enumerate() {
            let line = i + 1;
            let text = raw.strip_suffix('\r').unwrap_or(raw);
            if text.is_empty() || (i == 0 && text.starts_with("#version")) {
                continue;
            }
            let parts: Vec<&str> = text.split(' ').collect();
            if parts.len() != 2 || parts[0].is_empty() || parts[1].is_empty() {
                return Err(perr(
                    merges_name,
                    Some(line),
                    format!(
                        "expected two tokens separated by one space, found {text:?} (truncated or \
                            malformed line)"
                    ),
                ));
            }
            let mut pair = [0 as TokenId; 2];
            for (k, part) in parts.iter().enumerate() {
                let id = *ids.get(*part).ok_or_else(|| {
                    perr(
                        merges_name,
                        Some(line),
                        format!("the merge names {part:?}, which is not in {vocab_name}"),
                    )
                })?;
                if !available[id as usize] {
                    return Err(perr(
                        merges_name,
                        Some(line),
                        format!(
                            "the merge uses {part:?} before any earlier line makes it (merges must \
                                come in the order they were learned)"
                        ),
                    ));
                }
                pair[k] = id;
            }
            let joined = format!("{}{}", parts[0], parts[1]);
            let merged = *ids.get(&joined).ok_or_else(|| {
                perr(
                    merges_name,
                    Some(line),
                    format!(
                        "the merge makes {joined:?}, which is not in {vocab_name} (the files \
                            do not belong together)"
                    ),
                )
            })?;
            if ranks.insert((pair[0], pair[1]), (rank, merged)).is_some() {
                return Err(perr(
                    merges_name,
                    Some(line),
                    format!("the merge {text:?} appears twice"),
                ));
            }
            available[merged as usize] = true;
            rank += 1;
        }
        let mut specials: Vec<(String, TokenId)> = ids
            .iter()
            .filter(|&(_, &id)| !available[id as usize])
            .map(|(s, &id)| (s.clone(), id))
            .collect();
        specials.sort_by_key(|&(_, id)| id);
        Ok(Gpt2Tokenizer { byte_ids, ranks, vocab, specials, merge_count: rank as usize })
    }

    /// The number of merges read from `merges.txt`.
    pub fn merge_count(&self) -> usize {
        self.merge_count
    }

    /// Tokens that are neither a byte nor made by a merge, such as `<|endoftext|>`;
    /// [`Tokenizer::encode`] never produces them (like GPT-2's own encoder, it treats their text as
    /// ordinary text).
    pub fn special_tokens(&self) -> &[(String, TokenId)] {
        &self.specials
    }

    /// The token pieces of `text` as GPT-2 token strings (`Ġ` for a leading space).
    pub fn encode_to_strings(&self, text: &str) -> Result<Vec<String>> {
        Ok(self
            .encode(text)?
            .iter()
            .map(|&id| bytes_to_token_string(&self.vocab[id as usize]))
            .collect())
    }
}

impl Tokenizer for Gpt2Tokenizer {
    fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    fn encode(&self, text: &str) -> Result<Vec<TokenId>> {
        let mut out = Vec::with_capacity(text.len() / 3);
        encode_pieces(split(text), &self.byte_ids, &self.ranks, true, &mut out);
        Ok(out)
    }

    fn decode_bytes(&self, ids: &[TokenId]) -> Result<Vec<u8>> {
        super::decode_with("Gpt2Tokenizer::decode", &self.vocab, ids, |bytes, out| {
            out.extend_from_slice(bytes)
        })
    }

    fn token_bytes(&self, id: TokenId) -> Option<Vec<u8>> {
        self.vocab.get(id as usize).cloned()
    }
}

// ───────────────────────────── writing our own BPE in GPT-2's format ─────────────────────────────

/// Writes a trained [`Bpe`] as the text of a `vocab.json` and a `merges.txt`, in GPT-2's format
/// (keys in id order, one per line; merges after a `#version: 0.2` line). Errors when two merges
/// produced the same bytes, which `vocab.json` cannot express (one key per token string).
pub fn to_gpt2_files(bpe: &Bpe) -> Result<(String, String)> {
    let strings: Vec<String> = (0..bpe.vocab_size() as TokenId)
        .map(|id| bytes_to_token_string(&bpe.token_bytes(id).unwrap_or_default()))
        .collect();
    let mut seen = HashMap::new();
    for (id, s) in strings.iter().enumerate() {
        if let Some(first) = seen.insert(s.as_str(), id) {
            return Err(invalid(
                "to_gpt2_files",
                "bpe",
                format!(
                    "tokens {first} and {id} both stand for {s:?}; vocab.json holds one id per \
                        string"
                ),
            ));
        }
    }
    // One key per line, indented by four spaces, keys in id order.
    let mut bytes = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(
        &mut bytes,
        serde_json::ser::PrettyFormatter::with_indent(b"    "),
    );
    ser.collect_map(strings.iter().enumerate().map(|(id, s)| (s, id)))
        .map_err(|e| invalid("to_gpt2_files", "bpe", e.to_string()))?;
    let mut vocab =
        String::from_utf8(bytes).map_err(|e| invalid("to_gpt2_files", "bpe", e.to_string()))?;
    vocab.push('\n');
    let mut merges = String::from("#version: 0.2\n");
    for m in bpe.merges() {
        merges
            .push_str(&format!("{} {}\n", strings[m.pair.0 as usize], strings[m.pair.1 as usize]));
    }
    Ok((vocab, merges))
}
