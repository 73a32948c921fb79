//! The fused step's own versions of chapter functions, held to the chapter's: causal attention
//! over blocks (chapter 6's `attention_forward` / `attention_backward` with the causal mask),
//! cross-entropy by columns (chapter 2's), and the bias helpers.

use super::backward::{causal_attention_backward, column_sums};
use super::forward::{add_row, causal_attention_forward, cross_entropy_by_columns};
use super::precision::Rounder;
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
    causal_attention_forward(&qkv, heads, t, &mut weights, &mut att, &mut Rounder::default())
        .unwrap();
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
        &mut Rounder::default(),
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
    let mut nll = Vec::new();
    let sum = cross_entropy_by_columns(&mut ours, &targets, &[scale; 7], &mut nll);
    assert_eq!(nll.len(), n);
    assert_eq!(nll.iter().sum::<f64>().to_bits(), sum.to_bits());
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
fn one_query_row_is_its_row_of_the_training_steps_causal_attention() {
    use super::forward::{Products, causal_block_forward};
    use crate::matmul::{MatMut, MatRef};
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
    causal_attention_forward(&qkv, heads, t, &mut weights, &mut att, &mut Rounder::default())
        .unwrap();
    let buf = qkv.as_slice();
    let rows = |col0: usize, (i0, i1): (usize, usize)| {
        MatRef::new(&buf[col0 * t + i0..], i1 - i0, d_k, t).unwrap()
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
                    MatMut::new(&mut a, 1, pos + 1, ld).unwrap(),
                    MatMut::new(&mut out, 1, d_k, 1).unwrap(),
                    &mut stats,
                    (Products::OneRow, &mut Rounder::default()),
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

#[test]
fn the_shard_count_follows_the_batch_and_the_model_and_is_a_power_of_two() {
    use super::{MIN_SHARD_ROWS, gradient_shards, saved_values_per_sequence};
    use crate::ch09_gpt::config::Config;
    let nano = Config::new(65, 64, 4, 4, 128);
    // The figures the documentation of gradient_shards quotes.
    assert_eq!(gradient_shards(&nano, 12, 64), 2, "768 rows: 3 of 256, rounded down to 2");
    assert_eq!(gradient_shards(&Config::new(65, 64, 3, 4, 96), 8, 64), 2, "the corpus model");
    let wide = Config::new(65, 256, 6, 6, 384);
    assert_eq!(gradient_shards(&wide, 16, 256), 16, "one shard per sequence");
    let gpt2 = Config::gpt2_124m();
    let saved = 12 * saved_values_per_sequence(&gpt2, 64);
    assert!((160e6..162e6).contains(&(saved as f64)), "{saved}");
    assert_eq!(gradient_shards(&gpt2, 12, 64), 1, "the gradient copies would outweigh the rest");
    // Never more shards than sequences, never fewer rows than MIN_SHARD_ROWS in a shard (unless
    // there is one), never gradient copies beyond the saved values, a power of two, at least one.
    for batch in 1..=40 {
        for t in [1, 5, 64, 100, 256] {
            let s = gradient_shards(&nano, batch, t);
            assert!(s.is_power_of_two() && s <= batch, "B = {batch}, T = {t}: {s}");
            assert!(s == 1 || batch * t / s >= MIN_SHARD_ROWS, "B = {batch}, T = {t}: {s}");
            let (saved, parameters) =
                (batch * saved_values_per_sequence(&nano, t), nano.parameter_count() as usize);
            assert!(s == 1 || s * parameters <= saved, "B = {batch}, T = {t}: {s}");
            // The largest such count: twice as many would break one of the three bounds.
            assert!(
                2 * s > batch || batch * t / (2 * s) < MIN_SHARD_ROWS || 2 * s * parameters > saved,
                "B = {batch}, T = {t}: {s} could be doubled"
            );
        }
    }
    assert_eq!(gradient_shards(&nano, 0, 64), 1);
}

#[test]
fn the_sum_over_shards_has_the_same_bits_on_any_thread_count_and_is_taken_in_shard_order() {
    use super::shards::{REDUCE_PIECE, add_in_order};
    // Five shards' gradients: tensors of several pieces, of one piece and of a few elements.
    let shapes = [(100, 97), (1, 64), (3, 5), (2 * REDUCE_PIECE / 7 + 1, 7)];
    let mut rng = Rng::new(9);
    let shards: Vec<Vec<DMatrix<f32>>> = (0..5)
        .map(|_| shapes.iter().map(|&(r, c)| rng.normal_matrix::<f32>(r, c, 1.0)).collect())
        .collect();
    // Element by element, the first shard's value plus the second's, plus the third's …
    let expected: Vec<DMatrix<f32>> = (0..shapes.len())
        .map(|k| {
            let mut m = shards[0][k].clone();
            for (i, x) in m.iter_mut().enumerate() {
                for s in &shards[1..] {
                    *x += s[k][i];
                }
            }
            m
        })
        .collect();
    let rest: Vec<&[DMatrix<f32>]> = shards[1..].iter().map(Vec::as_slice).collect();
    for threads in [1, 2, 3, 4, 5, 8] {
        for parallel_min in [0, usize::MAX] {
            let mut acc = shards[0].clone();
            add_in_order(&mut acc, &rest, threads, parallel_min);
            assert!(acc == expected, "{threads} threads, parallel from {parallel_min}");
        }
    }
}

#[test]
fn a_reused_workspace_gives_a_fresh_ones_bits_whatever_it_was_sized_for_before() {
    use super::{FusedStep, Windows};
    use crate::ch09_gpt::{config::Config, data::windows_at, model::Gpt};
    // Generation without the cache runs one `Windows` over windows that grow, then (in this
    // test) shrink and grow again; the buffers keep their allocations and the fused W_QKV. Every
    // answer must be what a fresh workspace gives, bit for bit, prefill's cache included.
    let model = Gpt::<f64>::new(Config::new(11, 40, 2, 2, 8), 3).unwrap();
    let tokens: Vec<u32> = (0..40).map(|i| (i * 7 % 11) as u32).collect();
    let mut pass = Windows::new(&model);
    for n in [1, 2, 3, 33, 40, 5, 34, 1] {
        let fresh = FusedStep::new().last_logits(&model, &tokens[..n]).unwrap();
        assert_eq!(pass.last_logits(&tokens[..n]).unwrap(), fresh, "window of {n}");
        let (kv, z) = pass.prefill(&tokens[..n]).unwrap();
        let (kv_fresh, z_fresh) = FusedStep::new().prefill(&model, &tokens[..n]).unwrap();
        assert_eq!((kv.len, &kv.qkv, z), (kv_fresh.len, &kv_fresh.qkv, z_fresh), "prefill {n}");
    }
    // A training step on a workspace last sized for another batch (more or fewer sequences,
    // longer or shorter), or for a forward pass only.
    let mut step = FusedStep::new();
    for (starts, seq_len, forward_first) in [
        (vec![0, 3, 9, 1], 6, false),
        (vec![2], 9, true),
        (vec![5, 0, 7], 4, false),
        (vec![1], 6, true),
    ] {
        if forward_first {
            step.last_logits(&model, &tokens[..7]).unwrap();
        }
        let batch = windows_at(&tokens, seq_len, &starts);
        let (loss, grads) = step.loss_and_grads(&model, &batch).unwrap();
        let grads = grads.to_vec();
        let mut fresh = FusedStep::new();
        let (fresh_loss, fresh_grads) = fresh.loss_and_grads(&model, &batch).unwrap();
        assert_eq!((loss, grads.as_slice()), (fresh_loss, &*fresh_grads), "batch {starts:?}");
    }
}

#[test]
fn the_last_row_alone_is_the_full_passs_last_row_bit_for_bit() {
    use super::{FusedStep, Outputs};
    use crate::ch09_gpt::{config::Config, data::Batch, model::Gpt};
    use crate::float::Float;
    // Generation computes the last block's attention and everything after it for the last row
    // only (`Outputs::LastRow`); the logits must be the full pass's last row, bit for bit, in f64
    // and in f32 (whose products take the SIMD kernel: a one-row product is an edge tile there).
    fn check<T: Float>(config: Config) {
        let model = Gpt::<T>::new(config, 4).unwrap();
        let tokens: Vec<u32> =
            (0..config.context).map(|i| (i * 5 % config.vocab_size) as u32).collect();
        for t in [1, 2, 31, 33, config.context] {
            let mut step = FusedStep::new();
            let last = step.last_logits(&model, &tokens[..t]).unwrap();
            let shape = Batch { inputs: Vec::new(), targets: Vec::new(), batch: 1, seq_len: t };
            step.size(&model, &shape, false);
            let FusedStep { shards, .. } = &mut step;
            let rounder = &mut Rounder::default();
            shards[0].forward(&model, &tokens[..t], t, Outputs::Every, rounder).unwrap();
            let full: Vec<T> = shards[0].logits.row(t - 1).iter().copied().collect();
            assert_eq!(last, full, "T = {t} of {config:?}");
        }
    }
    check::<f64>(Config::new(11, 40, 2, 2, 8));
    check::<f32>(Config::new(65, 70, 2, 4, 64));
}

#[test]
fn the_row_team_gives_row_products_bits_on_any_number_of_threads() {
    use super::row_team::with_row_team;
    use crate::matmul::{MatMut, MatRef, Op, row_product};
    // 37 inputs (two runs of the dot's 16 lanes and 5 more) and 23 columns: 2 … 5 threads share
    // them in runs of 12, 8, 6 and 5; the output strided (ld 3) as the cache's [Q K V] rows are,
    // the row contiguous as the step's rows are. 24 threads: more than there are columns.
    let (k, n) = (37, 23);
    let mut rng = Rng::new(10);
    let x: DMatrix<f32> = rng.normal_matrix(1, k, 1.0);
    let b: DMatrix<f32> = rng.normal_matrix(k + 2, n, 1.0);
    let start: DMatrix<f32> = rng.normal_matrix(3, n, 1.0);
    let bits = |m: &DMatrix<f32>| m.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let a = MatRef::new(x.as_slice(), 1, k, 1).unwrap();
    let w = MatRef::new(b.as_slice(), k, n, k + 2).unwrap();
    for beta in [0.0, 1.0, 0.5] {
        let mut one = start.clone();
        let c = MatMut::new(&mut one.as_mut_slice()[1..], 1, n, 3).unwrap();
        row_product(0.75, a, w, Op::N, beta, c).unwrap();
        for threads in [1, 2, 3, 4, 5, 24] {
            let mut many = start.clone();
            with_row_team(threads, |team| {
                for _ in 0..2 {
                    // Twice on one team, from the same start: the helpers wait for a second.
                    many = start.clone();
                    let c = MatMut::new(&mut many.as_mut_slice()[1..], 1, n, 3).unwrap();
                    team.product(0.75, a, w, beta, c).unwrap();
                }
            });
            assert_eq!(bits(&one), bits(&many), "{threads} threads, β = {beta}");
        }
    }
}
