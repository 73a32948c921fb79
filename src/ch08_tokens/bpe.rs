//! Byte-level byte-pair encoding (BPE): training from a corpus, and encoding by applying the
//! learned merges in the order they were learned.
//!
//! **Training.** The text becomes its UTF-8 bytes, token ids 0‥255. Then, until the vocabulary
//! has the size asked for: count every adjacent pair of tokens as it occurs from left to right,
//! overlaps included (so `aaa` holds the pair `(a, a)` twice); pick the pair with the largest
//! count, breaking ties by the position of its first occurrence in the text; give it the next
//! id; and replace its occurrences from left to right, each token taking part in at most one
//! replacement (so `aaa` becomes `(aa) a`). A pair must occur at least twice to be merged.
//!
//! The counts are kept up to date incrementally: a merge touches only the occurrences of the
//! merged pair and their neighbours, so a whole training run costs O(n log n) for n bytes
//! instead of a recount of the text per merge.
//!
//! **Encoding** applies the merges in rank order (rank = the order they were learned). On the
//! training text this reproduces the training sequence exactly: a merge never creates a pair
//! that an earlier merge wanted, so "all merges in order" and "the merge of the moment" agree.

#![deny(clippy::unwrap_used, clippy::expect_used)]

use super::pretokenize::split as gpt2_split;
use super::{TokenId, Tokenizer};
use crate::error::{Error, Result, invalid};
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

/// The number of byte tokens every byte-level vocabulary starts from.
pub const BYTE_VOCAB: usize = 256;

/// How text is cut into pieces before merging; merges never cross a cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// No cuts: merges may span spaces and punctuation (the textbook algorithm).
    None,
    /// GPT-2's split (see [`super::pretokenize::split`]): words with their leading space, numbers,
    /// punctuation runs and whitespace runs are merged separately.
    Gpt2,
}

impl PreTokenizer {
    /// The pieces of `text`.
    pub fn pieces<'a>(&self, text: &'a str) -> Vec<&'a str> {
        match self {
            PreTokenizer::None => {
                if text.is_empty() {
                    vec![]
                } else {
                    vec![text]
                }
            }
            PreTokenizer::Gpt2 => gpt2_split(text),
        }
    }
}

/// What to train.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BpeConfig {
    /// The size of the final vocabulary: 256 byte tokens plus one per merge (at least 256).
    pub vocab_size: usize,
    /// How the text is cut before merging.
    pub pre_tokenizer: PreTokenizer,
}

/// One learned merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Merge {
    /// The two tokens merged, left then right.
    pub pair: (TokenId, TokenId),
    /// The id of the new token: 256 + the merge's rank.
    pub id: TokenId,
    /// How often the pair occurred (overlaps counted) when it was chosen.
    pub count: usize,
}

/// A trained byte-level BPE tokenizer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bpe {
    merges: Vec<Merge>,
    /// The bytes each token stands for, by id.
    vocab: Vec<Vec<u8>>,
    /// pair → (rank, id of the merged token).
    ranks: HashMap<(TokenId, TokenId), (u32, TokenId)>,
    pre_tokenizer: PreTokenizer,
}

/// The result of [`train`]: the tokenizer and the training text as it stands after the last merge.
#[derive(Clone, Debug)]
pub struct Training {
    /// The tokenizer.
    pub bpe: Bpe,
    /// The training text's token ids after all merges.
    pub tokens: Vec<TokenId>,
}

const NONE: u32 = u32::MAX;

/// The training state: the text's tokens as a doubly linked list over byte positions, and every
/// adjacent pair with the set of positions (of its left token) where it occurs.
struct Trainer {
    tok: Vec<TokenId>,
    next: Vec<u32>,
    prev: Vec<u32>,
    occurrences: HashMap<(TokenId, TokenId), BTreeSet<u32>>,
    /// (count, earliest position, pair); stale entries are skipped when popped.
    heap: BinaryHeap<(usize, Reverse<u32>, (TokenId, TokenId))>,
}

impl Trainer {
    fn new(text: &str, pre: PreTokenizer) -> Self {
        let bytes = text.as_bytes();
        let n = bytes.len();
        let tok: Vec<TokenId> = bytes.iter().map(|&b| TokenId::from(b)).collect();
        let mut next = vec![NONE; n];
        let mut prev = vec![NONE; n];
        let base = text.as_ptr() as usize;
        for piece in pre.pieces(text) {
            let start = piece.as_ptr() as usize - base;
            for i in start..start + piece.len() - 1 {
                next[i] = (i + 1) as u32;
                prev[i + 1] = i as u32;
            }
        }
        let mut t =
            Trainer { tok, next, prev, occurrences: HashMap::new(), heap: BinaryHeap::new() };
        for i in 0..n {
            if t.next[i] != NONE {
                let pair = (t.tok[i], t.tok[t.next[i] as usize]);
                t.occurrences.entry(pair).or_default().insert(i as u32);
            }
        }
        let entries: Vec<_> = t
            .occurrences
            .iter()
            .map(|(&p, s)| (s.len(), Reverse(*s.first().unwrap_or(&0)), p))
            .collect();
        t.heap.extend(entries);
        t
    }

    fn push(&mut self, pair: (TokenId, TokenId)) {
        if let Some(s) = self.occurrences.get(&pair)
            && let Some(&first) = s.first()
        {
            self.heap.push((s.len(), Reverse(first), pair));
        }
    }

    fn remove(&mut self, pair: (TokenId, TokenId), at: u32, touched: &mut Vec<(TokenId, TokenId)>) {
        if let Some(s) = self.occurrences.get_mut(&pair) {
            s.remove(&at);
            if s.is_empty() {
                self.occurrences.remove(&pair);
            }
        }
        touched.push(pair);
    }

    fn add(&mut self, pair: (TokenId, TokenId), at: u32, touched: &mut Vec<(TokenId, TokenId)>) {
        self.occurrences.entry(pair).or_default().insert(at);
        touched.push(pair);
    }

    /// The most frequent pair (earliest first occurrence among equals), with its count.
    fn best(&mut self) -> Option<((TokenId, TokenId), usize)> {
        while let Some((count, Reverse(first), pair)) = self.heap.pop() {
            if let Some(s) = self.occurrences.get(&pair)
                && s.len() == count
                && s.first() == Some(&first)
            {
                return Some((pair, count));
            }
        }
        None
    }

    /// Replaces the occurrences of `pair` from left to right by `id`.
    fn merge(&mut self, pair: (TokenId, TokenId), id: TokenId) {
        let (a, b) = pair;
        let positions: Vec<u32> =
            self.occurrences.get(&pair).map(|s| s.iter().copied().collect()).unwrap_or_default();
        let mut touched = Vec::new();
        for i in positions {
            // An earlier replacement in this pass may have used this occurrence's left token
            // (overlapping pairs such as a a a).
            if !self.occurrences.get(&pair).is_some_and(|s| s.contains(&i)) {
                continue;
            }
            let j = self.next[i as usize];
            let p = self.prev[i as usize];
            let r = self.next[j as usize];
            if p != NONE {
                let left = self.tok[p as usize];
                self.remove((left, a), p, &mut touched);
                self.add((left, id), p, &mut touched);
            }
            if r != NONE {
                let right = self.tok[r as usize];
                self.remove((b, right), j, &mut touched);
                self.add((id, right), i, &mut touched);
            }
            self.remove(pair, i, &mut touched);
            self.tok[i as usize] = id;
            self.next[i as usize] = r;
            if r != NONE {
                self.prev[r as usize] = i;
            }
            self.next[j as usize] = NONE;
            self.prev[j as usize] = NONE;
            self.tok[j as usize] = NONE;
        }
        touched.sort_unstable();
        touched.dedup();
        for t in touched {
            self.push(t);
        }
    }

    fn tokens(&self) -> Vec<TokenId> {
        self.tok.iter().copied().filter(|&t| t != NONE).collect()
    }
}

/// Trains a byte-level BPE on `text` up to `config.vocab_size` tokens.
///
/// Errors: [`Error::Empty`] for an empty text; [`Error::InvalidValue`] for a vocabulary smaller
/// than 256 or larger than the text can fill (when no pair occurs twice any more, saying how
/// many merges were possible).
pub fn train(text: &str, config: BpeConfig) -> Result<Training> {
    const OP: &str = "bpe::train";
    if text.is_empty() {
        return Err(Error::Empty { op: OP, arg: "text" });
    }
    if config.vocab_size < BYTE_VOCAB {
        return Err(invalid(
            OP,
            "vocab_size",
            format!(
                "a byte-level vocabulary holds at least the {BYTE_VOCAB} byte values; asked for {}",
                config.vocab_size
            ),
        ));
    }
    if config.vocab_size > TokenId::MAX as usize {
        return Err(invalid(
            OP,
            "vocab_size",
            format!("{} does not fit a 32-bit token id", config.vocab_size),
        ));
    }
    let mut trainer = Trainer::new(text, config.pre_tokenizer);
    let mut bpe = Bpe::bytes_only(config.pre_tokenizer);
    while bpe.vocab_size() < config.vocab_size {
        let Some((pair, count)) = trainer.best().filter(|&(_, count)| count >= 2) else {
            return Err(invalid(
                OP,
                "vocab_size",
                format!(
                    "the text can fill at most {} tokens ({} merges of pairs that occur at least \
                        twice); asked for {}",
                    bpe.vocab_size(),
                    bpe.merges.len(),
                    config.vocab_size
                ),
            ));
        };
        let id = bpe.push_merge(pair, count);
        trainer.merge(pair, id);
    }
    Ok(Training { tokens: trainer.tokens(), bpe })
}

/// Replaces adjacent pairs in `ids` by merged tokens, lowest rank first and, within a rank, from
/// left to right, until no adjacent pair has a rank. `ranks` maps a pair to (rank, merged id).
/// O(n log n) for n ids, so whole texts can be merged without pre-tokenization.
pub fn apply_merges(ids: &mut Vec<TokenId>, ranks: &HashMap<(TokenId, TokenId), (u32, TokenId)>) {
    let n = ids.len();
    if n < 2 {
        return;
    }
    let mut next: Vec<usize> = (1..=n).collect();
    let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
    let mut alive = vec![true; n];
    let mut heap = BinaryHeap::new();
    for i in 0..n - 1 {
        if let Some(&(rank, _)) = ranks.get(&(ids[i], ids[i + 1])) {
            heap.push(Reverse((rank, i)));
        }
    }
    while let Some(Reverse((rank, i))) = heap.pop() {
        if !alive[i] || next[i] >= n {
            continue;
        }
        let j = next[i];
        let Some(&(r, merged)) = ranks.get(&(ids[i], ids[j])) else { continue };
        if r != rank {
            continue;
        }
        ids[i] = merged;
        alive[j] = false;
        next[i] = next[j];
        if next[i] < n {
            prev[next[i]] = i;
        }
        if prev[i] < n
            && let Some(&(r, _)) = ranks.get(&(ids[prev[i]], ids[i]))
        {
            heap.push(Reverse((r, prev[i])));
        }
        if next[i] < n
            && let Some(&(r, _)) = ranks.get(&(ids[i], ids[next[i]]))
        {
            heap.push(Reverse((r, i)));
        }
    }
    let mut k = 0;
    for i in 0..n {
        if alive[i] {
            ids[k] = ids[i];
            k += 1;
        }
    }
    ids.truncate(k);
}

/// Every byte's id in a vocabulary that numbers the byte tokens 0‥255 by value, as [`Bpe`] does.
pub const BYTE_IDS_BY_VALUE: [TokenId; BYTE_VOCAB] = {
    let mut ids = [0; BYTE_VOCAB];
    let mut b = 0;
    while b < BYTE_VOCAB {
        ids[b] = b as TokenId;
        b += 1;
    }
    ids
};

/// The encoding loop both byte-level tokenizers share ([`Bpe`] and
/// [`super::gpt2::Gpt2Tokenizer`]): each piece's bytes become ids through `byte_ids`, the merges
/// in `ranks` are applied by [`apply_merges`], and the result is appended to `out`. With
/// `cache_pieces`, a piece seen before is copied from a cache instead of merged again (worth it
/// when the pieces are words, which repeat; not for one whole-text piece).
pub fn encode_pieces<'t>(
    pieces: impl IntoIterator<Item = &'t str>,
    byte_ids: &[TokenId; BYTE_VOCAB],
    ranks: &HashMap<(TokenId, TokenId), (u32, TokenId)>,
    cache_pieces: bool,
    out: &mut Vec<TokenId>,
) {
    let mut cache: HashMap<&str, Vec<TokenId>> = HashMap::new();
    for piece in pieces {
        if let Some(ids) = cache.get(piece) {
            out.extend_from_slice(ids);
            continue;
        }
        let mut ids: Vec<TokenId> = piece.bytes().map(|b| byte_ids[usize::from(b)]).collect();
        apply_merges(&mut ids, ranks);
        out.extend_from_slice(&ids);
        if cache_pieces {
            cache.insert(piece, ids);
        }
    }
}

impl Bpe {
    /// The tokenizer with no merges: one token per byte.
    pub fn bytes_only(pre_tokenizer: PreTokenizer) -> Self {
        Bpe {
            merges: vec![],
            vocab: (0..=255u8).map(|b| vec![b]).collect(),
            ranks: HashMap::new(),
            pre_tokenizer,
        }
    }

    /// A tokenizer from a merge list, e.g. one saved earlier. Each merge must name tokens that
    /// exist before it (a byte or an earlier merge), and its id must be 256 + its position.
    pub fn from_merges(pairs: &[(TokenId, TokenId)], pre_tokenizer: PreTokenizer) -> Result<Self> {
        let mut bpe = Bpe::bytes_only(pre_tokenizer);
        for (k, &(a, b)) in pairs.iter().enumerate() {
            let known = bpe.vocab.len() as TokenId;
            if a >= known || b >= known {
                return Err(invalid(
                    "Bpe::from_merges",
                    "pairs",
                    format!(
                        "merge {k} = ({a}, {b}) names a token that no byte or earlier merge \
                            defines (ids so far: 0‥{})",
                        known - 1
                    ),
                ));
            }
            if bpe.ranks.contains_key(&(a, b)) {
                return Err(invalid(
                    "Bpe::from_merges",
                    "pairs",
                    format!("merge {k} = ({a}, {b}) repeats an earlier merge"),
                ));
            }
            bpe.push_merge((a, b), 0);
        }
        Ok(bpe)
    }

    fn push_merge(&mut self, pair: (TokenId, TokenId), count: usize) -> TokenId {
        let id = self.vocab.len() as TokenId;
        let mut bytes = self.vocab[pair.0 as usize].clone();
        bytes.extend_from_slice(&self.vocab[pair.1 as usize]);
        self.vocab.push(bytes);
        self.ranks.insert(pair, (self.merges.len() as u32, id));
        self.merges.push(Merge { pair, id, count });
        id
    }

    /// The merges in rank order.
    pub fn merges(&self) -> &[Merge] {
        &self.merges
    }

    /// The pre-tokenizer the merges were learned with.
    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.pre_tokenizer
    }

    /// pair → (rank, merged id), the table [`apply_merges`] reads.
    pub fn ranks(&self) -> &HashMap<(TokenId, TokenId), (u32, TokenId)> {
        &self.ranks
    }

    /// A token shown as text: its bytes as an escaped string when they are UTF-8, as `\xNN`
    /// escapes when they are not (part of a multi-byte character).
    pub fn token_text(&self, id: TokenId) -> String {
        match self.vocab.get(id as usize) {
            None => format!("<{id}?>"),
            Some(b) => match std::str::from_utf8(b) {
                Ok(s) => s.escape_debug().to_string(),
                Err(_) => b.escape_ascii().to_string(),
            },
        }
    }

    /// The merge list as lines `rank: left + right -> merged (count)`, tokens shown by
    /// [`Bpe::token_text`] in quotes.
    pub fn merges_text(&self) -> String {
        self.merges
            .iter()
            .enumerate()
            .map(|(k, m)| {
                format!(
                    "{k:>4}: \"{}\" + \"{}\" -> \"{}\" ({})\n",
                    self.token_text(m.pair.0),
                    self.token_text(m.pair.1),
                    self.token_text(m.id),
                    m.count
                )
            })
            .collect()
    }
}

impl Tokenizer for Bpe {
    fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    fn encode(&self, text: &str) -> Result<Vec<TokenId>> {
        let mut out = Vec::with_capacity(text.len() / 2);
        let cache_pieces = self.pre_tokenizer == PreTokenizer::Gpt2;
        encode_pieces(
            self.pre_tokenizer.pieces(text),
            &BYTE_IDS_BY_VALUE,
            &self.ranks,
            cache_pieces,
            &mut out,
        );
        Ok(out)
    }

    fn decode_bytes(&self, ids: &[TokenId]) -> Result<Vec<u8>> {
        super::decode_with("Bpe::decode", &self.vocab, ids, |bytes, out| {
            out.extend_from_slice(bytes)
        })
    }

    fn token_bytes(&self, id: TokenId) -> Option<Vec<u8>> {
        self.vocab.get(id as usize).cloned()
    }
}
