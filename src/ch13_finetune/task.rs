//! The chapter's task: addition written as text, a prompt and an answer a rule can check.
//!
//! A problem is two numbers a, b below 10^n ([`Format::digits`]), each written in n places with
//! its leading zeros; its prompt is `a+b=` and its answer the sum in n + 1 places followed by a
//! newline (or, [`Format::reversed`], the sum's digits units first, the order carries travel in):
//!
//! ```text
//! prompt "07+58="   answer "065\n"       one line of text: "07+58=065\n"
//! ```
//!
//! Every line has the same length, 3n + 4 characters, so a character's place in its line says
//! which digit it is.
//!
//! Our tokenizers have no end-of-text token, so the newline ends an answer: a reply is read up
//! to its first newline, and it is right when that prefix, newline included, is the answer
//! exactly ([`is_correct`]). A reply that never writes the newline is wrong, whatever its digits.
//! The text is cut into characters by chapter 8's [`CharTokenizer`] over [`ALPHABET`] (13 ids).
//!
//! All (10^n)² problems are listed and shuffled once by a seed; the first `held_out` are never
//! trained on and measure exact-match accuracy, by greedy decoding ([`accuracy`]).

use crate::ch08_tokens::Tokenizer;
use crate::ch08_tokens::chars::CharTokenizer;
use crate::ch09_gpt::data::{Batch, Token};
use crate::ch09_gpt::model::Gpt;
use crate::ch09_gpt::sample::{Decoding, generate};
use crate::error::{Error, Result, invalid};
use crate::float::Float;
use crate::rng::Rng;

/// Every character the task writes: the newline that ends an answer, `+`, the digits, `=`.
pub const ALPHABET: &str = "\n+0123456789=";

/// The character that ends an answer (there is no end-of-text token).
pub const END: char = '\n';

/// The most problems [`AdditionTask::new`] lists: 10^n ≤ 1000 numbers a side.
pub const MAX_DIGITS: usize = 3;

/// One problem: a + b.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The first number.
    pub a: u32,
    /// The second number.
    pub b: u32,
}

/// How a problem is written: each number in `digits` places (leading zeros kept), the sum in
/// `digits` + 1, and that sum's digits in the usual order or reversed (units first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Format {
    /// n: each number is below 10^n and written in n places.
    pub digits: usize,
    /// Whether the answer is written units first (as the carries travel).
    pub reversed: bool,
}

impl Format {
    /// `a+b=`, each number in n places: `07+58=`.
    pub fn prompt(&self, p: &Problem) -> String {
        let n = self.digits;
        format!("{:0n$}+{:0n$}=", p.a, p.b)
    }

    /// The sum in n + 1 places (reversed if the format says so) and the newline that ends it.
    pub fn answer(&self, p: &Problem) -> String {
        let sum = format!("{:0w$}", p.a + p.b, w = self.digits + 1);
        let sum: String = if self.reversed { sum.chars().rev().collect() } else { sum };
        format!("{sum}{END}")
    }

    /// The whole line, prompt then answer: `07+58=065\n`.
    pub fn line(&self, p: &Problem) -> String {
        format!("{}{}", self.prompt(p), self.answer(p))
    }
}

/// Whether `reply` (what a model wrote after the prompt) is `answer`: its text up to and
/// including the first [`END`] is the answer exactly. What follows the newline is not read.
pub fn is_correct(answer: &str, reply: &str) -> bool {
    match reply.find(END) {
        Some(end) => reply[..=end] == *answer,
        None => false,
    }
}

/// The fraction of `answers` whose reply (same order) [`is_correct`]. Errors when the two
/// lists differ in length or are empty.
pub fn accuracy_of(answers: &[String], replies: &[String]) -> Result<f64> {
    const OP: &str = "accuracy_of";
    if answers.is_empty() {
        return Err(Error::Empty { op: OP, arg: "answers" });
    }
    if replies.len() != answers.len() {
        let reason = format!("{} replies for {} answers", replies.len(), answers.len());
        return Err(invalid(OP, "replies", reason));
    }
    let right = answers.iter().zip(replies).filter(|(a, r)| is_correct(a, r)).count();
    Ok(right as f64 / answers.len() as f64)
}

/// The task: its tokenizer and its problems, split once into training and held-out sets.
#[derive(Clone, Debug)]
pub struct AdditionTask {
    /// How the problems are written.
    pub format: Format,
    /// Chapter 8's character tokenizer over [`ALPHABET`].
    pub tokenizer: CharTokenizer,
    /// The problems to train on.
    pub train: Vec<Problem>,
    /// The problems never trained on, which measure accuracy.
    pub held_out: Vec<Problem>,
}

impl AdditionTask {
    /// Every problem with a, b < 10^n (n = `format.digits`), shuffled by `seed`, the first
    /// `held_out` kept out. Errors on n outside 1..=[`MAX_DIGITS`], and on a `held_out` of 0 or
    /// one that leaves nothing to train on.
    pub fn new(format: Format, held_out: usize, seed: u64) -> Result<AdditionTask> {
        let digits = format.digits;
        const OP: &str = "AdditionTask::new";
        if !(1..=MAX_DIGITS).contains(&digits) {
            return Err(invalid(OP, "digits", format!("must be 1..={MAX_DIGITS}; got {digits}")));
        }
        let side = 10u32.pow(digits as u32);
        let total = (side as usize) * (side as usize);
        if held_out == 0 || held_out >= total {
            let reason = format!("must be in 1..{total} (the problems there are); got {held_out}");
            return Err(invalid(OP, "held_out", reason));
        }
        let mut all: Vec<Problem> =
            (0..side).flat_map(|a| (0..side).map(move |b| Problem { a, b })).collect();
        Rng::new(seed).shuffle(&mut all);
        let train = all.split_off(held_out);
        let tokenizer = CharTokenizer::from_text(ALPHABET)?;
        Ok(AdditionTask { format, tokenizer, train, held_out: all })
    }

    /// The characters of an answer: n + 1 digits and the newline.
    pub fn answer_len(&self) -> usize {
        self.format.digits + 2
    }

    /// The characters of a prompt: a, `+`, b, `=`.
    pub fn prompt_len(&self) -> usize {
        2 * self.format.digits + 2
    }

    /// The characters of a line, 3n + 4.
    pub fn line_len(&self) -> usize {
        self.prompt_len() + self.answer_len()
    }

    /// T of a fine-tuning batch: every character of a line but its last is an input.
    pub fn seq_len(&self) -> usize {
        self.line_len() - 1
    }

    /// The ids of `text` (which must be written in [`ALPHABET`]).
    pub fn encode(&self, text: &str) -> Result<Vec<Token>> {
        self.tokenizer.encode(text)
    }

    /// The raw text of `problems`, one line each: what the base model is pretrained on.
    pub fn text(&self, problems: &[Problem]) -> String {
        problems.iter().map(|p| self.format.line(p)).collect()
    }

    /// The answers of `problems`, as [`accuracy_of`] compares them.
    pub fn answers(&self, problems: &[Problem]) -> Vec<String> {
        problems.iter().map(|p| self.format.answer(p)).collect()
    }

    /// One fine-tuning example of T = [`AdditionTask::seq_len`] positions: the inputs are the
    /// line without its last character; the target at position t is character t + 1. With
    /// `mask_prompt` only the answer's characters are targets (the prompt's are `None`, not
    /// scored); without it every character after the first is.
    pub fn example(
        &self,
        problem: &Problem,
        mask_prompt: bool,
    ) -> Result<(Vec<Token>, Vec<Option<Token>>)> {
        let line = self.encode(&self.format.line(problem))?;
        let first_answer = self.prompt_len(); // the target at t = prompt_len − 1 is the answer's
        let inputs = line[..line.len() - 1].to_vec();
        let targets = (0..line.len() - 1)
            .map(|t| (!mask_prompt || t + 1 >= first_answer).then(|| line[t + 1]))
            .collect();
        Ok((inputs, targets))
    }

    /// The batch of exactly these problems.
    pub fn batch_of(&self, problems: &[Problem], mask_prompt: bool) -> Result<Batch> {
        let (mut inputs, mut targets) = (Vec::new(), Vec::new());
        for p in problems {
            let (i, t) = self.example(p, mask_prompt)?;
            inputs.extend(i);
            targets.extend(t);
        }
        Ok(Batch { inputs, targets, batch: problems.len(), seq_len: self.seq_len() })
    }

    /// `batch` training problems drawn uniformly with replacement by `rng`.
    pub fn batch(&self, batch: usize, mask_prompt: bool, rng: &mut Rng) -> Result<Batch> {
        let picks: Vec<Problem> =
            (0..batch).map(|_| self.train[rng.below(self.train.len())]).collect();
        self.batch_of(&picks, mask_prompt)
    }

    /// What `model` writes after each problem's prompt, greedily, [`AdditionTask::answer_len`]
    /// characters (enough for any answer and its newline).
    pub fn replies<T: Float>(&self, model: &Gpt<T>, problems: &[Problem]) -> Result<Vec<String>> {
        let mut rng = Rng::new(0); // greedy decoding draws nothing
        problems
            .iter()
            .map(|p| {
                let prompt = self.encode(&self.format.prompt(p))?;
                let g =
                    generate(model, &prompt, self.answer_len(), &Decoding::Greedy, &mut rng, true)?;
                self.tokenizer.decode(g.new_tokens())
            })
            .collect()
    }
}

/// Exact-match accuracy of `model` on `problems`, greedy decoding: [`accuracy_of`] its
/// [`AdditionTask::replies`].
pub fn accuracy<T: Float>(
    task: &AdditionTask,
    model: &Gpt<T>,
    problems: &[Problem],
) -> Result<f64> {
    accuracy_of(&task.answers(problems), &task.replies(model, problems)?)
}
