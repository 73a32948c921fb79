//! Proof that every judge bites, whatever features are on: the main crate's own function passes
//! each judge, and at least one planted mistake per exercise (a missing transpose, a missing 1/N,
//! a mask off by one, the wrong softmax axis …) fails it with a message that names the mistake.
//! `cargo test -p llm-workbook-exercises --test planted`.

use llm_workbook::Result;
use llm_workbook_exercises::EXERCISES;
use llm_workbook_exercises::judge::{self, NOT_STARTED, Probe, Verdict};
use nalgebra::DMatrix;

/// The judge passed the right answer.
#[track_caller]
fn passes(v: Verdict) {
    if let Err(m) = v {
        panic!("the judge failed the main crate's own solution:\n{m}");
    }
}

/// One judge's name, its verdict on the main crate's answer and the kinds of probe it ran and
/// declared not applicable.
type Judged = (&'static str, Verdict, judge::Probes);

/// `judged![name(answer), …]`: runs `j::name(answer)` for each, recording the probes it runs.
macro_rules! judged {
    ($($name:ident($($answer:tt)*)),* $(,)?) => {
        vec![$({
            let (verdict, probes) = judge::probes_run(|| j::$name($($answer)*));
            (stringify!($name), verdict, probes)
        }),*]
    };
}

/// Every judge passed the right answer.
#[track_caller]
fn all_pass(judged: Vec<Judged>) {
    for (name, verdict, _) in judged {
        if let Err(m) = verdict {
            panic!("the judge of `{name}` failed the main crate's own solution:\n{m}");
        }
    }
}

/// The judge failed a planted mistake with a message that contains `names` and ends with a hint
/// pointing to a chapter section.
#[track_caller]
fn catches(v: Verdict, names: &str) {
    let m = match v {
        Ok(()) => panic!("the judge passed a planted mistake (expected it to say {names:?})"),
        Err(m) => m,
    };
    assert!(m.contains(names), "the message does not name the mistake ({names:?}):\n{m}");
    let printed = judge::printed(&m);
    let wide = printed.lines().find(|l| l.chars().count() > judge::WIDTH);
    assert!(wide.is_none(), "the judge prints a line over {} columns: {wide:?}", judge::WIDTH);
    assert_eq!(
        printed.split_whitespace().collect::<Vec<_>>(),
        m.split_whitespace().collect::<Vec<_>>(),
        "the printed message lost or changed words"
    );
    let last = m.lines().last().unwrap_or_default();
    assert!(
        last.contains("hint:") && last.contains("chapters/ch") && last.contains(".md#"),
        "the message does not end with a hint to a chapter section:\n{m}"
    );
}

/// `m` with every row from `t` on zeroed: what an answer whose batch loop stops after the first
/// sequence (of `t` rows) reads of an upstream gradient, or leaves in its output.
fn first_sequence_only(m: &DMatrix<f64>, t: usize) -> DMatrix<f64> {
    DMatrix::from_fn(m.nrows(), m.ncols(), |r, c| if r < t { m[(r, c)] } else { 0.0 })
}

/// The 1×C row of `m`'s column sums (a bias's gradient).
fn column_sums(m: &DMatrix<f64>) -> DMatrix<f64> {
    DMatrix::from_fn(1, m.ncols(), |_, c| m.column(c).sum())
}

#[test]
fn a_blank_is_reported_as_not_started_not_a_crash() {
    let m = judge::ch02::softmax_rows_forward(|_| todo!()).unwrap_err();
    assert!(m.starts_with(NOT_STARTED), "{m}");
    assert!(m.contains("chapters/ch02_softmax.md#"), "{m}");
    let m = judge::ch02::softmax_rows_forward(|_| panic!("index out of bounds")).unwrap_err();
    assert!(m.contains("panicked: index out of bounds"), "{m}");
}

// ───────────────────────────── chapter 1 ─────────────────────────────

mod ch01 {
    use super::*;
    use judge::ch01 as j;
    use llm_workbook::ch01_logistic as book;

    /// Every judge of the chapter run on the main crate's answers, with the probes it ran.
    pub fn judged() -> Vec<Judged> {
        judged![
            sigmoid(book::sigmoid),
            logits_forward(book::logits_forward),
            bce_from_logit(book::bce_from_logit),
            sample_gradient(book::sample_gradient),
            logits_backward(|x, w, d| {
                book::logits_backward(x, w, d).map(|g| (g.d_x, g.d_w, g.d_b))
            }),
        ]
    }

    #[test]
    fn solutions_pass() {
        all_pass(judged());
    }

    #[test]
    fn sigmoid_with_the_wrong_sign_or_unstable_tail() {
        catches(j::sigmoid(|z: f64| 1.0 / (1.0 + z.exp())), "the exponent is −z");
        catches(j::sigmoid(|z: f64| z.exp() / (1.0 + z.exp())), "σ(1000) should be 1");
    }

    #[test]
    fn logits_without_the_bias() {
        catches(j::logits_forward(|w, _, x| book::logits_forward(w, 0.0, x)), "forget the bias");
    }

    #[test]
    fn bce_through_the_probability() {
        catches(j::bce_from_logit(|y, z| book::bce(y, book::sigmoid(z))), "σ(z) rounds to 0 or 1");
    }

    #[test]
    fn gradient_through_the_three_factors_or_with_the_left_tail_as_one_minus() {
        // The chapter's three factors multiplied as written: ∞·0 once ŷ rounds to 0 or 1.
        let factors = |w: &nalgebra::DVector<f64>, b: f64, x: &nalgebra::DVector<f64>, y: f64| {
            let y_hat = book::sigmoid(w.dot(x) + b);
            let factor = book::d_loss_d_yhat(y, y_hat) * book::d_yhat_d_z(y_hat);
            Ok(book::d_z_d_w(x) * factor)
        };
        catches(j::sample_gradient(factors), "the three factors multiplied");
        let one_minus = |w: &nalgebra::DVector<f64>, b: f64, x: &nalgebra::DVector<f64>, y: f64| {
            let z = w.dot(x) + b;
            let right = |z: f64| 1.0 / (1.0 + (-z).exp());
            let y_hat = if z >= 0.0 { right(z) } else { 1.0 - right(-z) };
            Ok(x * (y_hat - y))
        };
        catches(j::sample_gradient(one_minus), "1 − σ(−z)");
    }

    #[test]
    fn gradient_with_y_minus_y_hat() {
        catches(
            j::sample_gradient(|w, b, x, y| Ok(-book::sample_gradient(w, b, x, y)?)),
            "the gradient is (ŷ − y)·x",
        );
    }

    #[test]
    fn logits_backward_with_a_mean_bias_or_a_transposed_d_x() {
        catches(
            j::logits_backward(|x, w, d| {
                let g = book::logits_backward(x, w, d)?;
                Ok((g.d_x, g.d_w, g.d_b / d.len() as f64))
            }),
            "not the mean",
        );
        catches(
            j::logits_backward(|x, w, d| {
                let g = book::logits_backward(x, w, d)?;
                Ok((g.d_x.transpose(), g.d_w, g.d_b))
            }),
            "transpose",
        );
    }
}

// ───────────────────────────── chapter 2 ─────────────────────────────

mod ch02 {
    use super::*;
    use judge::ch02 as j;
    use llm_workbook::ch02_softmax as book;

    /// Every judge of the chapter run on the main crate's answers, with the probes it ran.
    pub fn judged() -> Vec<Judged> {
        judged![
            softmax_rows_forward(book::softmax_rows_forward),
            cross_entropy_from_logits(book::cross_entropy_from_logits),
            cross_entropy_from_logits_backward(book::cross_entropy_from_logits_backward),
            softmax_rows_backward(book::softmax_rows_backward),
            log_softmax_rows_backward(book::log_softmax_rows_backward),
            regression_logits_backward(book::regression_logits_backward),
        ]
    }

    #[test]
    fn solutions_pass() {
        all_pass(judged());
    }

    #[test]
    fn log_softmax_backward_without_the_row_sum_or_along_the_columns() {
        catches(j::log_softmax_rows_backward(|_, d| Ok(d.clone())), "through the log-sum-exp");
        let by_columns = |l: &DMatrix<f64>, d: &DMatrix<f64>| -> Result<DMatrix<f64>> {
            Ok(DMatrix::from_fn(l.nrows(), l.ncols(), |r, c| {
                d[(r, c)] - l[(r, c)].exp() * d.column(c).sum()
            }))
        };
        catches(j::log_softmax_rows_backward(by_columns), "the sum runs along the row");
    }

    #[test]
    fn log_softmax_backward_that_takes_e_of_a_masked_entry_times_zero() {
        // Y recovered as e^{ln Y − max ln Y} · … is fine; multiplying ln Y by the gradient is not.
        let times_log = |l: &DMatrix<f64>, d: &DMatrix<f64>| -> Result<DMatrix<f64>> {
            let sums: Vec<f64> = (0..l.nrows()).map(|r| d.row(r).sum()).collect();
            Ok(DMatrix::from_fn(l.nrows(), l.ncols(), |r, c| {
                d[(r, c)] - l[(r, c)].exp() * sums[r] + 0.0 * l[(r, c)]
            }))
        };
        catches(j::log_softmax_rows_backward(times_log), "masked logit");
    }

    #[test]
    fn regression_backward_with_a_mean_bias_or_a_transposed_weight_gradient() {
        catches(
            j::regression_logits_backward(|w, x, d| {
                let (d_x, d_w, d_b) = book::regression_logits_backward(w, x, d)?;
                Ok((d_x, d_w, d_b / d.nrows() as f64))
            }),
            "not their mean",
        );
        catches(
            j::regression_logits_backward(|w, x, d| {
                let (d_x, _, d_b) = book::regression_logits_backward(w, x, d)?;
                Ok((d_x, d.transpose() * x, d_b))
            }),
            "transpose",
        );
    }

    #[test]
    fn softmax_along_the_wrong_axis() {
        let by_columns = |z: &DMatrix<f64>| -> Result<DMatrix<f64>> {
            Ok(book::softmax_rows_forward(&z.transpose())?.transpose())
        };
        catches(j::softmax_rows_forward(by_columns), "your columns sum to 1");
    }

    #[test]
    fn softmax_without_the_max_shift() {
        let naive = |z: &DMatrix<f64>| -> Result<DMatrix<f64>> {
            let e = z.map(f64::exp);
            Ok(DMatrix::from_fn(z.nrows(), z.ncols(), |r, c| e[(r, c)] / e.row(r).sum()))
        };
        catches(j::softmax_rows_forward(naive), "subtract each row's maximum");
    }

    #[test]
    fn cross_entropy_summed_not_averaged() {
        catches(
            j::cross_entropy_from_logits(|z, t| {
                Ok(book::cross_entropy_from_logits(z, t)? * t.len() as f64)
            }),
            "divide by N",
        );
    }

    #[test]
    fn cross_entropy_gradient_without_1_over_n() {
        catches(
            j::cross_entropy_from_logits_backward(|z, t| {
                Ok(book::cross_entropy_from_logits_backward(z, t)? * t.len() as f64)
            }),
            "a missing 1/N",
        );
    }

    #[test]
    fn softmax_backward_without_the_off_diagonal() {
        catches(
            j::softmax_rows_backward(|y, d| Ok(y.component_mul(d))),
            "the diagonal of the Jacobian only",
        );
    }
}

// ───────────────────────────── chapter 3 ─────────────────────────────

mod ch03 {
    use super::*;
    use judge::ch03 as j;
    use llm_workbook::ch03_mlp::{self as book, Activation};

    fn grads(x: &DMatrix<f64>, w: &DMatrix<f64>, d: &DMatrix<f64>) -> book::DenseGrads<f64> {
        book::dense_backward(x, w, d).expect("valid shapes")
    }

    /// Every judge of the chapter run on the main crate's answers, with the probes it ran.
    pub fn judged() -> Vec<Judged> {
        judged![
            dense_forward(book::dense_forward),
            dense_backward(|x, w, d| {
                let g = grads(x, w, d);
                Ok((g.d_x, g.d_w, g.d_b))
            }),
            relu_backward(|z, d| book::activation_backward(Activation::Relu, z, d)),
            gelu_backward(|z, d| book::activation_backward(Activation::GeluErf, z, d)),
            mse_backward(book::mse_backward),
            mlp_backward(|m, t, d| m.backward(t, d)),
        ]
    }

    #[test]
    fn solutions_pass() {
        all_pass(judged());
    }

    /// Backpropagation with `f′` taken at the wrong place: at the activation a = f(z) when
    /// `at_output`, and the gradients left last layer first when `reversed` is false.
    fn backprop(
        mlp: &book::Mlp<f64>,
        trace: &book::Trace<f64>,
        d_out: &DMatrix<f64>,
        at_output: bool,
        reverse: bool,
    ) -> Result<(Vec<book::LayerGrads<f64>>, DMatrix<f64>)> {
        let mut grads = Vec::new();
        let mut d_a = d_out.clone();
        for (l, layer) in mlp.layers().iter().enumerate().rev() {
            let at = match (at_output, trace.inputs.get(l + 1)) {
                (false, _) => &trace.pre[l],
                (true, Some(a)) => a,
                (true, None) => &trace.output,
            };
            let d_z = match layer.activation {
                Some(act) => book::activation_backward(act, at, &d_a)?,
                None => d_a,
            };
            let g = grads_of(&trace.inputs[l], &layer.w, &d_z);
            grads.push(book::LayerGrads { d_w: g.d_w, d_b: g.d_b });
            d_a = g.d_x;
        }
        if reverse {
            grads.reverse();
        }
        Ok((grads, d_a))
    }

    fn grads_of(x: &DMatrix<f64>, w: &DMatrix<f64>, d: &DMatrix<f64>) -> book::DenseGrads<f64> {
        grads(x, w, d)
    }

    #[test]
    fn mlp_backward_with_f_prime_at_the_output_or_gradients_last_layer_first() {
        catches(
            j::mlp_backward(|m, t, d| backprop(m, t, d, true, true)),
            "f′ at the layer's pre-activation z",
        );
        catches(j::mlp_backward(|m, t, d| backprop(m, t, d, false, false)), "last layer first");
        passes(j::mlp_backward(|m, t, d| backprop(m, t, d, false, true)));
    }

    #[test]
    fn dense_forward_without_the_bias() {
        catches(j::dense_forward(|x, w, _| Ok(x * w)), "without the bias");
    }

    #[test]
    fn dense_backward_with_the_transpose_on_the_wrong_side() {
        catches(
            j::dense_backward(|x, w, d| {
                let g = grads(x, w, d);
                Ok((g.d_x, d.transpose() * x, g.d_b))
            }),
            "check the transpose",
        );
    }

    #[test]
    fn dense_backward_with_a_mean_bias() {
        catches(
            j::dense_backward(|x, w, d| {
                let g = grads(x, w, d);
                Ok((g.d_x, g.d_w, g.d_b / d.nrows() as f64))
            }),
            "not their mean",
        );
    }

    #[test]
    fn relu_backward_testing_the_gradient_not_z() {
        catches(
            j::relu_backward(|_, d| Ok(d.map(|v| if v > 0.0 { v } else { 0.0 }))),
            "test z, not ∂C/∂a",
        );
    }

    #[test]
    fn gelu_backward_with_the_left_tail_as_one_minus() {
        catches(
            j::gelu_backward(|z, d| {
                let phi = |z: f64| 1.0 - book::normal_cdf(-z);
                Ok(z.zip_map(d, |z, d| (phi(z) + z * book::normal_pdf(z)) * d))
            }),
            "½ erfc(−z/√2)",
        );
    }

    #[test]
    fn gelu_backward_with_only_phi() {
        catches(
            j::gelu_backward(|z, d| Ok(z.zip_map(d, |z, d| book::normal_cdf(z) * d))),
            "product rule",
        );
    }

    #[test]
    fn mse_backward_without_1_over_n() {
        catches(j::mse_backward(|a, y| Ok((a - y) * 2.0)), "a missing 1/N");
    }

    #[test]
    fn mse_backward_over_every_entry_or_without_the_2() {
        let over_all = |a: &DMatrix<f64>, y: &DMatrix<f64>| Ok((a - y) * (2.0 / a.len() as f64));
        catches(j::mse_backward(over_all), "a division by N·K");
        let no_two = |a: &DMatrix<f64>, y: &DMatrix<f64>| Ok((a - y) / a.nrows() as f64);
        catches(j::mse_backward(no_two), "a missing 2:");
    }
}

// ───────────────────────────── chapter 4 ─────────────────────────────

mod ch04 {
    use super::*;
    use judge::ch04 as j;
    use llm_workbook::ch04_xor::{self as book, RELU_NET, SIGMOID_NET};

    /// Every judge of the chapter run on the main crate's answers, with the probes it ran.
    pub fn judged() -> Vec<Judged> {
        judged![
            xor_sigmoid_net(|| SIGMOID_NET),
            xor_relu_net(|| RELU_NET),
            least_squares_fit(book::least_squares_fit),
        ]
    }

    #[test]
    fn solutions_pass() {
        all_pass(judged());
    }

    #[test]
    fn sigmoid_net_with_weights_too_small_to_saturate() {
        let small = book::PrintedNet {
            w_rows: [[2.0, 2.0], [-2.0, -2.0]],
            c: [-1.0, 3.0],
            w_out: [2.0, 2.0],
            b_out: -3.0,
            ..SIGMOID_NET
        };
        catches(j::xor_sigmoid_net(|| small), "larger weights saturate");
    }

    #[test]
    fn relu_net_that_computes_or() {
        let or = book::PrintedNet { w_rows: [[1.0, 1.0], [-1.0, 1.0]], ..RELU_NET };
        catches(j::xor_relu_net(|| or), "input (1, 1): XOR is 0");
        catches(j::xor_relu_net(|| SIGMOID_NET), "asks for activation Relu");
    }

    #[test]
    fn least_squares_without_the_column_of_ones() {
        let through_origin = |x: &DMatrix<f64>, y: &DMatrix<f64>| {
            let w = (x.transpose() * x).try_inverse().unwrap_or_default() * x.transpose() * y;
            Ok(book::LinearFit { predictions: x * &w, w, b: 0.0 })
        };
        catches(j::least_squares_fit(through_origin), "column of ones");
    }
}

// ───────────────────────────── chapter 5 ─────────────────────────────

mod ch05 {
    use super::*;
    use judge::ch05 as j;
    use llm_workbook::ch05_positions as book;

    /// Every judge of the chapter run on the main crate's answers, with the probes it ran.
    pub fn judged() -> Vec<Judged> {
        judged![
            frequency(book::frequency),
            sinusoidal(book::sinusoidal),
            add_positions(book::add_positions),
        ]
    }

    #[test]
    fn solutions_pass() {
        all_pass(judged());
    }

    #[test]
    fn add_positions_to_the_first_sequence_only() {
        // The loop over the positions runs over the first T rows only; the rest stay as copied.
        let first_only = |x: &DMatrix<f64>, t: usize| -> Result<DMatrix<f64>> {
            let pe = book::sinusoidal::<f64>(t, x.ncols())?;
            let mut out = x.clone();
            for r in 0..t.min(x.nrows()) {
                let row = out.row(r) + pe.row(r);
                out.row_mut(r).copy_from(&row);
            }
            Ok(out)
        };
        catches(j::add_positions(first_only), "the batch loop ignored");
    }

    #[test]
    fn frequency_with_i_over_d() {
        catches(
            j::frequency(|i, d| 1.0 / 10_000f64.powf(i as f64 / d as f64)),
            "pair i's exponent is 2i/d",
        );
    }

    #[test]
    fn frequency_in_integers_or_without_the_reciprocal() {
        let integer = |i: usize, d: usize| 1.0 / 10_000f64.powi((2 * i / d) as i32);
        catches(j::frequency(integer), "2i/d computed in integers");
        let upside_down = |i: usize, d: usize| 10_000f64.powf(2.0 * i as f64 / d as f64);
        catches(j::frequency(upside_down), "without the reciprocal");
        let base_e = |i: usize, d: usize| 1.0 / (2.0 * i as f64 / d as f64).exp();
        catches(j::frequency(base_e), "applied to e, not to 10000");
    }

    #[test]
    fn sinusoidal_with_sin_and_cos_swapped() {
        let swapped = |n: usize, d: usize| -> Result<DMatrix<f64>> {
            let pe = book::sinusoidal::<f64>(n, d)?;
            Ok(DMatrix::from_fn(n, d, |r, c| pe[(r, c ^ 1)]))
        };
        catches(j::sinusoidal(swapped), "sin and cos are swapped");
    }

    #[test]
    fn positions_that_do_not_restart_per_sequence() {
        let running = |x: &DMatrix<f64>, _: usize| -> Result<DMatrix<f64>> {
            Ok(x + book::sinusoidal::<f64>(x.nrows(), x.ncols())?)
        };
        catches(j::add_positions(running), "starts again at position 0");
    }
}

// ───────────────────────────── chapter 6 ─────────────────────────────

mod ch06 {
    use super::*;
    use judge::ch06 as j;
    use llm_workbook::ch06_attention as book;
    use llm_workbook_exercises::solutions::ch06_attention as s;

    /// Every judge of the chapter run on the main crate's answers, with the probes it ran.
    pub fn judged() -> Vec<Judged> {
        judged![
            causal_mask(book::causal_mask),
            attention_forward(s::attention_forward),
            attention_backward(s::attention_backward),
            layer_norm_forward(s::layer_norm_forward),
            layer_norm_backward(s::layer_norm_backward),
            split_heads(book::split_heads),
            concat_heads(book::concat_heads),
            mha_backward(book::mha_backward),
            ffn_backward(book::ffn_backward),
            block_backward(book::block_backward),
        ]
    }

    #[test]
    fn solutions_pass() {
        all_pass(judged());
    }

    #[test]
    fn mha_and_block_backward_that_ignore_the_batch() {
        // Only the first sequence's rows of ∂out are read (the loop over sequences stops at 1).
        let first_only = |p: &book::MultiHead<f64>, c: &book::MhaCache<f64>, d: &DMatrix<f64>| {
            book::mha_backward(p, c, &first_sequence_only(d, c.spec.q_len))
        };
        catches(j::mha_backward(first_only), "the batch loop ignored");
        let block_first = |b: &book::Block<f64>, c: &book::BlockCache<f64>, d: &DMatrix<f64>| {
            book::block_backward(b, c, &first_sequence_only(d, c.attn.spec.q_len))
        };
        catches(j::block_backward(block_first), "the batch loop ignored");
    }

    #[test]
    fn mha_backward_with_only_the_value_path_into_x_kv_or_a_transposed_w_o() {
        catches(
            j::mha_backward(|p, c, d| {
                let mut g = book::mha_backward(p, c, d)?;
                let no_k = book::MultiHead { w_k: p.w_k.map(|_| 0.0), ..p.clone() };
                g.d_x_kv = book::mha_backward(&no_k, c, d)?.d_x_kv;
                Ok(g)
            }),
            "the sum of the two paths",
        );
        catches(
            j::mha_backward(|p, c, d| {
                let g = book::mha_backward(p, c, d)?;
                Ok(book::MhaGrads { d_w_o: d.transpose() * &c.concat, ..g })
            }),
            "transpose",
        );
    }

    #[test]
    fn ffn_backward_with_f_prime_at_the_activation() {
        use llm_workbook::ch03_mlp::{activation_backward, dense_backward};
        catches(
            j::ffn_backward(|f, c, d| {
                let second = dense_backward(&c.a1, &f.w2, d)?;
                let d_z1 = activation_backward(f.act, &c.a1, &second.d_x)?;
                let first = dense_backward(&c.x, &f.w1, &d_z1)?;
                Ok(book::FfnGrads {
                    d_x: first.d_x,
                    d_w1: first.d_w,
                    d_b1: first.d_b,
                    d_w2: second.d_w,
                    d_b2: second.d_b,
                })
            }),
            "not at a₁",
        );
        catches(
            j::ffn_backward(|f, c, d| {
                let g = book::ffn_backward(f, c, d)?;
                Ok(book::FfnGrads { d_w2: d.transpose() * &c.a1, ..g })
            }),
            "transpose",
        );
    }

    #[test]
    fn block_backward_without_the_residual_path_or_the_key_value_input() {
        use book::{NormOrder, ffn_backward, layer_norm_backward, mha_backward};
        // Pre-LN with ∂L/∂h = LN₂'s ∂x only: the residual's direct path is lost.
        let no_skip = |b: &book::Block<f64>, c: &book::BlockCache<f64>, d: &DMatrix<f64>| {
            if b.order == NormOrder::Post {
                return book::block_backward(b, c, d);
            }
            let ffn = ffn_backward(&b.ffn, &c.ffn, d)?;
            let ln2 = layer_norm_backward(&b.ln2, &c.ln2, &ffn.d_x)?;
            let d_h = ln2.d_x.clone();
            let attn = mha_backward(&b.attn, &c.attn, &d_h)?;
            let ln1 = layer_norm_backward(&b.ln1, &c.ln1, &(&attn.d_x_q + &attn.d_x_kv))?;
            Ok(book::BlockGrads { d_x: d_h + &ln1.d_x, attn, ln1, ffn, ln2 })
        };
        catches(j::block_backward(no_skip), "the residual's direct path");
        // Pre-LN with LN₁'s backward fed by d_x_q only.
        let queries_only = |b: &book::Block<f64>, c: &book::BlockCache<f64>, d: &DMatrix<f64>| {
            if b.order == NormOrder::Post {
                return book::block_backward(b, c, d);
            }
            let ffn = ffn_backward(&b.ffn, &c.ffn, d)?;
            let ln2 = layer_norm_backward(&b.ln2, &c.ln2, &ffn.d_x)?;
            let d_h = d + &ln2.d_x;
            let attn = mha_backward(&b.attn, &c.attn, &d_h)?;
            let ln1 = layer_norm_backward(&b.ln1, &c.ln1, &attn.d_x_q)?;
            Ok(book::BlockGrads { d_x: d_h + &ln1.d_x, attn, ln1, ffn, ln2 })
        };
        catches(j::block_backward(queries_only), "d_x_q + d_x_kv");
        // Post-LN with ∂L/∂x from the attention only.
        let post_no_skip = |b: &book::Block<f64>, c: &book::BlockCache<f64>, d: &DMatrix<f64>| {
            let mut g = book::block_backward(b, c, d)?;
            if b.order == NormOrder::Post {
                g.d_x = &g.attn.d_x_q + &g.attn.d_x_kv;
            }
            Ok(g)
        };
        catches(j::block_backward(post_no_skip), "Post-LN block");
    }

    #[test]
    fn causal_mask_off_by_one_and_leaking() {
        let strict = |tq: usize, tk: usize| -> Result<DMatrix<f64>> {
            let m = book::causal_mask::<f64>(tq, tk)?;
            Ok(DMatrix::from_fn(tq, tk, |i, j| {
                if j == i + tk - tq { f64::NEG_INFINITY } else { m[(i, j)] }
            }))
        };
        catches(j::causal_mask(strict), "the mask is off by one");
        let square = |tq: usize, tk: usize| -> Result<DMatrix<f64>> {
            book::causal_mask::<f64>(tq, tq).map(|m| m.resize(tq, tk, f64::NEG_INFINITY))
        };
        catches(j::causal_mask(square), "must see key");
        let upper = |tq: usize, tk: usize| -> Result<DMatrix<f64>> {
            Ok(book::causal_mask::<f64>(tq, tk)?
                .map(|v| if v == 0.0 { f64::NEG_INFINITY } else { 0.0 }))
        };
        catches(j::causal_mask(upper), "must");
    }

    #[test]
    fn attention_without_the_scale_or_with_the_mask_ignored() {
        let unscaled = |q: &DMatrix<f64>, k: &DMatrix<f64>, v: &DMatrix<f64>, causal: bool| {
            let spec = book::AttnSpec { causal, ..book::AttnSpec::cross(q.nrows(), k.nrows()) };
            let a = book::attention_forward(q, k, v, &spec.with_scale(1.0))?;
            Ok((a.out, a.weights))
        };
        catches(j::attention_forward(unscaled), "divide by √d_k");
        let leaky = |q: &DMatrix<f64>, k: &DMatrix<f64>, v: &DMatrix<f64>, _: bool| {
            s::attention_forward(q, k, v, false)
        };
        catches(j::attention_forward(leaky), "a causal leak");
    }

    #[test]
    fn attention_backward_without_the_scale_in_d_q() {
        catches(
            j::attention_backward(|q, k, v, a, d, causal| {
                let (d_q, d_k, d_v) = s::attention_backward(q, k, v, a, d, causal)?;
                Ok((d_q * 3f64.sqrt(), d_k, d_v))
            }),
            "a missing 1/√d_k",
        );
    }

    #[test]
    fn layer_norm_with_the_sample_variance() {
        let sample = |x: &DMatrix<f64>, g: &DMatrix<f64>, b: &DMatrix<f64>, eps: f64| {
            let c = x.ncols() as f64;
            let y = DMatrix::from_fn(x.nrows(), x.ncols(), |r, col| {
                let mean = x.row(r).mean();
                let var = x.row(r).iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (c - 1.0);
                (x[(r, col)] - mean) / (var + eps).sqrt() * g[(0, col)] + b[(0, col)]
            });
            Ok(y)
        };
        catches(j::layer_norm_forward(sample), "population variance");
    }

    #[test]
    fn layer_norm_variance_as_mean_square_minus_square_mean() {
        let one_pass = |x: &DMatrix<f64>, g: &DMatrix<f64>, b: &DMatrix<f64>, eps: f64| {
            let y = DMatrix::from_fn(x.nrows(), x.ncols(), |r, col| {
                let mean = x.row(r).mean();
                let var = x.row(r).map(|v| v * v).mean() - mean * mean;
                (x[(r, col)] - mean) / (var + eps).sqrt() * g[(0, col)] + b[(0, col)]
            });
            Ok(y)
        };
        catches(j::layer_norm_forward(one_pass), "the mean of (x − μ)²");
    }

    /// LayerNorm's backward as a student writes it, row by row, with the variance computed in
    /// one pass as E[x²] − μ² when `one_pass`, else as the mean of (x − μ)² (a right answer).
    fn layer_norm_backward_by_hand(
        x: &DMatrix<f64>,
        g: &DMatrix<f64>,
        d: &DMatrix<f64>,
        eps: f64,
        one_pass: bool,
    ) -> (DMatrix<f64>, DMatrix<f64>, DMatrix<f64>) {
        let (mut d_x, mut d_g) =
            (DMatrix::zeros(x.nrows(), x.ncols()), DMatrix::zeros(1, x.ncols()));
        for r in 0..x.nrows() {
            let mean = x.row(r).mean();
            let var = if one_pass {
                x.row(r).map(|v| v * v).mean() - mean * mean
            } else {
                x.row(r).map(|v| (v - mean) * (v - mean)).mean()
            };
            let inv = 1.0 / (var + eps).sqrt();
            let x_hat = x.row(r).map(|v| (v - mean) * inv);
            let g_hat = d.row(r).component_mul(g);
            let (m1, m2) = (g_hat.mean(), g_hat.component_mul(&x_hat).mean());
            for col in 0..x.ncols() {
                d_x[(r, col)] = inv * (g_hat[col] - m1 - x_hat[col] * m2);
                d_g[(0, col)] += d[(r, col)] * x_hat[col];
            }
        }
        (d_x, d_g, column_sums(d))
    }

    #[test]
    fn layer_norm_backward_with_the_variance_as_mean_square_minus_square_mean() {
        let by_hand = |one_pass| {
            move |x: &DMatrix<f64>, g: &DMatrix<f64>, d: &DMatrix<f64>, eps: f64| {
                Ok(layer_norm_backward_by_hand(x, g, d, eps, one_pass))
            }
        };
        passes(j::layer_norm_backward(by_hand(false)));
        catches(j::layer_norm_backward(by_hand(true)), "not in E[x²] − μ²");
    }

    #[test]
    fn layer_norm_backward_without_the_mean_terms() {
        catches(
            j::layer_norm_backward(|x, g, d, eps| {
                let (_, d_g, d_b) = s::layer_norm_backward(x, g, d, eps)?;
                let d_x = DMatrix::from_fn(x.nrows(), x.ncols(), |r, c| {
                    let mean = x.row(r).mean();
                    let var =
                        x.row(r).iter().map(|v| (v - mean).powi(2)).sum::<f64>() / x.ncols() as f64;
                    g[(0, c)] * d[(r, c)] / (var + eps).sqrt()
                });
                Ok((d_x, d_g, d_b))
            }),
            "∂L/∂x has three terms",
        );
    }

    #[test]
    fn heads_split_by_stride_and_merged_by_rows() {
        let strided = |m: &DMatrix<f64>, h: usize| -> Result<Vec<DMatrix<f64>>> {
            let w = m.ncols() / h;
            Ok((0..h).map(|i| DMatrix::from_fn(m.nrows(), w, |r, c| m[(r, c * h + i)])).collect())
        };
        catches(j::split_heads(strided), "contiguous block");
        let by_rows = |parts: &[DMatrix<f64>]| -> Result<DMatrix<f64>> {
            Ok(book::concat_heads(&parts.iter().map(|p| p.transpose()).collect::<Vec<_>>())?
                .transpose())
        };
        catches(j::concat_heads(by_rows), "side by side");
        let square_heads = |parts: &[DMatrix<f64>]| -> Result<DMatrix<f64>> {
            let n = parts[0].nrows();
            Ok(DMatrix::from_fn(n, parts.len() * n, |r, c| parts[c / n][(r, c % n)]))
        };
        catches(j::concat_heads(square_heads), "its column count");
    }
}

// ───────────────────────────── chapter 7 ─────────────────────────────

mod ch07 {
    use super::*;
    use judge::ch07 as j;
    use llm_workbook::ch06_attention::{self as ch06, MultiHead};
    use llm_workbook::ch07_encoder_decoder::{self as book, Batch};
    use llm_workbook_exercises::solutions::ch07_encoder_decoder as s;

    /// Every judge of the chapter run on the main crate's answers, with the probes it ran.
    pub fn judged() -> Vec<Judged> {
        judged![
            padding_mask(ch06::padding_mask),
            cross_attention_forward(|y, yb, e, eb, w| {
                Ok(book::cross_attention_forward(y, yb, e, eb, w)?.0)
            }),
            cross_attention_backward(s::cross_attention_backward),
            decoder_block_backward(book::decoder_block_backward),
            loss_and_gradients(s::loss_and_gradients),
        ]
    }

    #[test]
    fn solutions_pass() {
        all_pass(judged());
    }

    #[test]
    fn batched_chapter_7_answers_that_ignore_the_batch() {
        // Every sequence's mask built from kv_lengths[0].
        let first_length = |l: &[usize], tq: usize, tk: usize| {
            ch06::padding_mask::<f64>(&vec![l.first().copied().unwrap_or(0); l.len()], tq, tk)
        };
        catches(j::padding_mask(first_length), "sequence 0's content used for every sequence");
        // One sequence at a time, but its rows sliced from row 0 (the offset b·T forgotten).
        let from_row_0 =
            |y: &DMatrix<f64>, yb: &Batch, e: &DMatrix<f64>, eb: &Batch, w: &MultiHead<f64>| {
                let mut out = DMatrix::zeros(y.nrows(), w.w_o.ncols());
                for b in 0..yb.sequences() {
                    let one =
                        |batch: &Batch| Batch { len: batch.len, lengths: vec![batch.lengths[b]] };
                    let (y_b, e_b) =
                        (y.rows(0, yb.len).into_owned(), e.rows(0, eb.len).into_owned());
                    let (o, _) = book::cross_attention_forward(&y_b, &one(yb), &e_b, &one(eb), w)?;
                    out.rows_mut(b * yb.len, yb.len).copy_from(&o);
                }
                Ok(out)
            };
        catches(
            j::cross_attention_forward(from_row_0),
            "sequence 0's content used for every sequence",
        );
        // The loop over sequences stops after the first: the other rows stay zero.
        let first_only =
            |y: &DMatrix<f64>, yb: &Batch, e: &DMatrix<f64>, eb: &Batch, w: &MultiHead<f64>| {
                let out = book::cross_attention_forward(y, yb, e, eb, w)?.0;
                Ok(first_sequence_only(&out, yb.len))
            };
        catches(j::cross_attention_forward(first_only), "the batch loop ignored");
        let backward_first = |y: &DMatrix<f64>,
                              yb: &Batch,
                              e: &DMatrix<f64>,
                              eb: &Batch,
                              w: &MultiHead<f64>,
                              d: &DMatrix<f64>| {
            s::cross_attention_backward(y, yb, e, eb, w, &first_sequence_only(d, yb.len))
        };
        catches(j::cross_attention_backward(backward_first), "the batch loop ignored");
        use llm_workbook::ch07_encoder_decoder::{DecoderBlock, DecoderBlockCache};
        let block_first = |b: &DecoderBlock<f64>, c: &DecoderBlockCache<f64>, d: &DMatrix<f64>| {
            let t = c.self_attention.spec.q_len;
            book::decoder_block_backward(b, c, &first_sequence_only(d, t))
        };
        catches(j::decoder_block_backward(block_first), "the batch loop ignored");
    }

    #[test]
    fn padding_mask_off_by_one() {
        let shifted = |l: &[usize], tq: usize, tk: usize| -> Result<DMatrix<f64>> {
            let m = ch06::padding_mask::<f64>(l, tq, tk)?;
            Ok(DMatrix::from_fn(m.nrows(), tk, |r, j| {
                if j + 1 == l[r / tq] { f64::NEG_INFINITY } else { m[(r, j)] }
            }))
        };
        catches(j::padding_mask(shifted), "the mask is off by one");
    }

    #[test]
    fn cross_attention_that_attends_to_itself_or_ignores_padding() {
        let itself =
            |y: &DMatrix<f64>, yb: &Batch, _: &DMatrix<f64>, _: &Batch, w: &MultiHead<f64>| {
                Ok(book::cross_attention_forward(y, yb, y, yb, w)?.0)
            };
        catches(j::cross_attention_forward(itself), "keys and values from the encoder");
        let unmasked =
            |y: &DMatrix<f64>, yb: &Batch, e: &DMatrix<f64>, eb: &Batch, w: &MultiHead<f64>| {
                let full = Batch { len: eb.len, lengths: vec![eb.len; eb.lengths.len()] };
                Ok(book::cross_attention_forward(y, yb, e, &full, w)?.0)
            };
        catches(j::cross_attention_forward(unmasked), "a padding leak");
    }

    #[test]
    fn cross_attention_backward_with_only_the_value_path_into_e() {
        catches(
            j::cross_attention_backward(|y, yb, e, eb, w, d| {
                // ∂L/∂E through V only: zero W_K's contribution by differentiating with K fixed.
                let mut g = s::cross_attention_backward(y, yb, e, eb, w, d)?;
                let no_k = MultiHead { w_k: w.w_k.map(|_| 0.0), ..w.clone() };
                let through_v = s::cross_attention_backward(y, yb, e, eb, &no_k, d)?;
                g.d_x_kv = through_v.d_x_kv;
                Ok(g)
            }),
            "the sum of the two paths",
        );
    }

    #[test]
    fn decoder_block_backward_without_d_e_or_a_residual_path() {
        use ch06::{ffn_backward, layer_norm_backward, mha_backward};
        use llm_workbook::ch07_encoder_decoder::{DecoderBlock, DecoderBlockCache};
        // ∂L/∂E forgotten: left at zero instead of the cross-attention's d_x_kv.
        let no_d_e = |b: &DecoderBlock<f64>, c: &DecoderBlockCache<f64>, d: &DMatrix<f64>| {
            let (d_y, d_e, g) = book::decoder_block_backward(b, c, d)?;
            Ok((d_y, d_e.map(|_| 0.0), g))
        };
        catches(j::decoder_block_backward(no_d_e), "only from the cross-attention's keys");
        // The first residual's direct path dropped: ∂L/∂y from the self-attention only.
        let no_skip = |b: &DecoderBlock<f64>, c: &DecoderBlockCache<f64>, d: &DMatrix<f64>| {
            let (_, d_e, g) = book::decoder_block_backward(b, c, d)?;
            let n3 = layer_norm_backward(&b.norm3, &c.norm3, d)?;
            let f = ffn_backward(&b.ffn, &c.ffn, &n3.d_x)?;
            let n2 = layer_norm_backward(&b.norm2, &c.norm2, &(&n3.d_x + &f.d_x))?;
            let x =
                book::cross_attention_backward(&b.cross_attention, &c.cross_attention, &n2.d_x)?;
            let n1 = layer_norm_backward(&b.norm1, &c.norm1, &(&n2.d_x + &x.d_x_q))?;
            let s = mha_backward(&b.self_attention, &c.self_attention, &n1.d_x)?;
            Ok((&s.d_x_q + &s.d_x_kv, d_e, g))
        };
        catches(j::decoder_block_backward(no_skip), "the residual's direct path");
        // The second residual dropped: ∂L/∂Y₁ from the cross-attention's d_x_q only, so every
        // tensor before it (LN₁, the self-attention, y) is wrong.
        let no_skip2 = |b: &DecoderBlock<f64>, c: &DecoderBlockCache<f64>, d: &DMatrix<f64>| {
            let (_, d_e, mut g) = book::decoder_block_backward(b, c, d)?;
            let n3 = layer_norm_backward(&b.norm3, &c.norm3, d)?;
            let f = ffn_backward(&b.ffn, &c.ffn, &n3.d_x)?;
            let n2 = layer_norm_backward(&b.norm2, &c.norm2, &(&n3.d_x + &f.d_x))?;
            let x =
                book::cross_attention_backward(&b.cross_attention, &c.cross_attention, &n2.d_x)?;
            let n1 = layer_norm_backward(&b.norm1, &c.norm1, &x.d_x_q)?;
            g.norm1.gamma = n1.d_gamma.clone();
            g.norm1.beta = n1.d_beta.clone();
            let s = mha_backward(&b.self_attention, &c.self_attention, &n1.d_x)?;
            Ok((&n1.d_x + &s.d_x_q + &s.d_x_kv, d_e, g))
        };
        catches(j::decoder_block_backward(no_skip2), "the cross-attention's d_x_q");
        // The self-attention's input fed by d_x_q only (its keys/values path lost).
        let queries_only = |b: &DecoderBlock<f64>, c: &DecoderBlockCache<f64>, d: &DMatrix<f64>| {
            let (d_y, d_e, g) = book::decoder_block_backward(b, c, d)?;
            let n3 = layer_norm_backward(&b.norm3, &c.norm3, d)?;
            let f = ffn_backward(&b.ffn, &c.ffn, &n3.d_x)?;
            let n2 = layer_norm_backward(&b.norm2, &c.norm2, &(&n3.d_x + &f.d_x))?;
            let x =
                book::cross_attention_backward(&b.cross_attention, &c.cross_attention, &n2.d_x)?;
            let n1 = layer_norm_backward(&b.norm1, &c.norm1, &(&n2.d_x + &x.d_x_q))?;
            let s = mha_backward(&b.self_attention, &c.self_attention, &n1.d_x)?;
            Ok((d_y - &s.d_x_kv, d_e, g))
        };
        catches(j::decoder_block_backward(queries_only), "d_x_q + d_x_kv");
    }

    /// The slips a student may make writing the whole model's loss and backward.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Slip {
        /// None: the whole model written from the chapter's pieces, in another order than the
        /// main crate's.
        None,
        /// The loss's softmax written out without its max shift: e^{z} as it comes.
        SoftmaxWithoutShift,
        /// The decoder layers' ∂L/∂E never summed and sent into the encoder.
        NoCrossIntoEncoder,
        /// ∂L/∂E overwritten by each decoder layer instead of summed over them.
        DeOverwritten,
        /// The padding rows labelled 0 and scored with the real ones.
        PaddingScored,
        /// The mean over all B·T_t rows instead of the real positions.
        MeanOverAllRows,
        /// Only sequence 0's labels entered into the loss (the batch loop stops at 1).
        FirstSequenceOnly,
        /// No check that each label sequence is as long as its decoder input.
        NoLengthCheck,
    }

    /// The mean cross-entropy over the labelled rows and its gradient (P − Y)/N_real, with each
    /// row's softmax written out without its max shift.
    fn cross_entropy_without_shift(
        logits: &DMatrix<f64>,
        labels: &[Option<usize>],
    ) -> (f64, DMatrix<f64>) {
        let n = labels.iter().flatten().count() as f64;
        let mut d = DMatrix::zeros(logits.nrows(), logits.ncols());
        let mut loss = 0.0;
        for (r, label) in labels.iter().enumerate() {
            let Some(l) = *label else { continue };
            let total: f64 = logits.row(r).iter().map(|z| z.exp()).sum();
            for c in 0..logits.ncols() {
                let p = logits[(r, c)].exp() / total;
                d[(r, c)] = (p - f64::from(u8::from(c == l))) / n;
                if c == l {
                    loss -= p.ln() / n;
                }
            }
        }
        (loss, d)
    }

    /// Rows `E[token] + PE[position]` of a padded batch, zero on padding rows.
    fn embed(table: &DMatrix<f64>, seqs: &[Vec<usize>], len: usize) -> Result<DMatrix<f64>> {
        let pe = llm_workbook::ch05_positions::sinusoidal::<f64>(len, table.ncols())?;
        let mut x = DMatrix::zeros(seqs.len() * len, table.ncols());
        for (b, s) in seqs.iter().enumerate() {
            for (p, &t) in s.iter().enumerate() {
                x.row_mut(b * len + p).copy_from(&(table.row(t) + pe.row(p)));
            }
        }
        Ok(x)
    }

    /// Row t of the table's gradient gathers the rows of `d_x` that hold token t.
    fn embed_backward(seqs: &[Vec<usize>], len: usize, d_x: &DMatrix<f64>, d: &mut DMatrix<f64>) {
        for (b, s) in seqs.iter().enumerate() {
            for (p, &t) in s.iter().enumerate() {
                let row = d.row(t) + d_x.row(b * len + p);
                d.row_mut(t).copy_from(&row);
            }
        }
    }

    /// The whole encoder–decoder's loss and gradients as a student writes them from the public
    /// pieces (`encode`, `decoder_block_forward`, `padded_cross_entropy`,
    /// `decoder_block_backward`, `block_backward`), with `slip`.
    fn by_a_student(
        m: &book::EncoderDecoder<f64>,
        source: &[Vec<usize>],
        target_in: &[Vec<usize>],
        labels: &[Vec<usize>],
        slip: Slip,
    ) -> Result<book::Gradients<f64>> {
        use ch06::{Block, Ffn, LayerNorm, block_backward};
        use llm_workbook::error::invalid;
        const OP: &str = "loss_and_gradients";
        let cfg = m.config;
        if target_in.len() != source.len() || labels.len() != source.len() {
            return Err(invalid(OP, "target_in", "one target sequence per source sequence"));
        }
        for (t, l) in target_in.iter().zip(labels) {
            let outside = t.iter().chain(l).any(|&x| x >= cfg.vocab);
            let unequal = t.len() != l.len() && slip != Slip::NoLengthCheck;
            if unequal || t.is_empty() || t.len() > cfg.max_len || outside {
                return Err(invalid(OP, "target_in", "a bad target or label sequence"));
            }
        }
        let (e, eb, encoder_caches) = m.encode(source)?;
        let t_t = target_in.iter().map(Vec::len).max().unwrap_or(0);
        let tb = Batch::new(t_t, target_in.iter().map(Vec::len).collect())?;
        let mut y = embed(&m.target_embedding, target_in, t_t)?;
        let mut caches = Vec::new();
        for block in &m.decoder {
            let (out, cache) = book::decoder_block_forward(&y, &tb, &e, &eb, block)?;
            caches.push(cache);
            y = out;
        }
        let logits = &y * &m.w_out + DMatrix::from_fn(y.nrows(), cfg.vocab, |_, c| m.b_out[c]);
        let sequences = if slip == Slip::FirstSequenceOnly { 1 } else { labels.len() };
        let mut row_labels = vec![None; y.nrows()];
        for (b, l) in labels.iter().enumerate().take(sequences) {
            for (p, &t) in l.iter().enumerate() {
                row_labels[b * t_t + p] = Some(t);
            }
        }
        let real = row_labels.iter().flatten().count() as f64;
        if slip == Slip::PaddingScored {
            row_labels.iter_mut().for_each(|l| _ = l.get_or_insert(0));
        }
        let (mut loss, mut d_logits) = if slip == Slip::SoftmaxWithoutShift {
            cross_entropy_without_shift(&logits, &row_labels)
        } else {
            book::padded_cross_entropy(&logits, &row_labels)?
        };
        if slip == Slip::MeanOverAllRows {
            let share = real / y.nrows() as f64;
            loss *= share;
            d_logits *= share;
        }
        let mut g = m.zeros_like();
        g.w_out = y.transpose() * &d_logits;
        g.b_out = DMatrix::from_fn(1, cfg.vocab, |_, c| d_logits.column(c).sum());
        let mut d_y = &d_logits * m.w_out.transpose();
        let mut d_e = DMatrix::zeros(e.nrows(), e.ncols());
        for i in (0..m.decoder.len()).rev() {
            let (dy, de, grads) = book::decoder_block_backward(&m.decoder[i], &caches[i], &d_y)?;
            match slip {
                Slip::NoCrossIntoEncoder => {}
                Slip::DeOverwritten => d_e = de,
                _ => d_e += de,
            }
            d_y = dy;
            g.decoder[i] = grads;
        }
        embed_backward(target_in, t_t, &d_y, &mut g.target_embedding);
        for i in (0..m.encoder.len()).rev() {
            let like = &m.encoder[i];
            let gb = block_backward(like, &encoder_caches[i], &d_e)?;
            let a = gb.attn;
            g.encoder[i] = Block {
                attn: MultiHead {
                    heads: like.attn.heads,
                    w_q: a.d_w_q,
                    b_q: a.d_b_q,
                    w_k: a.d_w_k,
                    b_k: a.d_b_k,
                    w_v: a.d_w_v,
                    b_v: a.d_b_v,
                    w_o: a.d_w_o,
                    b_o: a.d_b_o,
                },
                ln1: LayerNorm { gamma: gb.ln1.d_gamma, beta: gb.ln1.d_beta, ..like.ln1.clone() },
                ffn: Ffn {
                    w1: gb.ffn.d_w1,
                    b1: gb.ffn.d_b1,
                    w2: gb.ffn.d_w2,
                    b2: gb.ffn.d_b2,
                    act: like.ffn.act,
                },
                ln2: LayerNorm { gamma: gb.ln2.d_gamma, beta: gb.ln2.d_beta, ..like.ln2.clone() },
                order: like.order,
            };
            d_e = gb.d_x;
        }
        embed_backward(source, eb.len, &d_e, &mut g.source_embedding);
        Ok(book::Gradients { loss, grads: g })
    }

    #[test]
    fn the_whole_model_written_from_the_pieces_passes() {
        passes(j::loss_and_gradients(|m, s, t, l| by_a_student(m, s, t, l, Slip::None)));
    }

    #[test]
    fn the_whole_model_with_a_slip_in_its_loss_or_its_backward() {
        let with = |slip| move |m: &_, s: &_, t: &_, l: &_| by_a_student(m, s, t, l, slip);
        catches(j::loss_and_gradients(with(Slip::NoCrossIntoEncoder)), "never reaches the encoder");
        catches(j::loss_and_gradients(with(Slip::DeOverwritten)), "the sum of every decoder layer");
        catches(j::loss_and_gradients(with(Slip::PaddingScored)), "padding rows scored");
        catches(j::loss_and_gradients(with(Slip::MeanOverAllRows)), "divide by N_real");
        catches(j::loss_and_gradients(with(Slip::FirstSequenceOnly)), "the batch loop ignored");
        catches(j::loss_and_gradients(with(Slip::SoftmaxWithoutShift)), "the max shift dropped");
    }

    #[test]
    fn the_whole_model_with_a_field_that_is_not_a_matrix_or_no_error() {
        let no_config = |m: &_, s: &_, t: &_, l: &_| {
            let mut g = by_a_student(m, s, t, l, Slip::None)?;
            g.grads.decoder[1].norm2.eps = 0.0; // zeroed along with the matrices
            Ok(g)
        };
        catches(j::loss_and_gradients(no_config), "start from model.zeros_like()");
        let no_check = |m: &_, s: &_, t: &_, l: &_| by_a_student(m, s, t, l, Slip::NoLengthCheck);
        catches(j::loss_and_gradients(no_check), "the doc promises an Err");
    }
}

// ───────────────────────────── chapter 8 ─────────────────────────────

mod ch08 {
    use super::*;
    use judge::ch08 as j;
    use llm_workbook::ch08_tokens::{TokenId, bpe};
    use llm_workbook_exercises::solutions::ch08_tokens as s;
    use std::collections::HashMap;

    type Ranks = HashMap<(TokenId, TokenId), (u32, TokenId)>;

    /// Every judge of the chapter run on the main crate's answers, with the probes it ran.
    pub fn judged() -> Vec<Judged> {
        judged![
            apply_merges(bpe::apply_merges),
            bigram_counts(s::bigram_counts),
            add_k_probability(s::add_k_probability),
        ]
    }

    #[test]
    fn solutions_pass() {
        all_pass(judged());
    }

    #[test]
    fn merges_in_one_left_to_right_pass_ignoring_rank() {
        let one_pass = |ids: &mut Vec<TokenId>, ranks: &Ranks| {
            let mut out = Vec::new();
            let mut i = 0;
            while i < ids.len() {
                match ids.get(i + 1).and_then(|&n| ranks.get(&(ids[i], n))) {
                    Some(&(_, merged)) => {
                        out.push(merged);
                        i += 2;
                    }
                    None => {
                        out.push(ids[i]);
                        i += 1;
                    }
                }
            }
            *ids = out;
        };
        catches(j::apply_merges(one_pass), "merged tokens can merge again");
    }

    #[test]
    fn merges_that_overlap() {
        let overlapping = |ids: &mut Vec<TokenId>, ranks: &Ranks| {
            let merged: Vec<TokenId> =
                ids.windows(2).filter_map(|w| ranks.get(&(w[0], w[1])).map(|&(_, m)| m)).collect();
            if !merged.is_empty() {
                *ids = merged;
            }
        };
        catches(j::apply_merges(overlapping), "no overlap");
    }

    #[test]
    fn bigram_counts_with_the_wrap_around_pair() {
        let wrapped = |t: &[TokenId], v: usize| -> Result<DMatrix<f64>> {
            let mut c = s::bigram_counts(t, v)?;
            if let (Some(&l), Some(&f)) = (t.last(), t.first()) {
                c[(l as usize, f as usize)] += 1.0;
            }
            Ok(c)
        };
        catches(j::bigram_counts(wrapped), "C (rows: a, columns: the token after a)");
    }

    #[test]
    fn add_k_with_k_not_k_times_v() {
        catches(
            j::add_k_probability(|t, v, c, x, k| {
                let p = s::add_k_probability(t, v, c, x, 0.0)?;
                let counts = s::bigram_counts(t, v)?;
                let total = counts.row(c as usize).sum();
                Ok(if total == 0.0 { p } else { (p * total + k) / (total + k) })
            }),
            "the denominator needs + k|V|",
        );
    }
}

// ───────────────────────────── chapter 9 ─────────────────────────────

mod ch09 {
    use super::*;
    use judge::ch09 as j;
    use llm_workbook::ch09_gpt::sample::{Decoding, distribution};
    use llm_workbook::optim::AdamConfig;
    use llm_workbook_exercises::solutions::ch09_gpt as s;

    fn top_k(z: &[f64], k: usize, t: f64) -> Result<Vec<(usize, f64)>> {
        distribution(z, &Decoding::Sample { temperature: t, top_k: Some(k), top_p: None })
    }

    /// Every judge of the chapter run on the main crate's answers, with the probes it ran.
    pub fn judged() -> Vec<Judged> {
        judged![
            lm_head_backward(s::lm_head_backward),
            adamw_step(s::adamw_step),
            temperature_distribution(|z, t| distribution(z, &Decoding::temperature(t))),
            top_k_distribution(top_k),
            kv_cache_step(s::kv_cache_step),
        ]
    }

    #[test]
    fn solutions_pass() {
        all_pass(judged());
    }

    #[test]
    fn lm_head_backward_transposed_unscaled_or_summed() {
        catches(
            j::lm_head_backward(|h, w, t| {
                let (l, d_h, d_w) = s::lm_head_backward(h, w, t)?;
                Ok((l, d_h, d_w.transpose()))
            }),
            "transpose",
        );
        catches(
            j::lm_head_backward(|h, w, t| {
                let (l, d_h, d_w) = s::lm_head_backward(h, w, t)?;
                let rows = h.nrows() as f64;
                Ok((l, d_h * rows, d_w * rows))
            }),
            "a missing 1/S",
        );
        catches(
            j::lm_head_backward(|h, w, t| {
                let (l, d_h, d_w) = s::lm_head_backward(h, w, t)?;
                Ok((l * h.nrows() as f64, d_h, d_w))
            }),
            "their mean",
        );
    }

    /// One head's step over the first `n(len)` rows of the cache, after writing row len when
    /// `append`.
    fn cache_step(
        keys: &mut DMatrix<f64>,
        values: &mut DMatrix<f64>,
        len: usize,
        (q, k, v): (&[f64], &[f64], &[f64]),
        append: bool,
        n: impl Fn(usize) -> usize,
    ) -> Result<Vec<f64>> {
        if len >= keys.nrows() {
            return Err(llm_workbook::error::invalid("step", "len", "the cache is full"));
        }
        if append {
            keys.row_mut(len).copy_from_slice(k);
            values.row_mut(len).copy_from_slice(v);
        }
        let n = n(len).max(1);
        llm_workbook::ch09_gpt::fast::attend_one("step", q, keys, values, n, 1)
    }

    #[test]
    fn kv_cache_step_that_leaks_is_off_by_one_or_never_appends() {
        let leaky =
            |k: &mut DMatrix<f64>, v: &mut DMatrix<f64>, l, q: &[f64], kn: &[f64], vn: &[f64]| {
                let rows = k.nrows();
                cache_step(k, v, l, (q, kn, vn), true, |_| rows)
            };
        catches(j::kv_cache_step(leaky), "a causal leak");
        let before_itself =
            |k: &mut DMatrix<f64>, v: &mut DMatrix<f64>, l, q: &[f64], kn: &[f64], vn: &[f64]| {
                cache_step(k, v, l, (q, kn, vn), true, |len| len)
            };
        catches(j::kv_cache_step(before_itself), "off by one");
        let read_only =
            |k: &mut DMatrix<f64>, v: &mut DMatrix<f64>, l, q: &[f64], kn: &[f64], vn: &[f64]| {
                cache_step(k, v, l, (q, kn, vn), false, |len| len + 1)
            };
        catches(j::kv_cache_step(read_only), "append at row len");
    }

    #[test]
    fn temperature_multiplied_not_divided() {
        catches(
            j::temperature_distribution(|z, t| {
                let scaled: Vec<f64> = z.iter().map(|v| v * t).collect();
                distribution(&scaled, &Decoding::temperature(1.0))
            }),
            "divide the logits by T",
        );
    }

    #[test]
    fn temperature_ties_listed_in_reverse() {
        catches(
            j::temperature_distribution(|z, t| {
                let mut all = distribution(z, &Decoding::temperature(t))?;
                all.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
                all.reverse();
                Ok(all)
            }),
            "ties by token id",
        );
    }

    #[test]
    fn top_k_without_renormalising() {
        catches(
            j::top_k_distribution(|z, k, t| {
                let mut all = distribution(z, &Decoding::temperature(t))?;
                all.truncate(k);
                Ok(all)
            }),
            "softmax over those alone",
        );
    }

    #[test]
    fn adam_without_bias_correction() {
        let uncorrected = |theta: &mut DMatrix<f64>,
                           g: &DMatrix<f64>,
                           m: &mut DMatrix<f64>,
                           v: &mut DMatrix<f64>,
                           _: u64,
                           c: &AdamConfig,
                           wd: f64| {
            *theta *= 1.0 - c.learning_rate * wd;
            *m = &*m * c.beta1 + g * (1.0 - c.beta1);
            *v = &*v * c.beta2 + g.map(|x| x * x) * (1.0 - c.beta2);
            *theta -= m.zip_map(v, |m, v| c.learning_rate * m / (v.sqrt() + c.epsilon));
            Ok(())
        };
        catches(j::adamw_step(uncorrected), "bias correction");
    }

    #[test]
    fn adam_with_l2_decay_in_the_gradient() {
        let l2 = |theta: &mut DMatrix<f64>,
                  g: &DMatrix<f64>,
                  m: &mut DMatrix<f64>,
                  v: &mut DMatrix<f64>,
                  steps: u64,
                  c: &AdamConfig,
                  wd: f64| {
            let g = g + &*theta * wd;
            s::adamw_step(theta, &g, m, v, steps, c, 0.0)
        };
        catches(j::adamw_step(l2), "decay is decoupled");
    }
}

// ───────────────────────────── chapter 10 ─────────────────────────────

mod ch10 {
    use super::*;
    use judge::ch10 as j;
    use llm_workbook_exercises::solutions::ch10_matmul::{self as s, MR, NR};

    use llm_workbook::matmul::Op;

    use llm_workbook::matmul::lab::{pack_a_block, pack_b_panel};
    use std::ops::Range;

    /// Every judge of the chapter run on the main crate's answers, with the probes it ran.
    pub fn judged() -> Vec<Judged> {
        judged![
            pack_a_block(pack_a_block::<f64>),
            pack_b_panel(pack_b_panel::<f64>),
            micro_kernel(s::micro_kernel),
        ]
    }

    #[test]
    fn solutions_pass() {
        all_pass(judged());
    }

    /// Each sliver of `packed` (slivers of kc·w values) written line by line instead.
    fn line_by_line(packed: Vec<f64>, kc: usize, w: usize) -> Vec<f64> {
        (0..packed.len())
            .map(|n| {
                let (q, r) = (n / (kc * w), n % (kc * w));
                // entry r of sliver q holds line r / kc, depth step r % kc
                packed[q * kc * w + (r % kc) * w + r / kc]
            })
            .collect()
    }

    #[test]
    fn packing_line_by_line_ignoring_op_or_the_offsets() {
        let by_lines = |a: &DMatrix<f64>, t, r: Range<usize>, d: Range<usize>, w| {
            let kc = d.len();
            pack_a_block(a, t, r, d, w).map(|p| line_by_line(p, kc, w))
        };
        catches(j::pack_a_block(by_lines), "line by line");
        // op ignored: the ranges read as rows and columns of A as stored.
        let as_stored = |a: &DMatrix<f64>, _: Op, r: Range<usize>, d: Range<usize>, w| {
            pack_a_block(a, Op::N, r, d, w)
        };
        catches(j::pack_a_block(as_stored), "read op(A)");
        let from_origin = |b: &DMatrix<f64>, t, d: Range<usize>, c: Range<usize>, w| {
            pack_b_panel(b, t, 0..d.len(), 0..c.len(), w)
        };
        catches(j::pack_b_panel(from_origin), "the block starts at the ranges' starts");
    }

    #[test]
    fn packing_that_pads_with_ones() {
        let ones = |b: &DMatrix<f64>, t, d: Range<usize>, c: Range<usize>, w: usize| {
            let (kc, nc) = (d.len(), c.len());
            let mut p = pack_b_panel(b, t, d, c, w)?;
            for (n, v) in p.iter_mut().enumerate() {
                if (n / (kc * w)) * w + n % w >= nc {
                    *v = 1.0;
                }
            }
            Ok(p)
        };
        catches(j::pack_b_panel(ones), "padding");
    }

    #[test]
    fn kernel_reading_a_row_by_row() {
        catches(
            j::micro_kernel(|kc, a, b, alpha, beta, c| {
                let a = DMatrix::from_row_slice(MR, kc, &a[..MR * kc]);
                let b = DMatrix::from_row_slice(kc, NR, &b[..kc * NR]);
                *c = if beta == 0.0 { &a * &b * alpha } else { &a * &b * alpha + &*c * beta };
            }),
            "you read Ã row by row",
        );
    }

    #[test]
    fn kernel_that_reads_c_when_beta_is_zero() {
        catches(
            j::micro_kernel(|kc, a, b, alpha, beta, c| {
                let a = DMatrix::from_column_slice(MR, kc, &a[..MR * kc]);
                let b = DMatrix::from_row_slice(kc, NR, &b[..kc * NR]);
                *c = &a * &b * alpha + &*c * beta;
            }),
            "do not read it when β = 0",
        );
    }
}

// ─────────────── the probes: scale, batch, ties and order, promised errors ───────────────

/// Answers a student might write, each with one slip the probes exist for, and answers written
/// differently from the main crate that are still right (they prove the tolerances are fair).
mod probes {
    use super::*;
    use judge::{ch01, ch02, ch06, ch07, ch08, ch09};
    use llm_workbook::ch06_attention::{MhaGrads, MultiHead};
    use llm_workbook::ch07_encoder_decoder::Batch;
    use llm_workbook::ch08_tokens::TokenId;
    use std::collections::HashMap;

    /// Where a student's softmax takes the maximum it subtracts.
    #[derive(Clone, Copy)]
    enum Max {
        PerRow,
        WholeMatrix,
        Dropped,
    }

    /// softmax of every row, written out with loops.
    fn softmax(z: &DMatrix<f64>, max: Max) -> DMatrix<f64> {
        let whole = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut p = z.clone();
        for r in 0..z.nrows() {
            let m = match max {
                Max::PerRow => z.row(r).iter().copied().fold(f64::NEG_INFINITY, f64::max),
                Max::WholeMatrix => whole,
                Max::Dropped => 0.0,
            };
            let total: f64 = z.row(r).iter().map(|v| (v - m).exp()).sum();
            for c in 0..z.ncols() {
                p[(r, c)] = (z[(r, c)] - m).exp() / total;
            }
        }
        p
    }

    /// softmax as e^{z − lse(z)}, the log-sum-exp written the other way round: a right answer.
    fn softmax_by_log_sum_exp(z: &DMatrix<f64>) -> DMatrix<f64> {
        let mut p = z.clone();
        for r in 0..z.nrows() {
            let m = z.row(r).iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let lse = m + z.row(r).iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            for c in 0..z.ncols() {
                p[(r, c)] = (z[(r, c)] - lse).exp();
            }
        }
        p
    }

    /// softmax(QKᵀ/√d_k + mask) V with the given softmax.
    fn attention(
        q: &DMatrix<f64>,
        k: &DMatrix<f64>,
        v: &DMatrix<f64>,
        causal: bool,
        softmax: impl Fn(&DMatrix<f64>) -> DMatrix<f64>,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>)> {
        let (tq, tk) = (q.nrows(), k.nrows());
        let mut s = q * k.transpose() / (q.ncols() as f64).sqrt();
        for i in 0..tq {
            for j in 0..tk {
                if causal && j + tq > i + tk {
                    s[(i, j)] = f64::NEG_INFINITY;
                }
            }
        }
        let a = softmax(&s);
        Ok((&a * v, a))
    }

    /// The judge failed a planted mistake naming it as `names`, and not as `not`: the other
    /// slip of the same kind, which the judge tells apart on its input.
    #[track_caller]
    fn names_only(v: Verdict, names: &str, not: &str) {
        let m = v.clone().err().unwrap_or_default();
        assert!(!m.contains(not), "the message names {not:?} as well as {names:?}:\n{m}");
        catches(v, names);
    }

    /// The checks the cross-entropy exercises promise: logits not empty, one target per row,
    /// each in 0..K.
    fn targets_fit(z: &DMatrix<f64>, t: &[usize]) -> Result<()> {
        use llm_workbook::error::invalid;
        if z.is_empty() || t.len() != z.nrows() || t.iter().any(|&c| c >= z.ncols()) {
            return Err(invalid("cross_entropy", "targets", "one class in 0..K per row of logits"));
        }
        Ok(())
    }

    #[test]
    fn cross_entropy_backward_without_the_shift_or_with_one_max_for_all_rows() {
        let with = |max| {
            move |z: &DMatrix<f64>, t: &[usize]| {
                targets_fit(z, t)?;
                let mut p = softmax(z, max);
                for (r, &c) in t.iter().enumerate() {
                    p[(r, c)] -= 1.0;
                }
                Ok(p / t.len() as f64)
            }
        };
        passes(ch02::cross_entropy_from_logits_backward(with(Max::PerRow)));
        let (dropped, whole) = ("the max shift dropped", "one max for the whole matrix");
        names_only(ch02::cross_entropy_from_logits_backward(with(Max::Dropped)), dropped, whole);
        names_only(
            ch02::cross_entropy_from_logits_backward(with(Max::WholeMatrix)),
            whole,
            dropped,
        );
    }

    #[test]
    fn cross_entropy_without_the_promised_errors() {
        let unchecked = |z: &DMatrix<f64>, t: &[usize]| {
            let mut p = softmax(z, Max::PerRow);
            for (r, &c) in t.iter().enumerate() {
                p[(r, c)] -= 1.0;
            }
            Ok(p / t.len() as f64)
        };
        catches(ch02::cross_entropy_from_logits_backward(unchecked), "empty logits (0×4)");
        let no_count_check = |z: &DMatrix<f64>, t: &[usize]| {
            if z.is_empty() {
                return Err(llm_workbook::error::invalid("cross_entropy", "logits", "empty"));
            }
            let lse = |r: usize| {
                let m = z.row(r).max();
                m + z.row(r).map(|v| (v - m).exp()).sum().ln()
            };
            Ok((0..t.len()).map(|r| lse(r) - z[(r, t[r])]).sum::<f64>() / t.len() as f64)
        };
        catches(ch02::cross_entropy_from_logits(no_count_check), "2 targets for 3 rows");
    }

    /// Cross-attention's backward as a student writes it from the public pieces (the
    /// projections, `attention_scores`, the heads split and joined), each head's softmax taking
    /// its maximum as `max` says.
    fn cross_attention_backward_by_hand(
        (y, yb): (&DMatrix<f64>, &Batch),
        (e, eb): (&DMatrix<f64>, &Batch),
        w: &MultiHead<f64>,
        d_out: &DMatrix<f64>,
        max: Max,
    ) -> Result<MhaGrads<f64>> {
        use llm_workbook::ch06_attention::{attention_scores, concat_heads, split_heads};
        let affine = |x: &DMatrix<f64>, m: &DMatrix<f64>, b: &DMatrix<f64>| {
            let xm = x * m;
            DMatrix::from_fn(xm.nrows(), xm.ncols(), |r, c| xm[(r, c)] + b[(0, c)])
        };
        let (q, k, v) =
            (affine(y, &w.w_q, &w.b_q), affine(e, &w.w_k, &w.b_k), affine(e, &w.w_v, &w.b_v));
        let spec = llm_workbook::ch07_encoder_decoder::attention_spec(yb, eb, false)?;
        let (qs, ks, vs) =
            (split_heads(&q, w.heads)?, split_heads(&k, w.heads)?, split_heads(&v, w.heads)?);
        let d_heads = split_heads(&(d_out * w.w_o.transpose()), w.heads)?;
        let scale = 1.0 / (qs[0].ncols() as f64).sqrt();
        let (tq, tk) = (yb.len, eb.len);
        let (mut outs, mut dqs, mut dks, mut dvs) = (vec![], vec![], vec![], vec![]);
        for h in 0..w.heads {
            let a = softmax(&attention_scores(&qs[h], &ks[h], &spec)?, max);
            let mut o = DMatrix::zeros(q.nrows(), vs[h].ncols());
            let mut dq = DMatrix::zeros(qs[h].nrows(), qs[h].ncols());
            let mut dk = DMatrix::zeros(ks[h].nrows(), ks[h].ncols());
            let mut dv = DMatrix::zeros(vs[h].nrows(), vs[h].ncols());
            for b in 0..yb.sequences() {
                let (rq, rk) = (b * tq, b * tk);
                let (a_b, v_b) = (a.rows(rq, tq), vs[h].rows(rk, tk));
                let d_o = d_heads[h].rows(rq, tq);
                o.rows_mut(rq, tq).copy_from(&(a_b * v_b));
                let d_a = d_o * v_b.transpose();
                let mut d_s = a_b.component_mul(&d_a);
                for r in 0..tq {
                    let total = d_s.row(r).sum();
                    for c in 0..tk {
                        d_s[(r, c)] -= a_b[(r, c)] * total;
                    }
                }
                dq.rows_mut(rq, tq).copy_from(&(&d_s * ks[h].rows(rk, tk) * scale));
                dk.rows_mut(rk, tk).copy_from(&(d_s.transpose() * qs[h].rows(rq, tq) * scale));
                dv.rows_mut(rk, tk).copy_from(&(a_b.transpose() * d_o));
            }
            outs.push(o);
            dqs.push(dq);
            dks.push(dk);
            dvs.push(dv);
        }
        let concat = concat_heads(&outs)?;
        let (dq, dk, dv) = (concat_heads(&dqs)?, concat_heads(&dks)?, concat_heads(&dvs)?);
        Ok(MhaGrads {
            d_x_q: &dq * w.w_q.transpose(),
            d_x_kv: &dk * w.w_k.transpose() + &dv * w.w_v.transpose(),
            d_w_q: y.transpose() * &dq,
            d_b_q: column_sums(&dq),
            d_w_k: e.transpose() * &dk,
            d_b_k: column_sums(&dk),
            d_w_v: e.transpose() * &dv,
            d_b_v: column_sums(&dv),
            d_w_o: concat.transpose() * d_out,
            d_b_o: column_sums(d_out),
        })
    }

    #[test]
    fn cross_attention_backward_without_the_shift_or_with_one_max_for_all_rows() {
        let with = |max| {
            move |y: &_, yb: &_, e: &_, eb: &_, w: &_, d: &_| {
                cross_attention_backward_by_hand((y, yb), (e, eb), w, d, max)
            }
        };
        passes(ch07::cross_attention_backward(with(Max::PerRow)));
        let (dropped, whole) = ("the max shift dropped", "one max for the whole matrix");
        names_only(ch07::cross_attention_backward(with(Max::Dropped)), dropped, whole);
        names_only(ch07::cross_attention_backward(with(Max::WholeMatrix)), whole, dropped);
    }

    #[test]
    fn sigma_left_tail_as_one_minus_the_right_tail() {
        let one_minus = |z: f64| {
            let right = |z: f64| 1.0 / (1.0 + (-z).exp());
            if z >= 0.0 { right(z) } else { 1.0 - right(-z) }
        };
        catches(ch01::sigmoid(one_minus), "1 − σ(−z)");
        // 1/(1 + e^{−z}) everywhere is right down to z = −709 (e^{709} is finite).
        passes(ch01::sigmoid(|z: f64| 1.0 / (1.0 + (-z).exp())));
    }

    #[test]
    fn softmax_with_one_max_for_the_whole_matrix() {
        catches(
            ch02::softmax_rows_forward(|z| Ok(softmax(z, Max::WholeMatrix))),
            "one max for the whole matrix",
        );
        passes(ch02::softmax_rows_forward(|z| {
            if z.is_empty() {
                return Err(llm_workbook::error::invalid("softmax", "z", "empty"));
            }
            Ok(softmax(z, Max::PerRow))
        }));
        passes(ch02::softmax_rows_forward(|z| {
            if z.is_empty() {
                return Err(llm_workbook::error::invalid("softmax", "z", "empty"));
            }
            Ok(softmax_by_log_sum_exp(z))
        }));
    }

    #[test]
    fn cross_entropy_without_the_shift_in_the_log_sum_exp() {
        let naive = |z: &DMatrix<f64>, t: &[usize]| -> Result<f64> {
            let n = z.nrows() as f64;
            Ok((0..z.nrows())
                .map(|r| z.row(r).iter().map(|v| v.exp()).sum::<f64>().ln() - z[(r, t[r])])
                .sum::<f64>()
                / n)
        };
        catches(ch02::cross_entropy_from_logits(naive), "the max shift dropped");
    }

    #[test]
    fn attention_without_the_shift_or_with_one_max_for_all_rows() {
        let dropped = |q: &DMatrix<f64>, k: &DMatrix<f64>, v: &DMatrix<f64>, causal: bool| {
            attention(q, k, v, causal, |s| softmax(s, Max::Dropped))
        };
        catches(ch06::attention_forward(dropped), "the max shift dropped");
        let whole = |q: &DMatrix<f64>, k: &DMatrix<f64>, v: &DMatrix<f64>, causal: bool| {
            attention(q, k, v, causal, |s| softmax(s, Max::WholeMatrix))
        };
        catches(ch06::attention_forward(whole), "one max for the whole matrix");
        let by_lse = |q: &DMatrix<f64>, k: &DMatrix<f64>, v: &DMatrix<f64>, causal: bool| {
            attention(q, k, v, causal, softmax_by_log_sum_exp)
        };
        passes(ch06::attention_forward(by_lse));
    }

    /// What an answer that adds a 2×3 to a 3×2 (a transpose on the wrong side) returns: nalgebra
    /// panics, quoting both shapes.
    fn mismatched<T>() -> T {
        let sum = &DMatrix::<f64>::zeros(2, 3) + &DMatrix::<f64>::zeros(3, 2);
        unreachable!("nalgebra added a 2×3 to a 3×2: {sum}")
    }

    /// The judge reported the panic once, with the shapes it passed (`passed`) and the two
    /// shapes that met.
    #[track_caller]
    fn reports_shapes(v: Verdict, passed: &str) {
        let m = v.expect_err("the judge passed an answer that panics");
        let line = m.lines().find(|l| l.contains("the judge passed")).unwrap_or_default();
        assert!(line.contains(passed), "{passed:?} not in:\n{m}");
        assert!(m.contains("the shapes that met there: 2×3 and 3×2"), "{m}");
        assert_eq!(m.matches("panicked").count(), 1, "{m}");
        assert!(!m.contains("backtrace"), "{m}");
    }

    #[test]
    fn a_shape_panic_names_the_shapes_in_every_judge_that_takes_matrices() {
        use judge::{ch03, ch04, ch05, ch07, ch10};
        reports_shapes(ch01::logits_forward(|_, _, _| mismatched()), "w of length 3, x 5×3");
        reports_shapes(ch01::sample_gradient(|_, _, _, _| mismatched()), "w of length 4");
        reports_shapes(ch01::logits_backward(|_, _, _| mismatched()), "x 5×3, w of length 3");
        reports_shapes(ch02::softmax_rows_forward(|_| mismatched()), "z 4×5");
        reports_shapes(ch02::cross_entropy_from_logits(|_, _| mismatched()), "logits 2×3");
        let ce_backward = ch02::cross_entropy_from_logits_backward(|_, _| mismatched());
        reports_shapes(ce_backward, "logits 1×4, targets of length 1");
        reports_shapes(ch02::softmax_rows_backward(|_, _| mismatched()), "y ");
        reports_shapes(ch02::log_softmax_rows_backward(|_, _| mismatched()), "log_y ");
        let regression = ch02::regression_logits_backward(|_, _, _| mismatched());
        reports_shapes(regression, "w 2×3, x 5×2, d_z 5×3");
        reports_shapes(ch03::dense_forward(|_, _, _| mismatched()), "x 4×3, w 3×2, b 1×2");
        reports_shapes(ch03::dense_backward(|_, _, _| mismatched()), "x 5×3, w 3×2, d_y 5×2");
        reports_shapes(ch03::relu_backward(|_, _| mismatched()), "z 4×3, d_a 4×3");
        reports_shapes(ch03::gelu_backward(|_, _| mismatched()), "z 4×3, d_a 4×3");
        reports_shapes(ch03::mse_backward(|_, _| mismatched()), "a 4×3, y 4×3");
        reports_shapes(ch03::mlp_backward(|_, _, _| mismatched()), "mlp (W ");
        reports_shapes(ch04::least_squares_fit(|_, _| mismatched()), "x 4×2, y 4×1");
        reports_shapes(ch05::add_positions(|_, _| mismatched()), "x 6×4");
        reports_shapes(ch06::attention_forward(|_, _, _, _| mismatched()), "Q 4×3, K 4×3");
        reports_shapes(ch06::attention_backward(|_, _, _, _, _, _| mismatched()), "Q 3×3, K 4×3");
        reports_shapes(ch06::layer_norm_forward(|_, _, _, _| mismatched()), "x 1×4, γ 1×4");
        reports_shapes(ch06::layer_norm_backward(|_, _, _, _| mismatched()), "x 4×5, γ 1×5");
        reports_shapes(ch06::split_heads(|_, _| mismatched()), "m 3×6");
        reports_shapes(ch06::mha_backward(|_, _, _| mismatched()), "cache (X_q 6×4, X_kv 10×3");
        reports_shapes(ch06::ffn_backward(|_, _, _| mismatched()), "ffn (W₁ 3×5, W₂ 5×3)");
        reports_shapes(ch06::block_backward(|_, _, _| mismatched()), "blk (MHA (2 heads");
        let cross = ch07::cross_attention_forward(|_, _, _, _, _| mismatched());
        reports_shapes(cross, "y 6×4, y_batch (B = 2, T = 3, lengths [3, 2]), e 8×4");
        let cross = ch07::cross_attention_backward(|_, _, _, _, _, _| mismatched());
        reports_shapes(cross, "y 6×4, y_batch (B = 2, T = 3, lengths [3, 2]), e 8×4");
        let decoder = ch07::decoder_block_backward(|_, _, _| mismatched());
        reports_shapes(decoder, "block (width 4, FFN (W₁ 4×6, W₂ 6×4)), cache (self-attention");
        let whole = ch07::loss_and_gradients(|_, _, _, _| mismatched());
        reports_shapes(whole, "model (V = 7, C = 4, 2 heads, 2 encoder and 2 decoder layers)");
        reports_shapes(ch09::adamw_step(|_, _, _, _, _, _, _| mismatched()), "theta 3×2, grad 3×2");
        reports_shapes(
            ch09::lm_head_backward(|_, _, _| mismatched()),
            "h 4×3, w_u 5×3, targets of length 4",
        );
        let step = ch09::kv_cache_step(|_, _, _, _, _, _| mismatched());
        reports_shapes(step, "keys 6×3, values 6×3, q of length 3");
        reports_shapes(ch10::micro_kernel(|_, _, _, _, _, _| mismatched()), "a of length");
        reports_shapes(ch10::pack_a_block(|_, _, _, _, _| mismatched()), "A ");
        reports_shapes(ch10::pack_b_panel(|_, _, _, _, _| mismatched()), "B ");
    }

    #[test]
    fn a_shape_panic_is_reported_once_with_what_the_judge_passed() {
        // Q K instead of Q Kᵀ: nalgebra panics on the product's shapes.
        let untransposed = |q: &DMatrix<f64>, k: &DMatrix<f64>, v: &DMatrix<f64>, _: bool| {
            let a = softmax(&(q * k), Max::PerRow);
            Ok((&a * v, a))
        };
        let m = ch06::attention_forward(untransposed).unwrap_err();
        assert!(m.contains("panicked") && m.contains("the judge passed Q 4×3, K 4×3"), "{m}");
        assert!(m.contains("shapes do not fit"), "{m}");
        assert_eq!(m.matches("panicked").count(), 1, "{m}");
        assert!(!m.contains("backtrace"), "{m}");
    }

    #[test]
    fn kv_cache_step_without_the_shift() {
        let step = |keys: &mut DMatrix<f64>,
                    values: &mut DMatrix<f64>,
                    len: usize,
                    q: &[f64],
                    k: &[f64],
                    v: &[f64]|
         -> Result<Vec<f64>> {
            if len >= keys.nrows() {
                return Err(llm_workbook::error::invalid("step", "len", "the cache is full"));
            }
            keys.row_mut(len).copy_from_slice(k);
            values.row_mut(len).copy_from_slice(v);
            let d = q.len();
            let s = DMatrix::from_fn(1, len + 1, |_, p| {
                (0..d).map(|c| q[c] * keys[(p, c)]).sum::<f64>() / (d as f64).sqrt()
            });
            let a = softmax(&s, Max::Dropped);
            Ok((0..d).map(|c| (0..=len).map(|p| a[(0, p)] * values[(p, c)]).sum()).collect())
        };
        catches(ch09::kv_cache_step(step), "the max shift dropped");
    }

    #[test]
    fn lm_head_loss_without_the_shift() {
        let naive = |h: &DMatrix<f64>, w_u: &DMatrix<f64>, t: &[usize]| {
            if h.ncols() != w_u.ncols() || h.nrows() == 0 || t.iter().any(|&t| t >= w_u.nrows()) {
                return Err(llm_workbook::error::invalid("lm head", "h", "bad input"));
            }
            let z = h * w_u.transpose();
            let mut p = softmax(&z, Max::Dropped);
            let s = h.nrows() as f64;
            let loss = (0..h.nrows()).map(|r| -p[(r, t[r])].ln()).sum::<f64>() / s;
            for (r, &t) in t.iter().enumerate() {
                p[(r, t)] -= 1.0;
            }
            let d_z = p / s;
            Ok((loss, &d_z * w_u, d_z.transpose() * h))
        };
        catches(ch09::lm_head_backward(naive), "the max shift dropped");
    }

    #[test]
    fn top_k_keeping_the_higher_token_id_on_a_tie() {
        let higher_first = |z: &[f64], k: usize, t: f64| -> Result<Vec<(usize, f64)>> {
            if k == 0 || t <= 0.0 || z.is_empty() {
                return Err(llm_workbook::error::invalid("top_k", "k", "k = 0"));
            }
            let mut ids: Vec<usize> = (0..z.len()).collect();
            ids.sort_by(|&a, &b| z[b].total_cmp(&z[a]).then(b.cmp(&a)));
            ids.truncate(k);
            let m = z[ids[0]];
            let total: f64 = ids.iter().map(|&i| ((z[i] - m) / t).exp()).sum();
            Ok(ids.iter().map(|&i| (i, ((z[i] - m) / t).exp() / total)).collect())
        };
        catches(ch09::top_k_distribution(higher_first), "a tie broken the wrong way");
    }

    #[test]
    fn temperature_with_an_error_for_zero_only() {
        let zero_only = |z: &[f64], t: f64| {
            if t == 0.0 {
                return Err(llm_workbook::error::invalid("temperature", "T", "T = 0"));
            }
            let spec = llm_workbook::ch09_gpt::sample::Decoding::temperature(t.abs());
            llm_workbook::ch09_gpt::sample::distribution(z, &spec)
        };
        catches(ch09::temperature_distribution(zero_only), "T = −1");
    }

    #[test]
    fn merges_applied_in_the_order_of_their_new_ids() {
        type Ranks = HashMap<(TokenId, TokenId), (u32, TokenId)>;
        let by_id = |ids: &mut Vec<TokenId>, ranks: &Ranks| loop {
            let best = ids
                .windows(2)
                .filter_map(|w| ranks.get(&(w[0], w[1])).map(|&(_, new)| (new, (w[0], w[1]))))
                .min();
            let Some((new, (a, b))) = best else { return };
            let mut out = Vec::with_capacity(ids.len());
            let mut i = 0;
            while i < ids.len() {
                if i + 1 < ids.len() && (ids[i], ids[i + 1]) == (a, b) {
                    out.push(new);
                    i += 2;
                } else {
                    out.push(ids[i]);
                    i += 1;
                }
            }
            *ids = out;
        };
        catches(ch08::apply_merges(by_id), "in the order of their new ids");
    }
}

// ───────────────────── the exercise files' doc comments ─────────────────────

/// Every chapter's exercise file: what each exercise asks is read in its doc comments.
const EXERCISE_FILES: [(&str, &str); 13] = [
    ("ch01_logistic.rs", include_str!("../src/ch01_logistic.rs")),
    ("ch02_softmax.rs", include_str!("../src/ch02_softmax.rs")),
    ("ch03_mlp.rs", include_str!("../src/ch03_mlp.rs")),
    ("ch04_xor.rs", include_str!("../src/ch04_xor.rs")),
    ("ch05_positions.rs", include_str!("../src/ch05_positions.rs")),
    ("ch06_attention.rs", include_str!("../src/ch06_attention.rs")),
    ("ch07_encoder_decoder.rs", include_str!("../src/ch07_encoder_decoder.rs")),
    ("ch08_tokens.rs", include_str!("../src/ch08_tokens.rs")),
    ("ch09_gpt.rs", include_str!("../src/ch09_gpt.rs")),
    ("ch10_matmul.rs", include_str!("../src/ch10_matmul.rs")),
    ("ch11_precision.rs", include_str!("../src/ch11_precision.rs")),
    ("ch12_modern.rs", include_str!("../src/ch12_modern.rs")),
    ("ch13_finetune.rs", include_str!("../src/ch13_finetune.rs")),
];

/// The doc comments (`///`, `//!`) of the exercise files fit in [`judge::WIDTH`] columns. Only
/// the doc comments: the lines of an answer are the reader's own.
#[test]
fn the_exercise_files_doc_comments_fit_in_100_columns() {
    let mut wide = Vec::new();
    for (file, text) in EXERCISE_FILES {
        for (i, line) in text.lines().enumerate() {
            let doc = ["///", "//!"].iter().any(|d| line.trim_start().starts_with(d));
            if doc && line.chars().count() > judge::WIDTH {
                wide.push(format!(
                    "exercises/src/{file}:{}: {} columns",
                    i + 1,
                    line.chars().count()
                ));
            }
        }
    }
    assert!(
        wide.is_empty(),
        "doc comment lines over {} columns:\n{}",
        judge::WIDTH,
        wide.join("\n")
    );
}

mod ch11 {
    use super::*;
    use judge::ch11 as j;
    use llm_workbook::ch11_precision::{Difference, f16_to_f32, f32_to_bf16};
    use llm_workbook_exercises::solutions::ch11_precision as s;

    /// Every judge of the chapter run on the main crate's answers, with the probes it ran.
    pub fn judged() -> Vec<Judged> {
        judged![
            f32_to_bf16(f32_to_bf16),
            f16_to_f32(f16_to_f32),
            balanced_step(|kind: Difference, eps| kind.balanced_step(eps)),
            kahan_sum(s::kahan_sum),
            quantize_block(s::quantize_block),
            dequantize_block(s::dequantize_block),
            int8_block_dot(s::int8_block_dot),
        ]
    }

    #[test]
    fn solutions_pass() {
        all_pass(judged());
    }

    #[test]
    fn bf16_by_truncation_by_ties_away_from_zero_and_without_the_sign() {
        catches(
            j::f32_to_bf16(
                |x| {
                    if x.is_nan() { f32_to_bf16(x) } else { (x.to_bits() >> 16) as u16 }
                },
            ),
            "truncating instead of rounding",
        );
        catches(
            j::f32_to_bf16(|x| {
                if x.is_nan() { f32_to_bf16(x) } else { ((x.to_bits() + 0x8000) >> 16) as u16 }
            }),
            "ties away from zero",
        );
        catches(j::f32_to_bf16(|x| f32_to_bf16(x.abs())), "the sign is lost");
    }

    #[test]
    fn bf16_that_turns_nan_into_infinity() {
        // Round to nearest even by adding a bias, with no test for NaN: the carry of a
        // signalling NaN's payload reaches the exponent and leaves ∞.
        let biased = |x: f32| {
            let b = x.to_bits();
            (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16
        };
        catches(j::f32_to_bf16(biased), "a NaN turned into ∞");
    }

    #[test]
    fn f16_without_subnormals_sign_or_nan() {
        let flushed = |b: u16| if b & 0x7c00 == 0 { 0.0 } else { f16_to_f32(b) };
        catches(j::f16_to_f32(flushed), "the subnormals flushed to 0");
        let hidden_one = |b: u16| {
            let (sign, f) = (if b & 0x8000 == 0 { 1.0 } else { -1.0 }, f32::from(b & 0x3ff));
            let subnormal = b & 0x7c00 == 0 && f != 0.0;
            if subnormal { sign * 2f32.powi(-14) * (1.0 + f / 1024.0) } else { f16_to_f32(b) }
        };
        catches(j::f16_to_f32(hidden_one), "a hidden 1 added to a subnormal");
        catches(j::f16_to_f32(|b| f16_to_f32(b).abs()), "the sign is lost");
        let no_nan =
            |b: u16| if b & 0x7c00 == 0x7c00 { f16_to_f32(b & 0xfc00) } else { f16_to_f32(b) };
        catches(j::f16_to_f32(no_nan), "a NaN turned into ∞");
        let bias_16 = |b: u16| f16_to_f32(b) / 2.0;
        catches(j::f16_to_f32(bias_16), "the bias of f16 is 15");
    }

    #[test]
    fn the_forward_step_where_the_central_one_is_asked_and_no_error() {
        let forward = |_: Difference, eps: f64| Difference::Forward.balanced_step(eps);
        catches(j::balanced_step(forward), "a forward difference's step");
        let unchecked = |kind: Difference, eps: f64| {
            Ok(eps.abs().powf(if kind == Difference::Central { 1.0 / 3.0 } else { 0.5 }))
        };
        catches(j::balanced_step(unchecked), "should be an Err");
    }

    #[test]
    fn kahan_without_its_compensation() {
        let dropped = |xs: &[f32]| xs.iter().fold(0.0f32, |s, &x| s + x);
        catches(j::kahan_sum(dropped), "the compensation dropped");
    }

    #[test]
    fn quantization_by_the_max_toward_zero_and_without_the_scale() {
        let by_max = |w: &[f32], l: i32| {
            let s = w.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) / l as f32;
            let q = w.iter().map(|&x| if s == 0.0 { 0 } else { (x / s).round() as i8 }).collect();
            (s, q)
        };
        catches(j::quantize_block(by_max), "the largest magnitude");
        let toward_zero = |w: &[f32], l: i32| {
            let s = w.iter().fold(0.0f32, |m, &x| m.max(x.abs())) / l as f32;
            let q = w.iter().map(|&x| if s == 0.0 { 0 } else { (x / s).trunc() as i8 }).collect();
            (s, q)
        };
        catches(j::quantize_block(toward_zero), "rounded toward zero");
        let codes_only = |_: f32, q: &[i8]| q.iter().map(|&c| f32::from(c)).collect();
        catches(j::dequantize_block(codes_only), "without the scale");
        let unscaled =
            |x: &[f32], _: f32, q: &[i8]| x.iter().zip(q).map(|(&a, &c)| a * f32::from(c)).sum();
        catches(j::int8_block_dot(unscaled), "the scale forgotten");
    }
}

// ───────────────────── the probe table of chapters/exercises.md ─────────────────────

/// The page's table of exercise × probe kind.
const EXERCISES_PAGE: &str = include_str!("../../chapters/exercises.md");

/// The page's table row of one exercise: "| `name` | what its sweep draws | ✓ | — | … |", then
/// one column per [`Probe::ALL`]: ✓ where the judge probes that kind, — where it declares the
/// kind not applicable, and a blank (which the test refuses) where it does neither.
fn table_row(name: &str, probes: &judge::Probes) -> String {
    let marks: Vec<&str> = Probe::ALL
        .iter()
        .map(|p| {
            if probes.run.contains(p) {
                "✓"
            } else if probes.not_applicable.contains(p) {
                "—"
            } else {
                " "
            }
        })
        .collect();
    format!("| `{name}` | {} | {} |", probes.swept.join("; "), marks.join(" | "))
}

/// The kinds of probe that apply to an exercise but that its judge does not run yet: a blank on
/// the page. Adding the probe fails the table's test until the entry is removed here.
const NOT_YET_PROBED: &[(&str, Probe)] = &[];

#[test]
fn the_probe_table_on_the_page_is_what_the_judges_run() {
    let chapters = [
        ch01::judged(),
        ch02::judged(),
        ch03::judged(),
        ch04::judged(),
        ch05::judged(),
        ch06::judged(),
        ch07::judged(),
        ch08::judged(),
        ch09::judged(),
        ch10::judged(),
        ch11::judged(),
        ch12::judged(),
        ch13::judged(),
    ];
    let judged: Vec<Judged> = chapters.into_iter().flatten().collect();
    // One list of exercises: the page's rows, this file's and the crate's table, in one order.
    let names: Vec<&str> = judged.iter().map(|(name, _, _)| *name).collect();
    let table: Vec<&str> = EXERCISES.iter().flat_map(|c| c.exercises.iter().copied()).collect();
    assert_eq!(names, table, "the judges run here are not the crate's EXERCISES, in its order");
    let mut undecided = Vec::new();
    for (name, _, probes) in &judged {
        assert!(!probes.swept.is_empty(), "the judge of `{name}` runs no sweep");
        let both: Vec<&Probe> = probes.run.intersection(&probes.not_applicable).collect();
        assert!(both.is_empty(), "`{name}` probes {both:?} and declares them not applicable");
        let neither: Vec<&Probe> = Probe::ALL
            .iter()
            .filter(|p| !probes.run.contains(p) && !probes.not_applicable.contains(p))
            .collect();
        if !neither.is_empty() {
            undecided.push(format!("{name}: {neither:?}"));
        }
    }
    let not_yet: Vec<String> =
        NOT_YET_PROBED.iter().map(|(name, kind)| format!("{name}: [{kind:?}]")).collect();
    assert_eq!(
        undecided, not_yet,
        "the kinds that apply to an exercise but that its judge does not probe yet must be the \
         ones NOT_YET_PROBED lists (the page shows them blank)"
    );
    let want: Vec<String> =
        judged.iter().map(|(name, _, probes)| table_row(name, probes)).collect();
    let headings: Vec<&str> = Probe::ALL.iter().map(|p| p.heading()).collect();
    let header = format!("| exercise | sweep | {} |", headings.join(" | "));
    let on_page: Vec<&str> =
        EXERCISES_PAGE.lines().filter(|l| l.starts_with("| `")).map(str::trim_end).collect();
    assert!(EXERCISES_PAGE.contains(&header), "the page lacks the table's header:\n{header}");
    assert_eq!(
        on_page,
        want,
        "chapters/exercises.md's table differs from the probes the judges run; it should read:\n\
         {header}\n{}",
        want.join("\n")
    );
    // The counts the page and the README state are the table's and this file's.
    let cells = judged.len() * Probe::ALL.len();
    let probed: usize = judged.iter().map(|(_, _, p)| p.run.len()).sum();
    let none: usize = judged.iter().map(|(_, _, p)| p.not_applicable.len()).sum();
    let this_file = include_str!("planted.rs");
    let calls = |f: &str| this_file.lines().filter(|l| l.trim_start().starts_with(f)).count();
    let (planted, panics) = (calls("catches("), calls("reports_shapes("));
    let flat = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    let page_says =
        format!("Of the table's {cells} cells, {probed} are probed and {none} cannot arise");
    assert!(flat(EXERCISES_PAGE).contains(&page_says), "the page should say: {page_says}");
    let readme = flat(include_str!("../../README.md"));
    for says in [
        format!(
            "({} exercises × 5 kinds: {probed} cells probed, {none} where the kind",
            judged.len()
        ),
        format!(
            "({planted} in all, each caught, by name where the mistake is a known one, and a \
             panic in each of {panics} judges"
        ),
    ] {
        assert!(readme.contains(&says), "the README should say: {says}");
    }
}

// ───────────────────── links to the chapters ─────────────────────

/// Every chapter page a link or hint may point to, with its text.
const CHAPTERS: [(&str, &str); 14] = [
    ("ch01_logistic", include_str!("../../chapters/ch01_logistic.md")),
    ("ch02_softmax", include_str!("../../chapters/ch02_softmax.md")),
    ("ch03_mlp", include_str!("../../chapters/ch03_mlp.md")),
    ("ch04_xor", include_str!("../../chapters/ch04_xor.md")),
    ("ch05_positions", include_str!("../../chapters/ch05_positions.md")),
    ("ch06_attention", include_str!("../../chapters/ch06_attention.md")),
    ("ch07_encoder_decoder", include_str!("../../chapters/ch07_encoder_decoder.md")),
    ("ch08_tokens", include_str!("../../chapters/ch08_tokens.md")),
    ("ch09_gpt", include_str!("../../chapters/ch09_gpt.md")),
    ("ch10_matmul", include_str!("../../chapters/ch10_matmul.md")),
    ("ch11_precision", include_str!("../../chapters/ch11_precision.md")),
    ("ch12_modern", include_str!("../../chapters/ch12_modern.md")),
    ("ch13_finetune", include_str!("../../chapters/ch13_finetune.md")),
    ("exercises", include_str!("../../chapters/exercises.md")),
];

/// The judges' sources, where each hint's `Section` (chapter and anchor) is written.
const JUDGE_FILES: [(&str, &str); 15] = [
    ("judge/mod.rs", include_str!("../src/judge/mod.rs")),
    ("judge/sweep.rs", include_str!("../src/judge/sweep.rs")),
    ("judge/ch01.rs", include_str!("../src/judge/ch01.rs")),
    ("judge/ch02.rs", include_str!("../src/judge/ch02.rs")),
    ("judge/ch03.rs", include_str!("../src/judge/ch03.rs")),
    ("judge/ch04.rs", include_str!("../src/judge/ch04.rs")),
    ("judge/ch05.rs", include_str!("../src/judge/ch05.rs")),
    ("judge/ch06.rs", include_str!("../src/judge/ch06.rs")),
    ("judge/ch07.rs", include_str!("../src/judge/ch07.rs")),
    ("judge/ch08.rs", include_str!("../src/judge/ch08.rs")),
    ("judge/ch09.rs", include_str!("../src/judge/ch09.rs")),
    ("judge/ch10.rs", include_str!("../src/judge/ch10.rs")),
    ("judge/ch11.rs", include_str!("../src/judge/ch11.rs")),
    ("judge/ch12.rs", include_str!("../src/judge/ch12.rs")),
    ("judge/ch13.rs", include_str!("../src/judge/ch13.rs")),
];

/// The anchor GitHub gives a heading: lower case, every character that is not a letter, a
/// digit, a combining mark, `_`, `-` or a space dropped, each space a `-`.
fn github_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|&c| {
            c.is_alphanumeric()
                || ('\u{300}'..='\u{36f}').contains(&c)
                || c == '_'
                || c == '-'
                || c == ' '
        })
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings (`#` … `######`, outside code blocks).
fn anchors(page: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in page.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(github_anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// Every `(chapter, anchor)` a text points to: links `chapters/STEM.md#ANCHOR` and hints'
/// `Section { chapter: "STEM", anchor: "ANCHOR" }`.
fn pointers(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let stop = |c: char| c.is_whitespace() || [')', '"', '`', ']', '>', ','].contains(&c);
    for (at, _) in text.match_indices("chapters/") {
        let rest = &text[at + "chapters/".len()..];
        let Some((stem, after)) = rest.split_once(".md") else { continue };
        // A format string's `chapters/{}.md#{}` is filled in from a `Section`, checked below.
        if stem.contains(stop) || stem.contains('{') || !after.starts_with('#') {
            continue;
        }
        let anchor: String = after[1..].chars().take_while(|&c| !stop(c)).collect();
        out.push((stem.to_string(), anchor));
    }
    for (at, _) in text.match_indices("Section { chapter: \"") {
        let rest = &text[at + "Section { chapter: \"".len()..];
        let Some((stem, after)) = rest.split_once('"') else { continue };
        let Some(anchor) = after.split("anchor: \"").nth(1).and_then(|a| a.split('"').next())
        else {
            continue;
        };
        out.push((stem.to_string(), anchor.to_string()));
    }
    out
}

/// Every link of the exercise files and every hint of the judges names a heading its chapter
/// has, by GitHub's rule for anchors.
#[test]
fn every_link_and_hint_names_a_heading_of_its_chapter() {
    assert_eq!(github_anchor(" 5. The gradient: ŷ − y"), "5-the-gradient-ŷ--y");
    assert_eq!(
        github_anchor(" 8. Quantized weights: int8 and 4-bit blocks"),
        "8-quantized-weights-int8-and-4-bit-blocks"
    );
    let mut broken = Vec::new();
    let mut seen = 0;
    for (file, text) in EXERCISE_FILES.iter().chain(&JUDGE_FILES) {
        for (stem, anchor) in pointers(text) {
            seen += 1;
            match CHAPTERS.iter().find(|(s, _)| *s == stem) {
                None => broken.push(format!("{file}: chapters/{stem}.md does not exist")),
                Some((_, page)) if !anchors(page).contains(&anchor) => {
                    broken.push(format!("{file}: chapters/{stem}.md has no heading #{anchor}"))
                }
                Some(_) => {}
            }
        }
    }
    assert!(seen > 90, "only {seen} links and hints found: the scan lost them");
    assert!(broken.is_empty(), "links to no heading:\n{}", broken.join("\n"));
}

// ───────────── mistakes no judge lists: found by the sweep alone ─────────────

mod unlisted {
    use super::*;
    use llm_workbook::ch08_tokens::TokenId;
    use llm_workbook::ch09_gpt::sample::{Decoding, distribution};
    use std::collections::HashMap;

    /// What the sweep says of an answer it finds wrong.
    const SWEPT: &str = "differs from the chapter's function";

    type Ranks = HashMap<(TokenId, TokenId), (u32, TokenId)>;

    #[test]
    fn merges_that_underflow_on_no_tokens() {
        let underflow = |ids: &mut Vec<TokenId>, ranks: &Ranks| {
            let last = ids.len() - 1; // 0 − 1 on no tokens
            if last > 0 {
                llm_workbook::ch08_tokens::bpe::apply_merges(ids, ranks);
            }
        };
        catches(judge::ch08::apply_merges(underflow), "panicked");
    }

    #[test]
    fn merges_in_the_hash_maps_order_fail_on_every_run() {
        // Each pair merged everywhere, in the order the map happens to list them.
        let in_map_order = |ids: &mut Vec<TokenId>, ranks: &Ranks| {
            for (&(a, b), &(_, merged)) in ranks {
                let mut out = Vec::with_capacity(ids.len());
                let mut i = 0;
                while i < ids.len() {
                    if i + 1 < ids.len() && ids[i] == a && ids[i + 1] == b {
                        out.push(merged);
                        i += 2;
                    } else {
                        out.push(ids[i]);
                        i += 1;
                    }
                }
                *ids = out;
            }
        };
        for _ in 0..10 {
            catches(judge::ch08::apply_merges(in_map_order), SWEPT);
        }
    }

    #[test]
    fn top_k_that_slices_past_the_vocabulary() {
        let sliced = |z: &[f64], k: usize, t: f64| {
            let _kept = &z[..k];
            distribution(z, &Decoding::Sample { temperature: t, top_k: Some(k), top_p: None })
        };
        catches(judge::ch09::top_k_distribution(sliced), "panicked");
    }

    #[test]
    fn temperature_with_the_raw_maximum_subtracted() {
        // e^{z/T − max z}: right at T = 1, over- or underflows elsewhere.
        let raw_max = |z: &[f64], t: f64| {
            if t <= 0.0 || z.is_empty() {
                return Err(llm_workbook::error::invalid("raw_max", "t", "T ≤ 0 or no logits"));
            }
            let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = z.iter().map(|v| (v / t - m).exp()).collect();
            let total: f64 = w.iter().sum();
            let mut d: Vec<(usize, f64)> = w.iter().map(|x| x / total).enumerate().collect();
            d.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            Ok(d)
        };
        catches(judge::ch09::temperature_distribution(raw_max), SWEPT);
    }

    #[test]
    fn a_micro_kernel_whose_depth_is_the_slices_length() {
        use llm_workbook_exercises::solutions::ch10_matmul::{self as s, MR};
        let from_length = |_kc: usize, a: &[f64], b: &[f64], alpha, beta, c: &mut DMatrix<f64>| {
            s::micro_kernel(a.len() / MR, a, b, alpha, beta, c)
        };
        catches(judge::ch10::micro_kernel(from_length), SWEPT);
    }

    #[test]
    fn a_causal_mask_as_a_factor_after_exp_with_the_maximum_over_masked_keys() {
        let factor = |q: &DMatrix<f64>, k: &DMatrix<f64>, v: &DMatrix<f64>, causal: bool| {
            let s = q * k.transpose() / (q.ncols() as f64).sqrt();
            let (tq, tk) = s.shape();
            let mut a = s.clone();
            for r in 0..tq {
                let m = s.row(r).max(); // over every key, masked ones too
                for c in 0..tk {
                    let seen = !causal || c <= r + tk - tq;
                    a[(r, c)] = (s[(r, c)] - m).exp() * f64::from(u8::from(seen));
                }
                let total = a.row(r).sum();
                a.row_mut(r).apply(|x| *x /= total);
            }
            Ok((&a * v, a))
        };
        catches(judge::ch06::attention_forward(factor), SWEPT);
    }

    #[test]
    fn one_gelu_derivative_for_both_gelu_forms() {
        use llm_workbook::ch03_mlp::{self as book, Activation};
        let erf_for_both = |mlp: &book::Mlp<f64>, trace: &book::Trace<f64>, d: &DMatrix<f64>| {
            let mut d_a = d.clone();
            let mut grads = Vec::new();
            for (l, layer) in mlp.layers().iter().enumerate().rev() {
                let d_z = match layer.activation {
                    Some(Activation::GeluTanh) => {
                        book::activation_backward(Activation::GeluErf, &trace.pre[l], &d_a)?
                    }
                    Some(act) => book::activation_backward(act, &trace.pre[l], &d_a)?,
                    None => d_a.clone(),
                };
                let g = book::dense_backward(&trace.inputs[l], &layer.w, &d_z)?;
                grads.push(book::LayerGrads { d_w: g.d_w, d_b: g.d_b });
                d_a = g.d_x;
            }
            grads.reverse();
            Ok((grads, d_a))
        };
        catches(judge::ch03::mlp_backward(erf_for_both), SWEPT);
    }

    #[test]
    fn add_k_without_the_branch_for_a_context_never_seen() {
        use llm_workbook::ch08_tokens::ngram::NGramModel;
        let no_branch = |t: &[TokenId], v: usize, c: TokenId, n: TokenId, k: f64| {
            let model = NGramModel::fit(t, 2, v)?;
            let p = model
                .followers(&[c])
                .map_or(0.0, |f| (f.count(n) as f64 + k) / (f.total as f64 + k * v as f64));
            Ok(p)
        };
        catches(judge::ch08::add_k_probability(no_branch), SWEPT);
    }

    #[test]
    fn sinusoidal_that_returns_an_empty_matrix_for_d_0() {
        let empty = |n: usize, d: usize| {
            if d == 0 {
                Ok(DMatrix::zeros(n, 0))
            } else {
                llm_workbook::ch05_positions::sinusoidal(n, d)
            }
        };
        catches(judge::ch05::sinusoidal(empty), SWEPT);
        let m = judge::ch05::sinusoidal(empty).unwrap_err();
        assert!(m.contains("the doc promises an Err"), "{m}");
        assert_eq!(m, judge::ch05::sinusoidal(empty).unwrap_err(), "the message changed");
    }
}

// ───────────────────────────── chapter 12 ─────────────────────────────

mod ch12 {
    use super::*;
    use judge::ch12 as j;
    use llm_workbook::ch06_attention::{AttnSpec, attention_backward, concat_heads, split_heads};
    use llm_workbook::ch12_modern::{self as book, Gqa, GqaGrads, Pairing};
    use llm_workbook_exercises::solutions::ch12_modern as s;

    /// Every judge of the chapter run on the main crate's answers, with the probes it ran.
    pub fn judged() -> Vec<Judged> {
        judged![
            rms_norm_backward(s::rms_norm_backward),
            rope_forward(s::rope_forward),
            rope_backward(s::rope_backward),
            swiglu_backward(s::swiglu_backward),
            gqa_backward(s::gqa_backward),
            kv_cache_bytes_per_token(s::kv_cache_bytes_per_token),
        ]
    }

    #[test]
    fn solutions_pass() {
        all_pass(judged());
    }

    #[test]
    fn rms_norm_with_epsilon_outside_the_root() {
        // r = √mean(x²) + ε, differentiated through consistently.
        let outside = |x: &DMatrix<f64>, gamma: &DMatrix<f64>, d_y: &DMatrix<f64>, eps: f64| {
            s::rms_norm_backward(x, gamma, d_y, eps)?;
            let (n, c) = x.shape();
            let (mut d_x, mut d_gamma) = (DMatrix::zeros(n, c), DMatrix::zeros(1, c));
            for r in 0..n {
                let root = (x.row(r).iter().map(|v| v * v).sum::<f64>() / c as f64).sqrt();
                let rms = root + eps;
                let g: Vec<f64> = (0..c).map(|j| gamma[(0, j)] * d_y[(r, j)]).collect();
                let gx: f64 = (0..c).map(|j| g[j] * x[(r, j)]).sum();
                for j in 0..c {
                    d_x[(r, j)] = g[j] / rms - gx * x[(r, j)] / (c as f64 * rms * rms * root);
                    d_gamma[(0, j)] += d_y[(r, j)] * x[(r, j)] / rms;
                }
            }
            Ok((d_x, d_gamma))
        };
        catches(j::rms_norm_backward(outside), "ε outside the root");
    }

    /// The other pairing.
    fn other(p: Pairing) -> Pairing {
        if p == Pairing::Adjacent { Pairing::Halves } else { Pairing::Adjacent }
    }

    #[test]
    fn rope_with_the_pairs_from_the_wrong_halves() {
        let wrong =
            |q: &DMatrix<f64>, h, start, base, p| s::rope_forward(q, h, start, base, other(p));
        catches(j::rope_forward(wrong), "the pairs taken from the other layout");
    }

    #[test]
    fn rope_with_the_angles_exponent_over_the_models_width() {
        // θ_i = base^(−2i/d) with d the width of all the heads together.
        let over_d = |q: &DMatrix<f64>, h: usize, start: usize, base: f64, p: Pairing| {
            let right = s::rope_forward(q, h, start, base, p)?;
            let (d, d_h) = (q.ncols(), q.ncols() / h);
            let mut y = right.clone();
            for head in 0..h {
                for r in 0..q.nrows() {
                    for i in 0..d_h / 2 {
                        let angle = (start + r) as f64 * base.powf(-2.0 * i as f64 / d as f64);
                        let (ca, cb) = p.columns(d_h, i);
                        let (ca, cb) = (head * d_h + ca, head * d_h + cb);
                        let (a, b) = (q[(r, ca)], q[(r, cb)]);
                        y[(r, ca)] = a * angle.cos() - b * angle.sin();
                        y[(r, cb)] = a * angle.sin() + b * angle.cos();
                    }
                }
            }
            Ok(y)
        };
        catches(j::rope_forward(over_d), "the angle's exponent over the model's width");
    }

    #[test]
    fn rope_backward_by_the_forward_rotation() {
        catches(j::rope_backward(s::rope_forward), "the rotation's direction");
    }

    #[test]
    fn swiglu_with_the_gate_on_the_wrong_branch() {
        // H = X W_gate ⊙ φ(X W_up), differentiated through consistently.
        let swapped = |x: &DMatrix<f64>,
                       wg: &DMatrix<f64>,
                       wu: &DMatrix<f64>,
                       wd: &DMatrix<f64>,
                       d_y: &DMatrix<f64>| {
            s::swiglu_backward(x, wg, wu, wd, d_y)?;
            let sig = llm_workbook::ch01_logistic::sigmoid::<f64>;
            let (a, b) = (x * wg, x * wu);
            let h = a.component_mul(&b.map(|v| v * sig(v)));
            let d_h = d_y * wd.transpose();
            let d_a = d_h.component_mul(&b.map(|v| v * sig(v)));
            let d_b = DMatrix::from_fn(b.nrows(), b.ncols(), |r, c| {
                let v = b[(r, c)];
                d_h[(r, c)] * a[(r, c)] * sig(v) * (1.0 + v * (1.0 - sig(v)))
            });
            Ok(book::GluGrads {
                d_x: &d_a * wg.transpose() + &d_b * wu.transpose(),
                d_w_gate: x.transpose() * &d_a,
                d_w_up: x.transpose() * &d_b,
                d_w_down: h.transpose() * d_y,
            })
        };
        catches(j::swiglu_backward(swapped), "the gate on the wrong branch");
    }

    #[test]
    fn gqa_whose_group_gradient_is_assigned_not_summed() {
        // Each key/value head's gradient set (=) by every query head of its group in turn.
        let assigned = |p: &Gqa<f64>, x: &DMatrix<f64>, t: usize, d_y: &DMatrix<f64>| {
            s::gqa_backward(p, x, t, d_y)?;
            let (_, cache) = book::gqa_forward(p, x, t)?;
            let d_outs = split_heads(&(d_y * p.w_o.transpose()), p.n_heads)?;
            let (n, d_h) = (x.nrows(), p.head_dim());
            let mut d_q = Vec::new();
            let mut d_k = vec![DMatrix::zeros(n, d_h); p.n_kv_heads];
            let mut d_v = d_k.clone();
            for (h, d_o) in d_outs.iter().enumerate() {
                let g = p.kv_head_of(h);
                let (q, k) = (&cache.q[h].rotated, &cache.k[g].rotated);
                let spec = AttnSpec::causal(t);
                let gr = attention_backward(q, k, &cache.v[g], &cache.weights[h], d_o, &spec)?;
                d_q.push(gr.d_q);
                d_k[g] = gr.d_k;
                d_v[g] = gr.d_v;
            }
            let (d_q, d_k, d_v) = (concat_heads(&d_q)?, concat_heads(&d_k)?, concat_heads(&d_v)?);
            Ok(GqaGrads {
                d_x: &d_q * p.w_q.transpose() + &d_k * p.w_k.transpose() + &d_v * p.w_v.transpose(),
                d_w_q: x.transpose() * d_q,
                d_w_k: x.transpose() * d_k,
                d_w_v: x.transpose() * d_v,
                d_w_o: cache.concat.transpose() * d_y,
                d_qk_gamma: None,
                d_biases: None,
            })
        };
        catches(j::gqa_backward(assigned), "the group's gradient assigned instead of summed");
    }

    #[test]
    fn kv_cache_without_the_factor_two() {
        let half = |l, h, k, d, b| s::kv_cache_bytes_per_token(l, h, k, d, b).map(|n| n / 2);
        catches(j::kv_cache_bytes_per_token(half), "the factor 2 dropped");
    }
}

// ───────────────────────────── chapter 13 ─────────────────────────────

mod ch13 {
    use super::*;
    use judge::ch13 as j;
    use llm_workbook::ch13_finetune::{self as book, DpoPair, GrpoSpec, Lora};
    use llm_workbook_exercises::solutions::ch13_finetune as s;

    /// Every judge of the chapter run on the main crate's answers, with the probes it ran.
    pub fn judged() -> Vec<Judged> {
        judged![
            masked_cross_entropy(s::masked_cross_entropy),
            lora_new(Lora::new),
            lora_backward(s::lora_backward),
            dpo_loss_and_gradient(s::dpo_loss_and_gradient),
            group_advantages(book::group_advantages),
            grpo_loss_and_gradient(s::grpo_loss_and_gradient),
            k3(book::k3),
        ]
    }

    #[test]
    fn solutions_pass() {
        all_pass(judged());
    }

    #[test]
    fn cross_entropy_with_the_prompt_not_masked() {
        let every = |z: &DMatrix<f64>, t: &[usize], m: &[bool]| {
            s::masked_cross_entropy(z, t, &vec![true; m.len()])
        };
        catches(j::masked_cross_entropy(every), "the prompt not masked");
    }

    #[test]
    fn lora_with_b_initialised_randomly() {
        let random_b = |w: DMatrix<f64>, r: usize, alpha: f64, seed: u64| {
            let mut layer = Lora::new(w, r, alpha, seed)?;
            let (rows, cols) = layer.b.shape();
            layer.b = llm_workbook::rng::Rng::new(seed + 1).normal_matrix(rows, cols, 0.02);
            Ok(layer)
        };
        catches(j::lora_new(random_b), "B initialised randomly");
    }

    #[test]
    fn lora_backward_without_the_scale() {
        let unscaled = |layer: &Lora, x: &DMatrix<f64>, d_y: &DMatrix<f64>| {
            s::lora_backward(layer, x, d_y)?;
            let rank = layer.a.nrows() as f64;
            s::lora_backward(&Lora { alpha: rank, ..layer.clone() }, x, d_y)
        };
        catches(j::lora_backward(unscaled), "the scale α/r dropped");
    }

    #[test]
    fn dpo_without_the_reference() {
        let no_ref = |pairs: &[DpoPair], beta: f64| {
            let bare: Vec<DpoPair> = pairs
                .iter()
                .map(|p| DpoPair { ref_chosen: 0.0, ref_rejected: 0.0, ..*p })
                .collect();
            s::dpo_loss_and_gradient(pairs, beta)?;
            s::dpo_loss_and_gradient(&bare, beta)
        };
        catches(j::dpo_loss_and_gradient(no_ref), "π_ref's log-probabilities left out");
    }

    #[test]
    fn advantages_not_normalised() {
        let centred = |r: &[f64], eps: f64| {
            book::group_advantages(r, eps)?;
            let mean = r.iter().sum::<f64>() / r.len() as f64;
            Ok(r.iter().map(|v| v - mean).collect())
        };
        catches(j::group_advantages(centred), "the advantages not normalised");
    }

    #[test]
    fn grpo_with_the_ratio_unclipped() {
        let unclipped = j::grpo_loss_and_gradient(|spec: GrpoSpec, sample| {
            if !(spec.clip_eps > 0.0 && spec.clip_eps < 1.0) {
                return s::grpo_loss_and_gradient(spec, sample);
            }
            s::grpo_loss_and_gradient(GrpoSpec { clip_eps: 0.99, ..spec }, sample)
        });
        catches(unclipped, "the ratio unclipped");
    }

    #[test]
    fn k3_with_the_kls_sign_reversed() {
        catches(j::k3(|log_ref, log_pi| book::k3(log_pi, log_ref)), "the KL's sign");
    }
}
