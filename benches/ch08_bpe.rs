//! How long byte-level BPE takes on 1 MB of text: `cargo bench --bench ch08_bpe`.
//!
//! The text is 1 MB written by the corpus grammar (another seed than the default corpus). For each
//! pre-tokenization, the benchmark trains to 1,024 tokens (768 merges), then encodes the same
//! megabyte with the result, and prints wall-clock times. A plain binary (no harness), so the
//! numbers are printed, not asserted: speed is never a test.

use llm_workbook::ch08_tokens::Tokenizer;
use llm_workbook::ch08_tokens::bpe::{self, BpeConfig, PreTokenizer};
use llm_workbook::ch08_tokens::corpus;
use std::time::Instant;

fn main() {
    let text = corpus::generate(7, 1_000_000);
    println!("text: {} bytes", text.len());
    for pre in [PreTokenizer::None, PreTokenizer::Gpt2] {
        let start = Instant::now();
        let trained = match bpe::train(&text, BpeConfig { vocab_size: 1024, pre_tokenizer: pre }) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        };
        let train_s = start.elapsed().as_secs_f64();
        let start = Instant::now();
        let ids = trained.bpe.encode(&text).unwrap_or_default();
        let encode_s = start.elapsed().as_secs_f64();
        println!(
            "{pre:?}: train to 1024 tokens {train_s:.2} s; encode {encode_s:.2} s; {} tokens \
                ({:.2} bytes/token); same as training: {}",
            ids.len(),
            text.len() as f64 / ids.len() as f64,
            ids == trained.tokens
        );
    }
}
