//! GPT-2's pre-tokenization: text cut into the pieces that BPE merges separately ([`split`]).
//! Both our byte-level BPE ([`super::bpe`], with [`super::bpe::PreTokenizer::Gpt2`]) and GPT-2's
//! tokenizer ([`super::gpt2`], which re-exports these items) cut text this way.

use super::unicode::{is_letter, is_number, is_space};

/// The contractions GPT-2 splits off (lower case only, ASCII apostrophe only).
pub const CONTRACTIONS: [&str; 7] = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"];

/// The end of the run of characters from byte `at` on that satisfy `keep`.
fn run_end(text: &str, at: usize, keep: impl Fn(char) -> bool) -> usize {
    text[at..].char_indices().find(|&(_, c)| !keep(c)).map_or(text.len(), |(i, _)| at + i)
}

/// Where the piece starting at byte `start` ends. The rules, tried in this order at `start`:
/// 1. a contraction from [`CONTRACTIONS`];
/// 2. an optional single space, then a run of letters (`\p{L}`);
/// 3. an optional single space, then a run of numbers (`\p{N}`);
/// 4. an optional single space, then a run of characters that are none of letter, number or
///    whitespace;
/// 5. a run of whitespace that reaches the end of the text, or, if the run is followed by
///    something else and is longer than one character, the run without its last character (GPT-2's
///    lookahead `\s+(?!\S)`: the last space stays to start the next word);
/// 6. the whitespace run (a single whitespace character before a non-space).
pub fn piece_end(text: &str, start: usize) -> usize {
    let rest = &text[start..];
    if let Some(c) = CONTRACTIONS.iter().find(|c| rest.starts_with(**c)) {
        return start + c.len();
    }
    let body = if rest.starts_with(' ') { start + 1 } else { start };
    if let Some(c) = text[body..].chars().next() {
        if is_letter(c) {
            return run_end(text, body, is_letter);
        }
        if is_number(c) {
            return run_end(text, body, is_number);
        }
        if !is_space(c) {
            return run_end(text, body, |c| !is_letter(c) && !is_number(c) && !is_space(c));
        }
    }
    let end = run_end(text, start, is_space);
    if end == text.len() {
        return end;
    }
    let run = &text[start..end];
    let last = run.char_indices().last().map_or(0, |(i, _)| i);
    if last > 0 { start + last } else { end }
}

/// GPT-2's pre-tokenization: `text` cut into the pieces that are merged separately. The pieces
/// concatenate back to `text`. See [`piece_end`] for the rules.
pub fn split(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let end = piece_end(text, start);
        out.push(&text[start..end]);
        start = end;
    }
    out
}
