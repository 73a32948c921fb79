//! Choosing the next token from the logits: greedy, temperature, top-k, top-p.
//!
//! With logits z over the vocabulary, sampling at temperature T draws token i with probability
//! softmax(z/T)ᵢ (D1: a larger T flattens the distribution towards the unlikely
//! tokens; as T → 0 all the mass goes to the largest logit, so T → 0 is greedy decoding, which is
//! offered as its own mode because T = 0 itself would divide by zero). Top-k keeps only the k
//! largest logits before the softmax; top-p (nucleus sampling) keeps the smallest set of most
//! likely tokens whose probabilities add up to at least p, and renormalises. Draws come from the
//! crate's seeded [`Rng`], so a seed fixes the text.

use crate::error::{Error, Result, invalid};
use crate::float::Float;
use crate::rng::Rng;

/// How the next token is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decoding {
    /// Always the most likely token (the first one on a tie).
    Greedy,
    /// A random draw from the tempered, truncated distribution.
    Sample {
        /// T > 0.
        temperature: f64,
        /// Keep only the k most likely tokens (k ≥ 1), if set.
        top_k: Option<usize>,
        /// Keep the smallest most-likely set with total probability ≥ p, p ∈ (0, 1], if set.
        top_p: Option<f64>,
    },
}

impl Decoding {
    /// Plain sampling at temperature T.
    pub fn temperature(t: f64) -> Decoding {
        Decoding::Sample { temperature: t, top_k: None, top_p: None }
    }

    /// Checks T > 0 (finite), k ≥ 1 and p ∈ (0, 1].
    pub fn validate(&self) -> Result<()> {
        const OP: &str = "Decoding";
        if let Decoding::Sample { temperature, top_k, top_p } = *self {
            if !(temperature.is_finite() && temperature > 0.0) {
                return Err(invalid(
                    OP,
                    "temperature",
                    format!(
                        "must be finite and > 0 to sample (T → 0 is greedy decoding: ask for that \
                            instead), got {temperature}"
                    ),
                ));
            }
            if top_k == Some(0) {
                return Err(invalid(OP, "top_k", "must keep at least 1 token, got 0"));
            }
            if let Some(p) = top_p
                && !(p > 0.0 && p <= 1.0)
            {
                return Err(invalid(OP, "top_p", format!("must lie in (0, 1], got {p}")));
            }
        }
        Ok(())
    }
}

/// The index of the largest logit (the first on a tie). Errors on an empty or non-finite vector.
pub fn argmax<T: Float>(logits: &[T]) -> Result<usize> {
    check_logits("argmax", logits)?;
    let mut best = 0;
    for (i, &z) in logits.iter().enumerate() {
        if z > logits[best] {
            best = i;
        }
    }
    Ok(best)
}

fn check_logits<T: Float>(op: &'static str, logits: &[T]) -> Result<()> {
    if logits.is_empty() {
        return Err(Error::Empty { op, arg: "logits" });
    }
    crate::float::ensure_finite_slice(op, "logits", logits)
}

/// The distribution a [`Decoding::Sample`] draws from, as (token, probability) pairs, most
/// likely first (ties by token id), computed in f64 with the maximum subtracted before exp.
/// For [`Decoding::Greedy`] it is the single argmax with probability 1.
pub fn distribution<T: Float>(logits: &[T], decoding: &Decoding) -> Result<Vec<(usize, f64)>> {
    const OP: &str = "distribution";
    decoding.validate()?;
    check_logits(OP, logits)?;
    let (temperature, top_k, top_p) = match *decoding {
        Decoding::Greedy => return Ok(vec![(argmax(logits)?, 1.0)]),
        Decoding::Sample { temperature, top_k, top_p } => (temperature, top_k, top_p),
    };
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].as_f64().total_cmp(&logits[a].as_f64()).then(a.cmp(&b)));
    if let Some(k) = top_k {
        order.truncate(k);
    }
    let max = logits[order[0]].as_f64();
    let weights: Vec<f64> =
        order.iter().map(|&i| ((logits[i].as_f64() - max) / temperature).exp()).collect();
    let total: f64 = weights.iter().sum();
    let mut dist: Vec<(usize, f64)> =
        order.into_iter().zip(weights.into_iter().map(|w| w / total)).collect();
    if let Some(p) = top_p {
        let mut cumulative = 0.0;
        let mut keep = dist.len();
        for (n, (_, q)) in dist.iter().enumerate() {
            cumulative += q;
            // Rounding may leave the total a hair under 1: p = 1 keeps everything.
            if cumulative >= p && p < 1.0 {
                keep = n + 1;
                break;
            }
        }
        dist.truncate(keep);
        let kept: f64 = dist.iter().map(|(_, q)| q).sum();
        for (_, q) in dist.iter_mut() {
            *q /= kept;
        }
    }
    Ok(dist)
}

/// Picks the next token: the argmax, or one draw u ~ U[0, 1) from [`distribution`] (the first
/// token whose cumulative probability exceeds u).
pub fn choose<T: Float>(logits: &[T], decoding: &Decoding, rng: &mut Rng) -> Result<usize> {
    let dist = distribution(logits, decoding)?;
    if matches!(decoding, Decoding::Greedy) {
        return Ok(dist[0].0);
    }
    let u = rng.next_f64();
    let mut cumulative = 0.0;
    for &(token, q) in &dist {
        cumulative += q;
        if u < cumulative {
            return Ok(token);
        }
    }
    // u fell in the rounding gap above the last cumulative sum: the last kept token.
    Ok(dist[dist.len() - 1].0)
}

// ───────────────────────────── generating text ─────────────────────────────

use super::config::Config;
use super::data::{Token, check_ids};
use super::model::{Gpt, KvCache};

/// What [`generate`] produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generated {
    /// The prompt (as the model saw it, after cropping) followed by the new tokens.
    pub tokens: Vec<Token>,
    /// How many of `tokens` are the prompt.
    pub prompt_len: usize,
    /// Tokens dropped from the front of a prompt longer than the context.
    pub cropped: usize,
    /// How often the window slid and the key/value cache was rebuilt.
    pub rebuilds: usize,
}

impl Generated {
    /// The new tokens only.
    pub fn new_tokens(&self) -> &[Token] {
        &self.tokens[self.prompt_len..]
    }
}

impl<T: Float> Gpt<T> {
    /// Runs the full forward pass over `tokens` (at most n_ctx of them) and returns a cache
    /// holding every block's keys and values, and the logits of the last position: by the fused
    /// forward pass ([`super::fast::FusedStep::prefill`]) when it covers the model, else by the
    /// reference one.
    pub fn prefill(&self, tokens: &[Token]) -> Result<(KvCache<T>, Vec<T>)> {
        super::fast::Windows::new(self).prefill(tokens)
    }

    /// [`Gpt::prefill`] by the reference forward pass (chapter 6's functions).
    pub fn reference_prefill(&self, tokens: &[Token]) -> Result<(KvCache<T>, Vec<T>)> {
        let cache = self.forward(tokens, tokens.len())?;
        let mut kv = self.new_kv_cache();
        let (t, d) = (tokens.len(), self.config.width);
        for (qkv, bc) in kv.qkv.iter_mut().zip(&cache.blocks) {
            for (part, m) in [&bc.attn.q, &bc.attn.k, &bc.attn.v].into_iter().enumerate() {
                qkv.view_mut((0, part * d), (t, d)).copy_from(m);
            }
        }
        kv.len = tokens.len();
        let last = cache.hidden.rows(tokens.len() - 1, 1).into_owned();
        Ok((kv, self.logits_of(&last)?.iter().copied().collect()))
    }

    /// The logits of the last position by the full forward pass over `tokens` (no cache): the
    /// fused forward pass ([`super::fast::FusedStep::last_logits`]) when it covers the model, else
    /// the reference one. A test holds the two to 10⁻¹² in f64.
    pub fn last_logits(&self, tokens: &[Token]) -> Result<Vec<T>> {
        super::fast::Windows::new(self).last_logits(tokens)
    }

    /// [`Gpt::last_logits`] by the reference forward pass (chapter 6's functions).
    pub fn reference_last_logits(&self, tokens: &[Token]) -> Result<Vec<T>> {
        let cache = self.forward(tokens, tokens.len())?;
        let last = cache.hidden.rows(tokens.len() - 1, 1).into_owned();
        Ok(self.logits_of(&last)?.iter().copied().collect())
    }
}

/// A model generation runs ([`generate_with`]): the full forward pass over a window
/// ([`Generator::last_logits`]), a key/value cache of one ([`Generator::prefill`]) and the
/// cached step ([`Generator::step`]), each as [`Gpt::last_logits`], [`Gpt::prefill`] and
/// [`Gpt::step`] define them. Chapter 9's f32 model is one ([`generate`]); another storage of
/// the same weights, whose step reads them as stored, is another; so is a model of a later
/// chapter with a cache of its own ([`Generator::Cache`]).
pub trait Generator<T: Float> {
    /// The key/value cache the step reads and extends (chapter 9's [`KvCache`] for GPT-2).
    type Cache;

    /// V, the token ids the model reads.
    fn vocab_size(&self) -> usize;

    /// n_ctx, the longest window.
    fn context(&self) -> usize;

    /// Whether the cached step covers the model (pre-LN blocks); else every token runs
    /// [`Generator::last_logits`] over the window.
    fn cached(&self) -> bool {
        true
    }

    /// The tokens a cache holds.
    fn cache_len(cache: &Self::Cache) -> usize;

    /// A cache of `tokens` (1 … n_ctx of them) and the logits of the last.
    fn prefill(&mut self, tokens: &[Token]) -> Result<(Self::Cache, Vec<T>)>;

    /// The logits of the last of `tokens` (1 … n_ctx of them), without a cache.
    fn last_logits(&mut self, tokens: &[Token]) -> Result<Vec<T>>;

    /// Feeds `token` at the cache's next position and returns its logits; errors when the
    /// cache is full.
    fn step(&mut self, cache: &mut Self::Cache, token: Token) -> Result<Vec<T>>;
}

/// Chapter 9's model as a [`Generator`]: its fused forward pass over each window (one workspace
/// for every window) and its cached step.
struct Windowed<'m, T: Float> {
    model: &'m Gpt<T>,
    pass: super::fast::Windows<'m, T>,
}

impl<T: Float> Windowed<'_, T> {
    /// The model's configuration.
    fn config(&self) -> &Config {
        &self.model.config
    }
}

impl<T: Float> Generator<T> for Windowed<'_, T> {
    type Cache = KvCache<T>;

    fn vocab_size(&self) -> usize {
        self.config().vocab_size
    }

    fn context(&self) -> usize {
        self.config().context
    }

    fn cache_len(cache: &KvCache<T>) -> usize {
        cache.len
    }

    /// The cached step covers pre-LN blocks (every model built by `Gpt::new` or loaded); a
    /// model assembled by hand with post-LN blocks runs the full forward pass at every step.
    fn cached(&self) -> bool {
        self.model.blocks.iter().all(|b| b.order == crate::ch06_attention::NormOrder::Pre)
    }

    fn prefill(&mut self, tokens: &[Token]) -> Result<(KvCache<T>, Vec<T>)> {
        self.pass.prefill(tokens)
    }

    fn last_logits(&mut self, tokens: &[Token]) -> Result<Vec<T>> {
        self.pass.last_logits(tokens)
    }

    fn step(&mut self, cache: &mut KvCache<T>, token: Token) -> Result<Vec<T>> {
        self.model.step(cache, token)
    }
}

/// Generates `max_new` tokens after `prompt` with chapter 9's model: [`generate_with`] on its
/// fused forward pass and cached step.
pub fn generate<T: Float>(
    model: &Gpt<T>,
    prompt: &[Token],
    max_new: usize,
    decoding: &Decoding,
    rng: &mut Rng,
    use_cache: bool,
) -> Result<Generated> {
    let mut windowed = Windowed { model, pass: super::fast::Windows::new(model) };
    generate_with(&mut windowed, prompt, max_new, decoding, rng, use_cache)
}

/// Generates `max_new` tokens after `prompt` with `model`.
///
/// A prompt longer than the context n_ctx is cropped to its last n_ctx tokens (reported in
/// [`Generated::cropped`]). With `use_cache`, the prompt fills a key/value cache in one forward
/// pass and each new token costs one [`Generator::step`]. Once the sequence fills the whole
/// context, the next position does not exist (there are only n_ctx position rows), so the window
/// slides: the model keeps the last n_ctx tokens, which now sit at positions 0 … n_ctx − 1, one
/// earlier than before. Every cached key and value was computed at the old positions, so the
/// cache is rebuilt from the window by a full forward pass (counted in [`Generated::rebuilds`]);
/// from then on every step slides and rebuilds, and the cached path costs what the uncached one
/// does. Without the cache, every step runs the full forward pass over the window. Both paths
/// choose the same tokens from the same `rng`.
pub fn generate_with<T: Float, G: Generator<T>>(
    model: &mut G,
    prompt: &[Token],
    max_new: usize,
    decoding: &Decoding,
    rng: &mut Rng,
    use_cache: bool,
) -> Result<Generated> {
    const OP: &str = "generate";
    decoding.validate()?;
    if prompt.is_empty() {
        return Err(Error::Empty {
            op: OP,
            arg: "prompt (the model needs at least one token to continue)",
        });
    }
    check_ids(OP, "prompt", prompt, model.vocab_size())?;
    let n_ctx = model.context();
    let cropped = prompt.len().saturating_sub(n_ctx);
    let mut tokens: Vec<Token> = prompt[cropped..].to_vec();
    let prompt_len = tokens.len();
    let mut rebuilds = 0;
    let mut cache: Option<G::Cache> = None;
    let mut logits = if use_cache && model.cached() {
        let (kv, z) = model.prefill(&tokens)?;
        cache = Some(kv);
        z
    } else {
        model.last_logits(&tokens)?
    };
    for produced in 0..max_new {
        let next = choose(&logits, decoding, rng)? as Token;
        tokens.push(next);
        if produced + 1 == max_new {
            break;
        }
        let window = &tokens[tokens.len().saturating_sub(n_ctx)..];
        logits = match cache.as_mut() {
            Some(kv) if G::cache_len(kv) < n_ctx => model.step(kv, next)?,
            Some(kv) => {
                let (fresh, z) = model.prefill(window)?;
                *kv = fresh;
                rebuilds += 1;
                z
            }
            None => model.last_logits(window)?,
        };
    }
    Ok(Generated { tokens, prompt_len, cropped, rebuilds })
}
