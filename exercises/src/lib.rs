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

// Each judge takes the answer as a `&dyn Fn` of the exercise's own signature (compiled once
// here, not in every test target that calls it): those types are as long as the signatures.
#[allow(clippy::type_complexity)]
pub mod judge;
pub mod results;
pub mod solutions;

use results::Chapter;

/// Every exercise, chapter by chapter, each chapter's in the order its answer file defines them:
/// the list the progress table shows (through the `listing` target, [`results::print_table`]).
/// Each judge target's `exercise!` list is this table's chapter, checked when it compiles.
pub const EXERCISES: &[Chapter] = &[
    Chapter {
        stem: "ch01_logistic",
        exercises: &[
            "sigmoid",
            "logits_forward",
            "bce_from_logit",
            "sample_gradient",
            "logits_backward",
        ],
    },
    Chapter {
        stem: "ch02_softmax",
        exercises: &[
            "softmax_rows_forward",
            "cross_entropy_from_logits",
            "cross_entropy_from_logits_backward",
            "softmax_rows_backward",
            "log_softmax_rows_backward",
            "regression_logits_backward",
        ],
    },
    Chapter {
        stem: "ch03_mlp",
        exercises: &[
            "dense_forward",
            "dense_backward",
            "relu_backward",
            "gelu_backward",
            "mse_backward",
            "mlp_backward",
        ],
    },
    Chapter {
        stem: "ch04_xor",
        exercises: &["xor_sigmoid_net", "xor_relu_net", "least_squares_fit"],
    },
    Chapter { stem: "ch05_positions", exercises: &["frequency", "sinusoidal", "add_positions"] },
    Chapter {
        stem: "ch06_attention",
        exercises: &[
            "causal_mask",
            "attention_forward",
            "attention_backward",
            "layer_norm_forward",
            "layer_norm_backward",
            "split_heads",
            "concat_heads",
            "mha_backward",
            "ffn_backward",
            "block_backward",
        ],
    },
    Chapter {
        stem: "ch07_encoder_decoder",
        exercises: &[
            "padding_mask",
            "cross_attention_forward",
            "cross_attention_backward",
            "decoder_block_backward",
            "loss_and_gradients",
        ],
    },
    Chapter {
        stem: "ch08_tokens",
        exercises: &["apply_merges", "bigram_counts", "add_k_probability"],
    },
    Chapter {
        stem: "ch09_gpt",
        exercises: &[
            "lm_head_backward",
            "adamw_step",
            "temperature_distribution",
            "top_k_distribution",
            "kv_cache_step",
        ],
    },
    Chapter { stem: "ch10_matmul", exercises: &["pack_a_block", "pack_b_panel", "micro_kernel"] },
    Chapter {
        stem: "ch11_precision",
        exercises: &[
            "f32_to_bf16",
            "f16_to_f32",
            "balanced_step",
            "kahan_sum",
            "quantize_block",
            "dequantize_block",
            "int8_block_dot",
        ],
    },
    Chapter {
        stem: "ch12_modern",
        exercises: &[
            "rms_norm_backward",
            "rope_forward",
            "rope_backward",
            "swiglu_backward",
            "gqa_backward",
            "kv_cache_bytes_per_token",
        ],
    },
    Chapter {
        stem: "ch13_finetune",
        exercises: &[
            "masked_cross_entropy",
            "lora_new",
            "lora_backward",
            "dpo_loss_and_gradient",
            "group_advantages",
            "grpo_loss_and_gradient",
            "k3",
        ],
    },
];

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
#[cfg(doc)]
pub mod ch12_modern;
#[cfg(doc)]
pub mod ch13_finetune;

#[cfg(test)]
mod tests {
    use super::*;

    /// The crate's own folder (where `src/` and `tests/` are).
    fn here() -> std::path::PathBuf {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
    }

    /// An exercise or a stem as the progress table accepts it: a Rust identifier in lower case.
    fn is_name(s: &str) -> bool {
        let lower = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
        s.starts_with(|c: char| c.is_ascii_lowercase()) && s.chars().all(lower)
    }

    #[test]
    fn the_table_has_one_chapter_per_judge_target_in_order() {
        let mut targets: Vec<String> = std::fs::read_dir(here().join("tests"))
            .expect("the judge targets' folder")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("ch") && n.ends_with(".rs"))
            .map(|n| n.trim_end_matches(".rs").to_string())
            .collect();
        targets.sort();
        let stems: Vec<&str> = EXERCISES.iter().map(|c| c.stem).collect();
        assert_eq!(stems, targets, "the table's chapters are not the judge targets tests/ch*.rs");
        for chapter in EXERCISES {
            assert!(is_name(chapter.stem), "stem {:?}", chapter.stem);
            assert!(!chapter.exercises.is_empty(), "{} lists no exercise", chapter.stem);
            for (i, name) in chapter.exercises.iter().enumerate() {
                assert!(is_name(name), "{}: exercise {name:?}", chapter.stem);
                let again = chapter.exercises[i + 1..].contains(name);
                assert!(!again, "{} lists {name} twice", chapter.stem);
            }
        }
    }

    /// The table states the order of the rows; it must be the order in which each answer file
    /// defines its exercises (`pub fn name(` or `pub fn name<` at the start of a line). Only the
    /// exercises' own lines are read: an answer's body or a helper of its own changes nothing.
    #[test]
    fn the_table_follows_the_order_of_the_answer_files() {
        for chapter in EXERCISES {
            let path = here().join("src").join(format!("{}.rs", chapter.stem));
            let answers = std::fs::read_to_string(&path).expect("the chapter's answer file");
            let line_of = |name: &str| {
                answers.lines().position(|line| {
                    let rest = line.strip_prefix("pub fn ").and_then(|r| r.strip_prefix(name));
                    rest.is_some_and(|r| r.starts_with('(') || r.starts_with('<'))
                })
            };
            let mut previous: Option<(usize, &str)> = None;
            for name in chapter.exercises {
                let at = line_of(name)
                    .unwrap_or_else(|| panic!("{} defines no `pub fn {name}`", path.display()));
                if let Some((before, earlier)) = previous {
                    assert!(
                        at > before,
                        "{}: the table lists {earlier} before {name}, the file after",
                        chapter.stem
                    );
                }
                previous = Some((at, name));
            }
        }
    }

    #[test]
    fn the_readme_counts_the_tables_exercises() {
        let count: usize = EXERCISES.iter().map(|c| c.exercises.len()).sum();
        let readme = include_str!("../../README.md").split_whitespace().collect::<Vec<_>>();
        let says = format!("yours to write: {count} functions across the thirteen chapters");
        assert!(readme.join(" ").contains(&says), "the README should say: {says}");
        assert_eq!(EXERCISES.len(), 13, "the README speaks of thirteen chapters");
    }

    #[test]
    fn a_judge_targets_list_is_held_to_its_chapter_in_the_table() {
        let ch05 = ["frequency", "sinusoidal", "add_positions"];
        assert!(results::lists(EXERCISES, "ch05_positions", &ch05));
        // Another order, one missing, one more, a misspelling, another chapter: all refused.
        assert!(!results::lists(EXERCISES, "ch05_positions", &["sinusoidal", "frequency"]));
        assert!(!results::lists(EXERCISES, "ch05_positions", &ch05[..2]));
        let more = ["frequency", "sinusoidal", "add_positions", "rope"];
        assert!(!results::lists(EXERCISES, "ch05_positions", &more));
        let typo = ["frequency", "sinusoidal", "add_position"];
        assert!(!results::lists(EXERCISES, "ch05_positions", &typo));
        assert!(!results::lists(EXERCISES, "ch04_xor", &ch05));
        assert!(!results::lists(EXERCISES, "ch12_missing", &ch05));
    }

    #[test]
    fn the_listing_prints_one_tab_separated_line_per_exercise_in_order() {
        let lines = results::table_lines(EXERCISES);
        let mut lines = lines.lines();
        assert_eq!(lines.next(), Some("ch01_logistic\tsigmoid"));
        assert_eq!(lines.next(), Some("ch01_logistic\tlogits_forward"));
        let last = lines.next_back();
        assert_eq!(last, Some("ch13_finetune\tk3"));
        let count: usize = EXERCISES.iter().map(|c| c.exercises.len()).sum();
        assert_eq!(results::table_lines(EXERCISES).lines().count(), count);
    }
}
