//! Judges of chapter 7's exercises.

use super::{Section, Verdict, attempt_ok, compare, gradient_check, note, random, weighted_sum};
use llm_workbook::Result;
use llm_workbook::ch06_attention::{MhaGrads, MultiHead};
use llm_workbook::ch07_encoder_decoder::{
    self as book, Batch, DecoderBlock, DecoderBlockCache, EncoderDecoder, Gradients, ModelConfig,
};
use nalgebra::DMatrix;

const PADDING: Section = Section { chapter: "ch07_encoder_decoder", anchor: "batches-and-padding" };
const CROSS: Section =
    Section { chapter: "ch07_encoder_decoder", anchor: "1-two-stacks-three-kinds-of-attention" };
const BACKWARD: Section =
    Section { chapter: "ch07_encoder_decoder", anchor: "3-backward-through-cross-attention" };

/// Every entry for lengths (2, 3, 1) with T_q = 2, T_k = 3 (sequence 0 padded, so that its mask
/// for all is not the unmasked one); errors for a zero or too long length.
fn padding_mask_checks(f: impl Fn(&[usize], usize, usize) -> Result<DMatrix<f64>>) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order]);
    super::probe(super::Probe::Named);
    let lengths = [2, 3, 1];
    let m = attempt_ok(PADDING, "padding_mask", || f(&lengths, 2, 3))?;
    let meaning = "3 sequences × T_q = 2 rows, T_k = 3 columns";
    super::expect_shape(PADDING, "padding_mask([2, 3, 1], 2, 3)", &m, (6, 3), meaning)?;
    super::batch_probe(super::BatchInput { sequences: 3, t_q: 2, t_k: 3, width: 3 });
    let book_mask = |l: &[usize]| llm_workbook::ch06_attention::padding_mask::<f64>(l, 2, 3);
    let want = book_mask(&lengths).map_err(|e| e.to_string())?;
    let same = book_mask(&[lengths[0]; 3]).map_err(|e| e.to_string())?;
    super::batch_slips(PADDING, &[(&m, &want, &same, 2)], 0.0)?;
    for r in 0..6 {
        let b = r / 2;
        for j in 0..3 {
            let want = if j < lengths[b] { 0.0 } else { f64::NEG_INFINITY };
            if m[(r, j)] != want {
                let why = if j + 1 == lengths[b] || j == lengths[b] {
                    " — the mask is off by one: keys 0 … length − 1 are real"
                } else {
                    ""
                };
                return Err(PADDING.fail(format!(
                    "row {r} (sequence {b}, {} real keys), key {j}: should be {want}, yours is \
                     {}{why}",
                    lengths[b],
                    m[(r, j)]
                )));
            }
        }
    }
    for bad in [&[0usize, 2][..], &[4, 1][..], &[][..]] {
        let what = format!("lengths {bad:?} with T_k = 3");
        super::expect_err(PADDING, "padding_mask", &what, || f(bad, 2, 3))?;
    }
    Ok(())
}

/// The layout of `setup`'s batch: 2 sequences, T_t = 3 decoder rows and T_s = 4 encoder rows
/// each, width 4.
const SETUP_BATCH: super::BatchInput = super::BatchInput { sequences: 2, t_q: 3, t_k: 4, width: 4 };

/// What the cross-attention judges pass, named as the exercise names it.
fn cross_passed<'a>(
    y: &'a DMatrix<f64>,
    yb: &'a Batch,
    e: &'a DMatrix<f64>,
    eb: &'a Batch,
    w: &'a MultiHead<f64>,
) -> [(&'static str, &'a dyn super::Shaped); 5] {
    [("y", y), ("y_batch", yb), ("e", e), ("e_batch", eb), ("w", w)]
}

fn setup() -> (DMatrix<f64>, Batch, DMatrix<f64>, Batch, MultiHead<f64>) {
    let (y_batch, e_batch) =
        (Batch { len: 3, lengths: vec![3, 2] }, Batch { len: 4, lengths: vec![4, 2] });
    let (y, e) = (random(100, 6, 4), random(101, 8, 4));
    let mut w = MultiHead {
        heads: 2,
        w_q: random(102, 4, 4),
        b_q: random(103, 1, 4),
        w_k: random(104, 4, 4),
        b_k: random(105, 1, 4),
        w_v: random(106, 4, 4),
        b_v: random(107, 1, 4),
        w_o: random(108, 4, 4),
        b_o: random(109, 1, 4),
    };
    w.w_q *= 0.5;
    (y, y_batch, e, e_batch, w)
}

/// The main crate's output on two sequences (the second padded); no leak from the padding or
/// from the other sequence.
fn cross_attention_forward_checks<F>(f: F) -> Verdict
where
    F: Fn(&DMatrix<f64>, &Batch, &DMatrix<f64>, &Batch, &MultiHead<f64>) -> Result<DMatrix<f64>>,
{
    super::not_applicable(&[super::Probe::Order, super::Probe::Errors]);
    let (y, yb, e, eb, w) = setup();
    super::batch_probe(SETUP_BATCH);
    let out = super::attempt_ok_on(
        CROSS,
        "cross_attention_forward",
        &cross_passed(&y, &yb, &e, &eb, &w),
        || f(&y, &yb, &e, &eb, &w),
    )?;
    let (want, _) =
        book::cross_attention_forward(&y, &yb, &e, &eb, &w).map_err(|x| x.to_string())?;
    let (y0, e0) = (super::first_for_all(&y, yb.len), super::first_for_all(&e, eb.len));
    let (same, _) =
        book::cross_attention_forward(&y0, &yb, &e0, &eb, &w).map_err(|x| x.to_string())?;
    super::batch_slips(CROSS, &[(&out, &want, &same, yb.len)], 1e-9)?;
    if out.shape() == want.shape() {
        let mut padded = e.clone();
        padded.row_mut(7).add_scalar_mut(3.0); // sequence 1's last encoder row is padding
        let again = super::attempt_ok_on(
            CROSS,
            "cross_attention_forward",
            &cross_passed(&y, &yb, &padded, &eb, &w),
            || f(&y, &yb, &padded, &eb, &w),
        )?;
        if (again.rows(3, 3) - out.rows(3, 3)).abs().max() > 1e-12 {
            return Err(CROSS.fail(
                "a padding leak: changing sequence 1's padded encoder row changed its outputs — \
                 mask the padded keys with −∞",
            ));
        }
        let mut other = e.clone();
        other.row_mut(0).add_scalar_mut(3.0);
        let again = super::attempt_ok_on(
            CROSS,
            "cross_attention_forward",
            &cross_passed(&y, &yb, &other, &eb, &w),
            || f(&y, &yb, &other, &eb, &w),
        )?;
        if (again.rows(3, 3) - out.rows(3, 3)).abs().max() > 1e-12 {
            return Err(CROSS.fail(
                "sequence 1's queries see sequence 0's encoder rows: attend within each sequence",
            ));
        }
    }
    let from_y = book::cross_attention_forward(&y, &yb, &y, &yb, &w).map(|(o, _)| o);
    let mistakes = [(
        "keys and values from the decoder's own y: queries come from the decoder \
                      (y), keys and values from the encoder (e)",
        from_y.map_err(|x| x.to_string())?,
    )];
    if let Some(mistake) = super::named(&out, &mistakes, 1e-9) {
        return Err(CROSS.fail(format!("yours attends over y itself — {mistake}")));
    }
    compare(CROSS, "cross-attention output", &out, &want, 1e-9, &[])?;
    // Large scores: the decoder's rows scaled so that q·k/√d_k reaches the hundreds.
    let big_y = super::rows_scaled(&y, &QUERY_GAINS);
    let out = super::attempt_ok_on(
        CROSS,
        "cross_attention_forward",
        &cross_passed(&big_y, &yb, &e, &eb, &w),
        || f(&big_y, &yb, &e, &eb, &w),
    )?;
    let (want, _) =
        book::cross_attention_forward(&big_y, &yb, &e, &eb, &w).map_err(|x| x.to_string())?;
    if out.iter().any(|v| !v.is_finite()) {
        return Err(CROSS.fail(format!(
            "y's rows scaled by {QUERY_GAINS:?}: your output has NaN or ∞ — {}",
            super::NO_SHIFT
        )));
    }
    compare(CROSS, "cross-attention output with large scores", &out, &want, 1e-9, &[])
}

/// What the cross-attention judges multiply the decoder's rows by for their scale probes: row 0
/// of each sequence keeps scores of a few units, rows 1 and 2 reach scores in the hundreds to
/// thousands, of both signs.
const QUERY_GAINS: [f64; 3] = [1.0, 900.0, -700.0];

/// The rows of ∂L/∂Y that a softmax with `shift` leaves NaN or ∞ in cross-attention on `y`: the
/// query rows whose weights, in some head, overflow (no shift) or come out 0/0 (a row far below
/// one maximum for the whole matrix). Each row of ∂L/∂Y depends on its own weights only.
fn overflowing_rows(
    y: &DMatrix<f64>,
    (yb, e, eb): (&Batch, &DMatrix<f64>, &Batch),
    w: &MultiHead<f64>,
    shift: super::Shift,
) -> Result<std::collections::BTreeSet<usize>> {
    use llm_workbook::ch06_attention::{attention_scores, split_heads};
    let (_, cache) = book::cross_attention_forward(y, yb, e, eb, w)?;
    let (qs, ks) = (split_heads(&cache.q, w.heads)?, split_heads(&cache.k, w.heads)?);
    let mut rows = std::collections::BTreeSet::new();
    for (q, k) in qs.iter().zip(&ks) {
        let scores = attention_scores(q, k, &cache.spec)?;
        rows.extend(super::non_finite_rows(&super::softmax_rows_shifted(&scores, shift)));
    }
    Ok(rows)
}

/// The gradient check of L = Σ G ⊙ out in Y, E and all eight weights and biases; then the ten
/// gradients against the main crate's with y's rows scaled by `QUERY_GAINS` (scores in the
/// hundreds to thousands), naming a dropped or whole-matrix max shift by the rows of ∂L/∂Y it
/// leaves NaN.
fn cross_attention_backward_checks(
    f: impl Fn(
        &DMatrix<f64>,
        &Batch,
        &DMatrix<f64>,
        &Batch,
        &MultiHead<f64>,
        &DMatrix<f64>,
    ) -> Result<MhaGrads<f64>>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Order, super::Probe::Errors]);
    let (y, yb, e, eb, w) = setup();
    super::batch_probe(SETUP_BATCH);
    let g = random(110, 6, 4);
    let d = super::attempt_ok_on(
        BACKWARD,
        "cross_attention_backward",
        &[("y", &y), ("y_batch", &yb), ("e", &e), ("e_batch", &eb), ("w", &w), ("d_out", &g)],
        || f(&y, &yb, &e, &eb, &w, &g),
    )?;
    let reference = |y: &DMatrix<f64>, e: &DMatrix<f64>| {
        crate::solutions::ch07_encoder_decoder::cross_attention_backward(y, &yb, e, &eb, &w, &g)
            .map_err(|x| x.to_string())
    };
    let want = reference(&y, &e)?;
    let same = reference(&super::first_for_all(&y, yb.len), &super::first_for_all(&e, eb.len))?;
    super::batch_slips(
        BACKWARD,
        &[
            (&d.d_x_q, &want.d_x_q, &same.d_x_q, yb.len),
            (&d.d_x_kv, &want.d_x_kv, &same.d_x_kv, eb.len),
        ],
        1e-9,
    )?;
    let inputs = [
        ("Y", y.clone()),
        ("E", e.clone()),
        ("W_Q", w.w_q.clone()),
        ("b_Q", w.b_q.clone()),
        ("W_K", w.w_k.clone()),
        ("b_K", w.b_k.clone()),
        ("W_V", w.w_v.clone()),
        ("b_V", w.b_v.clone()),
        ("W_O", w.w_o.clone()),
        ("b_O", w.b_o.clone()),
    ];
    let analytic =
        [d.d_x_q, d.d_x_kv, d.d_w_q, d.d_b_q, d.d_w_k, d.d_b_k, d.d_w_v, d.d_b_v, d.d_w_o, d.d_b_o];
    gradient_check(
        BACKWARD,
        &inputs,
        &analytic,
        |t| {
            let w = MultiHead {
                heads: 2,
                w_q: t[2].clone(),
                b_q: t[3].clone(),
                w_k: t[4].clone(),
                b_k: t[5].clone(),
                w_v: t[6].clone(),
                b_v: t[7].clone(),
                w_o: t[8].clone(),
                b_o: t[9].clone(),
            };
            book::cross_attention_forward(&t[0], &yb, &t[1], &eb, &w)
                .map(|(o, _)| weighted_sum(&g, &o))
                .unwrap_or(f64::NAN)
        },
        &[],
    )
    .map_err(|m| {
        if m.contains("∂L/∂E") {
            note(m, "E feeds both K and V: its gradient is the sum of the two paths")
        } else {
            m
        }
    })?;
    // Scale: scores in the hundreds to thousands.
    let big_y = super::rows_scaled(&y, &QUERY_GAINS);
    let d = super::attempt_ok_on(
        BACKWARD,
        "cross_attention_backward",
        &[("y", &big_y), ("y_batch", &yb), ("e", &e), ("e_batch", &eb), ("w", &w), ("d_out", &g)],
        || f(&big_y, &yb, &e, &eb, &w, &g),
    )?;
    let want = reference(&big_y, &e)?;
    let what = format!("y's rows scaled by {QUERY_GAINS:?}");
    if super::first_overflow(&d.d_x_q, &want.d_x_q).is_some() {
        let yours = super::non_finite_rows(&d.d_x_q);
        let rows = |shift| overflowing_rows(&big_y, (&yb, &e, &eb), &w, shift);
        let (none, whole) = (rows(super::Shift::None), rows(super::Shift::Whole));
        let (none, whole) = (none.map_err(|x| x.to_string())?, whole.map_err(|x| x.to_string())?);
        let slip = super::shift_slip(|shift| {
            yours == if shift == super::Shift::None { none.clone() } else { whole.clone() }
        });
        if let Some(slip) = slip {
            return Err(BACKWARD.fail(format!(
                "{what}: ∂L/∂Y is NaN or ∞ in rows {yours:?}, where the scores overflow — {slip}"
            )));
        }
    }
    let pairs = [
        ("∂L/∂Y", &d.d_x_q, &want.d_x_q),
        ("∂L/∂E", &d.d_x_kv, &want.d_x_kv),
        ("∂L/∂W_Q", &d.d_w_q, &want.d_w_q),
        ("∂L/∂b_Q", &d.d_b_q, &want.d_b_q),
        ("∂L/∂W_K", &d.d_w_k, &want.d_w_k),
        ("∂L/∂b_K", &d.d_b_k, &want.d_b_k),
        ("∂L/∂W_V", &d.d_w_v, &want.d_w_v),
        ("∂L/∂b_V", &d.d_b_v, &want.d_b_v),
        ("∂L/∂W_O", &d.d_w_o, &want.d_w_o),
        ("∂L/∂b_O", &d.d_b_o, &want.d_b_o),
    ];
    // Entries a million times below the largest gradient are compared against it (∂L/∂b_K is
    // rounding noise around 0).
    let floor = pairs.iter().map(|(_, _, want)| want.amax()).fold(0.0, f64::max) * GRADIENT_FLOOR;
    for (name, yours, want) in pairs {
        let name = format!("{name} with {what}");
        super::compare_with_floor(BACKWARD, &name, yours, want, GRADIENT_TOLERANCE, floor, &[])?;
    }
    Ok(())
}

/// A decoder block's 26 tensors, named, in the order its backward pass reaches them.
fn decoder_tensors(b: &DecoderBlock<f64>) -> Vec<(String, DMatrix<f64>)> {
    use super::ch06::{MHA_NAMES, ffn_tensors, mha_tensors};
    let mut out: Vec<(String, DMatrix<f64>)> =
        vec![("LN₃.γ".into(), b.norm3.gamma.clone()), ("LN₃.β".into(), b.norm3.beta.clone())];
    let ffn = ["FFN.W₂", "FFN.b₂", "FFN.W₁", "FFN.b₁"].iter().map(|n| n.to_string());
    out.extend(ffn.zip(ffn_tensors(&b.ffn)));
    out.push(("LN₂.γ".into(), b.norm2.gamma.clone()));
    out.push(("LN₂.β".into(), b.norm2.beta.clone()));
    let cross = MHA_NAMES.iter().map(|n| format!("Cross.{n}"));
    out.extend(cross.zip(mha_tensors(&b.cross_attention)));
    out.push(("LN₁.γ".into(), b.norm1.gamma.clone()));
    out.push(("LN₁.β".into(), b.norm1.beta.clone()));
    let selfa = MHA_NAMES.iter().map(|n| format!("Self.{n}"));
    out.extend(selfa.zip(mha_tensors(&b.self_attention)));
    out
}

/// The inverse of `decoder_tensors` (the activation and head counts from `template`).
fn decoder_from(template: &DecoderBlock<f64>, t: &[DMatrix<f64>]) -> DecoderBlock<f64> {
    use super::ch06::{ffn_from, mha_from};
    let mut b = template.clone();
    b.norm3.gamma = t[0].clone();
    b.norm3.beta = t[1].clone();
    b.ffn = ffn_from(b.ffn.act, &t[2..6]);
    b.norm2.gamma = t[6].clone();
    b.norm2.beta = t[7].clone();
    b.cross_attention = mha_from(b.cross_attention.heads, &t[8..16]);
    b.norm1.gamma = t[16].clone();
    b.norm1.beta = t[17].clone();
    b.self_attention = mha_from(b.self_attention.heads, &t[18..26]);
    b
}

fn decoder_hint(tensor: &str) -> &'static str {
    match tensor.split('.').next().unwrap_or_default() {
        "LN₃" | "FFN" => {
            "out = LN₃(Y₂ + FFN(Y₂)): LN₃'s backward takes ∂L/∂out, FFN's takes LN₃'s ∂x"
        }
        "LN₂" => {
            "∂L/∂Y₂ is LN₃'s ∂x (the residual's direct path) plus FFN's ∂x: the two paths add"
        }
        "Cross" => "Y₂ = LN₂(Y₁ + Cross(Y₁, E)): the cross-attention's backward takes LN₂'s ∂x",
        "LN₁" => {
            "∂L/∂Y₁ is LN₂'s ∂x (the residual's direct path) plus the cross-attention's d_x_q"
        }
        "Self" => "Y₁ = LN₁(y + Attn(y, y)): the self-attention's backward takes LN₁'s ∂x",
        "E" => {
            "∂L/∂E comes only from the cross-attention's keys and values: it is its d_x_kv, \
             nothing else"
        }
        _ => {
            "∂L/∂y is LN₁'s ∂x (the residual's direct path) plus the self-attention's \
             d_x_q + d_x_kv (y is its queries and its keys/values)"
        }
    }
}

/// The gradient check of L = Σ G ⊙ decoder_block(y, E) in y, E and all 26 tensors of the block:
/// 2 sequences (decoder lengths 3 and 2 of T_t = 3, encoder lengths 4 and 2 of T_s = 4), width
/// 4, 2 heads, hidden width 6, with random γ, β and biases.
fn decoder_block_backward_checks(
    f: impl Fn(
        &DecoderBlock<f64>,
        &DecoderBlockCache<f64>,
        &DMatrix<f64>,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DecoderBlock<f64>)>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order, super::Probe::Errors]);
    let (y, yb, e, eb, _) = setup();
    super::batch_probe(SETUP_BATCH);
    let mut rng = llm_workbook::rng::Rng::new(170);
    let mut block = DecoderBlock::random(4, 2, 6, &mut rng).map_err(|x| x.to_string())?;
    block.self_attention =
        super::ch06::random_mha(171, 2, (4, 4, 2, 4)).map_err(|x| x.to_string())?;
    block.cross_attention =
        super::ch06::random_mha(181, 2, (4, 4, 2, 4)).map_err(|x| x.to_string())?;
    for (i, n) in [&mut block.norm1, &mut block.norm2, &mut block.norm3].into_iter().enumerate() {
        n.gamma = random(190 + 2 * i as u64, 1, 4).add_scalar(1.0);
        n.beta = random(191 + 2 * i as u64, 1, 4) * 0.3;
    }
    block.ffn.b1 = random(200, 1, 6) * 0.3;
    block.ffn.b2 = random(201, 1, 4) * 0.3;
    let g = random(202, 6, 4);
    let (_, cache) =
        book::decoder_block_forward(&y, &yb, &e, &eb, &block).map_err(|x| x.to_string())?;
    let (d_y, d_e, grads) = super::attempt_ok_on(
        BACKWARD,
        "decoder_block_backward",
        &[("block", &block), ("cache", &cache), ("d_out", &g)],
        || f(&block, &cache, &g),
    )?;
    let reference = |y: &DMatrix<f64>, e: &DMatrix<f64>| {
        let (_, cache) = book::decoder_block_forward(y, &yb, e, &eb, &block)?;
        book::decoder_block_backward(&block, &cache, &g)
    };
    let (want_y, want_e, _) = reference(&y, &e).map_err(|x| x.to_string())?;
    let (y0, e0) = (super::first_for_all(&y, yb.len), super::first_for_all(&e, eb.len));
    let (same_y, same_e, _) = reference(&y0, &e0).map_err(|x| x.to_string())?;
    super::batch_slips(
        BACKWARD,
        &[(&d_y, &want_y, &same_y, yb.len), (&d_e, &want_e, &same_e, eb.len)],
        1e-9,
    )?;
    let mut inputs = decoder_tensors(&block);
    inputs.push(("y".into(), y.clone()));
    inputs.push(("E".into(), e.clone()));
    let mut analytic: Vec<DMatrix<f64>> =
        decoder_tensors(&grads).into_iter().map(|(_, t)| t).collect();
    analytic.push(d_y);
    analytic.push(d_e);
    super::gradient_check_named(
        BACKWARD,
        &inputs,
        &analytic,
        |t| {
            book::decoder_block_forward(&t[26], &yb, &t[27], &eb, &decoder_from(&block, &t[..26]))
                .map(|(out, _)| weighted_sum(&g, &out))
                .unwrap_or(f64::NAN)
        },
        &[],
    )
    .map_err(|m| {
        let hint = decoder_hint(super::failed_tensor(&m).unwrap_or_default());
        note(m, hint)
    })
}

const LOSS: Section = Section {
    chapter: "ch07_encoder_decoder",
    anchor: "2-output-layer-loss-teacher-forcing-greedy-decoding",
};

/// The shape of the model the whole-model judge grades on: two layers on each side (so ∂L/∂E
/// must be summed over the decoder layers), width 4, 2 heads, vocabulary 7, at most 5 positions.
const SMALL_MODEL: ModelConfig = ModelConfig {
    vocab: 7,
    width: 4,
    heads: 2,
    hidden: 6,
    encoder_layers: 2,
    decoder_layers: 2,
    max_len: 5,
};

/// How far the judge moves every weight of the freshly built model (γ = 1, β = 0 and zero biases
/// would hide a slip in their gradients): N(0, 0.3²) added to each entry.
const WEIGHT_NUDGE: f64 = 0.3;

/// The judge's small model: `SMALL_MODEL` with every tensor nudged by `WEIGHT_NUDGE`.
fn small_model() -> Result<EncoderDecoder<f64>> {
    let model = EncoderDecoder::new(SMALL_MODEL, 210)?;
    let nudged: Vec<DMatrix<f64>> = model
        .tensors()
        .iter()
        .enumerate()
        .map(|(i, t)| *t + random(211 + i as u64, t.nrows(), t.ncols()) * WEIGHT_NUDGE)
        .collect();
    model.with_tensors(&nudged)
}

/// The names of an encoder–decoder's tensors, in the order of [`EncoderDecoder::tensors`].
fn model_tensor_names(m: &EncoderDecoder<f64>) -> Vec<String> {
    const MHA: [&str; 8] = ["W_Q", "b_Q", "W_K", "b_K", "W_V", "b_V", "W_O", "b_O"];
    const FFN: [&str; 4] = ["W₁", "b₁", "W₂", "b₂"];
    let mut names = vec!["source embedding".to_string(), "target embedding".to_string()];
    for i in 0..m.encoder.len() {
        let at = format!("encoder[{i}]");
        names.extend(MHA.map(|n| format!("{at}.MHA.{n}")));
        names.extend(["LN₁.γ", "LN₁.β"].map(|n| format!("{at}.{n}")));
        names.extend(FFN.map(|n| format!("{at}.FFN.{n}")));
        names.extend(["LN₂.γ", "LN₂.β"].map(|n| format!("{at}.{n}")));
    }
    for i in 0..m.decoder.len() {
        let at = format!("decoder[{i}]");
        names.extend(MHA.map(|n| format!("{at}.Self.{n}")));
        names.extend(["LN₁.γ", "LN₁.β"].map(|n| format!("{at}.{n}")));
        names.extend(MHA.map(|n| format!("{at}.Cross.{n}")));
        names.extend(["LN₂.γ", "LN₂.β"].map(|n| format!("{at}.{n}")));
        names.extend(FFN.map(|n| format!("{at}.FFN.{n}")));
        names.extend(["LN₃.γ", "LN₃.β"].map(|n| format!("{at}.{n}")));
    }
    names.extend(["W_out".to_string(), "b_out".to_string()]);
    names
}

/// What to look at when the whole model's first wrong gradient (in the backward pass's order) is
/// `tensor`: everything the backward pass reached before it is right.
fn model_hint(tensor: &str) -> &'static str {
    match tensor.split(['[', '.']).next().unwrap_or_default() {
        "W_out" | "b_out" => {
            "logits = Y W_out + b_out: ∂W_out = Yᵀ ∂logits (Y the last decoder layer's output), \
             ∂b_out = Σ_rows ∂logits, with ∂logits = (softmax − one-hot)/N_real on real rows"
        }
        "decoder" => {
            "W_out is right, so look below it: ∂Y = ∂logits W_outᵀ enters the last decoder layer, \
             and each layer's decoder_block_backward returns the ∂y the layer below it takes"
        }
        "target embedding" => {
            "the decoder is right: row t of ∂E_tgt is the sum of the first decoder layer's ∂y \
             over the real positions holding token t (padding rows give nothing)"
        }
        "encoder" => {
            "the decoder is right, so look at ∂L/∂E: the sum of every decoder layer's d_E (each \
             cross-attends to the same E), entering the last encoder layer's block_backward"
        }
        _ => {
            "the encoder is right: row t of ∂E_src is the sum of the first encoder layer's ∂x over \
             the real source positions holding token t"
        }
    }
}

/// The whole model's slips the judge computes on its own input (by the main crate's forward and
/// backward on a changed loss) and names when yours matches one.
const PADDING_SCORED: &str = "the padding rows scored as if they were tokens (label 0): only the \
                              real target positions enter the loss, and padding rows get a zero \
                              gradient";
const MEAN_OVER_ALL_ROWS: &str = "the mean taken over all B·T_t rows, padding included: divide by \
                                  N_real, the number of real target positions";
const NO_CROSS_INTO_ENCODER: &str = "the encoder's gradients are all zero: the cross-attention's \
                                     ∂L/∂E (d_E of every decoder layer) never reaches the \
                                     encoder — sum it and run it back through the encoder layers";

/// A batch whose sequences are all copies of `seqs[0]`, for [`super::BatchSlip::FirstForAll`].
fn sequence_0_for_all(seqs: &[Vec<usize>]) -> Vec<Vec<usize>> {
    vec![seqs[0].clone(); seqs.len()]
}

/// The loss and every tensor's gradient of the whole encoder–decoder against the main crate's on
/// a small model (`SMALL_MODEL`, every weight nudged) and a teacher-forced batch of 3 sequences
/// of unequal content and lengths (source lengths 5, 2, 3; target lengths 3, 1, 2, so T_s = 5 ≠
/// T_t = 3), compared relatively (to 10⁻⁶ of each entry, or of the model's largest gradient for
/// entries a million times smaller); the slips of the loss (padding scored, the mean over all
/// rows), of the batch (sequence 0 only or for all) and ∂L/∂E kept from the encoder, named; the
/// promised errors.
fn loss_and_gradients_checks(
    f: impl Fn(
        &EncoderDecoder<f64>,
        &[Vec<usize>],
        &[Vec<usize>],
        &[Vec<usize>],
    ) -> Result<Gradients<f64>>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Order]);
    const NAME: &str = "loss_and_gradients";
    let model = small_model().map_err(|e| e.to_string())?;
    let source = vec![vec![3, 1, 4, 1, 5], vec![2, 6], vec![5, 3, 5]];
    let target_in = vec![vec![1, 5, 3], vec![1], vec![1, 2]];
    let labels = vec![vec![5, 3, 2], vec![4], vec![2, 6]];
    super::batch_probe(super::BatchInput { sequences: 3, t_q: 3, t_k: 5, width: 4 });
    let yours = super::attempt_ok_on(BACKWARD, NAME, &[("model", &model)], || {
        f(&model, &source, &target_in, &labels)
    })?;
    let want = model.loss_and_gradients(&source, &target_in, &labels).map_err(|e| e.to_string())?;
    let names = model_tensor_names(&model);
    let (mine, theirs) = (yours.grads.tensors(), want.grads.tensors());
    if mine.len() != theirs.len() {
        return Err(BACKWARD.fail(format!(
            "your grads hold {} tensors in {} encoder and {} decoder layers; the model has {} in \
             {} and {}: start from model.zeros_like()",
            mine.len(),
            yours.grads.encoder.len(),
            yours.grads.decoder.len(),
            theirs.len(),
            want.grads.encoder.len(),
            want.grads.decoder.len()
        )));
    }
    for ((name, yours), want) in names.iter().zip(&mine).zip(&theirs) {
        super::expect_shape(
            BACKWARD,
            &format!("∂L/∂{name}"),
            yours,
            want.shape(),
            "its tensor's shape",
        )?;
    }
    let as_yours: Vec<DMatrix<f64>> = mine.iter().map(|t| (*t).clone()).collect();
    if model.with_tensors(&as_yours).map_err(|e| e.to_string())? != yours.grads {
        return Err(BACKWARD.fail(
            "a field of your grads that is not a matrix differs from the model's (the config, a \
             head count, an activation, a norm order, an ε or its placement): they hold the \
             model's own values — start from model.zeros_like() and overwrite every matrix",
        ));
    }
    // The largest gradient entry: entries a million times smaller are compared against it.
    let scale = theirs.iter().map(|t| t.amax()).fold(0.0, f64::max);
    let floor = scale * GRADIENT_FLOOR;
    let same = |a: &Gradients<f64>, b: &Gradients<f64>| {
        super::same_value(a.loss, b.loss, 1e-9)
            && a.grads.tensors().iter().zip(b.grads.tensors()).all(|(x, y)| {
                x.iter().zip(y.iter()).all(|(p, q)| (p - q).abs() <= 1e-9 * q.abs().max(floor))
            })
    };
    // The slips, each computed by the main crate on the judge's input.
    let (logits, cache) = model.forward(&source, &target_in).map_err(|e| e.to_string())?;
    let rows = logits.nrows();
    let t_t = rows / source.len();
    let with_loss = |row_labels: &[Option<usize>], factor: f64| -> Result<Gradients<f64>> {
        let (loss, d) = book::padded_cross_entropy(&logits, row_labels)?;
        Ok(Gradients { loss: loss * factor, grads: model.backward(&cache, &(d * factor))? })
    };
    let real: Vec<Option<usize>> =
        (0..rows).map(|r| labels[r / t_t].get(r % t_t).copied()).collect();
    let n_real = real.iter().flatten().count();
    let padded: Vec<Option<usize>> = real.iter().map(|l| Some(l.unwrap_or(0))).collect();
    let first: Vec<Option<usize>> =
        real.iter().enumerate().map(|(r, l)| if r < t_t { *l } else { None }).collect();
    let mut no_encoder = want.clone();
    no_encoder.grads.source_embedding.fill(0.0);
    for layer in &mut no_encoder.grads.encoder {
        for t in book::block_tensors_mut(layer) {
            t.fill(0.0);
        }
    }
    let slips = [
        (PADDING_SCORED, with_loss(&padded, 1.0)),
        (MEAN_OVER_ALL_ROWS, with_loss(&real, n_real as f64 / rows as f64)),
        (super::BatchSlip::FirstOnly.name(), with_loss(&first, 1.0)),
        (
            super::BatchSlip::FirstForAll.name(),
            model.loss_and_gradients(
                &sequence_0_for_all(&source),
                &sequence_0_for_all(&target_in),
                &sequence_0_for_all(&labels),
            ),
        ),
        (NO_CROSS_INTO_ENCODER, Ok(no_encoder)),
    ];
    super::probe(super::Probe::Named);
    for (slip, grads) in slips {
        if same(&yours, &grads.map_err(|e| e.to_string())?) {
            let section = if slip == NO_CROSS_INTO_ENCODER { BACKWARD } else { LOSS };
            return Err(super::known_slip(section, slip));
        }
    }
    compare_model(&model, &yours, &want, n_real, "")?;
    large_logits(&f, &model, (&source, &target_in, &labels))?;
    model_errors(&f, &model, (&source, &target_in, &labels))
}

/// The loss and then every gradient of `yours` against `want` for `model`, in the order the
/// backward pass reaches them (W_out and b_out, the decoder layers last first, the target
/// embedding, the encoder layers last first, the source one), each relatively to
/// `GRADIENT_TOLERANCE` with the model's largest gradient times `GRADIENT_FLOOR` as floor;
/// `what` says what the probe changed ("" for none).
fn compare_model(
    model: &EncoderDecoder<f64>,
    yours: &Gradients<f64>,
    want: &Gradients<f64>,
    n_real: usize,
    what: &str,
) -> Verdict {
    if !(yours.loss.is_finite() && super::close(yours.loss, want.loss, 1e-9)) {
        return Err(LOSS.fail(format!(
            "the loss (mean cross-entropy over the {n_real} real target positions){what}: {}",
            super::yours_expected(yours.loss, want.loss)
        )));
    }
    let names = model_tensor_names(model);
    let (mine, theirs) = (yours.grads.tensors(), want.grads.tensors());
    let floor = theirs.iter().map(|t| t.amax()).fold(0.0, f64::max) * GRADIENT_FLOOR;
    let per_enc = book::block_tensors(&model.encoder[0]).len();
    let per_dec = model.decoder[0].tensors().len();
    let dec_start = 2 + model.encoder.len() * per_enc;
    let mut order: Vec<usize> = vec![theirs.len() - 2, theirs.len() - 1];
    for i in (0..model.decoder.len()).rev() {
        order.extend((dec_start + i * per_dec)..(dec_start + (i + 1) * per_dec));
    }
    order.push(1);
    for i in (0..model.encoder.len()).rev() {
        order.extend((2 + i * per_enc)..(2 + (i + 1) * per_enc));
    }
    order.push(0);
    for i in order {
        super::compare_with_floor(
            BACKWARD,
            &format!("∂L/∂{}{what}", names[i]),
            mine[i],
            theirs[i],
            GRADIENT_TOLERANCE,
            floor,
            &[],
        )
        .map_err(|m| note(m, model_hint(&names[i])))?;
    }
    Ok(())
}

/// What the scale probe multiplies W_out and b_out by: logits in the hundreds to thousands, rows
/// far apart, where e^{z} overflows without the max shift.
const LOGIT_GAIN: f64 = 1000.0;

/// The scale probe of `loss_and_gradients`: the model with W_out and b_out multiplied by
/// `LOGIT_GAIN`, against the main crate's, naming a dropped or whole-matrix max shift in the
/// loss's softmax by the loss it gives.
fn large_logits(
    f: LossAndGradients,
    model: &EncoderDecoder<f64>,
    (source, target_in, labels): TeacherForced,
) -> Verdict {
    super::probe(super::Probe::Scale);
    let mut tensors: Vec<DMatrix<f64>> = model.tensors().iter().map(|t| (*t).clone()).collect();
    let n = tensors.len();
    for t in &mut tensors[n - 2..] {
        *t *= LOGIT_GAIN;
    }
    let big = model.with_tensors(&tensors).map_err(|e| e.to_string())?;
    let (logits, _) = big.forward(source, target_in).map_err(|e| e.to_string())?;
    let top = logits.amax();
    let what = format!(" with W_out and b_out × {LOGIT_GAIN} (logits up to {top:.0})");
    let yours = super::attempt_on(BACKWARD, "loss_and_gradients", &[("model", &big)], || {
        f(&big, source, target_in, labels)
    })?;
    let yours = match yours {
        Ok(yours) => yours,
        // The main crate's pieces refuse a NaN: on this valid input only an overflowed softmax
        // makes one.
        Err(e) if e.to_string().contains("non-finite") => {
            return Err(LOSS.fail(format!(
                "your pass{what} stopped on a NaN or ∞ ({e}); the right loss and gradients are \
                 finite: {}; or {}",
                super::NO_SHIFT,
                super::WHOLE_MAX
            )));
        }
        Err(e) => {
            return Err(BACKWARD.fail(format!(
                "your `loss_and_gradients` returned an error on valid input{what}: {e}"
            )));
        }
    };
    let want = big.loss_and_gradients(source, target_in, labels).map_err(|e| e.to_string())?;
    let t_t = logits.nrows() / source.len();
    let real: Vec<(usize, usize)> =
        (0..logits.nrows()).filter_map(|r| labels[r / t_t].get(r % t_t).map(|&l| (r, l))).collect();
    if !yours.loss.is_finite() {
        // The loss a softmax with `shift` gives: the mean of −ln p over the real positions.
        let loss_with = |shift| {
            let p = super::softmax_rows_shifted(&logits, shift);
            real.iter().map(|&(r, l)| -p[(r, l)].ln()).sum::<f64>() / real.len() as f64
        };
        let slip = super::shift_slip(|shift| super::same_value(yours.loss, loss_with(shift), 1e-9));
        if let Some(slip) = slip {
            return Err(LOSS.fail(format!("the loss{what} is {}: {slip}", yours.loss)));
        }
    }
    compare_model(&big, &yours, &want, real.len(), &what)
}

/// The relative tolerance of the whole model's gradients: a correct answer that sums in another
/// order differs by far less.
const GRADIENT_TOLERANCE: f64 = 1e-6;
/// Entries below this fraction of the model's largest gradient are compared against that
/// fraction instead of themselves (b_K's gradient is rounding noise around 0).
const GRADIENT_FLOOR: f64 = 1e-6;

/// An answer to `loss_and_gradients`, as the judge's helpers take it.
type LossAndGradients<'a> = &'a dyn Fn(
    &EncoderDecoder<f64>,
    &[Vec<usize>],
    &[Vec<usize>],
    &[Vec<usize>],
) -> Result<Gradients<f64>>;

/// A teacher-forced batch: the source sequences, the decoder inputs and their labels.
type TeacherForced<'a> = (&'a [Vec<usize>], &'a [Vec<usize>], &'a [Vec<usize>]);

/// The errors `loss_and_gradients`'s doc promises.
fn model_errors(
    f: LossAndGradients,
    model: &EncoderDecoder<f64>,
    (source, target_in, labels): TeacherForced,
) -> Verdict {
    let name = "loss_and_gradients";
    super::expect_err(LOSS, name, "no sequences", || f(model, &[], &[], &[]))?;
    let what = "3 source sequences and 2 target sequences";
    super::expect_err(LOSS, name, what, || f(model, source, &target_in[..2], &labels[..2]))?;
    let mut short = labels.to_vec();
    short[0].pop();
    let what = "labels[0] one shorter than target_in[0]";
    super::expect_err(LOSS, name, what, || f(model, source, target_in, &short))?;
    let mut outside = target_in.to_vec();
    outside[1][0] = SMALL_MODEL.vocab;
    let what = "a token id equal to the vocabulary's size in target_in";
    super::expect_err(LOSS, name, what, || f(model, source, &outside, labels))?;
    let mut long = source.to_vec();
    long[0].push(2);
    let what = "a source sequence one longer than max_len";
    super::expect_err(LOSS, name, what, || f(model, &long, target_in, labels))?;
    let mut empty = source.to_vec();
    empty[1].clear();
    super::expect_err(LOSS, name, "an empty source sequence", || {
        f(model, &empty, target_in, labels)
    })
}

// ───────────── the judges: the sweep against the main crate, then the checks above ─────────────

use super::sweep::{Fixed, Gen, Named, Tol, explained, outcome, sweep};

/// **The padding mask**: B from 1 to 3 sequences of unequal lengths, T_q ≠ T_k, and the errors
/// the doc promises (no sequences, a zero length, a length of T_k + 1); then
/// `padding_mask_checks`.
pub fn padding_mask(f: impl Fn(&[usize], usize, usize) -> Result<DMatrix<f64>>) -> Verdict {
    padding_mask_judged(&f)
}

/// [`padding_mask`]'s judge, compiled once here rather than in every test that calls it.
fn padding_mask_judged(f: &dyn Fn(&[usize], usize, usize) -> Result<DMatrix<f64>>) -> Verdict {
    let mut cases: Vec<(Vec<usize>, usize, usize)> = Vec::new();
    for (q, k) in [(1, 1), (2, 3), (3, 2), (1, 4)] {
        cases.push((Vec::new(), q, k));
        cases.push((vec![k], q, k));
        cases.push((vec![k, 1], q, k));
        cases.push((vec![1, k, k.div_ceil(2)], q, k));
        cases.push((vec![k, 0], q, k));
        cases.push((vec![k + 1, 1], q, k));
    }
    let found = sweep(
        PADDING,
        "padding_mask",
        Tol::EXACT,
        &cases,
        |(l, q, k)| outcome(f(l, *q, *k)),
        |(l, q, k)| outcome(llm_workbook::ch06_attention::padding_mask(l, *q, *k)),
    );
    explained(found, || padding_mask_checks(f))
}

/// A cross-attention case's inputs: (y, its batch, e, its batch, the weights, ∂L/∂out).
type CrossInputs = (DMatrix<f64>, Batch, DMatrix<f64>, Batch, MultiHead<f64>, DMatrix<f64>);

/// A whole-model case's inputs: (the model, the sources, the decoder inputs, the labels).
type ModelInputs = (EncoderDecoder<f64>, Vec<Vec<usize>>, Vec<Vec<usize>>, Vec<Vec<usize>>);

/// One cross-attention case: (seed, B, T_t, T_s, the scale of the decoder rows).
type CrossSpec = (u64, usize, usize, usize, f64);

/// The decoder rows, batches, encoder rows, weights (2 heads, width 4) and an upstream gradient
/// of a case; sequence b's real lengths drawn in 1 … T.
fn cross_inputs(&(seed, b, t_t, t_s, scale): &CrossSpec) -> Result<CrossInputs> {
    let mut draw = Gen::new(&format!("cross {seed}"));
    let yb = Batch::new(t_t, (0..b).map(|_| 1 + draw.below(t_t)).collect())?;
    let eb = Batch::new(t_s, (0..b).map(|_| 1 + draw.below(t_s)).collect())?;
    let w = super::ch06::random_mha(seed, 2, (4, 4, 2, 4))?;
    let y = draw.matrix(b * t_t, 4, scale);
    Ok((y, yb, draw.matrix(b * t_s, 4, 1.0), eb, w, draw.matrix(b * t_t, 4, 1.0)))
}

/// The cross-attention cases: 1 to 3 sequences, T_t ≠ T_s, decoder rows at 10⁻³ to 300 (scores
/// in the thousands).
fn cross_cases() -> Vec<CrossSpec> {
    let mut cases = Vec::new();
    let mut seed = 900;
    for (b, t_t, t_s) in [(1, 1, 1), (2, 3, 4), (3, 2, 2), (2, 4, 1)] {
        for scale in [1.0, 1e-3, 300.0] {
            seed += 20;
            cases.push((seed, b, t_t, t_s, scale));
        }
    }
    cases
}

/// **Cross-attention forward**: the cross-attention cases; then
/// `cross_attention_forward_checks`.
pub fn cross_attention_forward<F>(f: F) -> Verdict
where
    F: Fn(&DMatrix<f64>, &Batch, &DMatrix<f64>, &Batch, &MultiHead<f64>) -> Result<DMatrix<f64>>,
{
    let found = sweep(
        CROSS,
        "cross_attention_forward",
        Tol::F64,
        &cross_cases(),
        |s| {
            let (y, yb, e, eb, w, _) = outcome(cross_inputs(s))?;
            outcome(f(&y, &yb, &e, &eb, &w))
        },
        |s| {
            let (y, yb, e, eb, w, _) = outcome(cross_inputs(s))?;
            outcome(book::cross_attention_forward(&y, &yb, &e, &eb, &w).map(|(o, _)| o))
        },
    );
    explained(found, || cross_attention_forward_checks(&f))
}

/// **Cross-attention backward**: the cross-attention cases with an upstream gradient; then
/// `cross_attention_backward_checks`.
pub fn cross_attention_backward(
    f: impl Fn(
        &DMatrix<f64>,
        &Batch,
        &DMatrix<f64>,
        &Batch,
        &MultiHead<f64>,
        &DMatrix<f64>,
    ) -> Result<MhaGrads<f64>>,
) -> Verdict {
    cross_attention_backward_judged(&f)
}

/// [`cross_attention_backward`]'s judge, compiled once here rather than in every test that calls it.
fn cross_attention_backward_judged(
    f: &dyn Fn(
        &DMatrix<f64>,
        &Batch,
        &DMatrix<f64>,
        &Batch,
        &MultiHead<f64>,
        &DMatrix<f64>,
    ) -> Result<MhaGrads<f64>>,
) -> Verdict {
    let found = sweep(
        BACKWARD,
        "cross_attention_backward",
        Tol::F64,
        &cross_cases(),
        |s| {
            let (y, yb, e, eb, w, g) = outcome(cross_inputs(s))?;
            outcome(f(&y, &yb, &e, &eb, &w, &g)).map(super::ch06::mha_named)
        },
        |s| {
            let (y, yb, e, eb, w, g) = outcome(cross_inputs(s))?;
            let grads = crate::solutions::ch07_encoder_decoder::cross_attention_backward(
                &y, &yb, &e, &eb, &w, &g,
            );
            outcome(grads).map(super::ch06::mha_named)
        },
    );
    explained(found, || cross_attention_backward_checks(f))
}

/// A decoder block's inputs for a cross-attention case (the case's weights unused; the block's
/// own drawn from its seed, with random γ, β and biases).
fn decoder_inputs(
    spec: &CrossSpec,
) -> Result<(DecoderBlock<f64>, DecoderBlockCache<f64>, DMatrix<f64>)> {
    let (y, yb, e, eb, _, g) = cross_inputs(spec)?;
    let seed = spec.0;
    let mut rng = llm_workbook::rng::Rng::new(seed);
    let mut block = DecoderBlock::random(4, 2, 6, &mut rng)?;
    block.self_attention = super::ch06::random_mha(seed + 1, 2, (4, 4, 2, 4))?;
    block.cross_attention = super::ch06::random_mha(seed + 11, 2, (4, 4, 2, 4))?;
    for (i, n) in [&mut block.norm1, &mut block.norm2, &mut block.norm3].into_iter().enumerate() {
        n.gamma = random(seed + 2 * i as u64, 1, 4).add_scalar(1.0);
        n.beta = random(seed + 1 + 2 * i as u64, 1, 4) * 0.3;
    }
    block.ffn.b1 = random(seed + 7, 1, 6) * 0.3;
    let (_, cache) = book::decoder_block_forward(&y, &yb, &e, &eb, &block)?;
    Ok((block, cache, g))
}

/// (∂L/∂y, ∂L/∂E, the block's gradients) by name.
fn decoder_named((d_y, d_e, grads): (DMatrix<f64>, DMatrix<f64>, DecoderBlock<f64>)) -> Named {
    let mut parts = vec![("∂L/∂y".to_string(), d_y), ("∂L/∂E".to_string(), d_e)];
    parts.extend(decoder_tensors(&grads).into_iter().map(|(n, m)| (format!("∂{n}"), m)));
    Named(parts)
}

/// **The decoder block's backward**: the cross-attention cases' shapes and scales
/// ([`Tol::CHAIN`]: three LayerNorms, two attentions and the FFN in a chain); then
/// `decoder_block_backward_checks`.
pub fn decoder_block_backward(
    f: impl Fn(
        &DecoderBlock<f64>,
        &DecoderBlockCache<f64>,
        &DMatrix<f64>,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DecoderBlock<f64>)>,
) -> Verdict {
    decoder_block_backward_judged(&f)
}

/// [`decoder_block_backward`]'s judge, compiled once here rather than in every test that calls it.
fn decoder_block_backward_judged(
    f: &dyn Fn(
        &DecoderBlock<f64>,
        &DecoderBlockCache<f64>,
        &DMatrix<f64>,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DecoderBlock<f64>)>,
) -> Verdict {
    let cases: Vec<CrossSpec> = cross_cases()
        .into_iter()
        .map(|(s, b, t, u, scale)| (s, b, t, u, scale.min(10.0)))
        .collect();
    let found = sweep(
        BACKWARD,
        "decoder_block_backward",
        Tol::CHAIN,
        &cases,
        |s| {
            let (block, cache, g) = outcome(decoder_inputs(s))?;
            outcome(f(&block, &cache, &g)).map(decoder_named)
        },
        |s| {
            let (block, cache, g) = outcome(decoder_inputs(s))?;
            outcome(book::decoder_block_backward(&block, &cache, &g)).map(decoder_named)
        },
    );
    explained(found, || decoder_block_backward_checks(f))
}

/// One whole-model case: (seed, layers on each side, B, the longest source, the longest target,
/// what is wrong with it: 0 nothing, then the errors the doc promises in its order — 1 no
/// sequences, 2 batches of different sizes, 3 a label short, 4 a token outside the vocabulary, 5
/// a sequence past max_len, 6 an empty sequence).
type ModelSpec = (u64, usize, usize, usize, usize, Fixed<u8>);

/// The model and teacher-forced batch of a case.
fn model_inputs(&(seed, layers, b, t_s, t_t, ref wrong): &ModelSpec) -> Result<ModelInputs> {
    let config = ModelConfig { encoder_layers: layers, decoder_layers: layers, ..SMALL_MODEL };
    let model = EncoderDecoder::new(config, seed)?;
    let mut draw = Gen::new(&format!("model {seed}"));
    let nudged: Vec<DMatrix<f64>> = model
        .tensors()
        .iter()
        .map(|t| *t + draw.matrix(t.nrows(), t.ncols(), WEIGHT_NUDGE))
        .collect();
    let model = model.with_tensors(&nudged)?;
    let v = config.vocab;
    let mut source: Vec<Vec<usize>> = (0..b)
        .map(|_| {
            let n = 1 + draw.below(t_s);
            draw.tokens(n, v)
        })
        .collect();
    let mut target: Vec<Vec<usize>> = (0..b)
        .map(|_| {
            let n = 1 + draw.below(t_t);
            draw.tokens(n, v)
        })
        .collect();
    let mut labels: Vec<Vec<usize>> = target.iter().map(|t| draw.tokens(t.len(), v)).collect();
    match wrong.0 {
        1 => (source, target, labels) = (Vec::new(), Vec::new(), Vec::new()),
        2 => {
            target.pop();
            labels.pop();
        }
        3 => {
            labels[0].pop();
        }
        4 => target[b - 1][0] = v,
        5 => source[0] = draw.tokens(config.max_len + 1, v),
        6 => source[b - 1].clear(),
        _ => {}
    }
    Ok((model, source, target, labels))
}

/// The loss and every gradient of the model, by name.
fn model_named(g: Gradients<f64>) -> Named {
    let names = model_tensor_names(&g.grads);
    let mut parts = vec![("the loss".to_string(), DMatrix::from_element(1, 1, g.loss))];
    parts.extend(
        names
            .into_iter()
            .zip(g.grads.tensors().into_iter().cloned())
            .map(|(n, m)| (format!("∂{n}"), m)),
    );
    Named(parts)
}

/// **The whole model's loss and gradients**: one and two layers on each side, 1 to 3 sequences
/// of unequal lengths (T_t ≠ T_s), every error the doc promises ([`Tol::CHAIN`]); then
/// `loss_and_gradients_checks`.
pub fn loss_and_gradients(
    f: impl Fn(
        &EncoderDecoder<f64>,
        &[Vec<usize>],
        &[Vec<usize>],
        &[Vec<usize>],
    ) -> Result<Gradients<f64>>,
) -> Verdict {
    loss_and_gradients_judged(&f)
}

/// [`loss_and_gradients`]'s judge, compiled once here rather than in every test that calls it.
fn loss_and_gradients_judged(
    f: &dyn Fn(
        &EncoderDecoder<f64>,
        &[Vec<usize>],
        &[Vec<usize>],
        &[Vec<usize>],
    ) -> Result<Gradients<f64>>,
) -> Verdict {
    let mut cases: Vec<ModelSpec> = Vec::new();
    let mut seed = 1000;
    for (layers, b, t_s, t_t) in [(1, 1, 1, 1), (2, 2, 5, 3), (1, 3, 2, 5), (2, 2, 3, 3)] {
        seed += 1;
        cases.push((seed, layers, b, t_s, t_t, Fixed(0)));
    }
    for wrong in 1..=6 {
        seed += 1;
        cases.push((seed, 1, 2, 3, 3, Fixed(wrong)));
    }
    let found = sweep(
        LOSS,
        "loss_and_gradients",
        Tol::CHAIN,
        &cases,
        |s| {
            let (m, src, tgt, lab) = outcome(model_inputs(s))?;
            outcome(f(&m, &src, &tgt, &lab)).map(model_named)
        },
        |s| {
            let (m, src, tgt, lab) = outcome(model_inputs(s))?;
            outcome(m.loss_and_gradients(&src, &tgt, &lab)).map(model_named)
        },
    );
    explained(found, || loss_and_gradients_checks(f))
}
