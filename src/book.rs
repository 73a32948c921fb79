//! The table of contents: every chapter, in order, as the main job walks them.
//!
//! Adding a chapter means adding its `CHAPTER` constant to [`chapters`]; nothing else in the main
//! job changes.

use crate::errata::Erratum;
use crate::report::Chapter;

/// All chapters in reading order (one line each).
#[rustfmt::skip]
pub fn chapters() -> Vec<Chapter> {
    vec![
        crate::ch01_logistic::CHAPTER,
        crate::ch02_softmax::CHAPTER,
        crate::ch03_mlp::CHAPTER,
        crate::ch04_xor::CHAPTER,
        crate::ch05_positions::CHAPTER,
        crate::ch06_attention::CHAPTER,
        crate::ch07_encoder_decoder::CHAPTER,
        crate::ch08_tokens::CHAPTER,
        crate::ch09_gpt::CHAPTER,
        crate::ch10_matmul::CHAPTER,
    ]
}

/// The chapter with this number, if it exists.
pub fn chapter(number: u32) -> Option<Chapter> {
    chapters().into_iter().find(|c| c.number == number)
}

/// The errata register: every erratum of every chapter, with the chapter's stem.
pub fn errata_register() -> Vec<(&'static str, &'static Erratum)> {
    chapters().into_iter().flat_map(|c| c.errata.iter().map(move |e| (c.stem, e))).collect()
}
