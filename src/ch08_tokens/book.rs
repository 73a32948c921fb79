//! What the book shows about chapter 8: the errata, the worked-number table, the walk-through,
//! the figure and the chapter's entry.

use super::bpe::{self, BpeConfig, PreTokenizer};
use super::chars::CharTokenizer;
use super::ngram::{self, BaselineRow, NGramModel};
use super::{
    ADD_K, CHAPTER_BPE_VOCAB, GPT3_EMBEDDING_WIDTH, MAX_N, TokenId, Tokenizer, char_baseline,
    char_data, corpus, gpt2, gpt2_vocab_size, shannon_samples,
};
use crate::errata::{Erratum, Kind};
use crate::error::Result;
use crate::plot::{Figure, LineChart, Series};
use crate::report::{Chapter, Walk, Worked, with_commas};
use crate::sources::{D1, D2, D3};
use std::path::{Path, PathBuf};

// ───────────────────────────── errata, worked numbers ─────────────────────────────

/// This chapter's rows of the errata register.
pub const ERRATA: &[Erratum] = &[Erratum {
    document: D2,
    section: "Symbol Representation, consideration 1",
    printed: "characters as the smallest symbol set, \"e.g., 255 ASCII\"",
    correct: "ASCII has 128 characters (codes 0–127); a byte has 256 values (0–255), the base \
        vocabulary of byte-level BPE",
    why: "ASCII is a 7-bit code, so it defines 2⁷ = 128 characters; 255 is neither that count nor \
        the number of byte values, 2⁸ = 256 (it is the largest byte value, an off-by-one from \
        counting 0–255).",
    kind: Kind::Erratum,
    tests: &["tests/ch08_tokens.rs::ascii_has_128_characters_and_a_byte_256_values"],
}];

/// The chapter's worked numbers, recomputed.
pub fn worked() -> Result<Vec<Worked>> {
    let vocab = gpt2_vocab_size();
    let in_range = (50_000..=100_000).contains(&vocab);
    let show_words = |s: &str| {
        format!(
            "[{}]",
            ngram::words(s).iter().map(|w| format!("'{w}'")).collect::<Vec<_>>().join(", ")
        )
    };
    Ok(vec![
        Worked::text(
            "gpt2_vocabulary_has_50_257_tokens",
            D1,
            "GPT-3's vocabulary: 256 byte tokens + 50,000 merges + 1 end-of-text token",
            "50,257",
            with_commas(vocab),
        ),
        Worked::text(
            "gpt3_token_embedding_has_617_558_016_parameters",
            D1,
            "embedding parameters, 50,257 tokens × 12,288 dimensions",
            "617,558,016",
            with_commas(vocab * GPT3_EMBEDDING_WIDTH),
        ),
        Worked::erratum(
            "ascii_has_128_characters_and_a_byte_256_values",
            D2,
            "size of the smallest character set, ASCII (and of a byte's values)",
            "255",
            format!(
                "{} (ASCII), {} (bytes)",
                (0..=255u8).filter(u8::is_ascii).count(),
                bpe::BYTE_VOCAB
            ),
        ),
        Worked::text(
            "gpt2_vocabulary_lies_in_the_lectures_range",
            D2,
            "today's vocabulary sizes (GPT-2/3's 50,257 lies in it)",
            "50,000 to 100,000",
            if in_range { "50,000 to 100,000".to_string() } else { format!("{vocab} is outside") },
        ),
        Worked::illustrative(D2, "words across languages", "100K words across 1K languages"),
        Worked::illustrative(D2, "the lecture's subword example 'subwords'", "[sub][word][s]"),
        Worked::illustrative(D2, "Shannon's English letter frequencies, E and W", ".12, .02"),
        Worked::text(
            "you_are_welcome_is_three_words_and_three_gpt2_tokens",
            D3,
            "word tokens of \"You are welcome\"",
            "['You', 'are', 'welcome']",
            show_words("You are welcome"),
        ),
        Worked::text(
            "i_love_ai_is_three_words_and_three_gpt2_tokens",
            D3,
            "word tokens of \"I love AI\"",
            "[\"I\", \"love\", \"AI\"]",
            format!(
                "[{}]",
                ngram::words("I love AI")
                    .iter()
                    .map(|w| format!("\"{w}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
    ])
}

// ───────────────────────────── walk-through and plots ─────────────────────────────

fn fmt_tokens(tok: &dyn Tokenizer, ids: &[TokenId]) -> String {
    ids.iter()
        .map(|&id| {
            let b = tok.token_bytes(id).unwrap_or_default();
            format!("[{}]", String::from_utf8_lossy(&b).replace('\n', "\\n"))
        })
        .collect()
}

/// The chapter in the order it builds things.
pub fn walk(out: &mut Walk) -> Result<()> {
    let text = corpus::default_corpus();
    let (train, validation) = corpus::split(text);
    out.step("1. The frozen corpus")?;
    out.say(&format!(
        "data/corpus.txt: {} bytes, {} characters, {} lines; training part {} bytes, validation \
            part {} bytes",
        text.len(),
        text.chars().count(),
        text.lines().count(),
        train.len(),
        validation.len()
    ))?;
    let chars = CharTokenizer::from_text(text)?;
    out.step("2. Characters as tokens")?;
    out.say(&format!(
        "vocabulary: {} characters: {:?}",
        chars.vocab_size(),
        chars.chars().iter().collect::<String>()
    ))?;
    let e_share = text.chars().filter(|c| c.eq_ignore_ascii_case(&'e')).count() as f64
        / text.chars().filter(|c| c.is_alphabetic()).count() as f64;
    let w_share = text.chars().filter(|c| c.eq_ignore_ascii_case(&'w')).count() as f64
        / text.chars().filter(|c| c.is_alphabetic()).count() as f64;
    out.say(&format!(
        "share of letters that are e/E: {e_share:.3}; w/W: {w_share:.3} (Shannon's \
            English: .12 and .02)"
    ))?;
    let sentence = "Mira found a silver key.";
    out.say(&format!("{sentence:?} → {:?}", chars.encode(sentence)?))?;

    out.step("3. Byte-pair encoding, the textbook example")?;
    let t = bpe::train(
        "aaabdaaabac",
        BpeConfig { vocab_size: 259, pre_tokenizer: PreTokenizer::None },
    )?;
    for line in t.bpe.merges_text().lines() {
        out.say(line)?;
    }
    out.say(&format!("result: {}", fmt_tokens(&t.bpe, &t.tokens)))?;

    out.step(&format!(
        "4. BPE on the corpus, {CHAPTER_BPE_VOCAB} tokens, GPT-2's pre-tokenization"
    ))?;
    let trained = bpe::train(
        train,
        BpeConfig { vocab_size: CHAPTER_BPE_VOCAB, pre_tokenizer: PreTokenizer::Gpt2 },
    )?;
    for line in trained.bpe.merges_text().lines().take(24) {
        out.say(line)?;
    }
    out.say("…")?;
    let val_ids = trained.bpe.encode(validation)?;
    out.say(&format!(
        "training text: {} bytes → {} tokens ({:.2} bytes/token); validation: {:.2} bytes/token",
        train.len(),
        trained.tokens.len(),
        train.len() as f64 / trained.tokens.len() as f64,
        validation.len() as f64 / val_ids.len() as f64
    ))?;
    out.say(&format!(
        "{sentence:?} → {}",
        fmt_tokens(&trained.bpe, &trained.bpe.encode(sentence)?)
    ))?;

    out.step("5. GPT-2's pre-tokenization split")?;
    for s in ["I'm sure they'll say it's 42, isn't it?", "two  spaces,   three,\n\nnew lines"] {
        out.say(&format!("{s:?} → {:?}", gpt2::split(s)))?;
    }

    out.step("6. Shannon's series of approximations, from the corpus")?;
    for (label, sample) in shannon_samples()? {
        out.say(&format!("{label}:"))?;
        out.say(&format!("    {sample}"))?;
    }

    out.step("7. The empirical predictor fails on unseen contexts")?;
    let (_, train_ids, val_ids) = char_data()?;
    for n in 1..=MAX_N {
        let m = NGramModel::fit(&train_ids, n, chars.vocab_size())?;
        let (unseen, zero, all) = m.mle_failures(&val_ids);
        out.say(&format!(
            "n = {n}: of {all} validation characters, {unseen} have an unseen context (no \
                estimate) and {zero} a probability of 0"
        ))?;
    }

    out.step(&format!(
        "8. The baseline: validation cross-entropy, nats per character (|V| = {})",
        chars.vocab_size()
    ))?;
    out.say(&format!(
        "uniform over the vocabulary: ln {} = {:.4}",
        chars.vocab_size(),
        (chars.vocab_size() as f64).ln()
    ))?;
    out.say(&format!(
        "{:>2}  {:>9}  {:>14}  {:>14}  {:>16}  {:>14}",
        "n",
        "contexts",
        "unseen (val)",
        format!("add-k {ADD_K}"),
        format!("backoff {}", ngram::DEFAULT_DISCOUNT),
        "backoff (train)"
    ))?;
    for r in char_baseline()? {
        out.say(&format!(
            "{:>2}  {:>9}  {:>13.1}%  {:>14.4}  {:>16.4}  {:>14.4}",
            r.n,
            r.contexts,
            100.0 * r.unseen_context_share,
            r.add_k,
            r.backoff,
            r.backoff_train
        ))?;
    }
    Ok(())
}

/// The chapter's figures as data: (file stem, figure).
pub fn figures() -> Result<Vec<(String, Figure)>> {
    let rows = char_baseline()?;
    let series = |label: &str, f: fn(&BaselineRow) -> f64| {
        Series::new(label, rows.iter().map(|r| (r.n as f64, f(r))).collect())
    };
    let loss = Figure::Line(LineChart {
        title: "Character n-gram models on the default corpus".into(),
        x_label: "n (the model sees n − 1 characters)".into(),
        y_label: "cross-entropy, nats per character".into(),
        series: vec![
            series(&format!("validation, add-k (k = {ADD_K})"), |r| r.add_k),
            series(&format!("validation, backoff (d = {})", ngram::DEFAULT_DISCOUNT), |r| {
                r.backoff
            }),
            series(&format!("training, backoff (d = {})", ngram::DEFAULT_DISCOUNT), |r| {
                r.backoff_train
            }),
        ],
        markers: true,
    });
    Ok(vec![("ch08_ngram_loss".into(), loss)])
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    crate::plot::save_all(&figures()?, dir)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter = Chapter {
    number: 8,
    stem: "ch08_tokens",
    title: "Tokens, byte-pair encoding and the empirical next-token predictor",
    worked,
    walk,
    plots,
    errata: ERRATA,
};
