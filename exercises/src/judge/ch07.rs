//! Judges of chapter 7's exercises.

use super::{Section, Verdict, attempt_ok, compare, gradient_check, note, random, weighted_sum};
use llm_workbook::Result;
use llm_workbook::ch06_attention::{MhaGrads, MultiHead};
use llm_workbook::ch07_encoder_decoder::{self as book, Batch, DecoderBlock, DecoderBlockCache};
use nalgebra::DMatrix;

const PADDING: Section = Section { chapter: "ch07_encoder_decoder", anchor: "batches-and-padding" };
const CROSS: Section =
    Section { chapter: "ch07_encoder_decoder", anchor: "1-two-stacks-three-kinds-of-attention" };
const BACKWARD: Section =
    Section { chapter: "ch07_encoder_decoder", anchor: "3-backward-through-cross-attention" };

/// Every entry for lengths (3, 1, 2) with T_q = 2, T_k = 3; errors for a zero or too long length.
pub fn padding_mask(f: impl Fn(&[usize], usize, usize) -> Result<DMatrix<f64>>) -> Verdict {
    super::probe(super::Probe::Named);
    let lengths = [3, 1, 2];
    let m = attempt_ok(PADDING, "padding_mask", || f(&lengths, 2, 3))?;
    if m.shape() != (6, 3) {
        return Err(PADDING.fail(format!(
            "3 sequences × T_q = 2 rows and T_k = 3 columns: 6×3; yours is {}×{}",
            m.nrows(),
            m.ncols()
        )));
    }
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
    super::probe(super::Probe::Batch);
    for bad in [&[0usize, 2][..], &[4, 1][..], &[][..]] {
        let what = format!("lengths {bad:?} with T_k = 3");
        super::expect_err(PADDING, "padding_mask", &what, || f(bad, 2, 3))?;
    }
    Ok(())
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
pub fn cross_attention_forward(
    f: impl Fn(&DMatrix<f64>, &Batch, &DMatrix<f64>, &Batch, &MultiHead<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    super::probe(super::Probe::Batch);
    let (y, yb, e, eb, w) = setup();
    let out = attempt_ok(CROSS, "cross_attention_forward", || f(&y, &yb, &e, &eb, &w))?;
    let (want, _) =
        book::cross_attention_forward(&y, &yb, &e, &eb, &w).map_err(|x| x.to_string())?;
    if out.shape() == want.shape() {
        let mut padded = e.clone();
        padded.row_mut(7).add_scalar_mut(3.0); // sequence 1's last encoder row is padding
        let again = attempt_ok(CROSS, "cross_attention_forward", || f(&y, &yb, &padded, &eb, &w))?;
        if (again.rows(3, 3) - out.rows(3, 3)).abs().max() > 1e-12 {
            return Err(CROSS.fail(
                "a padding leak: changing sequence 1's padded encoder row changed its outputs — \
                 mask the padded keys with −∞",
            ));
        }
        let mut other = e.clone();
        other.row_mut(0).add_scalar_mut(3.0);
        let again = attempt_ok(CROSS, "cross_attention_forward", || f(&y, &yb, &other, &eb, &w))?;
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
    let big_y = super::rows_scaled(&y, &[1.0, 900.0, -700.0]);
    let out = attempt_ok(CROSS, "cross_attention_forward", || f(&big_y, &yb, &e, &eb, &w))?;
    let (want, _) =
        book::cross_attention_forward(&big_y, &yb, &e, &eb, &w).map_err(|x| x.to_string())?;
    if out.iter().any(|v| !v.is_finite()) {
        return Err(CROSS.fail(format!(
            "y's rows scaled by (1, 900, −700): your output has NaN or ∞ — {}",
            super::NO_SHIFT
        )));
    }
    compare(CROSS, "cross-attention output with large scores", &out, &want, 1e-9, &[])
}

/// The gradient check of L = Σ G ⊙ out in Y, E and all eight weights and biases.
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
    super::probe(super::Probe::Batch);
    let (y, yb, e, eb, w) = setup();
    let g = random(110, 6, 4);
    let d = attempt_ok(BACKWARD, "cross_attention_backward", || f(&y, &yb, &e, &eb, &w, &g))?;
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
    })
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

/// The inverse of [`decoder_tensors`] (the activation and head counts from `template`).
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
pub fn decoder_block_backward(
    f: impl Fn(
        &DecoderBlock<f64>,
        &DecoderBlockCache<f64>,
        &DMatrix<f64>,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DecoderBlock<f64>)>,
) -> Verdict {
    super::probe(super::Probe::Batch);
    let (y, yb, e, eb, _) = setup();
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
    let (d_y, d_e, grads) =
        attempt_ok(BACKWARD, "decoder_block_backward", || f(&block, &cache, &g))?;
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
