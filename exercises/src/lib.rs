//! # The exercises of llm-workbook
//!
//! One file per chapter (`src/chNN_stem.rs`); each exercise is a function with the signature of
//! the main crate's own, a doc comment saying what to compute (the shapes, the formula in the
//! chapter's symbols, the section that teaches it) and the body `todo!()`. Replace the `todo!()`
//! with your answer and let the judge grade it:
//!
//! - `cargo test -p llm-workbook-exercises --test ch01_logistic` judges one chapter;
//! - `cargo run --release -- exercises` (at the repository root) prints a progress table, and
//!   `-- exercises --watch` re-judges whenever you save a file here.
//!
//! Each chapter's answers compile on their own, in that chapter's judge target: a syntax error in
//! one chapter leaves the other chapters judged.
//!
//! The judges ([`judge`]) grade with what the chapters have: the documents' worked numbers, the
//! finite-difference gradient checker, the invariants and the reference implementation on random
//! inputs. The feature `solutions` answers every exercise with the main crate's function (that is
//! how CI proves each judge passes a right answer; `tests/planted.rs` proves each one fails a
//! planted mistake). Nothing written here can break the main crate's `cargo test`.

// With `solutions`, each body returns before its `todo!()`; without, the arguments are unused.
#![cfg_attr(feature = "solutions", allow(unreachable_code))]
#![cfg_attr(not(feature = "solutions"), allow(unused_variables))]

// The answer files name this crate as the judge targets see it, also when `cargo doc` compiles
// them here.
extern crate self as llm_workbook_exercises;

pub mod judge;
pub mod results;
pub mod solutions;

// Your answers are compiled by their chapter's judge target (`tests/chNN_stem.rs` includes
// `src/chNN_stem.rs`), each chapter on its own: a half-written answer in one chapter never stops
// another chapter's judge. The library compiles them only for `cargo doc`, which shows what each
// exercise asks.

#[cfg(doc)]
pub mod ch01_logistic;
#[cfg(doc)]
pub mod ch02_softmax;
#[cfg(doc)]
pub mod ch03_mlp;
#[cfg(doc)]
pub mod ch04_xor;
#[cfg(doc)]
pub mod ch05_positions;
#[cfg(doc)]
pub mod ch06_attention;
#[cfg(doc)]
pub mod ch07_encoder_decoder;
#[cfg(doc)]
pub mod ch08_tokens;
#[cfg(doc)]
pub mod ch09_gpt;
#[cfg(doc)]
pub mod ch10_matmul;
#[cfg(doc)]
pub mod ch11_precision;
