//! Sizes bounded before anything is allocated: what a model of a configuration costs in memory,
//! and the budget it must fit.
//!
//! A run holds four copies of every parameter in `f32` (the weights, their gradients, and
//! AdamW's two moments: 16 bytes a parameter) and, for a batch of B sequences of T tokens, the
//! activations of the forward pass kept for the backward one. Per block and row of width d these
//! are the LayerNorm inputs and outputs, Q, K, V, the attention output and projection, and the
//! MLP's 4d-wide pre- and post-activation: about 20·d numbers, plus the h×T attention weights of
//! each head; then the logits and their gradient, 2·V per row. So
//!
//! ```text
//! bytes ≈ 16·P + 4·B·T·(l·(20·d + 2·h·T) + 2·V)        P = the parameter count
//! ```
//!
//! computed in 128-bit integers, so no absurd size (10¹⁸ layers included) can
//! overflow. It is an estimate of the order of magnitude, not an exact count: its job is to
//! refuse, with a clear message, a run that could not fit, before a single tensor exists.
//!
//! The budget is, in order: the command's `--memory-budget BYTES`, the variable
//! [`BUDGET_VARIABLE`], the `MemAvailable` line of `/proc/meminfo` (Linux), or
//! [`DEFAULT_BUDGET`].

use crate::ch09_gpt::config::{Config, Positions};
use crate::ch09_gpt::model::parameters_saturating;
use crate::error::{Result, invalid};

/// The variable that sets the memory budget in bytes (the flag `--memory-budget` wins over it).
pub const BUDGET_VARIABLE: &str = "LLM_WORKBOOK_MEMORY_BUDGET";

/// The budget when neither flag, variable nor `/proc/meminfo` gives one: 8 GiB.
pub const DEFAULT_BUDGET: u64 = 8 << 30;

/// Products and sums that stop at `u128::MAX` instead of overflowing.
fn mul(factors: &[u128]) -> u128 {
    factors.iter().fold(1u128, |p, &f| p.saturating_mul(f))
}

fn sum(terms: &[u128]) -> u128 {
    terms.iter().fold(0u128, |s, &t| s.saturating_add(t))
}

/// The parameter count of `c`, in 128-bit integers (saturating: never overflows), by the
/// parameter table ([`parameters_saturating`]).
pub fn parameters(c: &Config) -> u128 {
    parameters_saturating(c)
}

/// The estimated bytes of a run of `c` on batches of `batch` sequences of `tokens` tokens (see
/// the module's formula), saturating at `u128::MAX`.
pub fn estimate_bytes(c: &Config, batch: usize, tokens: usize) -> u128 {
    let (b, t) = (batch as u128, tokens as u128);
    let (l, d, h, v) = (c.layers as u128, c.width as u128, c.heads as u128, c.vocab_size as u128);
    let sinusoid =
        if c.positions == Positions::Sinusoidal { mul(&[c.context as u128, d]) } else { 0 };
    let per_block = sum(&[mul(&[20, d]), mul(&[2, h, t])]);
    let per_row = sum(&[mul(&[l, per_block]), mul(&[2, v])]);
    sum(&[mul(&[16, parameters(c)]), mul(&[4, sinusoid]), mul(&[4, b, t, per_row])])
}

/// The memory budget: `flag` if given, else [`BUDGET_VARIABLE`], else `MemAvailable` from
/// `/proc/meminfo`, else [`DEFAULT_BUDGET`]. A variable that is not a whole number is an error
/// naming it.
pub fn budget(flag: Option<u64>) -> Result<u64> {
    if let Some(b) = flag {
        return Ok(b);
    }
    if let Ok(text) = std::env::var(BUDGET_VARIABLE) {
        return text.trim().parse::<u64>().map_err(|_| {
            invalid("memory budget", BUDGET_VARIABLE, format!("{text:?} is not a number of bytes"))
        });
    }
    Ok(available_memory().unwrap_or(DEFAULT_BUDGET))
}

/// `MemAvailable` of `/proc/meminfo` in bytes, where there is one.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Refuses a run of `c` on `batch` × `tokens` whose estimate exceeds `budget`, naming the flag
/// `flag` (the setting a user would change) and the bytes the run would need (the estimate
/// counts weights, gradients, AdamW's moments and the activations), in one short line.
pub fn check(
    c: &Config,
    batch: usize,
    tokens: usize,
    budget: u64,
    flag: &'static str,
) -> Result<()> {
    let need = estimate_bytes(c, batch, tokens);
    if need > u128::from(budget) {
        // An absurd size saturates at 2^128 − 1: its 39 digits would say less than 3.4e38.
        let need =
            if need < COMPACT_FROM { need.to_string() } else { format!("{:.1e}", need as f64) };
        let over = if flag == BUDGET_FLAG {
            format!("{budget} bytes")
        } else {
            format!("{BUDGET_FLAG} {budget}")
        };
        let reason = format!("needs {need} bytes for {batch}×{tokens} tokens, over {over}");
        return Err(crate::error::Error::Parse { file: flag.to_string(), line: None, reason });
    }
    Ok(())
}

// ───────────────────────────── sampling ─────────────────────────────

/// The estimated bytes of sampling from a model of `c` whose weights occupy `weight_bytes` as
/// stored (f32, or bf16 or blocks for the block matrices: chapter 11's
/// [`stored_bytes`](crate::ch11_precision::quant::stored_bytes)): the weights twice
/// ([`FILE_BYTES_PER_BYTE`]: the file's bytes and the model built from them are held at once),
/// the key/value cache (l·n_ctx·3d values) and one step's rows (about 20·d + 2·V + h·n_ctx
/// values), 4 bytes a value. Sampling never widens stored weights, so a model in 4-bit blocks
/// needs about a sixth of its f32 bytes. Saturating at `u128::MAX`.
pub fn sampling_bytes(c: &Config, weight_bytes: u128) -> u128 {
    let (l, d, h, v) = (c.layers as u128, c.width as u128, c.heads as u128, c.vocab_size as u128);
    let n_ctx = c.context as u128;
    let cache = mul(&[l, n_ctx, 3, d]);
    let rows = sum(&[mul(&[20, d]), mul(&[2, v]), mul(&[h, n_ctx])]);
    sum(&[mul(&[u128::from(FILE_BYTES_PER_BYTE), weight_bytes]), mul(&[4, sum(&[cache, rows])])])
}

/// Refuses sampling a model of `c` whose weights occupy `weight_bytes` as stored in `storage`
/// (its name) when [`sampling_bytes`] exceeds `budget`, in one short line naming
/// `--memory-budget` and the bytes needed.
pub fn check_sampling(c: &Config, storage: &str, weight_bytes: u128, budget: u64) -> Result<()> {
    let need = sampling_bytes(c, weight_bytes);
    if need > u128::from(budget) {
        let need =
            if need < COMPACT_FROM { need.to_string() } else { format!("{:.1e}", need as f64) };
        let reason =
            format!("needs {need} bytes to sample this {storage} model, over {budget} bytes");
        return Err(crate::error::Error::Parse {
            file: BUDGET_FLAG.to_string(),
            line: None,
            reason,
        });
    }
    Ok(())
}

// ───────────────────────────── the text and the files ─────────────────────────────

/// Bytes of memory a text costs per byte of it while it is held and encoded: the text, the
/// token ids (4 bytes a token, at most one token a byte) and the tokenizer's work. Measured on
/// a 200 MB text with the character tokenizer: a peak of 1.8 GB, 9 bytes a byte.
pub const TEXT_BYTES_PER_BYTE: u64 = 9;
/// The same while a byte-level BPE is trained on the text (its pair counts and merge lists
/// come on top): a peak of 5.1 GB on the same 200 MB, 26 bytes a byte.
pub const BPE_TEXT_BYTES_PER_BYTE: u64 = 26;
/// Bytes of memory a checkpoint file costs per byte of it while it is read: its bytes, and the
/// tensors or tables built from them, about as large again.
pub const FILE_BYTES_PER_BYTE: u64 = 2;

/// The bytes of memory a text of `len` bytes costs ([`TEXT_BYTES_PER_BYTE`], or
/// [`BPE_TEXT_BYTES_PER_BYTE`] when a BPE is trained on it).
pub fn text_bytes(len: usize, bpe_training: bool) -> u128 {
    let per = if bpe_training { BPE_TEXT_BYTES_PER_BYTE } else { TEXT_BYTES_PER_BYTE };
    mul(&[len as u128, u128::from(per)])
}

/// [`check`] with the text's memory counted too: a text of `text_len` bytes, encoded (and, with
/// `bpe_training`, a BPE trained on it) beside the run of `c`.
pub fn check_with_text(
    c: &Config,
    batch: usize,
    tokens: usize,
    text_len: usize,
    bpe_training: bool,
    budget: u64,
) -> Result<()> {
    let text = text_bytes(text_len, bpe_training);
    let rest = u64::try_from(u128::from(budget).saturating_sub(text)).unwrap_or(u64::MAX);
    if text > u128::from(budget) {
        let what = format!("a text of {text_len} bytes needs about {text} bytes of memory");
        return Err(too_large("--data", "text", what, budget));
    }
    check(c, batch, tokens, rest, "--memory-budget")
}

/// The one-line refusal of `file` (a path, or a word for what it is), for which `what` needs
/// more than the memory `budget`; `flag` names where it came from when that is not the budget
/// itself (`--data`). Short, for the file's name may be long: the budget and its flag, the size.
fn too_large(flag: &'static str, file: &str, what: String, budget: u64) -> crate::error::Error {
    let from = if flag == BUDGET_FLAG { String::new() } else { format!(" ({flag})") };
    let reason = format!("{what}, over --memory-budget {budget}{from}");
    crate::error::Error::Parse { file: file.to_string(), line: None, reason }
}

/// Needs from this many bytes on are written as 1.2e15: one line holds them.
const COMPACT_FROM: u128 = 10_000_000_000_000;

/// The flag that sets the memory budget.
pub const BUDGET_FLAG: &str = "--memory-budget";

/// Whether `e` is a refusal by the memory budget ([`read_file`], [`check_with_text`]).
pub fn is_over_budget(e: &crate::error::Error) -> bool {
    match e {
        crate::error::Error::Parse { file, reason, .. } => {
            file == BUDGET_FLAG || reason.contains(BUDGET_FLAG)
        }
        _ => false,
    }
}

/// Reads the file at `path`, whose every byte costs `per_byte` bytes of memory once loaded,
/// within `budget` (bytes): a regular file larger than `budget / per_byte` is refused before a
/// byte is read, naming `flag` and the file; anything else (a pipe, `/dev/zero`) is read up to
/// that limit and refused past it (by [`read_at_most`](crate::ch09_gpt::checkpoint::read_at_most)).
pub fn read_file(
    path: &std::path::Path,
    per_byte: u64,
    budget: u64,
    flag: &'static str,
) -> Result<Vec<u8>> {
    use crate::ch09_gpt::checkpoint::{TooLong, read_at_most};
    let limit = budget / per_byte.max(1);
    let name = path.display();
    match read_at_most(path, limit)? {
        Ok(bytes) => Ok(bytes),
        Err(TooLong::File(len)) => {
            let what = format!("{len} bytes (×{per_byte})");
            Err(too_large(flag, &name.to_string(), what, budget))
        }
        Err(TooLong::Stream) => {
            let what = "not a regular file, and more".to_string();
            Err(too_large(flag, &name.to_string(), what, budget))
        }
    }
}

/// A file of a checkpoint folder (`config.json`, `train.json`, the tokenizer's, the weights),
/// read within the memory `budget` ([`read_file`] at [`FILE_BYTES_PER_BYTE`], naming
/// `--memory-budget`): every read of a checkpoint's files goes through it.
pub fn read_checkpoint_file(path: &std::path::Path, budget: u64) -> Result<Vec<u8>> {
    read_file(path, FILE_BYTES_PER_BYTE, budget, "--memory-budget")
}
