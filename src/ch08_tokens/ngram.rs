//! The empirical next-token predictor: n-gram models from counts.
//!
//! An n-gram model predicts token xᵢ from the n − 1 tokens before it. The maximum-likelihood
//! estimate reads the answer off the training counts:
//!
//! ```text
//! P(xᵢ | c) = #(c, xᵢ) / #(c),      c = x_{i−n+1} … x_{i−1}
//! ```
//!
//! It has no value when the context c never occurred in training (#(c) = 0) and gives
//! probability 0, an infinite log loss, to every continuation training never saw. Two fixes:
//! - **add-k smoothing**: (#(c, x) + k) / (#(c) + k·|V|), every token gets a share;
//! - **backoff** (interpolated absolute discounting): take a fixed discount d from every seen
//!   count and hand the mass it frees to the estimate with one context token fewer,
//!   `P(x | c) = max(#(c, x) − d, 0)/#(c) + d·N(c)/#(c) · P(x | c′)` where N(c) is the number of
//!   different tokens seen after c and c′ is c without its first token; an unseen context backs off
//!   entirely, and the empty context backs off to the uniform 1/|V|. Every level sums to 1.
//!
//! The quality of a model is its cross-entropy on held-out text, in nats per token:
//! `H = −(1/m) Σᵢ ln P(xᵢ | x_{<i})`. Near the start of a text the context is shorter than n − 1
//! and the model of that shorter order is used.

use super::TokenId;
use crate::error::{Error, Result, invalid};
use crate::rng::Rng;
use std::collections::HashMap;

/// The discount of [`Estimator::Backoff`] the chapter uses (the customary 0.75).
pub const DEFAULT_DISCOUNT: f64 = 0.75;

/// The tokens seen after one context, with their counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Followers {
    /// #(c): how often the context occurred with a token after it.
    pub total: u64,
    /// (token, #(c, token)), sorted by token id.
    pub counts: Vec<(TokenId, u64)>,
}

impl Followers {
    /// #(c, x).
    pub fn count(&self, x: TokenId) -> u64 {
        self.counts.binary_search_by_key(&x, |&(t, _)| t).map_or(0, |i| self.counts[i].1)
    }
}

/// How to turn counts into probabilities.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Estimator {
    /// #(c, x)/#(c): undefined for an unseen context.
    MaximumLikelihood,
    /// (#(c, x) + k)/(#(c) + k|V|), k > 0.
    AddK(f64),
    /// Interpolated absolute discounting with discount 0 < d < 1 (see the module docs).
    Backoff(f64),
}

impl Estimator {
    /// A short name for tables and legends.
    pub fn label(&self) -> String {
        match self {
            Estimator::MaximumLikelihood => "maximum likelihood".into(),
            Estimator::AddK(k) => format!("add-k, k = {k}"),
            Estimator::Backoff(d) => format!("backoff, d = {d}"),
        }
    }
}

/// Counts of every context of length 0 … n − 1 and the tokens that followed it.
#[derive(Clone, Debug)]
pub struct NGramModel {
    n: usize,
    vocab_size: usize,
    /// `levels[k]`: contexts of length k.
    levels: Vec<HashMap<Vec<TokenId>, Followers>>,
}

/// Every context of length k in `tokens` (the k tokens before position i, for i = k … len − 1)
/// with the tokens that followed it: #(c) and #(c, x) for each x, sorted by x.
pub fn context_followers(tokens: &[TokenId], k: usize) -> HashMap<Vec<TokenId>, Followers> {
    let mut raw: HashMap<Vec<TokenId>, HashMap<TokenId, u64>> = HashMap::new();
    for i in k..tokens.len() {
        let ctx = &tokens[i - k..i];
        let entry = match raw.get_mut(ctx) {
            Some(e) => e,
            None => raw.entry(ctx.to_vec()).or_default(),
        };
        *entry.entry(tokens[i]).or_insert(0) += 1;
    }
    raw.into_iter()
        .map(|(ctx, m)| {
            let mut counts: Vec<(TokenId, u64)> = m.into_iter().collect();
            counts.sort_unstable();
            let total = counts.iter().map(|&(_, c)| c).sum();
            (ctx, Followers { total, counts })
        })
        .collect()
}

impl NGramModel {
    /// Counts the n-grams of `tokens` (every order from 1 to n). Errors when n = 0, the tokens are
    /// empty, or an id is not below `vocab_size`.
    pub fn fit(tokens: &[TokenId], n: usize, vocab_size: usize) -> Result<Self> {
        const OP: &str = "NGramModel::fit";
        if n == 0 {
            return Err(invalid(OP, "n", "an n-gram model needs n ≥ 1 (n − 1 tokens of context)"));
        }
        if tokens.is_empty() {
            return Err(Error::Empty { op: OP, arg: "tokens" });
        }
        if let Some(i) = tokens.iter().position(|&t| t as usize >= vocab_size) {
            return Err(invalid(
                OP,
                "tokens",
                format!("tokens[{i}] = {} is not below vocab_size = {vocab_size}", tokens[i]),
            ));
        }
        let levels = (0..n).map(|k| context_followers(tokens, k)).collect();
        Ok(NGramModel { n, vocab_size, levels })
    }

    /// n.
    pub fn order(&self) -> usize {
        self.n
    }

    /// |V|.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The last min(n − 1, len) tokens of `context`: the part the model looks at.
    pub fn used_context<'a>(&self, context: &'a [TokenId]) -> &'a [TokenId] {
        &context[context.len().saturating_sub(self.n - 1)..]
    }

    /// What followed the context in training, if it occurred (with a token after it).
    pub fn followers(&self, context: &[TokenId]) -> Option<&Followers> {
        let c = self.used_context(context);
        self.levels[c.len()].get(c)
    }

    /// The number of distinct contexts of length k seen in training.
    pub fn distinct_contexts(&self, k: usize) -> usize {
        self.levels.get(k).map_or(0, HashMap::len)
    }

    /// #(c, x)/#(c), or `None` when the context never occurred: the count formula has no value.
    pub fn mle(&self, context: &[TokenId], next: TokenId) -> Option<f64> {
        self.followers(context).map(|f| f.count(next) as f64 / f.total as f64)
    }

    /// (#(c, x) + k)/(#(c) + k|V|); the uniform 1/|V| for an unseen context.
    pub fn add_k(&self, context: &[TokenId], next: TokenId, k: f64) -> f64 {
        let v = self.vocab_size() as f64;
        match self.followers(context) {
            Some(f) => (f.count(next) as f64 + k) / (f.total as f64 + k * v),
            None => 1.0 / v,
        }
    }

    /// Interpolated absolute discounting with discount d (see the module docs).
    pub fn backoff(&self, context: &[TokenId], next: TokenId, d: f64) -> f64 {
        let c = self.used_context(context);
        let mut p = 1.0 / self.vocab_size as f64;
        // From the empty context up to the full one, each level interpolating with the one below.
        for k in 0..=c.len() {
            let ctx = &c[c.len() - k..];
            if let Some(f) = self.levels[k].get(ctx) {
                let total = f.total as f64;
                let kept = (f.count(next) as f64 - d).max(0.0) / total;
                let freed = d * f.counts.len() as f64 / total;
                p = kept + freed * p;
            }
        }
        p
    }

    /// P(next | context) under `estimator`; `None` only for an undefined maximum-likelihood
    /// estimate.
    pub fn probability(
        &self,
        context: &[TokenId],
        next: TokenId,
        estimator: Estimator,
    ) -> Option<f64> {
        match estimator {
            Estimator::MaximumLikelihood => self.mle(context, next),
            Estimator::AddK(k) => Some(self.add_k(context, next, k)),
            Estimator::Backoff(d) => Some(self.backoff(context, next, d)),
        }
    }

    /// The mean of −ln P(xᵢ | x_{<i}) over all positions of `tokens`, in nats per token.
    ///
    /// Errors: empty `tokens`; an id not below the vocabulary size; an estimator parameter out of
    /// range (k ≤ 0, d outside (0, 1)); for [`Estimator::MaximumLikelihood`], the first position
    /// whose context training never saw (no estimate) or whose token never followed it
    /// (probability 0, infinite loss).
    pub fn cross_entropy(&self, tokens: &[TokenId], estimator: Estimator) -> Result<f64> {
        const OP: &str = "NGramModel::cross_entropy";
        if tokens.is_empty() {
            return Err(Error::Empty { op: OP, arg: "tokens" });
        }
        if let Some(i) = tokens.iter().position(|&t| t as usize >= self.vocab_size) {
            return Err(invalid(
                OP,
                "tokens",
                format!(
                    "tokens[{i}] = {} is not below vocab_size = {}",
                    tokens[i], self.vocab_size
                ),
            ));
        }
        match estimator {
            Estimator::AddK(k) if !(k > 0.0 && k.is_finite()) => {
                return Err(invalid(OP, "k", format!("k must be finite and > 0, got {k}")));
            }
            Estimator::Backoff(d) if !(d > 0.0 && d < 1.0) => {
                return Err(invalid(OP, "d", format!("d must lie in (0, 1), got {d}")));
            }
            _ => {}
        }
        let mut sum = 0.0;
        for i in 0..tokens.len() {
            let context = &tokens[i.saturating_sub(self.n - 1)..i];
            let p = self.probability(context, tokens[i], estimator).ok_or_else(|| {
                invalid(
                    OP,
                    "tokens",
                    format!(
                        "position {i}: the context {context:?} never occurred in training, so \
                            #(c, x)/#(c) has no value"
                    ),
                )
            })?;
            if p <= 0.0 {
                return Err(invalid(
                    OP,
                    "tokens",
                    format!(
                        "position {i}: token {} never followed the context {context:?} in \
                            training: probability 0, infinite loss",
                        tokens[i]
                    ),
                ));
            }
            sum -= p.ln();
        }
        Ok(sum / tokens.len() as f64)
    }

    /// How the maximum-likelihood estimate fares on `tokens`: (positions whose context was never
    /// seen, positions whose context was seen but whose token never followed it, all positions).
    pub fn mle_failures(&self, tokens: &[TokenId]) -> (usize, usize, usize) {
        let (mut unseen, mut zero) = (0, 0);
        for i in 0..tokens.len() {
            let context = &tokens[i.saturating_sub(self.n - 1)..i];
            match self.mle(context, tokens[i]) {
                None => unseen += 1,
                Some(p) if p <= 0.0 => zero += 1,
                Some(_) => {}
            }
        }
        (unseen, zero, tokens.len())
    }

    /// Draws `length` tokens from the maximum-likelihood model, each from the counts of what
    /// followed the last n − 1 tokens drawn (fewer at the start). Because every drawn context was
    /// itself seen in training, it has followers, except at the very end of the training text;
    /// then the first context token is dropped until one has.
    pub fn sample(&self, length: usize, rng: &mut Rng) -> Vec<TokenId> {
        let mut out: Vec<TokenId> = Vec::with_capacity(length);
        while out.len() < length {
            let mut ctx = self.used_context(&out);
            let f = loop {
                if let Some(f) = self.levels[ctx.len()].get(ctx) {
                    break f;
                }
                ctx = &ctx[1..];
            };
            let mut r = rng.below(f.total as usize) as u64;
            let mut pick = f.counts[0].0;
            for &(t, c) in &f.counts {
                if r < c {
                    pick = t;
                    break;
                }
                r -= c;
            }
            out.push(pick);
        }
        out
    }
}

/// Shannon's zero-order approximation: `length` tokens drawn uniformly from 0‥vocab_size−1.
pub fn sample_uniform(vocab_size: usize, length: usize, rng: &mut Rng) -> Vec<TokenId> {
    (0..length).map(|_| rng.below(vocab_size) as TokenId).collect()
}

/// One row of the baseline table: the validation cross-entropy of the n-gram model for one n.
#[derive(Clone, Debug, PartialEq)]
pub struct BaselineRow {
    /// n (the model sees n − 1 tokens).
    pub n: usize,
    /// Distinct contexts of length n − 1 in training.
    pub contexts: usize,
    /// Validation positions with an unseen context (the maximum-likelihood estimate fails).
    pub unseen_context_share: f64,
    /// Validation nats/token, add-k with the k given.
    pub add_k: f64,
    /// Validation nats/token, backoff with the d given.
    pub backoff: f64,
    /// Training nats/token, backoff (how much the model memorises).
    pub backoff_train: f64,
}

/// The validation cross-entropy of n-gram models for n = 1 … `max_n`, trained on `train` and
/// measured on `validation` (token ids below `vocab_size`), with add-k (k) and backoff (d).
/// This is the baseline a neural model on the same tokens has to beat.
pub fn baseline(
    train: &[TokenId],
    validation: &[TokenId],
    vocab_size: usize,
    max_n: usize,
    k: f64,
    d: f64,
) -> Result<Vec<BaselineRow>> {
    (1..=max_n)
        .map(|n| {
            let m = NGramModel::fit(train, n, vocab_size)?;
            let (unseen, _, all) = m.mle_failures(validation);
            Ok(BaselineRow {
                n,
                contexts: m.distinct_contexts(n - 1),
                unseen_context_share: unseen as f64 / all.max(1) as f64,
                add_k: m.cross_entropy(validation, Estimator::AddK(k))?,
                backoff: m.cross_entropy(validation, Estimator::Backoff(d))?,
                backoff_train: m.cross_entropy(train, Estimator::Backoff(d))?,
            })
        })
        .collect()
}

// ───────────────────────────── words ─────────────────────────────

/// Words for the word-level approximations: runs of letters, digits and apostrophes (so
/// `Mira's` is one word), and every other non-space character on its own; whitespace separates.
pub fn words(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let is_word = |c: char| c.is_alphanumeric() || c == '\'';
    for (i, c) in text.char_indices() {
        if is_word(c) {
            start.get_or_insert(i);
            continue;
        }
        if let Some(s) = start.take() {
            out.push(&text[s..i]);
        }
        if !c.is_whitespace() {
            out.push(&text[i..i + c.len_utf8()]);
        }
    }
    if let Some(s) = start {
        out.push(&text[s..]);
    }
    out
}

/// A word vocabulary: the distinct [`words`] of a text, sorted, with ids.
#[derive(Clone, Debug)]
pub struct WordVocab {
    words: Vec<String>,
    ids: HashMap<String, TokenId>,
}

impl WordVocab {
    /// The distinct words of `text`. Errors when it has none.
    pub fn from_text(text: &str) -> Result<Self> {
        let mut list: Vec<String> = words(text).into_iter().map(str::to_string).collect();
        if list.is_empty() {
            return Err(Error::Empty { op: "WordVocab::from_text", arg: "text (no words)" });
        }
        list.sort_unstable();
        list.dedup();
        let ids = list.iter().enumerate().map(|(i, w)| (w.clone(), i as TokenId)).collect();
        Ok(WordVocab { words: list, ids })
    }

    /// |V|.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Never true: a vocabulary is built from at least one word.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The ids of the words of `text`; errors on a word not in the vocabulary.
    pub fn encode(&self, text: &str) -> Result<Vec<TokenId>> {
        words(text)
            .into_iter()
            .map(|w| {
                self.ids.get(w).copied().ok_or_else(|| {
                    invalid(
                        "WordVocab::encode",
                        "text",
                        format!("the word {w:?} is not in the vocabulary"),
                    )
                })
            })
            .collect()
    }

    /// Words joined by spaces, with no space before closing punctuation.
    pub fn render(&self, ids: &[TokenId]) -> String {
        let mut out = String::new();
        for &id in ids {
            let w = self.words.get(id as usize).map_or("?", String::as_str);
            if !out.is_empty() && !matches!(w, "." | "," | ";" | ":" | "!" | "?") {
                out.push(' ');
            }
            out.push_str(w);
        }
        out
    }
}
