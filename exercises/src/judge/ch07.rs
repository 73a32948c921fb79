//! Judges of chapter 7's exercises.

use super::{
    Section, Verdict, attempt, attempt_ok, compare, gradient_check, note, random, weighted_sum,
};
use llm_workbook::Result;
use llm_workbook::ch06_attention::{MhaGrads, MultiHead};
use llm_workbook::ch07_encoder_decoder::{self as book, Batch};
use nalgebra::DMatrix;

const PADDING: Section = Section { chapter: "ch07_encoder_decoder", anchor: "batches-and-padding" };
const CROSS: Section =
    Section { chapter: "ch07_encoder_decoder", anchor: "1-two-stacks-three-kinds-of-attention" };
const BACKWARD: Section =
    Section { chapter: "ch07_encoder_decoder", anchor: "3-backward-through-cross-attention" };

/// Every entry for lengths (3, 1, 2) with T_q = 2, T_k = 3; errors for a zero or too long length.
pub fn padding_mask(f: impl Fn(&[usize], usize, usize) -> Result<DMatrix<f64>>) -> Verdict {
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
    for bad in [&[0usize, 2][..], &[4, 1][..]] {
        if attempt(PADDING, "padding_mask", || f(bad, 2, 3))?.is_ok() {
            return Err(PADDING.fail(format!("lengths {bad:?} with T_k = 3 should be an Err")));
        }
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
    compare(CROSS, "cross-attention output", &out, &want, 1e-9, &[]).map_err(|m| {
        note(m, "queries come from the decoder (y), keys and values from the encoder (e)")
    })
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
