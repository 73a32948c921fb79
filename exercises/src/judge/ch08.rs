//! Judges of chapter 8's exercises.

use super::{Section, Verdict, attempt, attempt_ok, close, compare};
use crate::solutions::ch08_tokens as solution;
use llm_workbook::Result;
use llm_workbook::ch08_tokens::TokenId;
use llm_workbook::ch08_tokens::bpe;
use llm_workbook::rng::Rng;
use nalgebra::DMatrix;
use std::collections::HashMap;

const BPE: Section = Section { chapter: "ch08_tokens", anchor: "3-byte-pair-encoding" };
const NGRAM: Section =
    Section { chapter: "ch08_tokens", anchor: "5-the-empirical-next-token-predictor" };

type Ranks = HashMap<(TokenId, TokenId), (u32, TokenId)>;

fn tokens(seed: u64, n: usize, vocab: usize) -> Vec<TokenId> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.below(vocab) as TokenId).collect()
}

/// "a a a" with (a, a) → X gives "X a"; ranks apply in order (a b → X then X c → Y, and a lower
/// rank first); the main crate's merges on random ids.
fn apply_merges_checks(f: impl Fn(&mut Vec<TokenId>, &Ranks)) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Batch, super::Probe::Errors]);
    let run = |ids: &[TokenId], ranks: &Ranks| {
        let mut v = ids.to_vec();
        attempt(BPE, "apply_merges", || f(&mut v, ranks)).map(|()| v)
    };
    let (a, b, c, x, y) = (0, 1, 2, 10, 11);
    let one = HashMap::from([((a, a), (0, x))]);
    let got = run(&[a, a, a], &one)?;
    if got != [x, a] {
        return Err(BPE.fail(format!(
            "(a, a) → X on [a, a, a] should give [X, a] (left to right, no overlap); yours gives \
             {got:?} (a = 0, X = 10)"
        )));
    }
    let chain = HashMap::from([((a, b), (0, x)), ((x, c), (1, y))]);
    let got = run(&[a, b, c, a, b], &chain)?;
    if got != [y, x] {
        return Err(BPE.fail(format!(
            "with (a, b) → X (rank 0) and (X, c) → Y (rank 1), [a, b, c, a, b] should give [Y, X]; \
             yours gives {got:?} (a, b, c = 0, 1, 2; X, Y = 10, 11): merged tokens can merge again"
        )));
    }
    let order = HashMap::from([((b, c), (0, x)), ((a, b), (1, y))]);
    let got = run(&[a, b, c], &order)?;
    if got != [a, x] {
        return Err(BPE.fail(format!(
            "with (b, c) of rank 0 and (a, b) of rank 1, [a, b, c] should give [a, X]; yours gives \
             {got:?}: the lowest rank merges first, wherever it stands"
        )));
    }
    // The new ids in the opposite order of the ranks: the rank decides, not the id.
    super::probe(super::Probe::Order);
    super::probe(super::Probe::Named);
    let reversed = HashMap::from([((b, c), (0, y)), ((a, b), (1, x)), ((x, c), (2, 12))]);
    let got = run(&[a, b, c], &reversed)?;
    if got != [a, y] {
        let why = if got == [12] || got == [x, c] {
            " — merges applied in the order of their new ids: the lowest rank merges first, \
             whatever id it makes"
        } else {
            ""
        };
        return Err(BPE.fail(format!(
            "with (b, c) → Y of rank 0 and (a, b) → X of rank 1 (X = 10 < Y = 11), [a, b, c] \
             should give [a, Y]; yours gives {got:?}{why}"
        )));
    }
    let ranks: Ranks = (0..6u32).map(|r| ((r % 4, (r + 1) % 4), (r, 20 + r))).collect();
    let ids = tokens(120, 40, 4);
    let got = run(&ids, &ranks)?;
    let mut want = ids.clone();
    bpe::apply_merges(&mut want, &ranks);
    if got != want {
        return Err(BPE.fail(format!("on random ids: yours {got:?}, expected {want:?}")));
    }
    Ok(())
}

/// The counts of a small sequence by hand, their total N − 1, and the main crate's on random text.
fn bigram_counts_checks(f: impl Fn(&[TokenId], usize) -> Result<DMatrix<f64>>) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Batch, super::Probe::Order]);
    let c = attempt_ok(NGRAM, "bigram_counts", || f(&[0, 1, 0, 1, 1], 2))?;
    let want = DMatrix::from_row_slice(2, 2, &[0.0, 2.0, 1.0, 1.0]);
    compare(NGRAM, "C (rows: a, columns: the token after a)", &c, &want, 0.0, &[])?;
    let ids = tokens(121, 200, 6);
    let c = attempt_ok(NGRAM, "bigram_counts", || f(&ids, 6))?;
    if c.shape() == (6, 6) && c.sum() != 199.0 {
        return Err(NGRAM.fail(format!(
            "200 tokens have 199 adjacent pairs; your counts add up to {}",
            c.sum()
        )));
    }
    let want = solution::bigram_counts(&ids, 6).map_err(|e| e.to_string())?;
    compare(NGRAM, "C", &c, &want, 0.0, &[])?;
    super::expect_err(NGRAM, "bigram_counts", "token 7 with |V| = 3", || f(&[0, 7], 3))
}

/// (#(c, x) + k)/(#(c) + k|V|) by hand, 1/|V| for an unseen context, the main crate's values.
fn add_k_probability_checks(
    f: impl Fn(&[TokenId], usize, TokenId, TokenId, f64) -> Result<f64>,
) -> Verdict {
    super::not_applicable(&[
        super::Probe::Scale,
        super::Probe::Batch,
        super::Probe::Order,
        super::Probe::Errors,
    ]);
    super::probe(super::Probe::Named);
    let seq = [0, 1, 0, 1, 1, 2];
    let p = attempt_ok(NGRAM, "add_k_probability", || f(&seq, 4, 0, 1, 1.0))?;
    // #(0, 1) = 2, #(0, ·) = 2: (2 + 1)/(2 + 4)
    if !close(p, 0.5, 1e-12) {
        let why = if close(p, 1.0, 1e-12) {
            " — the denominator needs + k|V|: k is added once for every token of the vocabulary"
        } else {
            ""
        };
        return Err(NGRAM.fail(format!(
            "P(1 | 0) with k = 1, |V| = 4 on [0, 1, 0, 1, 1, 2]: #(0, 1) = 2, #(0) = 2, so \
             (2 + 1)/(2 + 4) = 0.5; yours is {p:.6}{why}"
        )));
    }
    let unseen = attempt_ok(NGRAM, "add_k_probability", || f(&seq, 4, 3, 0, 1.0))?;
    if !close(unseen, 0.25, 1e-12) {
        return Err(NGRAM.fail(format!(
            "token 3 is never followed by anything: P(· | 3) is the uniform 1/|V| = 0.25; yours \
             is {unseen}"
        )));
    }
    let ids = tokens(122, 300, 5);
    for (c, x, k) in [(0, 1, 0.5), (2, 2, 1.0), (4, 0, 0.1)] {
        let p = attempt_ok(NGRAM, "add_k_probability", || f(&ids, 5, c, x, k))?;
        let want = solution::add_k_probability(&ids, 5, c, x, k).map_err(|e| e.to_string())?;
        if !close(p, want, 1e-12) {
            return Err(
                NGRAM.fail(format!("P({x} | {c}) with k = {k}: yours {p:.6}, expected {want:.6}"))
            );
        }
    }
    Ok(())
}

// ───────────── the judges: the sweep against the main crate, then the checks above ─────────────

use super::sweep::{Gen, Tol, explained, outcome, sweep};

/// A merge table as the sweep passes it: ((left, right), (rank, merged id)) entries.
type Table = Vec<((TokenId, TokenId), (u32, TokenId))>;

/// Merge tables over the ids 0 … 3 whose new ids (10 and up) run against their ranks, with
/// chains (a merged id merged again) and repeats ("a a a").
fn merge_tables() -> Vec<Table> {
    vec![
        vec![((0, 0), (0, 10))],
        vec![((0, 1), (1, 10)), ((1, 2), (0, 11))],
        vec![((0, 1), (0, 12)), ((12, 2), (1, 11)), ((2, 3), (2, 10))],
        vec![((1, 1), (2, 10)), ((0, 1), (1, 11)), ((11, 1), (0, 12)), ((3, 0), (3, 13))],
        vec![((2, 2), (0, 14)), ((14, 14), (1, 10)), ((0, 2), (2, 11)), ((3, 3), (3, 12))],
    ]
}

/// **BPE merges**: sequences of 0 to 40 ids over 4 symbols (empty and one-id sequences
/// included) under tables whose new ids run against their ranks, with chains and repeats; every
/// case run twice, so that an answer that depends on a HashMap's order of iteration fails as
/// nondeterministic; then `apply_merges_checks`.
pub fn apply_merges(f: impl Fn(&mut Vec<TokenId>, &Ranks)) -> Verdict {
    apply_merges_judged(&f)
}

/// [`apply_merges`]'s judge, compiled once here rather than in every test that calls it.
fn apply_merges_judged(f: &dyn Fn(&mut Vec<TokenId>, &Ranks)) -> Verdict {
    let mut draw = Gen::new("apply_merges");
    let mut cases: Vec<(Vec<TokenId>, Table)> = Vec::new();
    for table in merge_tables() {
        for n in [0, 1, 2, 3, 7, 40] {
            let ids = draw.tokens(n, 4).into_iter().map(|t| t as TokenId).collect();
            cases.push((ids, table.clone()));
        }
        // Each merge's own pair, alone and twice over: every rank gets its turn.
        for &((a, b), _) in &table {
            cases.push((vec![a, b], table.clone()));
            cases.push((vec![a, b, a, b, b], table.clone()));
        }
        cases.push((vec![0, 0, 0], table.clone()));
        cases.push((vec![2, 2, 2, 2, 2], table));
    }
    let run = |(ids, table): &(Vec<TokenId>, Table), merge: &dyn Fn(&mut Vec<TokenId>, &Ranks)| {
        let ranks: Ranks = table.iter().copied().collect();
        let mut v = ids.clone();
        merge(&mut v, &ranks);
        Ok(v)
    };
    let found = sweep(
        BPE,
        "apply_merges",
        Tol::EXACT,
        &cases,
        |c| run(c, &f),
        |c| run(c, &bpe::apply_merges),
    );
    explained(found, || apply_merges_checks(f))
}

/// **Bigram counts**: 1 to 60 tokens over vocabularies of 1 to 6, a token equal to the
/// vocabulary's size (the promised error); then `bigram_counts_checks`.
pub fn bigram_counts(f: impl Fn(&[TokenId], usize) -> Result<DMatrix<f64>>) -> Verdict {
    bigram_counts_judged(&f)
}

/// [`bigram_counts`]'s judge, compiled once here rather than in every test that calls it.
fn bigram_counts_judged(f: &dyn Fn(&[TokenId], usize) -> Result<DMatrix<f64>>) -> Verdict {
    let mut draw = Gen::new("bigram_counts");
    let mut cases: Vec<(Vec<TokenId>, usize)> = Vec::new();
    for v in [1, 2, 3, 6] {
        for n in [1, 2, 5, 60] {
            cases.push((draw.tokens(n, v).into_iter().map(|t| t as TokenId).collect(), v));
        }
        let mut bad: Vec<TokenId> = draw.tokens(4, v).into_iter().map(|t| t as TokenId).collect();
        bad[2] = v as TokenId;
        cases.push((bad, v));
    }
    let found = sweep(
        NGRAM,
        "bigram_counts",
        Tol::EXACT,
        &cases,
        |(t, v)| outcome(f(t, *v)),
        |(t, v)| outcome(solution::bigram_counts(t, *v)),
    );
    explained(found, || bigram_counts_checks(f))
}

/// **Add-k smoothing**: every (context, next) of vocabularies of 2 to 5, k from 10⁻³ to 2, with
/// contexts never followed by anything (absent from the text, or only its last token) and
/// contexts seen; then `add_k_probability_checks`.
pub fn add_k_probability(
    f: impl Fn(&[TokenId], usize, TokenId, TokenId, f64) -> Result<f64>,
) -> Verdict {
    add_k_probability_judged(&f)
}

/// [`add_k_probability`]'s judge, compiled once here rather than in every test that calls it.
fn add_k_probability_judged(
    f: &dyn Fn(&[TokenId], usize, TokenId, TokenId, f64) -> Result<f64>,
) -> Verdict {
    let mut draw = Gen::new("add_k_probability");
    let mut cases: Vec<(Vec<TokenId>, usize, TokenId, TokenId, f64)> = Vec::new();
    for v in [2, 3, 5] {
        // The last token is v − 1 and appears nowhere else: a context never followed.
        let mut text: Vec<TokenId> =
            draw.tokens(9, v - 1).into_iter().map(|t| t as TokenId).collect();
        text.push((v - 1) as TokenId);
        for k in [1.0, 0.5, 2.0, 1e-3] {
            for c in 0..v as TokenId {
                for n in 0..v as TokenId {
                    cases.push((text.clone(), v, c, n, k));
                }
            }
        }
    }
    let found = sweep(
        NGRAM,
        "add_k_probability",
        Tol::F64,
        &cases,
        |(t, v, c, n, k)| outcome(f(t, *v, *c, *n, *k)),
        |(t, v, c, n, k)| outcome(solution::add_k_probability(t, *v, *c, *n, *k)),
    );
    explained(found, || add_k_probability_checks(f))
}
