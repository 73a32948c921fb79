//! # llm-workbook
//!
//! The mathematics of neural networks, from one sigmoid neuron to a small GPT, as a test-driven
//! workbook. Each chapter is a module (`chNN_stem`), a prose page (`chapters/chNN_stem.md`), a
//! test file (`tests/chNN_stem.rs`) and its snapshots (`snapshots/chNN_stem__*.snap`).
//!
//! The shared core every chapter builds on:
//! - [`error`]: the one error type (and serde_json's errors turned into it, naming file, field
//!   and line);
//! - [`float`]: the float trait chapters are generic over (f64 for worked examples, f32 for speed);
//! - [`matmul`]: the one entry point for matrix products (packing, blocking, the five loops);
//! - [`threads`]: how many threads a large product may use;
//! - [`backend`]: who computes the products (ours, or nalgebra's as the benchmarks' peer);
//! - [`simd_map`]: an element-wise loop in the widest registers the CPU has (GELU);
//! - [`peak`]: the FMA throughput probe that measures the machine's peak;
//! - [`simd`]: the one dispatcher — which instruction set runs each SIMD loop ([`simd::Kernel`]),
//!   the CPU asked once; its file `src/simd/x86.rs` is the one place allowed `unsafe` code, the
//!   SIMD bodies of the micro-kernels, the probe, the map and the quantized dots behind safe
//!   functions that take a CPU-feature token only the detection can make;
//! - [`gradcheck`]: finite-difference gradient checks;
//! - [`rng`]: a seeded generator written here;
//! - [`optim`]: the optimisers;
//! - [`plot`]: figures as data, drawn to PNG and SVG with an embedded font;
//! - [`snapshot`]: matrices as text for insta snapshots;
//! - [`sources`]: the five source documents by short id (`D0` to `D4`), title and author;
//! - [`errata`] and [`report`]: the errata register's rows, worked-number tables, walk-throughs.
//!
//! [`book`] lists the chapters in order; the main job (`src/main.rs`) iterates it. [`workshop`]
//! holds what `gpt train | resume | sample` need beyond chapter 9's lesson.
//!
//! A first taste: one neuron's probability and its loss, computed stably from the logit.
//!
//! ```
//! use llm_workbook::ch01_logistic::{bce_from_logit, sigmoid};
//!
//! let z = 2.0_f64; // a logit wᵀx + b
//! let p = sigmoid(z); // P(y = 1 | x)
//! assert!((p - 0.880797).abs() < 1e-6);
//! // The loss if the label was 0: −ln(1 − p), computed without forming 1 − p.
//! assert!((bce_from_logit(0.0, z) - (-(1.0 - p).ln())).abs() < 1e-12);
//! ```
//!
//! Every product goes through [`matmul`], which checks shapes instead of panicking:
//!
//! ```
//! use llm_workbook::matmul::matmul;
//! use nalgebra::DMatrix;
//!
//! let a = DMatrix::from_row_slice(2, 3, &[1.0_f64, 2.0, 3.0, 4.0, 5.0, 6.0]);
//! let b = DMatrix::from_row_slice(3, 1, &[1.0, 0.0, -1.0]);
//! assert_eq!(matmul(&a, &b)?, DMatrix::from_row_slice(2, 1, &[-2.0, -2.0]));
//! assert!(matmul(&a, &a).is_err()); // 2×3 by 2×3 does not chain
//! # Ok::<(), llm_workbook::Error>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod errata;
pub mod error;
pub mod float;
pub mod gradcheck;
pub mod matmul;
pub mod optim;
pub mod peak;
pub mod plot;
pub mod report;
pub mod rng;
pub mod simd;
pub mod simd_map;
pub mod snapshot;
pub mod sources;
pub mod tex;
pub mod threads;

pub mod book;

pub mod ch01_logistic;
pub mod ch02_softmax;
pub mod ch03_mlp;
pub mod ch04_xor;
pub mod ch05_positions;
pub mod ch06_attention;
pub mod ch07_encoder_decoder;
pub mod ch08_tokens;
pub mod ch09_gpt;
pub mod ch10_matmul;
pub mod ch11_precision;
pub mod ch12_modern;
pub mod ch13_finetune;

pub mod workshop;

pub use error::{Error, Result};
pub use float::Float;
