//! Chapter 6 in the book: D3's "You are welcome" walk-through recomputed from its
//! printed inputs, the same chain done the standard way, the worked-number table ([`worked`]),
//! the errata ([`ERRATA`]), the walk-through ([`walk`]), the figures ([`figures`]) and the
//! chapter's entry ([`CHAPTER`]). The prose is `chapters/ch06_attention.md`.

use super::{
    AttnSpec, Epsilon, Ffn, LAYER_NORM_EPS, LayerNorm, MultiHead, attention_forward,
    attention_scores, attention_weight_entries, concat_heads, ffn_forward, head_parameter_count,
    layer_norm_forward, mha_forward, residual_add,
};
use crate::ch03_mlp::Activation;
use crate::ch05_positions::{self as ch05, PRINTED_X_PLUS_PE, PRINTED_Y_PLUS_PE, Reading};
use crate::errata::{Erratum, Kind};
use crate::error::Result;
use crate::matmul::matmul;
use crate::plot::{Figure, Heatmap};
use crate::report::{Chapter, Walk, Worked, matrix_like};
use crate::sources::{D0, D1, D2, D3, THIS_CRATE};
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};

// ───────────────────────────── D1's GPT-3 ─────────────────────────────

/// GPT-3's embedding width.
pub const GPT3_D_MODEL: usize = 12_288;
/// GPT-3's query/key width per head.
pub const GPT3_D_HEAD: usize = 128;
/// GPT-3's heads per layer.
pub const GPT3_HEADS: usize = 96;
/// GPT-3's layers.
pub const GPT3_LAYERS: usize = 96;

// ───────────────────────── D3's walk-through ─────────────────────────

/// The walk-through's W_Q.
pub const W_Q: [[f64; 4]; 4] =
    [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]];
/// The walk-through's W_K.
pub const W_K: [[f64; 4]; 4] =
    [[0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]];
/// The walk-through's W_V as first defined (and as every printed V uses).
pub const W_V: [[f64; 4]; 4] =
    [[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0]];
/// The different W_V the document displays beside the printed V.
pub const W_V_DISPLAYED: [[f64; 4]; 4] =
    [[0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]];
/// The made-up output of head 2.
pub const HEAD_2: &str = "1.5 0.8 1.2 2.0; \
    1.6 0.9 1.1 2.1; \
    1.4 0.7 1.3 1.9";
/// The 8×4 W_O the document prints (and uses).
pub const W_O: &str = "0.37738326 0.83274845 0.37280978 0.14584743; \
    0.28706851 0.29072609 0.69116998 0.20106682; \
    0.26764653 0.12058646 0.82634382 0.60818759; \
    0.44329703 0.4425581 0.89811744 0.24551412; \
    0.9186323 0.40029736 0.17636762 0.06896409; \
    0.41921272 0.0495383 0.77792527 0.4354529; \
    0.14791365 0.66822966 0.48313699 0.94127396; \
    0.11604641 0.51794357 0.62942357 0.76420883";
/// W₁ of the feed-forward example (4×6).
pub const W_1: &str = "0.1 0.2 0.3 0.4 0.5 0.6; \
    0.7 0.8 0.9 1.0 1.1 1.2; \
    1.3 1.4 1.5 1.6 1.7 1.8; \
    1.9 2.0 2.1 2.2 2.3 2.4";
/// b₁.
pub const B_1: &str = "0.01 0.02 0.03 0.04 0.05 0.06";
/// W₂ (6×4).
pub const W_2: &str = "0.1 0.7 1.3 1.9; \
    0.2 0.8 1.4 2.0; \
    0.3 0.9 1.5 2.1; \
    0.4 1.0 1.6 2.2; \
    0.5 1.1 1.7 2.3; \
    0.6 1.2 1.8 2.4";
/// b₂.
pub const B_2: &str = "0.01 0.02 0.03 0.04";

/// Printed: Q in the main text, "printed nicely out to four decimal places".
pub const PRINTED_Q_MAIN: &str = "1.5 1.1 2.6 0; \
    1.3415 1.6 2.3 0.6415; \
    2.4093 0.8998 1.7998 1.5093";
/// Printed: the first supplemental cell's Q (X + PE written with the symbolic exponents).
pub const PRINTED_Q_CELL_SYMBOLIC: &str = "1.5 1.1 2.6 0.; \
    1.34147098 1.59995001 2.29995 0.64147099; \
    2.40929743 0.89980003 1.79980001 1.50929745";
/// Printed: Q of the cell computing all three from the printed X + PE.
pub const PRINTED_Q: &str = "1.5 1.1 2.6 0.; \
    1.3415 1.60005 2.29995 0.6416; \
    2.4093 0.9 1.7998 1.5095";
/// Printed: K of that cell.
pub const PRINTED_K: &str = "1.1 1.5 0. 2.6; \
    1.60005 1.3415 0.6416 2.29995; \
    0.9 2.4093 1.5095 1.7998";
/// Printed: V of that cell.
pub const PRINTED_V: &str = "1.5 0. 1.1 2.6; \
    1.3415 0.6416 1.60005 2.29995; \
    2.4093 1.5095 0.9 1.7998";
/// Printed: V in the main text, beside the displayed W_V.
pub const PRINTED_V_MAIN: &str = "1.5 0 1.1 2.6; \
    1.3415 0.6416 1.6001 2.3; \
    2.4093 1.5095 0.9 1.7998";
/// Printed: the matrix under the K heading of the main text (equal to Q).
pub const PRINTED_UNDER_K_HEADING: &str = PRINTED_Q_MAIN;
/// Printed: Q, K, V for Y (cell).
pub const PRINTED_Q_Y: &str = "1. 1. 2. 0.; \
    1.7415 1.70005 2.49995 0.9416; \
    2.7093 0.5 2.1998 1.0095";
/// Printed: K for Y (cell).
pub const PRINTED_K_Y: &str = "1. 1. 0. 2.; \
    1.70005 1.7415 0.9416 2.49995; \
    0.5 2.7093 1.0095 2.1998";
/// Printed: V for Y (cell).
pub const PRINTED_V_Y: &str = "1. 0. 1. 2.; \
    1.7415 0.9416 1.70005 2.49995; \
    2.7093 1.0095 0.5 2.1998";
/// Printed: Q for Y, main text (4 decimals).
pub const PRINTED_Q_Y_MAIN: &str = "1 1 2 0; \
    1.7415 1.7001 2.5 0.9416; \
    2.7093 0.5 2.1998 1.0095";
/// Printed: K for Y, main text.
pub const PRINTED_K_Y_MAIN: &str = "1 1 0 2; \
    1.7001 1.7415 0.9416 2.5; \
    0.5 2.7093 1.0095 2.1998";
/// Printed: V for Y, main text.
pub const PRINTED_V_Y_MAIN: &str = "1 0 1 2; \
    1.7415 0.9416 1.7001 2.5; \
    2.7093 1.0095 0.5 2.1998";
/// Printed: softmax(QKᵀ/√d_k).
pub const PRINTED_WEIGHTS: &str = "0.07057112 0.21671075 0.71271813; \
    0.08861574 0.2073653 0.70401897; \
    0.16858447 0.40724309 0.42417243";
/// Printed: Attention(Q, K, V).
pub const PRINTED_ATTENTION: &str = "2.11372594 1.21488963 1.06582258 1.96465889; \
    2.10729705 1.1957622 1.06288922 1.97442407; \
    1.82115196 0.90157546 1.21880742 2.13838393";
/// Printed: Concat(Attention₁, Attention₂).
pub const PRINTED_CONCAT: &str = "2.11372594 1.21488963 1.06582258 1.96465889 1.5 0.8 1.2 2.0; \
    2.10729705 1.1957622 1.06288922 1.97442407 1.6 0.9 1.1 2.1; \
    1.82115196 0.90157546 1.21880742 2.13838393 1.4 0.7 1.3 1.9";
/// Printed: Concat · W_O (the multi-head cell's output, called M in the LayerNorm section).
pub const PRINTED_MULTIHEAD: &str = "4.42554033 5.589241 6.99844643 4.79288192; \
    4.55176485 5.6122494 7.09923364 4.82144704; \
    4.21254506 5.31988824 6.84520426 4.79017392";
/// Printed: LN(M).
pub const PRINTED_LN1: &str = "-1.03927142 0.13949668 1.56694829 -0.66717355; \
    -0.97825977 0.09190721 1.59246789 -0.70611533; \
    -1.10306273 0.02854757 1.58729045 -0.51277529";
/// Printed: FFN(LN(M)).
pub const PRINTED_FFN: &str = "1.70355949 4.58680433 7.47004916 10.353294; \
    1.56070622 4.19905974 6.83741326 9.47576678; \
    2.19865128 5.93062489 9.66259851 13.39457212";
/// Printed: the final LayerNorm.
pub const PRINTED_LN2: &str = "-1.34164072 -0.44721357 0.44721357 1.34164072; \
    -1.34164071 -0.44721357 0.44721357 1.34164071; \
    -1.34164075 -0.44721358 0.44721358 1.34164075";

/// A constant 4×4 matrix.
pub fn m4(rows: &[[f64; 4]; 4]) -> DMatrix<f64> {
    DMatrix::from_fn(4, 4, |r, c| rows[r][c])
}

/// A printed matrix as numbers (the module's constants always parse).
pub fn printed(text: &str) -> Result<DMatrix<f64>> {
    ch05::printed_matrix(text)
}

/// Every matrix of D3's encoder walk-through, each computed the way the document's
/// printed numbers were: from the printed inputs of its step.
#[derive(Clone, Debug, PartialEq)]
pub struct Walkthrough {
    /// X + PE as printed (chapter 5).
    pub x_pe: DMatrix<f64>,
    /// Y + PE as printed.
    pub y_pe: DMatrix<f64>,
    /// Q = (X + PE) W_Q.
    pub q: DMatrix<f64>,
    /// K = (X + PE) W_K.
    pub k: DMatrix<f64>,
    /// V = (X + PE) W_V.
    pub v: DMatrix<f64>,
    /// Q, K, V of Y + PE with the same weights.
    pub qkv_y: [DMatrix<f64>; 3],
    /// QKᵀ/√d_k (not printed by the document).
    pub scores: DMatrix<f64>,
    /// softmax(QKᵀ/√d_k).
    pub weights: DMatrix<f64>,
    /// Attention(Q, K, V), head 1.
    pub attention: DMatrix<f64>,
    /// Concat(head 1 as printed, head 2 as given).
    pub concat: DMatrix<f64>,
    /// Concat · W_O (= M).
    pub multihead: DMatrix<f64>,
    /// LN(M as printed) with (x − μ)/(σ + ε): the printed numbers.
    pub ln1: DMatrix<f64>,
    /// LN(M as printed) with the stated (x − μ)/√(σ² + ε).
    pub ln1_stated: DMatrix<f64>,
    /// FFN(LN₁ as printed).
    pub ffn: DMatrix<f64>,
    /// LN(FFN as printed), ε inside the square root.
    pub ln2: DMatrix<f64>,
}

/// The document's feed-forward net with ReLU.
pub fn doc_ffn() -> Result<Ffn<f64>> {
    Ok(Ffn {
        w1: printed(W_1)?,
        b1: printed(B_1)?,
        w2: printed(W_2)?,
        b2: printed(B_2)?,
        act: Activation::Relu,
    })
}

/// γ = 1, β = 0, ε = 1e-6, ε placed as given.
pub fn doc_layer_norm(placement: Epsilon) -> Result<LayerNorm<f64>> {
    Ok(LayerNorm::new(4, LAYER_NORM_EPS)?.with_placement(placement))
}

/// Recomputes the walk-through. Each step starts from the document's printed input for it, as
/// its Python cells do, so every printed matrix can be compared at the printed precision.
pub fn walkthrough() -> Result<Walkthrough> {
    let x_pe = printed(PRINTED_X_PLUS_PE)?;
    let y_pe = printed(PRINTED_Y_PLUS_PE)?;
    let (wq, wk, wv) = (m4(&W_Q), m4(&W_K), m4(&W_V));
    let q = matmul(&x_pe, &wq)?;
    let k = matmul(&x_pe, &wk)?;
    let v = matmul(&x_pe, &wv)?;
    let qkv_y = [matmul(&y_pe, &wq)?, matmul(&y_pe, &wk)?, matmul(&y_pe, &wv)?];
    let spec = AttnSpec::bidirectional(3);
    let scores = attention_scores(&q, &k, &spec)?;
    let att = attention_forward(&q, &k, &v, &spec)?;
    let concat = concat_heads(&[printed(PRINTED_ATTENTION)?, printed(HEAD_2)?])?;
    let multihead = matmul(&concat, &printed(W_O)?)?;
    let m = printed(PRINTED_MULTIHEAD)?;
    let ln1 = layer_norm_forward(&doc_layer_norm(Epsilon::AddedToStd)?, &m)?.0;
    let ln1_stated = layer_norm_forward(&doc_layer_norm(Epsilon::InsideSqrt)?, &m)?.0;
    let ffn = ffn_forward(&doc_ffn()?, &printed(PRINTED_LN1)?)?.0;
    let ln2 = layer_norm_forward(&doc_layer_norm(Epsilon::InsideSqrt)?, &printed(PRINTED_FFN)?)?.0;
    Ok(Walkthrough {
        x_pe,
        y_pe,
        q,
        k,
        v,
        qkv_y,
        scores,
        weights: att.weights,
        attention: att.out,
        concat,
        multihead,
        ln1,
        ln1_stated,
        ffn,
        ln2,
    })
}

/// The same chain from the embeddings with nothing rounded in between and the document's choices
/// replaced by the standard ones: the standard PE, LN with ε inside the square root, and the
/// residual connections of the post-LN block (h = LN(X + PE + M), out = LN(h + FFN(h))).
#[derive(Clone, Debug, PartialEq)]
pub struct StandardChain {
    /// X + PE, standard PE.
    pub x_pe: DMatrix<f64>,
    /// softmax(QKᵀ/2) with the document's W_Q, W_K.
    pub weights: DMatrix<f64>,
    /// Head 1's output.
    pub attention: DMatrix<f64>,
    /// Concat(head 1, head 2 as given) · W_O.
    pub multihead: DMatrix<f64>,
    /// LN(X + PE + M).
    pub h: DMatrix<f64>,
    /// LN(h + FFN(h)).
    pub out: DMatrix<f64>,
}

/// Computes [`StandardChain`].
pub fn standard_chain() -> Result<StandardChain> {
    let x_pe = ch05::matrix3x4(&ch05::X_EMBEDDINGS) + ch05::walkthrough_pe(Reading::Standard)?;
    let (q, k, v) =
        (matmul(&x_pe, &m4(&W_Q))?, matmul(&x_pe, &m4(&W_K))?, matmul(&x_pe, &m4(&W_V))?);
    let att = attention_forward(&q, &k, &v, &AttnSpec::bidirectional(3))?;
    let multihead = matmul(&concat_heads(&[att.out.clone(), printed(HEAD_2)?])?, &printed(W_O)?)?;
    let ln = doc_layer_norm(Epsilon::InsideSqrt)?;
    let h = layer_norm_forward(&ln, &residual_add(&x_pe, &multihead)?)?.0;
    let f = ffn_forward(&doc_ffn()?, &h)?.0;
    let out = layer_norm_forward(&ln, &residual_add(&h, &f)?)?.0;
    Ok(StandardChain { x_pe, weights: att.weights, attention: att.out, multihead, h, out })
}

/// The hand multiplication of Q's first row as the document writes it out: each entry is
/// Σⱼ x₁ⱼ (W_Q)ⱼc over the four products.
pub fn first_row_by_hand() -> Result<[f64; 4]> {
    let x = printed(PRINTED_X_PLUS_PE)?;
    let w = m4(&W_Q);
    Ok(std::array::from_fn(|c| (0..4).map(|j| x[(0, j)] * w[(j, c)]).sum()))
}

/// Whether every row of m is an arithmetic progression: all steps between neighbours within
/// `tolerance` of the first step. This is the reason the document's final LayerNorm has identical
/// rows. (Numbers printed to 8 decimals need a tolerance of 2e-8.)
pub fn rows_are_arithmetic(m: &DMatrix<f64>, tolerance: f64) -> bool {
    (0..m.nrows()).all(|r| {
        let step = m[(r, 1)] - m[(r, 0)];
        (2..m.ncols()).all(|c| ((m[(r, c)] - m[(r, c - 1)]) - step).abs() <= tolerance)
    })
}

// ───────────────────────────── errata ─────────────────────────────

/// This chapter's rows of the errata register.
pub const ERRATA: &[Erratum] = &[
    Erratum {
        document: D3,
        section: "Supplemental: Matrix Multiplication, first row of Q",
        printed: "Q[1,3] = (0.1×0) + (1.2×1) + (−0.1×0) + (1.4×1) = 0 + 1.2 + 0 + 0 = 1.2",
        correct: "Q[1,3] = 0 + 1.2 + 0 + 1.4 = 2.6",
        why: "The last product 1.4 × 1 was written as 0 in the sum. The printed Q matrix has the \
            right 2.6.",
        kind: Kind::Erratum,
        tests: &["tests/ch06_attention.rs::q_first_row_by_hand_is_1_5_1_1_2_6_0"],
    },
    Erratum {
        document: D3,
        section: "A Concrete Example, Q (main text)",
        printed: "Q row 3 = (2.4093, 0.8998, 1.7998, 1.5093)",
        correct: "from the printed X + PE: (2.4093, 0.9, 1.7998, 1.5095), as the supplement's Q, \
            K, V cell prints",
        why: "The main-text Q was computed from the symbolic X + PE written beside it, whose third \
            column uses sin(pos/10000²) ≈ 0 instead of the printed 0.0001/0.0002; the K, V and \
            attention that follow use the printed X + PE, so Q and V of the main text come from \
            different inputs.",
        kind: Kind::Erratum,
        tests: &["tests/ch06_attention.rs::main_text_q_follows_the_symbolic_pe"],
    },
    Erratum {
        document: D3,
        section: "A Concrete Example, K (main text)",
        printed: "K = (X + PE) W_K, then W_Q displayed and Q = (1.5 1.1 2.6 0; …) printed",
        correct: "K = (1.1 1.5 0 2.6; 1.60005 1.3415 0.6416 2.29995; 0.9 2.4093 1.5095 1.7998)",
        why: "The K paragraph repeats the Q paragraph: it shows W_Q and prints Q again. K with the \
            W_K defined above is printed only in the supplement's cell, and the attention output \
            uses that K.",
        kind: Kind::Erratum,
        tests: &["tests/ch06_attention.rs::k_heading_shows_q_again"],
    },
    Erratum {
        document: D3,
        section: "A Concrete Example, V (main text)",
        printed: "W_V = (0 0 1 1; 1 1 0 0; 0 1 0 1; 1 0 1 0) beside V = (1.5 0 1.1 2.6; …)",
        correct: "V = (X + PE)(1, 1, 0, 0; 0, 0, 1, 1; 0, 1, 1, 0; 1, 0, 0, 1), the W_V defined \
            first; the displayed W_V gives (2.6 1.1 1.5 0; …)",
        why: "The printed V follows the W_V defined at the start of the example, not the different \
            matrix displayed beside it.",
        kind: Kind::Erratum,
        tests: &["tests/ch06_attention.rs::v_follows_the_first_w_v_not_the_displayed_one"],
    },
    Erratum {
        document: D3,
        section: "Attention Heads and Multi Attention Heads, Final Linear Projection",
        printed: "let's assume W_O is an 8x4 matrix filled with 0.5",
        correct: "the printed product uses the random W_O printed next; with every entry 0.5 all \
            four output columns would equal half the row sum (5.92954852, 6.02018627, 5.68995938)",
        why: "The sentence was left from a draft; the numbers downstream (M, LN(M), the FFN) all \
            follow the random W_O.",
        kind: Kind::Erratum,
        tests: &["tests/ch06_attention.rs::w_o_filled_with_0_5_misses_every_printed_row"],
    },
    Erratum {
        document: D3,
        section: "Attention Heads and Multi Attention Heads, the final multi-head output",
        printed: "\"The final multi-head attention output will be:\" followed by the 3×8 Concat \
            matrix",
        correct: "Concat · W_O = (4.42554033 5.589241 6.99844643 4.79288192; …), 3×4",
        why: "The concatenation is printed a second time in place of its product with W_O; the \
            product appears only as the output of the supplement's multi-head cell (and as M in \
            the LayerNorm section).",
        kind: Kind::Erratum,
        tests: &["tests/ch06_attention.rs::multihead_output_is_concat_times_w_o"],
    },
    Erratum {
        document: D3,
        section: "Layer Normalization, LN(x_i) and the Calculate Layer Normalization cell; the \
            decoder's LN(x_o) and its cell (chapter 7)",
        printed: "encoder LN row 1 = (−1.03927142, 0.13949668, 1.56694829, −0.66717355), decoder \
            LN row 1 = (−0.46049196, −1.4140849, 0.81224991, 1.06232694), each beside \
            (x − μ)/√(σ² + ε), ε = 10⁻⁶",
        correct: "(x − μ)/√(σ² + ε): encoder (−1.03927194, 0.13949675, 1.56694907, −0.66717388), \
            decoder (−0.46049142, −1.41408325, 0.81224896, 1.0623257); with the decoder text's \
            causal mask and ÷√d_k as well, decoder row 1 is (−0.44147247, −1.42943838, \
            1.01157498, 0.85933588) and rows 2 and 3 change too",
        why: "One slip, made twice: both printed LayerNorms follow (x − μ)/(σ + ε), ε added to \
            the standard deviation (the decoder cell writes it std + ε), not the formula beside \
            them nor the encoder cell's code (np.sqrt(variance + epsilon)). The two differ by \
            about 1.6·10⁻⁶, visible at the printed 8 decimals. Both use the population variance \
            (divide by C); the sample variance (divide by C − 1) would scale every entry by \
            √(3/4), giving −0.90004 for the encoder's first.",
        kind: Kind::Erratum,
        tests: &[
            "tests/ch06_attention.rs::layer_norm_printed_follows_std_plus_eps",
            "tests/ch07_encoder_decoder.rs::decoder_layer_norm_divides_by_std_plus_eps",
            "tests/ch07_encoder_decoder.rs::decoder_cell_as_the_text_describes_it",
        ],
    },
    Erratum {
        document: D3,
        section: "Feed Forward Neural Net, after the final LayerNorm",
        printed: "the columns are the same because the FNN values are scalar multiples (×3)",
        correct: "each FFN row is an arithmetic progression (equal steps 2.88324484, 2.63835352, \
            3.73197362); the ratios between columns are 2.69, 1.63, 1.39",
        why: "W₂'s columns differ by a constant column (0.6 per step) and b₂ by 0.01 per step, so \
            every output row is a + c·j. LayerNorm maps any 4-term arithmetic progression to \
            (−1.3416, −0.4472, 0.4472, 1.3416), which is why all rows agree.",
        kind: Kind::Erratum,
        tests: &["tests/ch06_attention.rs::ffn_rows_are_arithmetic_not_scalar_multiples"],
    },
    Erratum {
        document: D3,
        section: "Encoder Stack Processing (the order Self-Attention → Layer Norm → Feed-forward → \
            Layer Norm)",
        printed: "LN(MultiHead(X)) = (−1.03927142, 0.13949668, 1.56694829, −0.66717355; …), then \
            LN(FFN(·))",
        correct: "with the residual connections of the post-LN transformer: LN(X + PE + MultiHead) \
            row 1 = (−1.66120976, 0.72490220, 0.84001300, 0.09629456)",
        why: "The walk-through normalises each sub-layer's output alone, without saying that it \
            leaves out the residual connections of the transformer it describes (Add & Norm adds \
            the sub-layer's input first). Its numbers are right for what it computes, and are \
            reproduced here as printed; `StandardChain` computes the block with residuals.",
        kind: Kind::Simplification,
        tests: &["tests/ch06_attention.rs::walkthrough_omits_the_residual_connections"],
    },
    Erratum {
        document: D3,
        section: "Attention Heads and Multi Attention Heads, after the projection",
        printed: "the calculation is independent of input length: 1000 words or 500 run at the \
            same speed",
        correct: "each head forms an n×n weight matrix: 1,000,000 entries for 1000 tokens, 250,000 \
            for 500; QKᵀ and A·V cost grows as n²·d",
        why: "Attention compares every token with every token, so its work grows quadratically \
            with the length (the document's own GPT section gives O(l·n²·d)).",
        kind: Kind::Erratum,
        tests: &["tests/ch06_attention.rs::attention_weights_grow_quadratically_with_length"],
    },
    Erratum {
        document: D2,
        section: "Matrix Representation of One-Head Attention",
        printed: "A = row-softmax(Z ⊙ M), M_ij = 1 if i ≥ j and −∞ otherwise",
        correct: "A = row-softmax(Z + M), M_ij = 0 if i ≥ j and −∞ otherwise",
        why: "Multiplying by −∞ sends a negative score to +∞ and a zero score to NaN, so the \
            softmax of a masked row is NaN or puts all weight on a future token; the mask must be \
            added.",
        kind: Kind::Erratum,
        tests: &["tests/ch06_attention.rs::multiplicative_mask_breaks_softmax"],
    },
    Erratum {
        document: D2,
        section: "Expressivity of Multi-Head Attention",
        printed: "W_o mixes together the results of A₁V₁ and A₂V₁",
        correct: "A₁V₁ and A₂V₂",
        why: "Head 2 applies its own weights A₂ to its own values V₂ = E W_{v,2}, as the line \
            above it writes.",
        kind: Kind::Erratum,
        tests: &["tests/ch06_attention.rs::two_heads_are_a_sum_of_per_head_terms"],
    },
    Erratum {
        document: D2,
        section: "Matrix Representation of One-Head Attention",
        printed: "LayerNorm E ← LN(E); … Ê = E + AVW_o; LayerNorm Ê ← LN(Ê); … E ← Ê + Ẽ",
        correct: "pre-LN keeps the residual stream unnormalised: Ê = E + A V W_o with A, V from \
            LN(E); E ← Ê + FFN(LN(Ê))",
        why: "Read literally, the assignments overwrite E and Ê with their normalised versions, so \
            the residual adds the normalised input and every block renormalises the stream; in the \
            pre-LN transformer (GPT-2) only the sub-layer's input is normalised. The two give \
            different outputs; the arrows are shorthand for the pre-LN block the section means.",
        kind: Kind::Notation,
        tests: &["tests/ch06_attention.rs::literal_reading_of_d2_normalises_the_residual_stream"],
    },
];

// ───────────────────────────── worked numbers ─────────────────────────────

/// The chapter's worked numbers, recomputed.
pub fn worked() -> Result<Vec<Worked>> {
    let w = walkthrough()?;
    let hand = first_row_by_hand()?;
    let x_sym: DMatrix<f64> = ch05::matrix3x4(&ch05::X_EMBEDDINGS)
        + ch05::with_exponents(&[0.0, 1.0, 2.0], &ch05::DOC_SYMBOLIC_EXPONENTS)?;
    let q_sym = matmul(&x_sym, &m4(&W_Q))?;
    let v_displayed = matmul(&w.x_pe, &m4(&W_V_DISPLAYED))?;
    let half = matmul(&w.concat, &DMatrix::from_element(8, 4, 0.5))?;
    let residual_ln = layer_norm_forward(
        &doc_layer_norm(Epsilon::InsideSqrt)?,
        &residual_add(&w.x_pe, &printed(PRINTED_MULTIHEAD)?)?,
    )?
    .0;
    let ffn = printed(PRINTED_FFN)?;
    let ratio = |r: usize, c: usize| ffn[(r, c + 1)] / ffn[(r, c)];
    let row = |m: &DMatrix<f64>, r: usize, d: usize| {
        (0..m.ncols()).map(|c| crate::snapshot::fixed(m[(r, c)], d)).collect::<Vec<_>>().join(" ")
    };
    let (d, c) = (D3, THIS_CRATE);
    Ok(vec![
        Worked::text(
            "q_first_row_by_hand_is_1_5_1_1_2_6_0",
            d,
            "Q[1,1], Q[1,2], Q[1,4] by hand",
            "1.5 1.1 0",
            format!(
                "{} {} {}",
                crate::snapshot::fixed(hand[0], 1),
                crate::snapshot::fixed(hand[1], 1),
                crate::snapshot::fixed(hand[3], 0)
            ),
        ),
        Worked::erratum(
            "q_first_row_by_hand_is_1_5_1_1_2_6_0",
            d,
            "Q[1,3] by hand",
            "1.2",
            crate::snapshot::fixed(hand[2], 1),
        ),
        Worked::matrix(
            "main_text_q_follows_the_symbolic_pe",
            d,
            "Q, main text, from the symbolic X + PE",
            PRINTED_Q_MAIN,
            4,
            &q_sym,
        ),
        Worked::erratum(
            "main_text_q_follows_the_symbolic_pe",
            d,
            "Q, main text, vs Q from the printed X + PE",
            PRINTED_Q_MAIN,
            matrix_like(PRINTED_Q_MAIN, 4, &w.q),
        ),
        Worked::matrix(
            "python_cell_q_uses_the_symbolic_pe",
            d,
            "Q, first Python cell (symbolic PE)",
            PRINTED_Q_CELL_SYMBOLIC,
            8,
            &q_sym,
        ),
        Worked::matrix("qkv_cell_is_reproduced", d, "Q = (X + PE) W_Q (cell)", PRINTED_Q, 5, &w.q),
        Worked::matrix("qkv_cell_is_reproduced", d, "K = (X + PE) W_K (cell)", PRINTED_K, 5, &w.k),
        Worked::matrix("qkv_cell_is_reproduced", d, "V = (X + PE) W_V (cell)", PRINTED_V, 5, &w.v),
        Worked::erratum(
            "k_heading_shows_q_again",
            d,
            "the matrix under the K heading vs K",
            PRINTED_UNDER_K_HEADING,
            matrix_like(PRINTED_UNDER_K_HEADING, 4, &w.k),
        ),
        Worked::matrix(
            "v_follows_the_first_w_v_not_the_displayed_one",
            d,
            "V, main text (first W_V)",
            PRINTED_V_MAIN,
            4,
            &w.v,
        ),
        Worked::erratum(
            "v_follows_the_first_w_v_not_the_displayed_one",
            d,
            "V, main text, with the W_V displayed beside it",
            PRINTED_V_MAIN,
            matrix_like(PRINTED_V_MAIN, 4, &v_displayed),
        ),
        Worked::matrix("y_qkv_are_reproduced", d, "Q for Y (cell)", PRINTED_Q_Y, 5, &w.qkv_y[0]),
        Worked::matrix("y_qkv_are_reproduced", d, "K for Y (cell)", PRINTED_K_Y, 5, &w.qkv_y[1]),
        Worked::matrix("y_qkv_are_reproduced", d, "V for Y (cell)", PRINTED_V_Y, 5, &w.qkv_y[2]),
        Worked::matrix(
            "y_qkv_are_reproduced",
            d,
            "Q for Y (main text)",
            PRINTED_Q_Y_MAIN,
            4,
            &w.qkv_y[0],
        ),
        Worked::matrix(
            "y_qkv_are_reproduced",
            d,
            "K for Y (main text)",
            PRINTED_K_Y_MAIN,
            4,
            &w.qkv_y[1],
        ),
        Worked::matrix(
            "y_qkv_are_reproduced",
            d,
            "V for Y (main text)",
            PRINTED_V_Y_MAIN,
            4,
            &w.qkv_y[2],
        ),
        Worked::number(
            "scale_is_one_over_sqrt_d_k",
            d,
            "1/√d_k for d_k = 4",
            "0.5",
            1.0 / 4f64.sqrt(),
        ),
        Worked::matrix(
            "attention_weights_are_reproduced",
            d,
            "softmax(QKᵀ/√d_k)",
            PRINTED_WEIGHTS,
            8,
            &w.weights,
        ),
        Worked::matrix(
            "attention_output_is_reproduced",
            d,
            "Attention(Q, K, V)",
            PRINTED_ATTENTION,
            8,
            &w.attention,
        ),
        Worked::matrix(
            "concatenation_is_reproduced",
            d,
            "Concat(head 1, head 2)",
            PRINTED_CONCAT,
            8,
            &w.concat,
        ),
        Worked::matrix(
            "multihead_output_is_concat_times_w_o",
            d,
            "Concat · W_O (multi-head cell)",
            PRINTED_MULTIHEAD,
            8,
            &w.multihead,
        ),
        Worked::erratum(
            "multihead_output_is_concat_times_w_o",
            d,
            "what follows \"the final multi-head attention output will be\"",
            "the 3×8 Concat again",
            format!("3×4: {}; …", row(&w.multihead, 0, 8)),
        ),
        Worked::erratum(
            "w_o_filled_with_0_5_misses_every_printed_row",
            d,
            "Concat · W_O with W_O all 0.5, row 1",
            "4.42554033 5.589241 6.99844643 4.79288192",
            row(&half, 0, 8),
        ),
        Worked::erratum(
            "w_o_filled_with_0_5_misses_every_printed_row",
            d,
            "Concat · W_O with W_O all 0.5, row 2",
            "4.55176485 5.6122494 7.09923364 4.82144704",
            row(&half, 1, 8),
        ),
        Worked::erratum(
            "w_o_filled_with_0_5_misses_every_printed_row",
            d,
            "Concat · W_O with W_O all 0.5, row 3",
            "4.21254506 5.31988824 6.84520426 4.79017392",
            row(&half, 2, 8),
        ),
        Worked::matrix(
            "layer_norm_printed_follows_std_plus_eps",
            d,
            "LN(M), (x − μ)/(σ + ε)",
            PRINTED_LN1,
            8,
            &w.ln1,
        ),
        Worked::erratum(
            "layer_norm_printed_follows_std_plus_eps",
            d,
            "LN(M), the stated (x − μ)/√(σ² + ε)",
            PRINTED_LN1,
            matrix_like(PRINTED_LN1, 8, &w.ln1_stated),
        ),
        Worked::number(
            "ffn_inner_width_is_4d_in_the_transformer_and_6_in_the_example",
            d,
            "inner width of the Transformer's FFN, 4 × d for the example's d = 4",
            "16",
            (4 * w.x_pe.ncols()) as f64,
        ),
        Worked::number(
            "ffn_inner_width_is_4d_in_the_transformer_and_6_in_the_example",
            d,
            "inner width of the example's FFN (columns of W₁, \"6 just for demonstration\")",
            "6",
            doc_ffn()?.w1.ncols() as f64,
        ),
        Worked::matrix(
            "ffn_is_reproduced",
            d,
            "FFN = max(0, LN·W₁ + b₁)W₂ + b₂",
            PRINTED_FFN,
            8,
            &w.ffn,
        ),
        Worked::matrix(
            "final_layer_norm_is_reproduced",
            d,
            "LN(FFN), ε inside √",
            PRINTED_LN2,
            8,
            &w.ln2,
        ),
        Worked::erratum(
            "ffn_rows_are_arithmetic_not_scalar_multiples",
            d,
            "FFN row 1: ratio of neighbouring columns (claimed ×3)",
            "3 3 3",
            format!("{:.2} {:.2} {:.2}", ratio(0, 0), ratio(0, 1), ratio(0, 2)),
        ),
        Worked::text(
            "ffn_rows_are_arithmetic_not_scalar_multiples",
            c,
            "every FFN row is an arithmetic progression",
            "yes",
            if rows_are_arithmetic(&ffn, 2e-8) { "yes" } else { "no" },
        ),
        Worked::simplification(
            "walkthrough_omits_the_residual_connections",
            d,
            "row 1 after the first Add & Norm: LN(M) as printed vs LN(X + PE + M)",
            "-1.03927142 0.13949668 1.56694829 -0.66717355",
            row(&residual_ln, 0, 8),
        ),
        Worked::erratum(
            "attention_weights_grow_quadratically_with_length",
            d,
            "attention weights per head for 1000 vs 500 tokens",
            "same",
            format!("{} vs {}", attention_weight_entries(1000), attention_weight_entries(500)),
        ),
        Worked::number(
            "gpt3_head_has_6_3_million_parameters",
            D1,
            "parameters of one GPT-3 head (million)",
            "6.3",
            head_parameter_count(GPT3_D_MODEL, GPT3_D_HEAD) as f64 / 1e6,
        ),
        Worked::text(
            "gpt3_head_has_6_3_million_parameters",
            D1,
            "parameters of one GPT-3 multi-head layer, to two significant figures",
            "600 million",
            format!(
                "{} million",
                round_to_two_figures(
                    (GPT3_HEADS * head_parameter_count(GPT3_D_MODEL, GPT3_D_HEAD)) as f64 / 1e6
                )
            ),
        ),
        Worked::erratum(
            "gpt3_head_has_6_3_million_parameters",
            D0,
            "GPT-3's embedding width",
            "12,388",
            format!("{},{:03}", GPT3_HEADS * GPT3_D_HEAD / 1000, GPT3_HEADS * GPT3_D_HEAD % 1000),
        ),
        Worked::erratum(
            "multiplicative_mask_breaks_softmax",
            D2,
            "row 2 of softmax(Z ⊙ M) for Z row (0.5, 1, −2)",
            "a distribution over keys 1, 2",
            multiplicative_mask_row_text(),
        ),
    ])
}

/// Softmax of one row under D2's multiplicative mask, as text: Z row (0.5, 1, −2) for
/// query 2 of 3, mask (1, 1, −∞) multiplied in. The masked score is negative, so Z ⊙ M puts +∞
/// there and every weight of the row becomes NaN.
pub fn multiplicative_mask_row_text() -> String {
    let z = [0.5f64, 1.0, -2.0];
    let m = [1.0, 1.0, f64::NEG_INFINITY];
    let zm: Vec<f64> = z.iter().zip(m).map(|(a, b)| a * b).collect();
    let top = zm.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = zm.iter().map(|v| (v - top).exp()).collect();
    let total: f64 = e.iter().sum();
    e.iter().map(|v| format!("{}", v / total)).collect::<Vec<_>>().join(" ")
}

/// x rounded to two significant figures (603.98 → 600), for the documents' round figures.
pub fn round_to_two_figures(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let unit = 10f64.powi(x.abs().log10().floor() as i32 - 1);
    (x / unit).round() * unit
}

// ───────────────────────────── walk-through and plots ─────────────────────────────

/// The tokens of the walk-through.
pub const TOKENS_X: [&str; 3] = ["You", "are", "welcome"];

/// The chapter in the order the document derives it.
pub fn walk(out: &mut Walk) -> Result<()> {
    let w = walkthrough()?;
    out.decimals = 5;
    out.step("1. Input: X + PE as printed (chapter 5)")?;
    out.matrix("X + PE", &w.x_pe)?;
    out.step("2. Projections Q = (X + PE)W_Q, K = (X + PE)W_K, V = (X + PE)W_V")?;
    out.matrix("W_Q", &m4(&W_Q))?;
    out.matrix("W_K", &m4(&W_K))?;
    out.matrix("W_V", &m4(&W_V))?;
    out.matrix("Q", &w.q)?;
    out.matrix("K", &w.k)?;
    out.matrix("V", &w.v)?;
    out.step("3. Scores QKᵀ/√d_k with d_k = 4")?;
    out.decimals = 8;
    out.matrix("S", &w.scores)?;
    out.step("4. Row softmax: the attention weights (each row sums to 1)")?;
    out.matrix("A", &w.weights)?;
    let causal = attention_forward(&w.q, &w.k, &w.v, &AttnSpec::causal(3))?;
    out.matrix("A with the causal mask", &causal.weights)?;
    out.step("5. Attention output A·V")?;
    out.matrix("A·V", &w.attention)?;
    out.step("6. Concatenate with head 2 and multiply by W_O")?;
    out.matrix("Concat", &w.concat)?;
    out.matrix("M = Concat · W_O", &w.multihead)?;
    out.step("7. LayerNorm of M (the document divides by σ + ε)")?;
    out.matrix("LN(M), (x − μ)/(σ + ε)  [printed]", &w.ln1)?;
    out.matrix("LN(M), (x − μ)/√(σ² + ε)  [stated]", &w.ln1_stated)?;
    out.step("8. Feed-forward net max(0, xW₁ + b₁)W₂ + b₂")?;
    out.matrix("FFN", &w.ffn)?;
    out.step("9. Final LayerNorm")?;
    out.matrix("LN(FFN)", &w.ln2)?;
    out.step("10. The same chain with standard PE and the residual connections of post-LN")?;
    let s = standard_chain()?;
    out.matrix("h = LN(X + PE + M)", &s.h)?;
    out.matrix("out = LN(h + FFN(h))", &s.out)?;
    Ok(())
}

/// The small two-head example of the per-head plots.
#[derive(Clone, Debug, PartialEq)]
pub struct TwoHeads {
    /// The attention: two heads of width 8 on inputs of width 16, identity W_V and W_O.
    pub mha: MultiHead<f64>,
    /// The input: the standard PE of six positions, width 16.
    pub x: DMatrix<f64>,
    /// Each head's causal attention weights, 6×6.
    pub weights: Vec<DMatrix<f64>>,
}

/// Builds [`TwoHeads`]: head 0 looks one token back (its queries are the encodings shifted by −1
/// with chapter 5's rotation), head 1 looks at the token itself. Causal.
pub fn two_head_example() -> Result<TwoHeads> {
    let (t, d, dh) = (6, 16, 8);
    let sharp = 8.0;
    let x = ch05::sinusoidal::<f64>(t, d)?;
    let back = ch05::shift_operator::<f64>(-1.0, d)?;
    let eye = DMatrix::<f64>::identity(d, d);
    let mut w_q = DMatrix::zeros(d, 2 * dh);
    let mut w_k = DMatrix::zeros(d, 2 * dh);
    // Head 0: q = sharp · PE(pos − 1) restricted to the 8 fastest columns; k = PE(pos) there.
    w_q.columns_mut(0, dh).copy_from(&(back.columns(0, dh) * sharp));
    w_k.columns_mut(0, dh).copy_from(&eye.columns(0, dh));
    // Head 1: q = sharp · PE(pos), k = PE(pos).
    w_q.columns_mut(dh, dh).copy_from(&(eye.columns(0, dh) * sharp));
    w_k.columns_mut(dh, dh).copy_from(&eye.columns(0, dh));
    let w_v = DMatrix::<f64>::identity(d, 2 * dh);
    let w_o = DMatrix::<f64>::identity(2 * dh, d);
    let mha = MultiHead::new(2, w_q, w_k, w_v, w_o)?;
    let (_, cache) = mha_forward(&mha, &x, &x, &AttnSpec::causal(t))?;
    Ok(TwoHeads { mha, x, weights: cache.weights })
}

fn heat(title: &str, m: &DMatrix<f64>, rows: Vec<String>, cols: Vec<String>) -> Figure {
    Figure::Heatmap(Heatmap {
        title: title.into(),
        x_label: "key (attended to)".into(),
        y_label: "query (attending)".into(),
        values: (0..m.nrows()).map(|r| (0..m.ncols()).map(|c| m[(r, c)]).collect()).collect(),
        col_names: cols,
        row_names: rows,
        annotate: true,
    })
}

/// The chapter's figures as data: (file stem, figure).
pub fn figures() -> Result<Vec<(String, Figure)>> {
    let w = walkthrough()?;
    let causal = attention_forward(&w.q, &w.k, &w.v, &AttnSpec::causal(3))?;
    let names: Vec<String> = TOKENS_X.iter().map(|s| s.to_string()).collect();
    let heads = two_head_example()?.weights;
    let pos: Vec<String> = (0..6).map(|p| format!("pos {p}")).collect();
    Ok(vec![
        (
            "ch06_weights".into(),
            heat(
                "Attention weights of the walk-through, no mask",
                &w.weights,
                names.clone(),
                names.clone(),
            ),
        ),
        (
            "ch06_weights_causal".into(),
            heat("The same with the causal mask", &causal.weights, names.clone(), names),
        ),
        (
            "ch06_head0".into(),
            heat("Head 0: queries shifted back one position", &heads[0], pos.clone(), pos.clone()),
        ),
        (
            "ch06_head1".into(),
            heat("Head 1: queries at their own position", &heads[1], pos.clone(), pos),
        ),
    ])
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    crate::plot::save_all(&figures()?, dir)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter = Chapter {
    number: 6,
    stem: "ch06_attention",
    title: "Attention, multi-head attention, LayerNorm and the encoder block",
    worked,
    walk,
    plots,
    errata: ERRATA,
};
