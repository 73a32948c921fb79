//! Chapter 8: tokens — [chapters/ch08_tokens.md](../../chapters/ch08_tokens.md).
//!
//! Replace each `todo!()` with your answer, then run
//! `cargo test -p llm-workbook-exercises --test ch08_tokens`.
//!
//! Where a doc comment asks for an error, return one of `llm_workbook::Error`'s variants, whose
//! message is one line naming the argument: `Err(llm_workbook::error::invalid("op", "arg",
//! "why"))` for a bad value, `Err(llm_workbook::Error::Empty { op: "op", arg: "arg" })` for an
//! empty input and `Err(llm_workbook::error::shape_error("op", "arg", expected, got))` for shapes
//! that disagree (`llm_workbook::error::shape_of(&m)` writes a matrix's shape as `rows×cols`).

use llm_workbook::Result;
use llm_workbook::ch08_tokens::TokenId;
use nalgebra::DMatrix;
use std::collections::HashMap;

/// **Applying BPE merges**: replace adjacent pairs in `ids` by merged tokens, lowest rank first
/// and, within a rank, from left to right, until no adjacent pair has a rank. `ranks` maps a pair
/// to (rank, merged id). With the single merge (a, a) → X, "a a a" becomes "X a" (left to right,
/// no overlap); a merge of rank 1 may only apply once rank 0 is exhausted.
///
/// Chapter: [3. Byte-pair encoding](../../chapters/ch08_tokens.md#3-byte-pair-encoding).
pub fn apply_merges(ids: &mut Vec<TokenId>, ranks: &HashMap<(TokenId, TokenId), (u32, TokenId)>) {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch08_tokens::bpe::apply_merges(ids, ranks);
    todo!()
}

/// **Bigram counts**: the |V|×|V| matrix C with C[a, b] = #(a followed by b) in `tokens`, every
/// adjacent pair counted once. Error when a token is not below `vocab_size`.
///
/// Chapter: [5. The empirical next-token predictor][ch].
///
/// [ch]: ../../chapters/ch08_tokens.md#5-the-empirical-next-token-predictor
pub fn bigram_counts(tokens: &[TokenId], vocab_size: usize) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return solution::bigram_counts(tokens, vocab_size);
    todo!()
}

/// **Add-k smoothing**: P(next | context) = (#(context, next) + k) / (#(context) + k|V|) for the
/// bigram model of `tokens`, where #(context) counts the times `context` is followed by any
/// token; the uniform 1/|V| when `context` is never followed by anything.
///
/// Chapter: [5. The empirical next-token predictor][ch].
///
/// [ch]: ../../chapters/ch08_tokens.md#5-the-empirical-next-token-predictor
pub fn add_k_probability(
    tokens: &[TokenId],
    vocab_size: usize,
    context: TokenId,
    next: TokenId,
    k: f64,
) -> Result<f64> {
    #[cfg(feature = "solutions")]
    return solution::add_k_probability(tokens, vocab_size, context, next, k);
    todo!()
}

// The `solutions` feature's adapters (src/solutions.rs).
#[cfg(feature = "solutions")]
use llm_workbook_exercises::solutions::ch08_tokens as solution;
