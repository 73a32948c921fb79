//! Chapter 8: tokens, byte-pair encoding and the empirical next-token predictor.
mod common;

use llm_workbook::Error;
use llm_workbook::ch08_tokens::bpe::{self, BYTE_VOCAB, Bpe, BpeConfig, PreTokenizer};
use llm_workbook::ch08_tokens::chars::CharTokenizer;
use llm_workbook::ch08_tokens::corpus;
use llm_workbook::ch08_tokens::gpt2::{self, Gpt2Tokenizer};
use llm_workbook::ch08_tokens::ngram::{self, Estimator, NGramModel, WordVocab};
use llm_workbook::ch08_tokens::unicode;
use llm_workbook::ch08_tokens::{TokenId, Tokenizer};
use llm_workbook::rng::Rng;
use std::path::PathBuf;
use std::sync::OnceLock;

// ───────────────────────────── helpers ─────────────────────────────

/// The folder of GPT-2's files shipped inside the `tiktoken-rs` dev-dependency: the version is
/// read from Cargo.lock, the crate's sources from cargo's registry (`$CARGO_HOME`, by default
/// `~/.cargo`). Nothing is downloaded at run time.
fn gpt2_assets() -> PathBuf {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock")).expect("Cargo.lock");
    let version = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"tiktoken-rs\""))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
        .map(|v| v.trim_end_matches('"').to_string())
        .expect("tiktoken-rs in Cargo.lock");
    let mut homes: Vec<PathBuf> = vec![];
    if let Ok(h) = std::env::var("CARGO_HOME") {
        homes.push(h.into());
    }
    if let Ok(h) = std::env::var("HOME") {
        homes.push(PathBuf::from(h).join(".cargo"));
    }
    for home in &homes {
        let Ok(indexes) = std::fs::read_dir(home.join("registry").join("src")) else { continue };
        for index in indexes.flatten() {
            let assets = index.path().join(format!("tiktoken-rs-{version}")).join("assets");
            if assets.join("encoder.json").is_file() && assets.join("vocab.bpe").is_file() {
                return assets;
            }
        }
    }
    panic!("tiktoken-rs {version} sources not found under {homes:?}/registry/src (run `cargo fetch`)");
}

fn gpt2() -> &'static Gpt2Tokenizer {
    static T: OnceLock<Gpt2Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let dir = gpt2_assets();
        Gpt2Tokenizer::from_files(dir.join("encoder.json"), dir.join("vocab.bpe")).expect("GPT-2 files load")
    })
}

fn oracle() -> &'static tiktoken_rs::CoreBPE {
    tiktoken_rs::r50k_base_singleton()
}

/// Strings that exercise the pre-tokenizer and the merges: contractions, whitespace runs,
/// numbers, punctuation, many scripts, emoji, combining marks, control characters.
fn varied_strings() -> Vec<String> {
    let fixed = [
        "",
        " ",
        "  ",
        "\n",
        "\n\n\n",
        "Hello world",
        "Hello  world",
        "Hello   world",
        "Hello\tworld",
        "Hello \n world",
        "trailing spaces   ",
        "   leading spaces",
        "I'm sure you're right, they've said we'll see; it's Bob's and I'd go.",
        "I'M SHOUTING 'S 'T 'RE",
        "don't 'sup ''s '''",
        "rock'n'roll",
        "The year 2024 had 366 days; 3.14159 and 1,000,000.",
        "12345678901234567890",
        "x=1+2*3/4-5",
        "email@example.com http://example.org/path?q=1&r=2#frag",
        "(parentheses) [brackets] {braces} <angles>",
        "...!!!???---***",
        "You are welcome",
        "I love AI",
        "subwords",
        "tokenization",
        "Ünïcödé façade naïve café",
        "Straße Größe",
        "Привет, мир! Как дела?",
        "Γειά σου Κόσμε",
        "こんにちは世界",
        "你好，世界！",
        "안녕하세요 세계",
        "مرحبا بالعالم",
        "שלום עולם",
        "नमस्ते दुनिया",
        "สวัสดีชาวโลก",
        "emoji 😀😃😄 and 👍🏽 and 👨‍👩‍👧‍👦 family",
        "e\u{301} combining acute",
        "Ⅻ Roman numeral twelve, ½ half, ² squared, ٣ Arabic three",
        "tab\tand\u{b}vertical\u{c}form\rreturn",
        "nbsp\u{a0}here and\u{2003}em space and\u{3000}ideographic",
        "\u{0}\u{1}\u{7f} control bytes",
        "<|endoftext|> is text here",
        "mixed123abc 456 def789",
        "  \n  indented\n\tcode();\n",
        "def f(x):\n    return x ** 2\n",
        "ALLCAPS lowercase MixedCase camelCase snake_case kebab-case",
        "a  b   c    d     e",
        "word.\n\nNew paragraph.",
    ];
    let mut out: Vec<String> = fixed.iter().map(|s| s.to_string()).collect();
    // Random strings from a pool of pieces that stress the split rules.
    let pieces = [
        " ", "  ", "\n", "\t", "'s", "'ll", "'", "a", "Z", "ab", "the", " the", "123", "٣", "½", "é", "e\u{301}", "😀", "中", "!", "?!", ".", ",",
        "\u{a0}", "\u{2003}", "-", "_", "Ж", "ß", "\r\n", "  x", "9", " 9", "$", "€", "ǅ", "ʰ",
    ];
    let mut rng = Rng::new(8);
    for _ in 0..250 {
        let len = rng.below(12);
        out.push((0..len).map(|_| pieces[rng.below(pieces.len())]).collect());
    }
    // And lines of the default corpus.
    out.extend(corpus::default_corpus().lines().step_by(40).map(str::to_string));
    out
}

/// Random Unicode: any scalar value (surrogates excluded), weighted towards ASCII and the BMP.
fn random_unicode(rng: &mut Rng, max_len: usize) -> String {
    let len = rng.below(max_len + 1);
    (0..len)
        .map(|_| loop {
            let code = match rng.below(4) {
                0 => rng.below(0x80) as u32,
                1 => rng.below(0x800) as u32,
                2 => rng.below(0x10000) as u32,
                _ => rng.below(0x110000) as u32,
            };
            if let Some(c) = char::from_u32(code) {
                break c;
            }
        })
        .collect()
}

// ───────────────────────────── GPT-2 ─────────────────────────────

#[test]
fn gpt2_ids_match_tiktoken_on_varied_strings() {
    let strings = varied_strings();
    assert!(strings.len() >= 300, "{} strings", strings.len());
    let mut mismatches = vec![];
    for s in &strings {
        let ours = gpt2().encode(s).unwrap();
        let theirs: Vec<TokenId> = oracle().encode_ordinary(s);
        if ours != theirs {
            mismatches.push(format!("{s:?}: ours {ours:?} theirs {theirs:?}"));
        }
    }
    assert!(mismatches.is_empty(), "{} of {} differ:\n{}", mismatches.len(), strings.len(), mismatches.join("\n"));
}

#[test]
fn gpt2_ids_match_tiktoken_on_random_unicode() {
    let mut rng = Rng::new(81);
    for _ in 0..300 {
        let s = random_unicode(&mut rng, 24);
        assert_eq!(gpt2().encode(&s).unwrap(), oracle().encode_ordinary(&s), "{s:?}");
    }
}
