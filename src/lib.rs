//! # llm-workbook
//!
//! The mathematics of neural networks, from one sigmoid neuron to a small GPT, as a test-driven
//! workbook. Each chapter is a module (`chNN_stem`), a prose page (`chapters/chNN_stem.md`), a
//! test file (`tests/chNN_stem.rs`) and its snapshots (`snapshots/chNN_stem__*.snap`).
//!
//! The shared core every chapter builds on:
//! - [`error`]: the one error type;
//! - [`float`]: the float trait chapters are generic over (f64 for worked examples, f32 for speed);
//! - [`matmul`]: the one entry point for matrix products;
//! - [`gradcheck`]: finite-difference gradient checks;
//! - [`rng`]: a seeded generator written here;
//! - [`optim`]: the optimisers;
//! - [`plot`]: figures as data, drawn to PNG and SVG with an embedded font;
//! - [`snapshot`]: matrices as text for insta snapshots;
//! - [`errata`] and [`report`]: the errata register's rows, worked-number tables, walk-throughs.
//!
//! [`book`] lists the chapters in order; the main job (`src/main.rs`) iterates it.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod errata;
pub mod error;
pub mod float;
pub mod gradcheck;
pub mod matmul;
pub mod optim;
pub mod plot;
pub mod report;
pub mod rng;
pub mod snapshot;

pub mod book;

pub mod ch01_logistic;
pub mod ch07_encoder_decoder;

pub use error::{Error, Result};
pub use float::Float;
