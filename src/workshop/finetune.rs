//! The reader's own examples for `gpt finetune`: a JSON Lines file read strictly, its characters
//! added to a character tokenizer's vocabulary, and the fine-tuning batches built from it.
//!
//! One example a line, in one of two kinds, which the first example's keys choose (every later
//! line must be of the same kind; blank lines are skipped):
//!
//! ```text
//! {"prompt": "12+7=", "answer": "19"}                          supervised fine-tuning (SFT)
//! {"prompt": "12+7=", "chosen": "19", "rejected": "18"}        preferences (DPO)
//! ```
//!
//! Our tokenizers have no end-of-text token, so an answer ends with an end marker (a newline by
//! default) appended to every answer, chosen and rejected: the model learns to write it, and a
//! reply is read up to it (`gpt sample --stop`). An answer may not hold the marker itself.
//!
//! An example of prompt tokens p₁…p_P and answer tokens a₁…a_A (the marker included) is one row
//! of a batch: the inputs are the whole sequence but its last token, the target at each position
//! the token after it, and only the answer's targets are scored (the prompt is masked, chapter
//! 13): L = −(1/S) Σ over the S answer positions of the batch of ln p(a_j | p, a_<j). Rows are
//! padded at their end to the file's longest example; padding is never scored and, attention
//! being causal, never seen by an earlier position.
//!
//! A character tokenizer trained on prose lacks characters such a file uses (`+`, `=`, digits):
//! they are added to the vocabulary ([`extend_vocabulary`]), which stays sorted, so the old
//! rows of W_E (and of W_U when it is a tensor of its own) move to their characters' new ids and
//! each new character gets a new row: the mean of the old rows plus N(0, 0.02²) noise, so it
//! starts as an average token, not a favourite, and the new rows differ. A byte-level BPE spells
//! any text with its bytes and needs nothing new.

use crate::ch08_tokens::Tokenizer;
use crate::ch08_tokens::chars::CharTokenizer;
use crate::ch09_gpt::data::{Batch, Token};
use crate::ch09_gpt::model::{Gpt, INIT_STD, Param};
use crate::error::{Error, Result, invalid, without_position};
use crate::rng::Rng;
use nalgebra::DMatrix;

/// The end marker appended to every answer when none is asked for: a newline.
pub const DEFAULT_END: &str = "\n";

/// The standard deviation of the noise on a new character's embedding row (GPT-2's initial
/// weights').
pub const NEW_ROW_STD: f64 = INIT_STD;

/// Which kind of file: answers, or pairs of a better and a worse answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `{"prompt", "answer"}`: supervised fine-tuning on the answer's tokens.
    Sft,
    /// `{"prompt", "chosen", "rejected"}`: direct preference optimisation.
    Dpo,
}

impl Mode {
    /// Its name as `finetune.json` records it and messages say it: `SFT` or `DPO`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sft => "SFT",
            Mode::Dpo => "DPO",
        }
    }
}

/// One example as text, the end marker already appended to its answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its line in the file, from 1.
    pub line: usize,
    /// The prompt.
    pub prompt: String,
    /// The answer (SFT) or the chosen answer (DPO), the end marker appended.
    pub answer: String,
    /// The rejected answer, the end marker appended (DPO only).
    pub rejected: Option<String>,
}

/// The keys a line may hold.
const KEYS: [&str; 4] = ["prompt", "answer", "chosen", "rejected"];

/// Reads a JSON Lines file's bytes (`file` names it in errors) with the answers' end marker
/// `end`: the mode the first example's keys choose and every example. A bad line is refused in
/// one line naming the file, the line and what is wrong: not UTF-8, not JSON, not an object, an
/// unknown or missing key, a value that is not a string, an empty prompt or answer, an answer
/// holding `end`, a chosen answer equal to the rejected one, or a line of the other kind. A file
/// with no example is refused too.
pub fn parse_examples(bytes: &[u8], file: &str, end: &str) -> Result<(Mode, Vec<Record>)> {
    let at = |line: usize, reason: String| Error::Parse {
        file: file.to_string(),
        line: Some(line),
        reason,
    };
    if end.is_empty() {
        return Err(invalid("gpt finetune", "--end", "the end marker must not be empty"));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = 1 + bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count();
        at(line, "is not UTF-8".into())
    })?;
    let mut mode: Option<(Mode, usize)> = None;
    let mut records = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        let line = i + 1;
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        if raw.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(raw)
            .map_err(|e| at(line, format!("not JSON ({})", without_position(&e.to_string()))))?;
        let serde_json::Value::Object(map) = value else {
            return Err(at(line, "not a JSON object {\"prompt\": …, \"answer\": …}".into()));
        };
        if let Some(key) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
            let reason =
                format!("unknown key {key:?}; give prompt and answer (or chosen, rejected)");
            return Err(at(line, reason));
        }
        let has = |k: &str| map.contains_key(k);
        let kind = match (has("answer"), has("chosen") || has("rejected")) {
            (true, true) => {
                let reason = "mixes \"answer\" with \"chosen\"/\"rejected\"; give one kind";
                return Err(at(line, reason.into()));
            }
            (true, false) => Mode::Sft,
            (false, true) => Mode::Dpo,
            (false, false) => return Err(at(line, "missing key \"answer\"".into())),
        };
        match mode {
            None => mode = Some((kind, line)),
            Some((first, first_line)) if first != kind => {
                let reason = format!(
                    "{} keys in a file of {} lines (line {first_line} chose the kind)",
                    kind.name(),
                    first.name()
                );
                return Err(at(line, reason));
            }
            Some(_) => {}
        }
        let text_of = |key: &str| -> Result<String> {
            match map.get(key) {
                None => Err(at(line, format!("missing key {key:?}"))),
                Some(serde_json::Value::String(s)) if s.is_empty() => {
                    Err(at(line, format!("empty {key:?}")))
                }
                Some(serde_json::Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(at(line, format!("{key:?} is not a string"))),
            }
        };
        let prompt = text_of("prompt")?;
        let answer_of = |key: &str| -> Result<String> {
            let a = text_of(key)?;
            if a.contains(end) {
                let reason = format!("{key:?} holds the end marker {end:?}, which ends an answer");
                return Err(at(line, reason));
            }
            Ok(format!("{a}{end}"))
        };
        let record = match kind {
            Mode::Sft => Record { line, prompt, answer: answer_of("answer")?, rejected: None },
            Mode::Dpo => {
                let (chosen, rejected) = (answer_of("chosen")?, answer_of("rejected")?);
                if chosen == rejected {
                    return Err(at(line, "\"chosen\" and \"rejected\" are the same answer".into()));
                }
                Record { line, prompt, answer: chosen, rejected: Some(rejected) }
            }
        };
        records.push(record);
    }
    match mode {
        Some((mode, _)) => Ok((mode, records)),
        None => Err(Error::Parse {
            file: file.to_string(),
            line: None,
            reason: "holds no example (one {\"prompt\": …, \"answer\": …} a line)".into(),
        }),
    }
}

// ───────────────────────────── the vocabulary ─────────────────────────────

/// The characters of `records` (prompts and answers, end markers included) that `tok` lacks, in
/// code-point order.
pub fn missing_characters(tok: &CharTokenizer, records: &[Record]) -> Vec<char> {
    let mut new: Vec<char> = records
        .iter()
        .flat_map(|r| {
            let rejected = r.rejected.as_deref().unwrap_or("");
            r.prompt.chars().chain(r.answer.chars()).chain(rejected.chars())
        })
        .filter(|&c| tok.id(c).is_none())
        .collect();
    new.sort_unstable();
    new.dedup();
    new
}

/// Adds the characters `added` (none of them in `tok`) to `tok`'s vocabulary and to `model`:
/// the vocabulary stays in code-point order, so each old row of W_E (and of W_U when untied)
/// moves to its character's new id, and each added character gets a row of its own, the mean
/// of the old rows plus N(0, [`NEW_ROW_STD`]²) noise drawn with `seed`. Returns the extended
/// tokenizer and the new ids of the added characters. The model's V becomes the tokenizer's.
/// Errors when the model's V is not the tokenizer's size (rows no character names would be
/// lost) or `added` holds a character `tok` has.
pub fn extend_vocabulary(
    model: &mut Gpt<f32>,
    tok: &CharTokenizer,
    added: &[char],
    seed: u64,
) -> Result<(CharTokenizer, Vec<usize>)> {
    const OP: &str = "extend_vocabulary";
    let old = tok.chars();
    if model.config.vocab_size != old.len() {
        let reason = format!(
            "the model has {} token rows for a vocabulary of {} characters",
            model.config.vocab_size,
            old.len()
        );
        return Err(invalid(OP, "--checkpoint", reason));
    }
    if let Some(c) = added.iter().find(|&&c| tok.id(c).is_some()) {
        return Err(invalid(OP, "added", format!("{c:?} is in the vocabulary already")));
    }
    let all: String = old.iter().chain(added).collect();
    let extended = CharTokenizer::from_text(&all)?;
    let new_ids: Vec<usize> =
        added.iter().filter_map(|&c| extended.id(c)).map(|id| id as usize).collect();
    let mut rng = Rng::new(seed);
    let mut grow = |m: &DMatrix<f32>| -> DMatrix<f32> {
        let d = m.ncols();
        let mean: Vec<f64> =
            (0..d).map(|j| m.column(j).iter().map(|&x| f64::from(x)).sum::<f64>()).collect();
        let rows = m.nrows().max(1) as f64;
        let mut out = DMatrix::<f32>::zeros(extended.vocab_size(), d);
        for (id, &c) in extended.chars().iter().enumerate() {
            match tok.id(c) {
                Some(old_id) => out.row_mut(id).copy_from(&m.row(old_id as usize)),
                None => {
                    for (j, mean_j) in mean.iter().enumerate() {
                        out[(id, j)] = (mean_j / rows + NEW_ROW_STD * rng.normal()) as f32;
                    }
                }
            }
        }
        out
    };
    let wte = grow(model.wte());
    let lm_head = model.lm_head().map(&mut grow);
    if let Some(w) = model.params.get_mut(Param::Wte, None) {
        *w = wte;
    }
    if let (Some(h), Some(w)) = (lm_head, model.params.get_mut(Param::LmHead, None)) {
        *w = h;
    }
    model.config.vocab_size = extended.vocab_size();
    Ok((extended, new_ids))
}

// ───────────────────────────── examples as tokens ─────────────────────────────

/// One example as token ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Example {
    /// Its line in the file, from 1.
    pub line: usize,
    /// The prompt's ids.
    pub prompt: Vec<Token>,
    /// The answer's (SFT) or the chosen answer's (DPO) ids, the end marker's included.
    pub answer: Vec<Token>,
    /// The rejected answer's ids (DPO).
    pub rejected: Option<Vec<Token>>,
}

impl Example {
    /// The inputs of the longest row it makes: prompt and longer answer, less the last token.
    pub fn row_len(&self) -> usize {
        let longest = self.answer.len().max(self.rejected.as_ref().map_or(0, Vec::len));
        self.prompt.len() + longest - 1
    }
}

/// `records` as ids of `tok` (prompt and answers encoded apart, so the mask falls between them
/// whatever the tokenizer), each refused, naming `file` and its line, when one of its rows is
/// longer than the model's `context` (prompt plus answer may be `context` + 1 tokens: the last
/// is only a target).
pub fn encode_examples(
    tok: &dyn Tokenizer,
    records: &[Record],
    context: usize,
    file: &str,
) -> Result<Vec<Example>> {
    let at = |line: usize, reason: String| Error::Parse {
        file: file.to_string(),
        line: Some(line),
        reason,
    };
    records
        .iter()
        .map(|r| {
            let encode = |text: &str| tok.encode(text).map_err(|e| at(r.line, e.to_string()));
            let example = Example {
                line: r.line,
                prompt: encode(&r.prompt)?,
                answer: encode(&r.answer)?,
                rejected: r.rejected.as_deref().map(encode).transpose()?,
            };
            let tokens = example.row_len() + 1;
            if tokens > context + 1 {
                let most = context + 1;
                let reason = format!(
                    "{tokens} tokens; the model's context of {context} takes {most} (the last a \
                     target)"
                );
                return Err(at(r.line, reason));
            }
            Ok(example)
        })
        .collect()
}

/// The longest row of `examples` (see [`Example::row_len`]): the T of every batch.
pub fn seq_len(examples: &[Example]) -> usize {
    examples.iter().map(Example::row_len).max().unwrap_or(1).max(1)
}

/// One row of T = `seq_len` positions for `prompt` then `answer`: inputs the sequence but its
/// last token, padded with `pad`; the target at position t is token t + 1 where that token is
/// the answer's, else `None` (the prompt masked, the padding unscored).
pub fn row(
    prompt: &[Token],
    answer: &[Token],
    seq_len: usize,
    pad: Token,
) -> (Vec<Token>, Vec<Option<Token>>) {
    let whole: Vec<Token> = prompt.iter().chain(answer).copied().collect();
    let mut inputs = whole[..whole.len() - 1].to_vec();
    let mut targets: Vec<Option<Token>> =
        (0..inputs.len()).map(|t| (t + 1 >= prompt.len()).then(|| whole[t + 1])).collect();
    inputs.resize(seq_len, pad);
    targets.resize(seq_len, None);
    (inputs, targets)
}

/// The batch of `picks` (indices into `examples`): one row each of its answer (SFT), or, with
/// `pairs`, two rows each, row 2i its chosen answer and row 2i + 1 its rejected one (DPO: the
/// layout chapter 13's [`pair_sums`] and [`dpo_weights`] read); T = `seq_len`, padded with
/// token 0.
///
/// [`pair_sums`]: crate::ch13_finetune::feedback::pair_sums
/// [`dpo_weights`]: crate::ch13_finetune::feedback::dpo_weights
pub fn batch_of(examples: &[Example], picks: &[usize], seq_len: usize, pairs: bool) -> Batch {
    let (mut inputs, mut targets) = (Vec::new(), Vec::new());
    let mut push = |answer: &[Token], prompt: &[Token]| {
        let (i, t) = row(prompt, answer, seq_len, 0);
        inputs.extend(i);
        targets.extend(t);
    };
    for &p in picks {
        let e = &examples[p];
        push(&e.answer, &e.prompt);
        if pairs {
            push(e.rejected.as_deref().unwrap_or(&e.answer), &e.prompt);
        }
    }
    let rows = if pairs { 2 * picks.len() } else { picks.len() };
    Batch { inputs, targets, batch: rows, seq_len }
}

/// `batch` indices below `n` drawn uniformly with replacement by `rng`.
pub fn draw(n: usize, batch: usize, rng: &mut Rng) -> Vec<usize> {
    (0..batch).map(|_| rng.below(n)).collect()
}

/// Whether `reply` (text a model wrote after a prompt) is `answer` (the end marker `end`
/// appended): its text up to and including the first `end` is `answer` exactly. A reply that
/// never writes the marker is wrong.
pub fn is_exact(answer: &str, reply: &str, end: &str) -> bool {
    match reply.find(end) {
        Some(at) => reply[..at + end.len()] == *answer,
        None => false,
    }
}

/// `reply` up to (not including) the first `end`, or all of it when it holds none.
pub fn cut_at(reply: &str, end: &str) -> String {
    if end.is_empty() {
        return reply.to_string();
    }
    reply.find(end).map_or(reply, |at| &reply[..at]).to_string()
}

/// `text` with the escapes a shell leaves as typed read as the characters they name: `\n` a
/// newline, `\t` a tab, `\r` a carriage return, `\\` a backslash (any other backslash stays).
/// So `--end '\n'` and `--end $'\n'` both give a newline.
pub fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('\\') => out.push('\\'),
            Some(other) => out.extend(['\\', other]),
            None => out.push('\\'),
        }
    }
    out
}

/// What `model` writes greedily after each example's prompt, decoded by `tok`: up to twice the
/// answer's tokens (room for an answer spelled in other tokens), read as text.
pub fn replies(model: &Gpt<f32>, tok: &dyn Tokenizer, examples: &[Example]) -> Result<Vec<String>> {
    use crate::ch09_gpt::sample::{Decoding, generate};
    let mut rng = Rng::new(0); // greedy decoding draws nothing
    examples
        .iter()
        .map(|e| {
            let g =
                generate(model, &e.prompt, 2 * e.answer.len(), &Decoding::Greedy, &mut rng, true)?;
            tok.decode_lossy(g.new_tokens())
        })
        .collect()
}
