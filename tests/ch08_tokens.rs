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
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock"))
        .expect("Cargo.lock");
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
    panic!(
        "tiktoken-rs {version} sources not found under {homes:?}/registry/src (run `cargo fetch`)"
    );
}

fn gpt2() -> &'static Gpt2Tokenizer {
    static T: OnceLock<Gpt2Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let dir = gpt2_assets();
        Gpt2Tokenizer::from_files(dir.join("encoder.json"), dir.join("vocab.bpe"))
            .expect("GPT-2 files load")
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
        " ", "  ", "\n", "\t", "'s", "'ll", "'", "a", "Z", "ab", "the", " the", "123", "٣", "½",
        "é", "e\u{301}", "😀", "中", "!", "?!", ".", ",", "\u{a0}", "\u{2003}", "-", "_", "Ж", "ß",
        "\r\n", "  x", "9", " 9", "$", "€", "ǅ", "ʰ",
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
        .map(|_| {
            loop {
                let code = match rng.below(4) {
                    0 => rng.below(0x80) as u32,
                    1 => rng.below(0x800) as u32,
                    2 => rng.below(0x10000) as u32,
                    _ => rng.below(0x110000) as u32,
                };
                if let Some(c) = char::from_u32(code) {
                    break c;
                }
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
    assert!(
        mismatches.is_empty(),
        "{} of {} differ:\n{}",
        mismatches.len(),
        strings.len(),
        mismatches.join("\n")
    );
}

#[test]
fn gpt2_ids_match_tiktoken_on_random_unicode() {
    let mut rng = Rng::new(81);
    for _ in 0..300 {
        let s = random_unicode(&mut rng, 24);
        assert_eq!(gpt2().encode(&s).unwrap(), oracle().encode_ordinary(&s), "{s:?}");
    }
}

#[test]
fn gpt2_vocabulary_has_50_257_tokens() {
    let t = gpt2();
    assert_eq!(t.vocab_size(), 50_257);
    assert_eq!(t.merge_count(), llm_workbook::ch08_tokens::GPT2_MERGES);
    assert_eq!(t.special_tokens(), &[("<|endoftext|>".to_string(), 50_256)]);
    assert_eq!(BYTE_VOCAB + t.merge_count() + t.special_tokens().len(), t.vocab_size());
    assert_eq!(llm_workbook::ch08_tokens::gpt2_vocab_size(), t.vocab_size());
    assert_eq!(oracle().decode(&[50_256]).unwrap(), "<|endoftext|>");
    assert_eq!(t.decode(&[50_256]).unwrap(), "<|endoftext|>");
}

#[test]
fn gpt3_token_embedding_has_617_558_016_parameters() {
    let v = llm_workbook::ch08_tokens::gpt2_vocab_size();
    assert_eq!(v * llm_workbook::ch08_tokens::GPT3_EMBEDDING_WIDTH, 617_558_016);
    assert_eq!(llm_workbook::report::with_commas(v * 12_288), "617,558,016");
}

#[test]
fn gpt2_vocabulary_lies_in_the_lectures_range() {
    assert!((50_000..=100_000).contains(&gpt2().vocab_size()));
}

#[test]
fn ascii_has_128_characters_and_a_byte_256_values() {
    assert_eq!((0..=255u8).filter(u8::is_ascii).count(), llm_workbook::ch08_tokens::ASCII_SIZE);
    assert_eq!((0..=u8::MAX as usize).count(), BYTE_VOCAB);
    // Not the printed 255: that is the largest byte value, not a count.
    assert_ne!(llm_workbook::ch08_tokens::ASCII_SIZE, 255);
    assert_eq!(bpe::Bpe::bytes_only(PreTokenizer::None).vocab_size(), 256);
}

#[test]
fn you_are_welcome_is_three_words_and_three_gpt2_tokens() {
    assert_eq!(ngram::words("You are welcome"), ["You", "are", "welcome"]);
    // GPT-2 keeps the space with the word that follows it.
    assert_eq!(gpt2().encode_to_strings("You are welcome").unwrap(), ["You", "Ġare", "Ġwelcome"]);
    assert_eq!(gpt2().encode("You are welcome").unwrap(), [1639, 389, 7062]);
}

#[test]
fn i_love_ai_is_three_words_and_three_gpt2_tokens() {
    assert_eq!(ngram::words("I love AI"), ["I", "love", "AI"]);
    assert_eq!(gpt2().encode_to_strings("I love AI").unwrap(), ["I", "Ġlove", "ĠAI"]);
}

#[test]
fn gpt2_splits_subwords_into_sub_and_words() {
    // The lecture's illustration is [sub][word][s]; GPT-2's actual merges give two pieces.
    assert_eq!(gpt2().encode_to_strings("subwords").unwrap(), ["sub", "words"]);
    assert_eq!(gpt2().encode_to_strings("tokenization").unwrap(), ["token", "ization"]);
}

#[test]
fn gpt2_decode_inverts_encode_on_random_unicode() {
    let mut rng = Rng::new(82);
    for _ in 0..300 {
        let s = random_unicode(&mut rng, 40);
        let ids = gpt2().encode(&s).unwrap();
        assert_eq!(gpt2().decode(&ids).unwrap(), s);
        assert_eq!(oracle().decode(&ids).unwrap(), s);
    }
}

#[test]
fn gpt2_decode_refuses_unknown_ids_and_split_characters() {
    let err = gpt2().decode(&[50_257]).unwrap_err();
    assert!(matches!(err, Error::InvalidValue { .. }), "{err}");
    assert!(err.to_string().contains("50257"), "{err}");
    // "é" is the two bytes C3 A9; each byte alone is a token, but C3 alone is not UTF-8.
    let byte_id = |b: u8| (0..256).find(|&id| gpt2().token_bytes(id) == Some(vec![b])).unwrap();
    let (c3, a9) = (byte_id(0xC3), byte_id(0xA9));
    assert_eq!(gpt2().decode(&[c3, a9]).unwrap(), "é");
    let err = gpt2().decode(&[c3]).unwrap_err();
    assert!(err.to_string().contains("not valid UTF-8"), "{err}");
    assert_eq!(gpt2().decode_lossy(&[c3]).unwrap(), "\u{FFFD}");
}

#[test]
fn byte_to_char_moves_68_bytes_and_is_a_bijection() {
    let t = gpt2::byte_to_char();
    assert_eq!(t[b' ' as usize], 'Ġ');
    assert_eq!(t[b'\n' as usize], 'Ċ');
    assert_eq!(t[0], 'Ā');
    assert_eq!(t[b'a' as usize], 'a');
    assert_eq!(t[0xAD], 'Ń'); // the soft hyphen, the one byte moved from the Latin-1 upper half
    let moved = (0..=255u8).filter(|&b| !gpt2::byte_is_shown_as_itself(b)).count();
    assert_eq!(moved, 68);
    let distinct: std::collections::HashSet<char> = t.iter().copied().collect();
    assert_eq!(distinct.len(), 256);
    assert!(t.iter().all(|c| !c.is_whitespace() && !c.is_control()));
    let back = gpt2::char_to_byte();
    assert!((0..=255u8).all(|b| back[&t[b as usize]] == b));
}

#[test]
fn split_follows_gpt2s_pattern() {
    let cases: &[(&str, &[&str])] = &[
        ("Hello world", &["Hello", " world"]),
        ("Hello  world", &["Hello", " ", " world"]),
        ("Hello   world", &["Hello", "  ", " world"]),
        ("a\n\nb", &["a", "\n", "\n", "b"]),
        ("a \nb", &["a", " ", "\n", "b"]),
        ("end   ", &["end", "   "]),
        ("  x", &[" ", " x"]),
        ("I'm you're 'sup", &["I", "'m", " you", "'re", " '", "sup"]),
        ("'s's", &["'s", "'s"]),
        ("I'M", &["I", "'", "M"]),
        ("abc123 456", &["abc", "123", " 456"]),
        ("x!?.y", &["x", "!?.", "y"]),
        ("a !b", &["a", " !", "b"]),
        ("½Ⅻ٣", &["½Ⅻ٣"]),
        ("naïve café", &["naïve", " café"]),
        ("e\u{301}", &["e", "\u{301}"]),
        ("tab\tx", &["tab", "\t", "x"]),
        ("\u{a0}x", &["\u{a0}", "x"]),
        ("", &[]),
    ];
    for (text, want) in cases {
        let got = gpt2::split(text);
        assert_eq!(&got, want, "{text:?}");
        assert_eq!(got.concat(), *text);
    }
}

#[test]
fn unicode_tables_equal_regex_syntax_classes() {
    use regex_syntax::hir::{Class, HirKind};
    for (pattern, table) in
        [(r"\p{L}", unicode::LETTERS), (r"\p{N}", unicode::NUMBERS), (r"\s", unicode::WHITESPACE)]
    {
        let hir = regex_syntax::parse(pattern).unwrap();
        let HirKind::Class(Class::Unicode(class)) = hir.kind() else {
            panic!("{pattern} is not a Unicode class")
        };
        let theirs: Vec<(u32, u32)> =
            class.ranges().iter().map(|r| (r.start() as u32, r.end() as u32)).collect();
        assert_eq!(table, theirs.as_slice(), "{pattern}");
    }
    // The standard library agrees on whitespace and numbers, but not on letters.
    assert!(
        (0..=0x10FFFFu32)
            .filter_map(char::from_u32)
            .all(|c| unicode::is_space(c) == c.is_whitespace())
    );
    // U+0903 is a Devanagari vowel sign (Mc).
    assert!(!unicode::is_letter('\u{903}') && '\u{903}'.is_alphabetic());
    assert!(unicode::is_number('Ⅻ') && !unicode::is_letter('Ⅻ') && 'Ⅻ'.is_alphabetic());
}

// ───────────────────────────── malformed GPT-2 files ─────────────────────────────

fn small_gpt2_files() -> (String, String) {
    let t = bpe::train(
        "the cat and the hat sat at the mat",
        BpeConfig { vocab_size: 260, pre_tokenizer: PreTokenizer::Gpt2 },
    )
    .unwrap();
    gpt2::to_gpt2_files(&t.bpe).unwrap()
}

fn parse_error(r: llm_workbook::Result<Gpt2Tokenizer>) -> (String, Option<usize>, String) {
    match r {
        Err(Error::Parse { file, line, reason }) => (file, line, reason),
        Err(e) => panic!("expected a parse error, got {e}"),
        Ok(_) => panic!("expected a parse error, got a tokenizer"),
    }
}

#[test]
fn our_bpe_saved_in_gpt2_format_loads_back_and_encodes_the_same() {
    let text = corpus::default_corpus();
    let t = bpe::train(
        &text[..40_000],
        BpeConfig { vocab_size: 400, pre_tokenizer: PreTokenizer::Gpt2 },
    )
    .unwrap();
    let (vocab, merges) = gpt2::to_gpt2_files(&t.bpe).unwrap();
    let loaded = Gpt2Tokenizer::from_texts("vocab.json", &vocab, "merges.txt", &merges).unwrap();
    assert_eq!(loaded.vocab_size(), 400);
    assert_eq!(loaded.merge_count(), 144);
    assert!(loaded.special_tokens().is_empty());
    let sample = &text[40_000..50_000];
    assert_eq!(loaded.encode(sample).unwrap(), t.bpe.encode(sample).unwrap());
    // And through real files on disk.
    let dir = common::temp_dir("ch08-gpt2-files");
    std::fs::write(dir.join("vocab.json"), &vocab).unwrap();
    std::fs::write(dir.join("merges.txt"), &merges).unwrap();
    let from_disk =
        Gpt2Tokenizer::from_files(dir.join("vocab.json"), dir.join("merges.txt")).unwrap();
    assert_eq!(from_disk.encode(sample).unwrap(), t.bpe.encode(sample).unwrap());
}

#[test]
fn malformed_vocab_json_errors_name_the_file_and_line() {
    let (vocab, merges) = small_gpt2_files();
    let load =
        |v: &str| parse_error(Gpt2Tokenizer::from_texts("vocab.json", v, "merges.txt", &merges));
    // Truncated in the middle of a key on line 3.
    let cut = vocab.match_indices('\n').nth(2).unwrap().0 + 8;
    let (file, line, reason) = load(&vocab[..cut]);
    assert_eq!((file.as_str(), line), ("vocab.json", Some(4)));
    assert!(reason.contains("truncated"), "{reason}");
    // Truncated after a complete line.
    let (_, line, reason) = load(&vocab[..vocab.match_indices('\n').nth(9).unwrap().0 + 1]);
    assert_eq!(line, Some(11));
    assert!(reason.contains("truncated"), "{reason}");
    // Not an object.
    let (_, line, reason) = load("[\"a\", 1]");
    assert_eq!(line, Some(1));
    assert!(reason.contains("'{'"), "{reason}");
    // A fractional id on line 2.
    let (_, line, reason) = load("{\n  \"a\": 1.5\n}");
    assert_eq!(line, Some(2));
    assert!(reason.contains("whole numbers"), "{reason}");
    // A negative id.
    let (_, line, _) = load("{\n\n  \"a\": -1\n}");
    assert_eq!(line, Some(3));
    // The same key twice, on line 4.
    let bad =
        vocab.replacen("\n", "\n    \"!\": 999,\n", 1).replacen("\"!\": 999,", "\"!\": 0,", 1);
    let (_, line, reason) = load(&bad);
    assert!(reason.contains("twice") || reason.contains("two tokens"), "{reason}");
    assert!(line.is_some());
    // A raw space, which GPT-2's files always write as Ġ.
    let (_, line, reason) = load("{\n\"a\": 0,\n\" b\": 1\n}");
    assert_eq!(line, Some(3));
    assert!(reason.contains("U+0020"), "{reason}");
    // A vocabulary without all 256 bytes.
    let (_, line, reason) = load("{\"a\": 0}");
    assert_eq!(line, None);
    assert!(reason.contains("no token for byte 0x00"), "{reason}");
    // Text after the object.
    let (_, line, _) = load(&format!("{vocab}x"));
    assert_eq!(line, Some(vocab.lines().count() + 1));
    // Bad escapes.
    let (_, _, reason) = load("{\"\\q\": 0}");
    assert!(reason.contains("escape"), "{reason}");
    // A lead surrogate with no trail (serde_json: "unexpected end of hex escape"), a lone trail.
    let (_, _, reason) = load("{\"\\ud800\": 0}");
    assert!(reason.contains("escape"), "{reason}");
    let (_, _, reason) = load("{\"\\udc00\": 0}");
    assert!(reason.contains("surrogate"), "{reason}");
}

#[test]
fn json_reader_decodes_escapes_and_surrogate_pairs() {
    let entries = gpt2::parse_string_to_int_json(
        "x.json",
        "{\"\\u0120the\": 1, \"\\\"q\\\"\": 2, \"\\ud83d\\ude00\": 3, \"a\\/b\": 4}",
    )
    .unwrap();
    let keys: Vec<&str> = entries.iter().map(|(k, _, _)| k.as_str()).collect();
    assert_eq!(keys, ["Ġthe", "\"q\"", "😀", "a/b"]);
    assert_eq!(entries.iter().map(|e| e.1).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert!(gpt2::parse_string_to_int_json("x.json", "{}").unwrap().is_empty());
}

#[test]
fn malformed_merges_txt_errors_name_the_file_and_line() {
    let (vocab, merges) = small_gpt2_files();
    let load =
        |m: &str| parse_error(Gpt2Tokenizer::from_texts("vocab.json", &vocab, "merges.txt", m));
    assert!(Gpt2Tokenizer::from_texts("vocab.json", &vocab, "merges.txt", &merges).is_ok());
    let lines: Vec<&str> = merges.lines().collect();
    // A line truncated to one token (line 3).
    let mut bad = lines.clone();
    let first_token = bad[2].split(' ').next().unwrap().to_string();
    bad[2] = &first_token;
    let (file, line, reason) = load(&bad.join("\n"));
    assert_eq!((file.as_str(), line), ("merges.txt", Some(3)));
    assert!(reason.contains("two tokens"), "{reason}");
    // A merge naming a token that is not in the vocabulary.
    let (_, line, reason) = load(&format!("{merges}Ġzz q\n"));
    assert_eq!(line, Some(lines.len() + 1));
    assert!(reason.contains("\"Ġzz\"") && reason.contains("not in vocab.json"), "{reason}");
    // A merge whose result is not in the vocabulary: the files do not belong together.
    let (_, line, reason) = load(&format!("{merges}q q\n"));
    assert_eq!(line, Some(lines.len() + 1));
    assert!(reason.contains("\"qq\""), "{reason}");
    // Merges in the wrong order: line 2 uses what the last line makes.
    let mut swapped = lines.clone();
    let last = swapped.len() - 1;
    swapped.swap(1, last);
    let (_, line, reason) = load(&swapped.join("\n"));
    assert_eq!(line, Some(2));
    assert!(reason.contains("before any earlier line makes it"), "{reason}");
    // The same merge twice.
    let (_, line, reason) = load(&format!("{merges}{}\n", lines[1]));
    assert_eq!(line, Some(lines.len() + 1));
    assert!(reason.contains("twice"), "{reason}");
}

#[test]
fn missing_gpt2_files_are_io_errors_naming_the_path() {
    let err = Gpt2Tokenizer::from_files("/no/such/vocab.json", "/no/such/merges.txt").unwrap_err();
    assert!(matches!(&err, Error::Io { path, .. } if path == "/no/such/vocab.json"), "{err}");
}

// ───────────────────────────── corpus ─────────────────────────────

#[test]
fn default_corpus_is_at_least_200_kb_of_varied_text() {
    let text = corpus::default_corpus();
    assert!(text.len() >= 200_000, "{} bytes", text.len());
    assert!(text.is_ascii());
    // Every kind of piece is there.
    for marker in [
        "Once upon a time",
        "Moral: ",
        "\nQ: ",
        "\nA: ",
        "people live there",
        "the day after",
        "Together they had",
    ] {
        assert!(text.contains(marker), "{marker:?}");
    }
    let words: std::collections::HashSet<&str> = ngram::words(text).into_iter().collect();
    assert!(words.len() > 500, "{} distinct words", words.len());
}

#[test]
fn grammar_regenerates_the_committed_corpus_byte_for_byte() {
    let generated = corpus::generate(corpus::CORPUS_SEED, corpus::TARGET_BYTES);
    assert!(
        generated == corpus::default_corpus(),
        "data/corpus.txt differs from the grammar's output; if the grammar changed on purpose, \
            rewrite it with `cargo run --release --example ch08_corpus -- data/corpus.txt` (every \
            number of the chapter will change)"
    );
    assert_ne!(
        corpus::generate(corpus::CORPUS_SEED + 1, 5_000),
        generated[..generated.len().min(5_000)].to_string()
    );
}

#[test]
fn corpus_stories_keep_their_pronouns_and_names() {
    // Long-range structure: a story's hero comes back by name, and the pronouns agree.
    let text = corpus::default_corpus();
    let mut checked = 0;
    for story in text.split("\n\n").filter(|p| p.contains(" named ") && p.contains("When ")) {
        let body = story.lines().nth(1).unwrap_or("");
        let Some(hero) = body.split(" named ").nth(1).or_else(|| body.split(" called ").nth(1))
        else {
            continue;
        };
        let hero: String = hero.chars().take_while(|c| c.is_alphabetic()).collect();
        let second = story.lines().nth(2).unwrap_or("");
        if !body.contains("there lived") || hero.is_empty() {
            continue;
        }
        assert!(second.contains(&format!("When {hero} reached")), "{story}");
        checked += 1;
    }
    assert!(checked > 30, "{checked} stories checked");
}

#[test]
fn corpus_sums_and_calendars_are_right() {
    let text = corpus::default_corpus();
    let number = |w: &str| (0..=200).find(|&n| corpus::number_words(n) == w);
    let mut sums = 0;
    for s in text.split(" planted ").skip(1).filter(|s| s.split(' ').nth(1) == Some("rows")) {
        // "<r> rows of <c> trees, which makes <r·c> trees in all"
        let w: Vec<&str> = s.split([' ', ',']).filter(|w| !w.is_empty()).collect();
        let (r, c, t) = (number(w[0]).unwrap(), number(w[3]).unwrap(), number(w[7]).unwrap());
        assert_eq!(r * c, t, "{s}");
        sums += 1;
    }
    let days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
    let mut dates = 0;
    for s in text.split("If today is ").skip(1) {
        let w: Vec<&str> = s.split([' ', ',', '.']).filter(|w| !w.is_empty()).collect();
        let d = days.iter().position(|&x| x == w[0]).unwrap();
        assert_eq!((w[4], w[8]), (days[(d + 1) % 7], days[(d + 6) % 7]), "{s}");
        dates += 1;
    }
    assert!(sums > 10 && dates > 10, "{sums} sums, {dates} dates");
}

#[test]
fn corpus_file_with_invalid_utf8_is_refused_with_line_and_offset() {
    let dir = common::temp_dir("ch08-bad-corpus");
    let path = dir.join("latin1.txt");
    std::fs::write(&path, b"first line\ncaf\xe9 au lait\n").unwrap();
    let err = corpus::load(&path).unwrap_err();
    match &err {
        Error::Parse { file, line, reason } => {
            assert_eq!(file, &path.display().to_string());
            assert_eq!(*line, Some(2));
            assert!(reason.contains("byte 14") && reason.contains("0xE9"), "{reason}");
        }
        e => panic!("{e}"),
    }
    assert!(err.to_string().contains("latin1.txt:2:"), "{err}");
}

#[test]
fn empty_or_missing_corpus_file_is_refused() {
    let dir = common::temp_dir("ch08-empty-corpus");
    let path = dir.join("empty.txt");
    std::fs::write(&path, b"").unwrap();
    let err = corpus::load(&path).unwrap_err();
    assert!(
        matches!(&err, Error::Parse { line: None, .. }) && err.to_string().contains("empty"),
        "{err}"
    );
    let err = corpus::load(dir.join("absent.txt")).unwrap_err();
    assert!(matches!(&err, Error::Io { path, .. } if path.ends_with("absent.txt")), "{err}");
}

#[test]
fn a_user_corpus_replaces_the_default() {
    let dir = common::temp_dir("ch08-user-corpus");
    let path = dir.join("mine.txt");
    std::fs::write(&path, "größer als ein Haus\nzweite Zeile\n").unwrap();
    let text = corpus::load(&path).unwrap();
    let chars = CharTokenizer::from_text(&text).unwrap();
    assert!(chars.id('ö').is_some() && chars.id('ß').is_some());
    assert_eq!(chars.decode(&chars.encode(&text).unwrap()).unwrap(), text);
    let (train, validation) = corpus::split(&text);
    assert_eq!(format!("{train}{validation}"), text);
    assert!(!train.is_empty() && !validation.is_empty());
}

#[test]
fn split_holds_out_the_last_tenth_from_a_line_start() {
    let text = corpus::default_corpus();
    let (train, validation) = corpus::split(text);
    assert_eq!(train.len() + validation.len(), text.len());
    assert!(train.ends_with('\n'));
    let share = validation.len() as f64 / text.len() as f64;
    assert!((0.09..=0.1).contains(&share), "{share}");
    for s in ["ab", "a\u{e9}\u{1F600}", "line\n", "x\ny"] {
        let (a, b) = corpus::split(s);
        assert!(!a.is_empty() && !b.is_empty(), "{s:?}");
        assert_eq!(format!("{a}{b}"), s);
    }
}

// ───────────────────────────── characters ─────────────────────────────

#[test]
fn char_tokenizer_round_trips_the_corpus_in_code_point_order() {
    let text = corpus::default_corpus();
    let t = CharTokenizer::from_text(text).unwrap();
    assert_eq!(t.vocab_size(), 72);
    assert!(t.chars().windows(2).all(|w| w[0] < w[1]));
    assert_eq!(t.id('\n'), Some(0));
    assert_eq!(t.id(' '), Some(1));
    let ids = t.encode(text).unwrap();
    assert_eq!(ids.len(), text.chars().count());
    assert_eq!(t.decode(&ids).unwrap(), text);
}

#[test]
fn char_tokenizer_refuses_unknown_characters_and_ids() {
    let t = CharTokenizer::from_text("abc").unwrap();
    assert_eq!(t.encode("cab").unwrap(), [2, 0, 1]);
    let err = t.encode("abd").unwrap_err();
    assert!(matches!(err, Error::InvalidValue { .. }));
    let msg = err.to_string();
    assert!(msg.contains("'d'") && msg.contains("U+0064") && msg.contains("character 2"), "{msg}");
    let err = t.decode(&[0, 3]).unwrap_err();
    assert!(err.to_string().contains("ids[1] = 3"), "{err}");
    assert!(matches!(CharTokenizer::from_text(""), Err(Error::Empty { .. })));
}

// ───────────────────────────── byte-pair encoding ─────────────────────────────

fn train(text: &str, vocab_size: usize, pre_tokenizer: PreTokenizer) -> bpe::Training {
    bpe::train(text, BpeConfig { vocab_size, pre_tokenizer }).unwrap()
}

fn shown(b: &Bpe, ids: &[TokenId]) -> Vec<String> {
    ids.iter().map(|&id| b.token_text(id)).collect()
}

#[test]
fn textbook_aaabdaaabac_ends_as_x_d_x_a_c_after_three_merges() {
    let t = train("aaabdaaabac", 259, PreTokenizer::None);
    let m = t.bpe.merges();
    // (a, a) occurs four times (twice inside each "aaa").
    assert_eq!((m[0].pair, m[0].count), ((97, 97), 4));
    // Then (aa, a) and (a, b) both occur twice; (aa, a) occurs first, at byte 0.
    assert_eq!((m[1].pair, m[1].count), ((256, 97), 2));
    assert_eq!((m[2].pair, m[2].count), ((257, 98), 2));
    assert_eq!(shown(&t.bpe, &t.tokens), ["aaab", "d", "aaab", "a", "c"]);
    let x = 258;
    assert_eq!(t.tokens, [x, u32::from(b'd'), x, u32::from(b'a'), u32::from(b'c')]);
    assert_eq!(t.bpe.encode("aaabdaaabac").unwrap(), t.tokens);
    // No pair occurs twice any more: a fourth merge is refused.
    let err =
        bpe::train("aaabdaaabac", BpeConfig { vocab_size: 260, pre_tokenizer: PreTokenizer::None })
            .unwrap_err();
    assert!(err.to_string().contains("at most 259 tokens (3 merges"), "{err}");
}

#[test]
fn overlapping_pairs_count_twice_but_merge_once_from_the_left() {
    let t = train("aaa.aaa", 257, PreTokenizer::None);
    assert_eq!(t.bpe.merges()[0].count, 4);
    assert_eq!(shown(&t.bpe, &t.tokens), ["aa", "a", ".", "aa", "a"]);
    let t = train("aaaaa", 257, PreTokenizer::None);
    assert_eq!(t.bpe.merges()[0].count, 4);
    assert_eq!(shown(&t.bpe, &t.tokens), ["aa", "aa", "a"]);
    assert_eq!(shown(&t.bpe, &t.bpe.encode("aaaaaaa").unwrap()), ["aa", "aa", "aa", "a"]);
}

#[test]
fn ties_go_to_the_pair_that_occurs_first() {
    // "xy" and "ab" both occur twice; "ab" comes first in the text.
    let t = train("ab xy ab xy", 257, PreTokenizer::None);
    assert_eq!(shown(&t.bpe, &[t.bpe.merges()[0].id]), ["ab"]);
    let t = train("xy ab xy ab", 257, PreTokenizer::None);
    assert_eq!(shown(&t.bpe, &[t.bpe.merges()[0].id]), ["xy"]);
}

/// The definition, followed literally: recount every pair before each merge.
fn naive_merges(pieces: &[&str], merges: usize) -> Vec<((TokenId, TokenId), usize)> {
    let mut seqs: Vec<Vec<TokenId>> =
        pieces.iter().map(|p| p.bytes().map(TokenId::from).collect()).collect();
    let mut out = vec![];
    for k in 0..merges {
        let mut counts: std::collections::HashMap<(TokenId, TokenId), (usize, usize)> =
            Default::default();
        let mut position = 0;
        for s in &seqs {
            for w in s.windows(2) {
                counts.entry((w[0], w[1])).or_insert((0, position)).0 += 1;
                position += 1;
            }
            position += 1;
        }
        let Some((&pair, &(count, _))) =
            counts.iter().max_by_key(|&(_, &(c, first))| (c, std::cmp::Reverse(first)))
        else {
            break;
        };
        if count < 2 {
            break;
        }
        let id = (BYTE_VOCAB + k) as TokenId;
        for s in &mut seqs {
            let mut merged = Vec::with_capacity(s.len());
            let mut i = 0;
            while i < s.len() {
                if i + 1 < s.len() && (s[i], s[i + 1]) == pair {
                    merged.push(id);
                    i += 2;
                } else {
                    merged.push(s[i]);
                    i += 1;
                }
            }
            *s = merged;
        }
        out.push((pair, count));
    }
    out
}

#[test]
fn incremental_counting_agrees_with_recounting_from_scratch() {
    let mut rng = Rng::new(3);
    let mut texts: Vec<String> = (0..40)
        .map(|_| (0..rng.below(300) + 2).map(|_| ['a', 'b', 'c', ' ', 'a'][rng.below(5)]).collect())
        .collect();
    texts.push(corpus::default_corpus()[..6_000].to_string());
    texts.push("ééé ü ü ü 😀😀😀".to_string());
    for text in &texts {
        for pre in [PreTokenizer::None, PreTokenizer::Gpt2] {
            let pieces = pre.pieces(text);
            let want = naive_merges(&pieces, 60);
            let t = train(text, BYTE_VOCAB + want.len(), pre);
            let got: Vec<_> = t.bpe.merges().iter().map(|m| (m.pair, m.count)).collect();
            assert_eq!(got, want, "{pre:?} {text:?}");
        }
    }
}

#[test]
fn encoding_the_training_text_reproduces_the_training_sequence() {
    let text = &corpus::default_corpus()[..60_000];
    for pre in [PreTokenizer::None, PreTokenizer::Gpt2] {
        let t = train(text, 600, pre);
        assert_eq!(t.bpe.encode(text).unwrap(), t.tokens, "{pre:?}");
        assert_eq!(t.bpe.decode(&t.tokens).unwrap(), text);
        assert!(t.tokens.len() < text.len() / 2, "{} tokens", t.tokens.len());
    }
}

#[test]
fn gpt2_pre_tokenization_keeps_merges_inside_pieces() {
    let text = &corpus::default_corpus()[..30_000];
    let t = train(text, 500, PreTokenizer::Gpt2);
    for m in t.bpe.merges() {
        let piece = t.bpe.token_bytes(m.id).unwrap();
        let piece = String::from_utf8(piece).unwrap();
        assert_eq!(
            gpt2::split(&piece),
            [piece.as_str()],
            "merge {piece:?} crosses a piece boundary"
        );
    }
    // Without it, merges do cross word boundaries (e.g. "e " or "d t").
    let free = train(text, 500, PreTokenizer::None);
    let crossing = free
        .bpe
        .merges()
        .iter()
        .filter(|m| {
            let s = String::from_utf8(free.bpe.token_bytes(m.id).unwrap()).unwrap();
            gpt2::split(&s).len() > 1
        })
        .count();
    assert!(crossing > 20, "{crossing}");
}

#[test]
fn bpe_decode_inverts_encode_on_random_unicode() {
    let text = corpus::default_corpus();
    let mut multi = text[..20_000].to_string();
    multi.push_str(&"éàü 中文 😀 ".repeat(50));
    let tokenizers =
        [train(&multi, 420, PreTokenizer::None).bpe, train(&multi, 420, PreTokenizer::Gpt2).bpe];
    let mut rng = Rng::new(2024);
    let mut strings: Vec<String> = (0..400).map(|_| random_unicode(&mut rng, 30)).collect();
    strings.push(String::new());
    strings.push(text[100_000..101_000].to_string());
    for b in &tokenizers {
        for s in &strings {
            let ids = b.encode(s).unwrap();
            assert!(ids.iter().all(|&id| (id as usize) < b.vocab_size()));
            assert_eq!(b.decode(&ids).unwrap(), *s);
        }
    }
    assert!(tokenizers[0].encode("").unwrap().is_empty());
}

#[test]
fn bpe_refuses_bad_vocabulary_sizes_and_empty_text() {
    let err =
        bpe::train("some text", BpeConfig { vocab_size: 255, pre_tokenizer: PreTokenizer::None })
            .unwrap_err();
    assert!(
        matches!(err, Error::InvalidValue { arg: "vocab_size", .. })
            && err.to_string().contains("256"),
        "{err}"
    );
    let err =
        bpe::train("abcabc", BpeConfig { vocab_size: 300, pre_tokenizer: PreTokenizer::None })
            .unwrap_err();
    assert!(err.to_string().contains("at most 258 tokens (2 merges"), "{err}");
    assert!(matches!(
        bpe::train("", BpeConfig { vocab_size: 256, pre_tokenizer: PreTokenizer::None }),
        Err(Error::Empty { .. })
    ));
    assert_eq!(train("x", 256, PreTokenizer::None).tokens, [u32::from(b'x')]);
    let err = train("ab ab", 257, PreTokenizer::None).bpe.decode(&[257]).unwrap_err();
    assert!(err.to_string().contains("ids[0] = 257"), "{err}");
    assert!(Bpe::from_merges(&[(300, 1)], PreTokenizer::None).is_err());
    assert!(Bpe::from_merges(&[(1, 2), (1, 2)], PreTokenizer::None).is_err());
}

#[test]
fn bpe_from_saved_merges_equals_the_trained_one() {
    let text = &corpus::default_corpus()[..20_000];
    let t = train(text, 300, PreTokenizer::Gpt2);
    let pairs: Vec<_> = t.bpe.merges().iter().map(|m| m.pair).collect();
    let rebuilt = Bpe::from_merges(&pairs, PreTokenizer::Gpt2).unwrap();
    assert_eq!(rebuilt.encode(text).unwrap(), t.tokens);
}

#[test]
fn merges_of_a_small_corpus() {
    let text = corpus::default_corpus().split("\n\n").nth(2).unwrap();
    let t = train(text, 256 + 40, PreTokenizer::None);
    common::snap_text!(
        "bpe_merges_small_corpus",
        format!("text: {} bytes → {} tokens\n{}", text.len(), t.tokens.len(), t.bpe.merges_text())
    );
}

// ───────────────────────────── n-grams ─────────────────────────────

fn ids(s: &str) -> Vec<TokenId> {
    s.bytes().map(|b| TokenId::from(b - b'a')).collect()
}

#[test]
fn mle_is_the_count_ratio() {
    // "abab" + "ac": after 'a' come b, b, c.
    let m = NGramModel::fit(&ids("ababac"), 2, 3).unwrap();
    assert_eq!(m.mle(&ids("a"), 1), Some(2.0 / 3.0));
    assert_eq!(m.mle(&ids("a"), 2), Some(1.0 / 3.0));
    assert_eq!(m.mle(&ids("a"), 0), Some(0.0));
    assert_eq!(m.mle(&ids("b"), 0), Some(1.0));
    // Only the last n − 1 tokens of a longer context count.
    assert_eq!(m.mle(&ids("cccb"), 0), Some(1.0));
    // The unigram level: a 3 of 6, b 2 of 6, c 1 of 6.
    let u = NGramModel::fit(&ids("ababac"), 1, 3).unwrap();
    assert_eq!(u.mle(&[], 0), Some(0.5));
    assert_eq!(u.mle(&ids("bbb"), 2), Some(1.0 / 6.0));
}

#[test]
fn an_unseen_context_has_no_estimate() {
    let m = NGramModel::fit(&ids("ababac"), 3, 3).unwrap();
    // "ca" never occurred (c is the last token), so #(c, x)/#(c) is 0/0.
    assert_eq!(m.mle(&ids("ca"), 0), None);
    assert!(m.followers(&ids("ca")).is_none());
    let err = m.cross_entropy(&ids("cab"), Estimator::MaximumLikelihood).unwrap_err();
    assert!(err.to_string().contains("never occurred in training"), "{err}");
    // A seen context followed by a token it was never followed by: probability 0.
    let err = m.cross_entropy(&ids("abc"), Estimator::MaximumLikelihood).unwrap_err();
    assert!(err.to_string().contains("probability 0"), "{err}");
    // Smoothing and backoff give an answer in both cases.
    for e in [Estimator::AddK(0.5), Estimator::Backoff(0.75)] {
        assert!(m.cross_entropy(&ids("cab"), e).unwrap().is_finite());
        assert!(m.probability(&ids("ca"), 0, e).unwrap() > 0.0);
    }
    // Unseen contexts in the corpus's validation part, for n ≥ 3.
    let (_, train, validation) = llm_workbook::ch08_tokens::char_data().unwrap();
    let m = NGramModel::fit(&train, 3, 72).unwrap();
    let (unseen, zero, _) = m.mle_failures(&validation);
    assert!(unseen > 0 && zero > 0, "{unseen} {zero}");
    assert!(m.cross_entropy(&validation, Estimator::MaximumLikelihood).is_err());
}

#[test]
fn add_k_and_backoff_sum_to_one_over_the_vocabulary() {
    let (tok, train, _) = llm_workbook::ch08_tokens::char_data().unwrap();
    let v = tok.vocab_size();
    let m = NGramModel::fit(&train[..50_000], 4, v).unwrap();
    let contexts = [
        tok.encode("the").unwrap(),
        tok.encode("Q: ").unwrap(),
        tok.encode("zzz").unwrap(),
        tok.encode("").unwrap(),
        tok.encode("x").unwrap(),
    ];
    for ctx in &contexts {
        for e in [
            Estimator::AddK(1.0),
            Estimator::AddK(0.01),
            Estimator::Backoff(0.75),
            Estimator::Backoff(0.1),
        ] {
            let total: f64 = (0..v as TokenId).map(|x| m.probability(ctx, x, e).unwrap()).sum();
            assert!((total - 1.0).abs() < 1e-12, "{e:?} {ctx:?}: {total}");
        }
        if m.followers(ctx).is_some() {
            let total: f64 = (0..v as TokenId).map(|x| m.mle(ctx, x).unwrap()).sum();
            assert!((total - 1.0).abs() < 1e-12);
        }
    }
}

#[test]
fn add_k_and_backoff_by_hand() {
    let m = NGramModel::fit(&ids("ababac"), 2, 3).unwrap();
    // After a: b twice, c once, a never; |V| = 3.
    assert!((m.add_k(&ids("a"), 1, 1.0) - 3.0 / 6.0).abs() < 1e-15);
    assert!((m.add_k(&ids("a"), 0, 1.0) - 1.0 / 6.0).abs() < 1e-15);
    // Backoff, d = 0.5: unigram level: a 3, b 2, c 1 of 6, three kinds seen;
    // P(b) = (2 − 0.5)/6 + 0.5·3/6 · 1/3 = 0.25 + 0.0833… = 1/3.
    let p_b = (2.0 - 0.5) / 6.0 + 0.5 * 3.0 / 6.0 / 3.0;
    assert!((m.backoff(&[], 1, 0.5) - p_b).abs() < 1e-15);
    // Bigram level after a: (2 − 0.5)/3 + 0.5·2/3 · P(b) (two kinds, b and c, followed a).
    let want = 1.5 / 3.0 + 0.5 * 2.0 / 3.0 * p_b;
    assert!((m.backoff(&ids("a"), 1, 0.5) - want).abs() < 1e-15);
}

#[test]
fn n_gram_inputs_are_checked() {
    assert!(NGramModel::fit(&[0, 1], 0, 2).is_err());
    assert!(matches!(NGramModel::fit(&[], 2, 2), Err(Error::Empty { .. })));
    let err = NGramModel::fit(&[0, 5], 2, 3).unwrap_err();
    assert!(err.to_string().contains("tokens[1] = 5"), "{err}");
    let m = NGramModel::fit(&[0, 1, 0], 2, 2).unwrap();
    assert!(m.cross_entropy(&[], Estimator::AddK(1.0)).is_err());
    assert!(m.cross_entropy(&[0, 2], Estimator::AddK(1.0)).is_err());
    assert!(m.cross_entropy(&[0, 1], Estimator::AddK(0.0)).is_err());
    assert!(m.cross_entropy(&[0, 1], Estimator::AddK(f64::NAN)).is_err());
    assert!(m.cross_entropy(&[0, 1], Estimator::Backoff(1.0)).is_err());
}

#[test]
fn baseline_for_n_1_to_5() {
    let rows = llm_workbook::ch08_tokens::char_baseline().unwrap();
    assert_eq!(rows.len(), 5);
    let ln_v = (72f64).ln();
    // Each longer context helps on held-out text, and every model beats the uniform guess.
    assert!(rows[0].backoff < ln_v);
    for w in rows.windows(2) {
        assert!(w[1].backoff < w[0].backoff, "{w:?}");
        assert!(w[1].add_k < w[0].add_k, "{w:?}");
        assert!(w[1].unseen_context_share >= w[0].unseen_context_share);
    }
    // Training text is easier than held-out text, more so as n grows (memorisation).
    for r in &rows {
        assert!(r.backoff_train <= r.backoff + 1e-9, "{r:?}");
    }
    assert!(rows[4].backoff - rows[4].backoff_train > rows[0].backoff - rows[0].backoff_train);
    let table: String = rows
        .iter()
        .map(|r| {
            format!(
                "n = {}: contexts {:>5}, unseen {:.4}, add-k {:.4}, backoff {:.4}, backoff on \
                    training {:.4}\n",
                r.n, r.contexts, r.unseen_context_share, r.add_k, r.backoff, r.backoff_train
            )
        })
        .collect();
    common::snap_text!("char_baseline_nats_per_char", table);
}

#[test]
fn character_backoff_keeps_improving_past_n_5_0_5922_0_5322_0_4809() {
    // The prose's reason for holding chapter 9 to a better bar than the 5-gram: on this
    // grammar-made corpus, longer character contexts keep helping up to n = 10 and then stop.
    let (tok, train, validation) = llm_workbook::ch08_tokens::char_data().unwrap();
    let rows = ngram::baseline(
        &train,
        &validation,
        tok.vocab_size(),
        11,
        llm_workbook::ch08_tokens::ADD_K,
        ngram::DEFAULT_DISCOUNT,
    )
    .unwrap();
    let backoff = |n: usize| rows[n - 1].backoff;
    for (n, printed) in [(6, 0.5922), (7, 0.5322), (10, 0.4809)] {
        assert!((backoff(n) - printed).abs() < 5e-5, "n = {n}: {:.4}", backoff(n));
    }
    assert!(backoff(6) < backoff(5) && backoff(10) < backoff(9), "{rows:?}");
    assert!(backoff(11) > backoff(10), "n = 11 should be past the best: {rows:?}");
}

#[test]
fn the_unigram_cross_entropy_is_the_entropy_of_the_character_frequencies() {
    // An independent check of the n = 1 row: with k → 0 the add-k unigram model is the
    // training frequencies, whose cross-entropy on the validation text is −Σ q(x) ln p(x).
    let (tok, train, validation) = llm_workbook::ch08_tokens::char_data().unwrap();
    let v = tok.vocab_size();
    let mut p = vec![0f64; v];
    for &t in &train {
        p[t as usize] += 1.0;
    }
    let k = 1e-9;
    let total: f64 = p.iter().sum::<f64>() + k * v as f64;
    let direct: f64 = validation.iter().map(|&t| -((p[t as usize] + k) / total).ln()).sum::<f64>()
        / validation.len() as f64;
    let m = NGramModel::fit(&train, 1, v).unwrap();
    assert!((m.cross_entropy(&validation, Estimator::AddK(k)).unwrap() - direct).abs() < 1e-9);
}

#[test]
fn samples_only_use_transitions_seen_in_training() {
    let (tok, train, _) = llm_workbook::ch08_tokens::char_data().unwrap();
    let mut rng = Rng::new(5);
    for n in 2..=4 {
        let m = NGramModel::fit(&train, n, tok.vocab_size()).unwrap();
        let s = m.sample(500, &mut rng);
        for i in 1..s.len() {
            let ctx = &s[i.saturating_sub(n - 1)..i];
            assert!(m.mle(ctx, s[i]).unwrap() > 0.0, "n = {n}, position {i}");
        }
    }
    let u = ngram::sample_uniform(72, 10_000, &mut rng);
    assert!(u.iter().all(|&t| t < 72));
    let distinct: std::collections::HashSet<_> = u.iter().collect();
    assert_eq!(distinct.len(), 72);
}

#[test]
fn shannon_series_from_the_corpus() {
    let samples = llm_workbook::ch08_tokens::shannon_samples().unwrap();
    assert_eq!(samples.len(), 6);
    assert_eq!(
        samples,
        llm_workbook::ch08_tokens::shannon_samples().unwrap(),
        "seeded, so repeatable"
    );
    // Higher orders produce more real words.
    let real: std::collections::HashSet<&str> =
        ngram::words(corpus::default_corpus()).into_iter().collect();
    let share = |s: &str| {
        let w = ngram::words(s);
        w.iter().filter(|w| real.contains(*w)).count() as f64 / w.len().max(1) as f64
    };
    let shares: Vec<f64> = samples[..4].iter().map(|(_, s)| share(s)).collect();
    assert!(shares[1] < shares[2] && shares[2] < shares[3], "{shares:?}");
    assert_eq!(share(&samples[4].1), 1.0);
    let text: String = samples.iter().map(|(label, s)| format!("{label}:\n{s}\n\n")).collect();
    common::snap_text!("shannon_samples", text);
}

#[test]
fn words_keep_apostrophes_and_split_punctuation() {
    assert_eq!(
        ngram::words("Mira's cat, \"Pip\", purred."),
        ["Mira's", "cat", ",", "\"", "Pip", "\"", ",", "purred", "."]
    );
    let v = WordVocab::from_text("b a. a").unwrap();
    assert_eq!(v.len(), 3);
    assert_eq!(v.render(&v.encode("a b. a").unwrap()), "a b. a");
    assert!(v.encode("c").is_err());
    assert!(WordVocab::from_text("   ").is_err());
}

// ───────────────────────────── the chapter ─────────────────────────────

#[test]
fn figures_plot_the_baseline_against_n() {
    let figs = llm_workbook::ch08_tokens::book::figures().unwrap();
    assert_eq!(figs.len(), 1);
    let llm_workbook::plot::Figure::Line(chart) = &figs[0].1 else { panic!("a line chart") };
    assert_eq!(figs[0].0, "ch08_ngram_loss");
    let rows = llm_workbook::ch08_tokens::char_baseline().unwrap();
    assert_eq!(chart.series.len(), 3);
    assert_eq!(
        chart.series[1].points,
        rows.iter().map(|r| (r.n as f64, r.backoff)).collect::<Vec<_>>()
    );
    let dir = common::temp_dir("ch08-plots");
    let (stem, fig) = &figs[0];
    let files = fig.save(&dir, stem).unwrap();
    assert!(files.iter().all(|f| std::fs::metadata(f).unwrap().len() > 1_000));
}

#[test]
fn walk_prints_the_samples_and_the_table() {
    let text = common::walk_text(&llm_workbook::ch08_tokens::book::CHAPTER);
    for needle in
        ["third-order characters", "second-order words", "[aaab][d][aaab][a][c]", "backoff (train)"]
    {
        assert!(text.contains(needle), "{needle}");
    }
}

#[test]
fn chapter_prose_carries_the_tables() {
    common::check_chapter_prose(&llm_workbook::ch08_tokens::book::CHAPTER);
}

// ───────────── properties (proptest) ─────────────

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// A byte-level BPE trained once on the corpus plus some non-ASCII text, with GPT-2's
    /// pre-tokenizer: it must still round-trip text it never saw (any UTF-8 through its bytes).
    fn small_bpe() -> &'static Bpe {
        static B: OnceLock<Bpe> = OnceLock::new();
        B.get_or_init(|| {
            let mut text = corpus::default_corpus()[..10_000].to_string();
            text.push_str(&"naïve café 東京 🙂 ".repeat(20));
            train(&text, 360, PreTokenizer::Gpt2).bpe
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn char_tokenizer_round_trips_any_text_over_its_own_characters(s in "\\PC{1,60}") {
            let t = CharTokenizer::from_text(&s).unwrap();
            let ids = t.encode(&s).unwrap();
            prop_assert_eq!(ids.len(), s.chars().count());
            prop_assert!(ids.iter().all(|&id| (id as usize) < t.vocab_size()));
            prop_assert_eq!(t.decode(&ids).unwrap(), s);
        }

        #[test]
        fn bpe_round_trips_arbitrary_utf8(s in any::<String>()) {
            let b = small_bpe();
            let ids = b.encode(&s).unwrap();
            prop_assert!(ids.iter().all(|&id| (id as usize) < b.vocab_size()));
            prop_assert!(ids.len() <= s.len(), "never more tokens than bytes");
            prop_assert_eq!(b.decode(&ids).unwrap(), s);
        }

        #[test]
        fn gpt2_round_trips_arbitrary_utf8_and_agrees_with_tiktoken(s in any::<String>()) {
            let ids = gpt2().encode(&s).unwrap();
            prop_assert!(ids.len() <= s.len());
            prop_assert_eq!(&gpt2().decode(&ids).unwrap(), &s);
            let theirs: Vec<TokenId> = oracle().encode_ordinary(&s);
            prop_assert_eq!(ids, theirs);
        }
    }
}

#[path = "fuzz/harness.rs"]
mod fuzz_harness;

/// The fuzz corpora of the GPT-2 files and BPE round-trip targets replayed (see
/// tests/fuzz/harness.rs and README, "Fuzzing"): every committed input must load or be refused,
/// and every text must come back from encode then decode, never a panic.
mod fuzz_corpus_replay {
    use super::common::{fuzz_seed_writer, replay_fuzz_corpus};
    use super::fuzz_harness as h;

    #[test]
    fn gpt2_files_corpus_replays_without_a_panic() {
        replay_fuzz_corpus("gpt2_files", 10, h::gpt2_files);
    }

    #[test]
    fn bpe_roundtrip_corpus_replays_without_a_panic() {
        replay_fuzz_corpus("bpe_roundtrip", 10, h::bpe_roundtrip);
    }

    #[test]
    fn the_replay_notices_a_panic() {
        // A replay that could not fail would prove nothing: a target that panics on every input
        // must make it fail, and so must a missing corpus.
        let r = std::panic::catch_unwind(|| {
            replay_fuzz_corpus("bpe_roundtrip", 1, |_| panic!("planted"))
        });
        assert!(r.is_err());
        let r = std::panic::catch_unwind(|| replay_fuzz_corpus("no_such_target", 1, |_| {}));
        assert!(r.is_err());
    }

    /// Writes the seed inputs of the two targets into `$FUZZ_SEEDS_OUT/<target>/` (never into
    /// the source tree by itself). Run by hand when the formats change:
    /// `FUZZ_SEEDS_OUT=/tmp/seeds cargo test --test ch08_tokens -- --ignored write_fuzz_seeds`.
    #[test]
    #[ignore = "writes seed files; run by hand"]
    fn write_fuzz_seeds() {
        let write = fuzz_seed_writer();
        let (v, m) = super::small_gpt2_files();
        write("gpt2_files", "small", &h::join_with_prefix(v.as_bytes(), m.as_bytes()));
        let (v, m) =
            llm_workbook::ch08_tokens::gpt2::to_gpt2_files(&h::fuzz_tokenizers().0).unwrap();
        write("gpt2_files", "fuzz_tokenizer", &h::join_with_prefix(v.as_bytes(), m.as_bytes()));
        let no_version = m.lines().skip(1).collect::<Vec<_>>().join("\r\n");
        write(
            "gpt2_files",
            "crlf_no_version",
            &h::join_with_prefix(v.as_bytes(), no_version.as_bytes()),
        );
        let text = llm_workbook::ch08_tokens::corpus::default_corpus();
        for (k, line) in text.lines().filter(|l| !l.is_empty()).step_by(40).take(6).enumerate() {
            write("bpe_roundtrip", &format!("corpus_{k}"), line.as_bytes());
        }
        write(
            "bpe_roundtrip",
            "unicode",
            "naïve café — 東京 😀 it's 12,5 l\u{a0}\t\n\n  x".as_bytes(),
        );
        write("bpe_roundtrip", "invalid_utf8", b"ab\xff\xfe cd \xe2\x82");
    }
}
