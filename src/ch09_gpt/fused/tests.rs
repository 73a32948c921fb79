//! The fused step's own versions of chapter functions, held to the chapter's: causal attention
//! over blocks (chapter 6's `attention_forward` / `attention_backward` with the causal mask),
//! cross-entropy by columns (chapter 2's), and the bias helpers.

use super::backward::{causal_attention_backward, column_sums};
use super::forward::{add_row, causal_attention_forward, cross_entropy_by_columns};
use crate::ch02_softmax::cross_entropy_from_logits_with_gradient;
use crate::ch06_attention::{AttnSpec, attention_backward, attention_forward};
use crate::rng::Rng;
use nalgebra::DMatrix;

const TOL: f64 = 1e-12;

fn close(a: &DMatrix<f64>, b: &DMatrix<f64>, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}");
    let err = (a - b).abs().max();
    assert!(err < TOL, "{what}: off by {err:e}");
}

#[test]
fn causal_attention_by_blocks_equals_chapter_6s_attention_with_the_causal_mask() {
    // T = 40 crosses a CAUSAL_BLOCK (32) boundary; two sequences of two heads of width 3.
    let (seqs, t, heads, d_k) = (2, 40, 2, 3);
    let (n, d) = (seqs * t, heads * d_k);
    let mut rng = Rng::new(7);
    let qkv: DMatrix<f64> = rng.normal_matrix(n, 3 * d, 1.0);
    let d_att: DMatrix<f64> = rng.normal_matrix(n, d, 1.0);
    let mut weights = vec![0.0; seqs * heads * t * t];
    let mut att = DMatrix::zeros(n, d);
    causal_attention_forward(&qkv, heads, t, &mut weights, &mut att).unwrap();
    let mut d_qkv = DMatrix::zeros(n, 3 * d);
    let (mut d_scores, mut row) = (vec![0.0; t * t], vec![0.0; t]);
    causal_attention_backward(
        &qkv,
        heads,
        t,
        &weights,
        &d_att,
        &mut d_qkv,
        &mut d_scores,
        &mut row,
    )
    .unwrap();
    let spec = AttnSpec::causal(t);
    for s in 0..seqs {
        for h in 0..heads {
            let part = |m: &DMatrix<f64>, col: usize| m.view((s * t, col), (t, d_k)).into_owned();
            let (q, k, v) =
                (part(&qkv, h * d_k), part(&qkv, d + h * d_k), part(&qkv, 2 * d + h * d_k));
            let a = attention_forward(&q, &k, &v, &spec).unwrap();
            close(&part(&att, h * d_k), &a.out, "O");
            let ours = &weights[(s * heads + h) * t * t..][..t * t];
            close(&DMatrix::from_column_slice(t, t, ours), &a.weights, "A");
            let g =
                attention_backward(&q, &k, &v, &a.weights, &part(&d_att, h * d_k), &spec).unwrap();
            close(&part(&d_qkv, h * d_k), &g.d_q, "∂Q");
            close(&part(&d_qkv, d + h * d_k), &g.d_k, "∂K");
            close(&part(&d_qkv, 2 * d + h * d_k), &g.d_v, "∂V");
        }
    }
}

#[test]
fn cross_entropy_by_columns_equals_chapter_2s_on_the_scored_rows() {
    let (n, v) = (7, 5);
    let mut rng = Rng::new(3);
    let z: DMatrix<f64> = rng.normal_matrix(n, v, 2.0);
    let targets = [Some(1), None, Some(4), Some(0), None, Some(2), Some(4)];
    let scored: Vec<usize> = (0..n).filter(|&r| targets[r].is_some()).collect();
    let labels: Vec<usize> = scored.iter().map(|&r| targets[r].unwrap_or(0) as usize).collect();
    let z_s = DMatrix::from_fn(scored.len(), v, |i, c| z[(scored[i], c)]);
    let (loss, d_z) = cross_entropy_from_logits_with_gradient(&z_s, &labels).unwrap();
    let mut ours = z.clone();
    let scale = 1.0 / scored.len() as f64;
    let sum = cross_entropy_by_columns(&mut ours, &targets, scale);
    assert!((sum * scale - loss).abs() < TOL, "{} vs {loss}", sum * scale);
    for r in 0..n {
        let want = match scored.iter().position(|&x| x == r) {
            Some(i) => DMatrix::from_fn(1, v, |_, c| d_z[(i, c)]),
            None => DMatrix::zeros(1, v), // an unscored row has no gradient
        };
        close(&DMatrix::from_fn(1, v, |_, c| ours[(r, c)]), &want, "∂z");
    }
}

#[test]
fn the_bias_helpers_broadcast_and_sum_as_the_chapters_do() {
    let mut rng = Rng::new(5);
    let m: DMatrix<f64> = rng.normal_matrix(37, 4, 1.0);
    let b: DMatrix<f64> = rng.normal_matrix(1, 4, 1.0);
    let mut added = m.clone();
    add_row(&mut added, &b);
    close(&added, &DMatrix::from_fn(37, 4, |r, c| m[(r, c)] + b[(0, c)]), "x + b");
    let mut sums = DMatrix::zeros(1, 4);
    column_sums(&m, &mut sums);
    let plain = DMatrix::from_fn(1, 4, |_, c| m.column(c).sum());
    close(&sums, &plain, "Σ rows"); // equal to rounding: summed in lanes here
}

#[test]
fn the_one_row_product_equals_the_blocked_product() {
    use super::forward::{Products, Strided, StridedMut, product};
    use crate::matmul::Op;
    // 37 inputs: two full runs of the dot product's 16 lanes and a remainder of 5; every operand
    // inside a longer buffer (leading dimensions past the rows), as the cache's views are.
    let (k, n) = (37, 21);
    let mut rng = Rng::new(9);
    let x: DMatrix<f64> = rng.normal_matrix(3, k, 1.0);
    for (tb, (rows, cols)) in [(Op::N, (k, n)), (Op::T, (n, k))] {
        let b: DMatrix<f64> = rng.normal_matrix(rows + 4, cols, 1.0);
        let start: DMatrix<f64> = rng.normal_matrix(2, n, 1.0);
        // β = 1 adds onto c (a residual); Bᵀ is only ever used with β = 0 (scores, logits).
        let betas: &[f64] = if tb == Op::N { &[0.0, 1.0] } else { &[0.0] };
        for &beta in betas {
            let mut out = [start.clone(), start.clone()];
            for (how, c) in [Products::Blocked, Products::OneRow].into_iter().zip(&mut out) {
                let a = Strided { data: &x.as_slice()[1..], rows: 1, cols: k, ld: 3 };
                let b = Strided { data: b.as_slice(), rows, cols, ld: rows + 4 };
                let c = StridedMut { data: &mut c.as_mut_slice()[1..], rows: 1, cols: n, ld: 2 };
                product(how, 0.5, a, b, tb, beta, c).unwrap();
            }
            close(&out[1], &out[0], &format!("{tb:?}, β = {beta}"));
            // Row 0 of c is not part of the product and stays as it was.
            close(&out[1].rows(0, 1).into_owned(), &start.rows(0, 1).into_owned(), "row 0");
        }
    }
}

#[test]
fn one_query_row_is_its_row_of_the_training_steps_causal_attention() {
    use super::forward::{Products, Strided, StridedMut, causal_block_forward};
    // The cached step's block (pos, pos + 1) on one sequence of T = 40 (across a CAUSAL_BLOCK
    // boundary) gives row pos of the blocked attention, its weights too; the weights stored
    // contiguously (the cached step's layout) or with a leading dimension (the general path) are
    // the same bits.
    let (t, heads, d_k) = (40, 2, 3);
    let d = heads * d_k;
    let mut rng = Rng::new(8);
    let qkv: DMatrix<f64> = rng.normal_matrix(t, 3 * d, 1.0);
    let mut weights = vec![0.0; heads * t * t];
    let mut att = DMatrix::zeros(t, d);
    causal_attention_forward(&qkv, heads, t, &mut weights, &mut att).unwrap();
    let buf = qkv.as_slice();
    let rows = |col0: usize, (i0, i1): (usize, usize)| Strided {
        data: &buf[col0 * t + i0..],
        rows: i1 - i0,
        cols: d_k,
        ld: t,
    };
    for pos in [0, 1, 31, 32, 39] {
        for h in 0..heads {
            let mut runs = Vec::new();
            for ld in [1, 2] {
                let (mut a, mut out, mut stats) = (vec![0.0; 2 * t], vec![0.0; d_k], [0.0; 2]);
                causal_block_forward(
                    (
                        rows(h * d_k, (pos, pos + 1)),
                        rows(d + h * d_k, (0, pos + 1)),
                        rows(2 * d + h * d_k, (0, pos + 1)),
                    ),
                    pos,
                    StridedMut { data: &mut a, rows: 1, cols: pos + 1, ld },
                    StridedMut { data: &mut out, rows: 1, cols: d_k, ld: 1 },
                    &mut stats,
                    Products::OneRow,
                )
                .unwrap();
                let a: Vec<f64> = a.iter().step_by(ld).take(pos + 1).copied().collect();
                runs.push((a, out));
            }
            // The softmax of one contiguous row is the general one, bit for bit.
            assert_eq!(runs[0].0, runs[1].0, "pos {pos}, head {h}: the two layouts differ");
            let (a, out) = &runs[0];
            let want_a: Vec<f64> = (0..=pos).map(|j| weights[h * t * t + pos + j * t]).collect();
            let want_out: Vec<f64> = (0..d_k).map(|c| att[(pos, h * d_k + c)]).collect();
            let row = |v: &[f64]| DMatrix::from_row_slice(1, v.len(), v);
            close(&row(&runs[1].1), &row(out), &format!("O in both layouts, pos {pos}"));
            close(&row(a), &row(&want_a), &format!("A, pos {pos}, head {h}"));
            close(&row(out), &row(&want_out), &format!("O, pos {pos}, head {h}"));
        }
    }
}
