//! Writes the default corpus from the grammar in `src/ch08_tokens/corpus.rs`:
//! `cargo run --release --example ch08_corpus -- data/corpus.txt`. The committed file was written
//! this way; a test checks that the grammar still reproduces it byte for byte.

use llm_workbook::ch08_tokens::corpus::{CORPUS_SEED, TARGET_BYTES, generate};

fn main() -> std::process::ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: ch08_corpus <output file>");
        return std::process::ExitCode::FAILURE;
    };
    let text = generate(CORPUS_SEED, TARGET_BYTES);
    if let Err(e) = std::fs::write(&path, &text) {
        eprintln!("error: {path}: {e}");
        return std::process::ExitCode::FAILURE;
    }
    println!("wrote {} bytes, {} lines to {path}", text.len(), text.lines().count());
    std::process::ExitCode::SUCCESS
}
