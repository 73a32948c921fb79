//! What the GPT reads: mini-batches of token windows, with the next token as the target at every
//! position.
//!
//! Two sources. [`SortTask`] is minGPT's sorting problem: a string of 6 digits from 0–4 followed
//! by the same digits sorted; the model sees the first 11 tokens and is scored only on the 6
//! sorted ones (the unsorted half cannot be predicted). A token stream (a tokenized corpus) gives
//! random windows of `context + 1` tokens, the first `context` as input and the last `context` as
//! targets, the training objective of D3: maximise Σᵢ log P(uᵢ | uᵢ₋ₖ … uᵢ₋₁).

use crate::error::{Error, Result, invalid};
use crate::rng::Rng;

/// A token id (the same type as chapter 8's).
pub type Token = u32;

/// B sequences of equal length T, stacked: `inputs[b·T + t]` is token t of sequence b, and
/// `targets[b·T + t]` the token that should follow it, or `None` where the position is not scored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// B·T input tokens.
    pub inputs: Vec<Token>,
    /// B·T targets.
    pub targets: Vec<Option<Token>>,
    /// B.
    pub batch: usize,
    /// T.
    pub seq_len: usize,
}

impl Batch {
    /// Checks that inputs and targets hold B·T entries and every id is below `vocab_size`.
    pub fn check(&self, op: &'static str, vocab_size: usize) -> Result<()> {
        let n = self.batch * self.seq_len;
        if n == 0 {
            return Err(Error::Empty { op, arg: "batch" });
        }
        if self.inputs.len() != n || self.targets.len() != n {
            return Err(crate::error::shape_error(
                op,
                "inputs and targets",
                format!("{n} each (B = {} sequences of T = {})", self.batch, self.seq_len),
                format!("{} inputs, {} targets", self.inputs.len(), self.targets.len()),
            ));
        }
        check_ids(op, "inputs", &self.inputs, vocab_size)?;
        if let Some((i, t)) = self
            .targets
            .iter()
            .enumerate()
            .find_map(|(i, t)| t.filter(|&t| t as usize >= vocab_size).map(|t| (i, t)))
        {
            return Err(invalid(
                op,
                "targets",
                format!("token id {t} at index {i} is not below the vocabulary size {vocab_size}"),
            ));
        }
        Ok(())
    }

    /// The number of scored positions.
    pub fn scored(&self) -> usize {
        self.targets.iter().filter(|t| t.is_some()).count()
    }
}

/// Fails unless every id is below `vocab_size`, naming the first that is not.
pub fn check_ids(
    op: &'static str,
    arg: &'static str,
    ids: &[Token],
    vocab_size: usize,
) -> Result<()> {
    match ids.iter().position(|&t| t as usize >= vocab_size) {
        Some(i) => Err(invalid(
            op,
            arg,
            format!(
                "token id {} at index {i} is not below the vocabulary size {vocab_size}",
                ids[i]
            ),
        )),
        None => Ok(()),
    }
}

// ───────────────────────────── the sorting task ─────────────────────────────

/// minGPT's task: length-6 strings over the digits 0–4 (5⁶ = 15,625 of them).
pub const SORT_LENGTH: usize = 6;
/// Digits 0 … 4.
pub const SORT_DIGITS: usize = 5;
/// Strings kept out of training and scored at the end.
pub const SORT_HELD_OUT: usize = 1_000;

/// Every string of a length over some digits, split once into a training set and a disjoint
/// held-out set.
#[derive(Clone, Debug)]
pub struct SortTask {
    /// String length n.
    pub length: usize,
    /// Alphabet size (digits 0 … digits − 1, which are also the token ids).
    pub digits: usize,
    /// Strings to train on.
    pub train: Vec<Vec<Token>>,
    /// Strings never trained on.
    pub held_out: Vec<Vec<Token>>,
}

impl SortTask {
    /// All `digits^length` strings, shuffled by `seed`, the first `held_out` kept out.
    pub fn new(length: usize, digits: usize, held_out: usize, seed: u64) -> Result<SortTask> {
        const OP: &str = "SortTask::new";
        if length == 0 || digits == 0 {
            return Err(invalid(
                OP,
                "length and digits",
                format!("must both be ≥ 1, got {length} and {digits}"),
            ));
        }
        let total = (digits as u64).checked_pow(length as u32).filter(|&t| t <= 10_000_000);
        let total = total.ok_or_else(|| {
            invalid(OP, "length", format!("{digits}^{length} strings is too many to enumerate"))
        })? as usize;
        if held_out >= total {
            return Err(invalid(
                OP,
                "held_out",
                format!("{held_out} leaves nothing to train on out of {total} strings"),
            ));
        }
        let mut all: Vec<Vec<Token>> = (0..total)
            .map(|mut k| {
                let mut s = vec![0; length];
                for slot in s.iter_mut().rev() {
                    *slot = (k % digits) as Token;
                    k /= digits;
                }
                s
            })
            .collect();
        Rng::new(seed).shuffle(&mut all);
        let train = all.split_off(held_out);
        Ok(SortTask { length, digits, train, held_out: all })
    }

    /// The chapter's task: [`SORT_LENGTH`], [`SORT_DIGITS`], [`SORT_HELD_OUT`].
    pub fn standard(seed: u64) -> Result<SortTask> {
        SortTask::new(SORT_LENGTH, SORT_DIGITS, SORT_HELD_OUT, seed)
    }

    /// The model's sequence length 2n − 1: the string and all but the last sorted digit.
    pub fn seq_len(&self) -> usize {
        2 * self.length - 1
    }

    /// One example: the input x ++ sorted(x) without its last token; the target at position t
    /// is token t + 1, scored only from position n − 1 on (where the sorted half is predicted).
    pub fn example(&self, x: &[Token]) -> (Vec<Token>, Vec<Option<Token>>) {
        let mut sorted = x.to_vec();
        sorted.sort_unstable();
        let full: Vec<Token> = x.iter().chain(sorted.iter()).copied().collect();
        let n = self.length;
        let inputs = full[..2 * n - 1].to_vec();
        let targets =
            (0..2 * n - 1).map(|t| if t + 1 >= n { Some(full[t + 1]) } else { None }).collect();
        (inputs, targets)
    }

    /// A batch of `batch` training strings drawn uniformly with replacement.
    pub fn batch(&self, batch: usize, rng: &mut Rng) -> Batch {
        let picks: Vec<&[Token]> =
            (0..batch).map(|_| self.train[rng.below(self.train.len())].as_slice()).collect();
        self.batch_of(&picks)
    }

    /// The batch of exactly these strings.
    pub fn batch_of(&self, strings: &[&[Token]]) -> Batch {
        let mut inputs = Vec::with_capacity(strings.len() * self.seq_len());
        let mut targets = Vec::with_capacity(strings.len() * self.seq_len());
        for s in strings {
            let (i, t) = self.example(s);
            inputs.extend(i);
            targets.extend(t);
        }
        Batch { inputs, targets, batch: strings.len(), seq_len: self.seq_len() }
    }
}

// ───────────────────────────── a token stream ─────────────────────────────

/// A tokenized corpus cut into a training part and a validation part (the last
/// `validation_fraction` of the tokens, so the two never share a window). It holds the ids once,
/// and the two parts are slices of them ([`TokenSplit::train`], [`TokenSplit::validation`]): a
/// corpus of N characters costs 4·N bytes of ids with the character tokenizer, besides its text.
#[derive(Clone, Debug)]
pub struct TokenSplit {
    tokens: Vec<Token>,
    cut: usize,
}

impl TokenSplit {
    /// Splits a copy of `tokens`; see [`TokenSplit::from_tokens`].
    pub fn new(tokens: &[Token], validation_fraction: f64, context: usize) -> Result<TokenSplit> {
        TokenSplit::from_tokens(tokens.to_vec(), validation_fraction, context)
    }

    /// Splits `tokens`, which it keeps (no copy); both parts must hold at least `context + 1`
    /// tokens so that a window fits.
    pub fn from_tokens(
        tokens: Vec<Token>,
        validation_fraction: f64,
        context: usize,
    ) -> Result<TokenSplit> {
        const OP: &str = "TokenSplit::new";
        if tokens.is_empty() {
            return Err(Error::Empty { op: OP, arg: "corpus (no tokens)" });
        }
        if !(validation_fraction.is_finite()
            && validation_fraction > 0.0
            && validation_fraction < 1.0)
        {
            return Err(invalid(
                OP,
                "validation_fraction",
                format!("must lie in (0, 1), got {validation_fraction}"),
            ));
        }
        let cut = tokens.len() - (tokens.len() as f64 * validation_fraction).round() as usize;
        let (train, validation) = tokens.split_at(cut);
        for (arg, part) in
            [("corpus (its training part)", train), ("corpus (its validation part)", validation)]
        {
            if part.len() < context.saturating_add(1) {
                return Err(invalid(
                    OP,
                    arg,
                    format!(
                        "holds {} tokens, fewer than one window of context + 1 = {}",
                        part.len(),
                        context.saturating_add(1)
                    ),
                ));
            }
        }
        Ok(TokenSplit { tokens, cut })
    }

    /// The first part.
    pub fn train(&self) -> &[Token] {
        &self.tokens[..self.cut]
    }

    /// The last part.
    pub fn validation(&self) -> &[Token] {
        &self.tokens[self.cut..]
    }

    /// The bytes of ids it holds on the heap (its allocation, which may exceed the ids).
    pub fn heap_bytes(&self) -> usize {
        self.tokens.capacity() * std::mem::size_of::<Token>()
    }
}

/// `batch` windows of `seq_len + 1` consecutive tokens starting at uniformly random places: the
/// first `seq_len` are the input, the last `seq_len` the targets.
pub fn random_windows(
    tokens: &[Token],
    seq_len: usize,
    batch: usize,
    rng: &mut Rng,
) -> Result<Batch> {
    if tokens.len() < seq_len + 1 || seq_len == 0 {
        return Err(invalid(
            "random_windows",
            "tokens",
            format!("{} tokens cannot hold a window of {} + 1", tokens.len(), seq_len),
        ));
    }
    let starts: Vec<usize> = (0..batch).map(|_| rng.below(tokens.len() - seq_len)).collect();
    Ok(windows_at(tokens, seq_len, &starts))
}

/// The windows starting at `starts` (each must fit).
pub fn windows_at(tokens: &[Token], seq_len: usize, starts: &[usize]) -> Batch {
    let mut inputs = Vec::with_capacity(starts.len() * seq_len);
    let mut targets = Vec::with_capacity(starts.len() * seq_len);
    for &s in starts {
        inputs.extend_from_slice(&tokens[s..s + seq_len]);
        targets.extend(tokens[s + 1..s + seq_len + 1].iter().map(|&t| Some(t)));
    }
    Batch { inputs, targets, batch: starts.len(), seq_len }
}

/// Consecutive non-overlapping windows covering the stream, grouped `batch` windows at a time:
/// every token after the first is a target exactly once. The last window may be shorter than
/// `seq_len` (then it forms its own batch). This is how validation loss is measured exactly:
/// over every token, deterministically (see [`covering_starts`] for the windows alone).
pub fn covering_windows(tokens: &[Token], seq_len: usize, batch: usize) -> Vec<Batch> {
    if batch == 0 {
        return Vec::new();
    }
    let starts = covering_starts(tokens.len(), seq_len);
    let mut out = Vec::new();
    for group in starts.chunk_by(|a, b| a.1 == b.1) {
        for chunk in group.chunks(batch) {
            let firsts: Vec<usize> = chunk.iter().map(|w| w.0).collect();
            out.push(windows_at(tokens, chunk[0].1, &firsts));
        }
    }
    out
}

/// The windows of [`covering_windows`] as (start, length) pairs, for a stream of `len` tokens:
/// ⌊(len − 1)/`seq_len`⌋ full windows, then the shorter rest if any. No ids are copied.
pub fn covering_starts(len: usize, seq_len: usize) -> Vec<(usize, usize)> {
    if len < 2 || seq_len == 0 {
        return Vec::new();
    }
    let full = (len - 1) / seq_len;
    let mut out: Vec<(usize, usize)> = (0..full).map(|k| (k * seq_len, seq_len)).collect();
    let rest = (len - 1) % seq_len;
    if rest > 0 {
        out.push((full * seq_len, rest));
    }
    out
}

/// At most `limit` of `windows`, drawn without replacement by a generator seeded with `seed`
/// (a partial Fisher–Yates shuffle), in the order of the stream; all of them when there are no
/// more than `limit`.
pub fn sample_windows(
    mut windows: Vec<(usize, usize)>,
    limit: usize,
    seed: u64,
) -> Vec<(usize, usize)> {
    if windows.len() <= limit {
        return windows;
    }
    let mut rng = Rng::new(seed);
    for i in 0..limit {
        let j = i + rng.below(windows.len() - i);
        windows.swap(i, j);
    }
    windows.truncate(limit);
    windows.sort_unstable();
    windows
}
