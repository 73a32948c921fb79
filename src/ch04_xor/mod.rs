//! Chapter 4: XOR, the function no straight line can draw, and the two-layer networks that can.
//!
//! Four points, (0,0) ↦ 0, (0,1) ↦ 1, (1,0) ↦ 1, (1,1) ↦ 0. A linear model fitted by least
//! squares predicts 0.5 for all four; a hidden layer of two neurons bends the plane so that one
//! line separates the classes there. Built on chapter 3's [`Mlp`](crate::ch03_mlp::Mlp), dense
//! layer and activations. The prose is [`chapters/ch04_xor.md`](../../chapters/ch04_xor.md); the
//! tests are `tests/ch04_xor.rs`.
//!
//! The lesson, in the order the document derives it:
//! - [`data`]: the four points and their XOR, the 0.5 rule, accuracy;
//! - [`linear`]: the least-squares fit ŷ = x·w + b, which cannot do better than 0.5 everywhere;
//! - [`printed`]: the document's networks h = f(Wx + c), y = f(w·h + b), sigmoid and ReLU;
//! - [`learned`]: a 2-2-1 sigmoid network trained from random weights, and the seeds that fail.
//!
//! [`book`] holds what the book shows of the chapter (worked numbers, walk-through, figures).

pub mod book;
pub mod data;
pub mod learned;
pub mod linear;
pub mod printed;

pub use data::{THRESHOLD, XOR_INPUTS, XOR_TARGETS, accuracy, classify, xor_data};
pub use learned::{
    LEARN_BIAS_STD, LEARN_SEED, LEARN_TRAIN, Learned, SURVEY_SEEDS, SeedSurvey, learn_xor,
    seed_survey,
};
pub use linear::{LinearFit, least_squares_fit};
pub use printed::{PrintedNet, RELU_NET, SIGMOID_NET, hidden_layer, output_pre_activation};
