//! Batches of padded sequences, their masks, and cross-attention: queries from the decoder, keys
//! and values from the encoder output, through chapter 6's multi-head attention.

use crate::ch06_attention::{
    AttnSpec, MhaCache, MhaGrads, MultiHead, mha_backward, mha_forward, padding_mask,
};
use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::Float;
use nalgebra::DMatrix;

// ───────────────────────────── batches and masks ─────────────────────────────

/// B sequences padded to a common length T, stacked as B·T rows: sequence b's real tokens are
/// rows b·T … b·T + lengths\[b\] − 1, the rest is padding that no real position may attend to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// T, the padded length.
    pub len: usize,
    /// The real length of each sequence (1 ≤ lengths\[b\] ≤ T).
    pub lengths: Vec<usize>,
}

impl Batch {
    /// A batch of padded length `len` with these real lengths; errors on an empty batch, a zero
    /// length or a length above `len`.
    pub fn new(len: usize, lengths: Vec<usize>) -> Result<Self> {
        if lengths.is_empty() || len == 0 {
            return Err(Error::Empty {
                op: "Batch::new",
                arg: "batch (no sequences or zero length)",
            });
        }
        if let Some(b) = lengths.iter().position(|&l| l == 0 || l > len) {
            return Err(invalid(
                "Batch::new",
                "lengths",
                format!("sequence {b} has length {}, outside 1..={len}", lengths[b]),
            ));
        }
        Ok(Batch { len, lengths })
    }

    /// Every sequence of the full length T.
    pub fn full(sequences: usize, len: usize) -> Result<Self> {
        Self::new(len, vec![len; sequences])
    }

    /// B.
    pub fn sequences(&self) -> usize {
        self.lengths.len()
    }

    /// B·T, the rows of a matrix holding this batch.
    pub fn rows(&self) -> usize {
        self.len * self.lengths.len()
    }

    pub(super) fn check_rows<T>(
        &self,
        op: &'static str,
        arg: &'static str,
        x: &DMatrix<T>,
    ) -> Result<()> {
        if x.nrows() != self.rows() {
            return Err(shape_error(
                op,
                arg,
                format!(
                    "{} rows ({} sequences × length {})",
                    self.rows(),
                    self.sequences(),
                    self.len
                ),
                shape_of(x),
            ));
        }
        Ok(())
    }
}

// ───────────────────────────── attention between two sequences ─────────────────────────────

/// The attention specification (chapter 6's [`AttnSpec`]) for queries from `q_batch` over keys
/// from `kv_batch`: scores ÷ √d_k, the padded keys of each sequence masked with −∞, and for
/// self-attention of the decoder the causal mask on top.
pub fn attention_spec<T: Float>(
    q_batch: &Batch,
    kv_batch: &Batch,
    causal: bool,
) -> Result<AttnSpec<T>> {
    if q_batch.sequences() != kv_batch.sequences() {
        return Err(shape_error(
            "attention_spec",
            "query and key/value batches",
            format!("{} sequences in both", q_batch.sequences()),
            format!("{}", kv_batch.sequences()),
        ));
    }
    let spec = if causal {
        AttnSpec::causal(q_batch.len)
    } else {
        AttnSpec::cross(q_batch.len, kv_batch.len)
    };
    let spec = AttnSpec { kv_len: kv_batch.len, ..spec };
    if kv_batch.lengths.iter().all(|&l| l == kv_batch.len) {
        return Ok(spec); // nothing padded
    }
    Ok(spec.with_mask(padding_mask(&kv_batch.lengths, q_batch.len, kv_batch.len)?))
}

/// Cross-attention: queries from the decoder rows `y`, keys and values from the encoder output
/// `e`, with chapter 6's multi-head attention and no causal mask; only the source padding is
/// masked. Shapes: y (B·T_t)×C, e (B·T_s)×C, result (B·T_t)×C. T_t and T_s may differ.
///
/// Q = Y W_Q + b_Q, K = E W_K + b_K, V = E W_V + b_V; per sequence and head
/// A = softmax(QKᵀ/√d_k + padding mask), O = A V; heads concatenated, · W_O + b_O.
pub fn cross_attention_forward<T: Float>(
    y: &DMatrix<T>,
    y_batch: &Batch,
    e: &DMatrix<T>,
    e_batch: &Batch,
    w: &MultiHead<T>,
) -> Result<(DMatrix<T>, MhaCache<T>)> {
    const OP: &str = "cross_attention_forward";
    if y.ncols() != e.ncols() {
        return Err(shape_error(
            OP,
            "decoder and encoder widths",
            format!("the decoder's width {} to equal the encoder's", y.ncols()),
            format!("decoder {}, encoder {}", shape_of(y), shape_of(e)),
        ));
    }
    y_batch.check_rows(OP, "decoder input", y)?;
    e_batch.check_rows(OP, "encoder output", e)?;
    mha_forward(w, y, e, &attention_spec(y_batch, e_batch, false)?)
}

/// Backward of [`cross_attention_forward`]: chapter 6's multi-head backward pass. Its `d_x_kv` is
/// the gradient that flows into the encoder output, ∂E = ∂K W_Kᵀ + ∂V W_Vᵀ.
pub fn cross_attention_backward<T: Float>(
    w: &MultiHead<T>,
    cache: &MhaCache<T>,
    d_out: &DMatrix<T>,
) -> Result<MhaGrads<T>> {
    mha_backward(w, cache, d_out)
}
