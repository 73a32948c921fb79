//! Chapter 5: sinusoidal position encodings.
//!
//! Attention treats its input as a set: permute the tokens and the outputs permute with them.
//! Word order enters only through a matrix added to the token embeddings, one row per position.
//! The sinusoidal encoding of the original transformer fills that row with sines and cosines of
//! the position at d/2 geometrically spaced frequencies:
//!
//! ```text
//! ωᵢ = 1 / 10000^(2i/d)            i = 0 … d/2 − 1
//! PE(pos, 2i)   = sin(pos · ωᵢ)
//! PE(pos, 2i+1) = cos(pos · ωᵢ)
//! ```
//!
//! Both members of a pair share the frequency ωᵢ, which is what makes PE(pos + k) a rotation of
//! PE(pos) ([`shift_operator`]) and the dot product of two encodings a function of their offset
//! alone ([`dot_at_offset`]).
//!
//! D3 prints encodings for d = 4 that follow a different exponent from the one it
//! states; [`Reading`] names both, and [`with_exponents`] evaluates any exponent list so every
//! printed variant can be reproduced. The prose is `chapters/ch05_positions.md`; the tests are
//! `tests/ch05_positions.rs`.
//!
//! The lesson:
//! - [`encoding`]: ωᵢ, the exponents of a reading, PE, and X + PE for a batch;
//! - [`properties`]: the shift operator S_k with PE(pos + k) = PE(pos)·S_k, and
//!   PE(p)·PE(p + k) = Σᵢ cos(k ωᵢ);
//! - [`example`]: D3's embeddings, the exponents it writes, and its printed X + PE and
//!   Y + PE, which chapter 6 starts from.
//!
//! [`book`] holds what the book shows of the chapter (the printed PE, errata, worked numbers,
//! walk-through, figures).
//!
//! Conventions: one row per position (or per token), a batch of B sequences of length T stacked
//! as a (B·T)×d matrix.

pub mod book;
pub mod encoding;
pub mod example;
pub mod properties;

pub use encoding::{
    BASE, Reading, add_positions, exponents, frequency, sinusoidal, sinusoidal_at, with_exponents,
};
pub use example::{
    D_MODEL, DOC_BREAKDOWN_EXPONENTS, DOC_SYMBOLIC_EXPONENTS, PRINTED_X_PLUS_PE, PRINTED_Y_PLUS_PE,
    SEQ_LEN, X_EMBEDDINGS, Y_EMBEDDINGS, matrix3x4, printed_matrix, walkthrough_pe,
};
pub use properties::{dot_at_offset, every_position_mixes, shift_operator};
