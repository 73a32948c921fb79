//! What the book shows about chapter 7: the errata, the worked-number table, the walk-through,
//! the figures and the chapter's entry; and numpy's way of printing numbers, which the tables
//! compare against.

use super::*;
use crate::errata::{Erratum, Kind};
use crate::error::Result;
use crate::plot::{Figure, Heatmap, LineChart, Series};
use crate::report::{Chapter, Walk, Worked};
use crate::rng::NumpyMt19937;
use crate::sources::{D3, NUMPY, THIS_CRATE};
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};

// ───────────────────────────── numpy's printing ─────────────────────────────

/// A number the way numpy prints it in an array at precision 8: fixed 8 decimals, trailing zeros
/// dropped but the point kept (`-1.4140849`, `0.`).
pub fn numpy_style(x: f64) -> String {
    let s = crate::snapshot::fixed(x, 8);
    let s = s.trim_end_matches('0');
    s.to_string()
}

/// A matrix row in numpy's style, entries separated by single spaces.
pub fn numpy_row(m: &DMatrix<f64>, r: usize) -> String {
    (0..m.ncols()).map(|c| numpy_style(m[(r, c)])).collect::<Vec<_>>().join(" ")
}
// ───────────────────────────── the printed outputs ─────────────────────────────

/// The decoder cell's printed output A·V·W_o (D3's "Attention₂"), row by row as numpy
/// prints it. The worked table and the tests compare against these.
pub const PRINTED_DECODER_OUTPUT: [&str; 3] = [
    "2.82896639 2.49151229 3.27935978 3.36785616",
    "2.93697775 2.57919015 3.42996786 3.49210994",
    "2.95810782 2.60399936 3.43836135 3.51718943",
];

/// The decoder cell's printed LayerNorm LN(x_o), row by row as numpy prints it.
pub const PRINTED_DECODER_LAYER_NORM: [&str; 3] = [
    "-0.46049196 -1.4140849 0.81224991 1.06232694",
    "-0.46121408 -1.41736871 0.85625689 1.02232591",
    "-0.46146504 -1.41536061 0.83223948 1.04458616",
];

/// Each of the three rows of the encoder–decoder cell's printed attention weights.
pub const PRINTED_CROSS_WEIGHTS: &str = "0.33333333 0.33333333 0.33333334";

/// Each of the three rows of the encoder–decoder cell's printed output.
pub const PRINTED_CROSS_OUTPUT: &str = "-1.7888543 1.7888543 0. 0.";

// ───────────────────────────── errata, worked numbers ─────────────────────────────

/// This chapter's rows of the errata register.
pub const ERRATA: &[Erratum] = &[
    Erratum {
        document: D3,
        section: "Prepare and Embed Target Sequence for Decoder (Attention Masking) and the \
            Decoder Attention Heads cell",
        printed: "The text says the Python cell masks the future tokens; the cell's weights \
            softmax(QKᵀ) have as row 1: 0.12451364, 0.56641068, 0.30907567",
        correct: "The cell applies no mask. With the causal mask row 1 is 1, 0, 0 and the first \
            output row is 1.48356448, 1.24013147, 1.84159274, 1.80408131 instead of \
            2.82896639, 2.49151229, 3.27935978, 3.36785616 (the last row, which may see every \
            token, is unchanged)",
        why: "The cell exponentiates the full 3×3 score matrix; nothing sets the scores above the \
            diagonal to −∞, so <start> attends to 'de' and 'nada', the very tokens it is meant to \
            predict.",
        kind: Kind::Erratum,
        tests: &["tests/ch07_encoder_decoder.rs::decoder_cell_applies_no_causal_mask"],
    },
    Erratum {
        document: D3,
        section: "Prepare and Embed Target Sequence for Decoder and the Decoder Attention Heads \
            cell",
        printed: "The text: the decoder's attention head follows the encoder's math, \
            softmax(QKᵀ/√d_k)V; the cell computes exp(QKᵀ) with no division",
        correct: "With ÷√d_k = ÷2 (unmasked, as in the cell) the weights' row 1 is 0.2123884, \
            0.45298941, 0.33462219 and the first output row 2.71375426, 2.3908812, 3.13827038, \
            3.23460218",
        why: "The cell omits the 1/√d_k of the formula it says it follows, so its scores are twice \
            too large and its weights too peaked.",
        kind: Kind::Erratum,
        tests: &["tests/ch07_encoder_decoder.rs::decoder_cell_does_not_scale_the_scores"],
    },
    Erratum {
        document: D3,
        section: "Prepare and Embed Target Sequence for Decoder (Attention₂ for the decoder)",
        printed: "Attention₂(Q, K, V) = [[2.82896639 2.49151229 3.27935978 3.36785616] …]",
        correct: "That matrix is softmax(QKᵀ)·V·W_o, one head already multiplied by the output \
            matrix W_o; the attention output softmax(QKᵀ)·V is [[0.71925419 1.65933026 1.94938668 \
            1.81203693] …]",
        why: "The cell multiplies by W_o ('project the output back') before printing, and there is \
            no second head: the label names neither.",
        kind: Kind::Erratum,
        tests: &["tests/ch07_encoder_decoder.rs::decoder_output_is_attention_times_w_o"],
    },
    Erratum {
        document: D3,
        section: "Decoder Stack Processing with Encoder Output (steps 1–2) and the Calculate \
            Encoder-Decoder Output cell",
        printed: "Q = LN(x_o) × W_Q, K = LN(x_e) × W_K, V = LN(x_e) × W_V; output rows -1.7888543 \
            1.7888543 0. 0.",
        correct: "As written (X·W) every output row is 0 -0.89442715 0 0.89442715; the printed \
            rows come from X·Wᵀ",
        why: "The cell computes `X.dot(W.T)`, transposing every weight matrix; the uniform \
            attention weights hide nothing here, so the two readings give different outputs.",
        kind: Kind::Erratum,
        tests: &["tests/ch07_encoder_decoder.rs::cross_cell_transposes_the_weights"],
    },
    Erratum {
        document: D3,
        section: "Decoder Stack Processing with Encoder Output (step 3) and the Calculate \
            Encoder-Decoder Output cell",
        printed: "Scores = Q × Kᵀ/√4 (d_k = 4 columns); the cell divides by np.sqrt(3)",
        correct: "÷√4 = 2: row 1 of the scores is 0.31462187 0.31462186 0.31462187 instead of \
            0.36329404 0.36329403 0.36329405; the printed weights and output do not change at 8 \
            decimals",
        why: "The cell's divisor is √3 although d_k = 4. The printed numbers survive only because \
            all three keys are (almost) the same vector, so every score row is constant and any \
            divisor gives weights 1/3.",
        kind: Kind::Erratum,
        tests: &["tests/ch07_encoder_decoder.rs::cross_cell_divides_by_sqrt_3_not_sqrt_4"],
    },
    Erratum {
        document: D3,
        section: "Decoder Stack Processing with Encoder Output (step 4, Apply Masking)",
        printed: "Step 4 masks the future words here as well, as in the decoder's self-attention",
        correct: "Cross-attention has no causal mask: every target position may read every source \
            position (the cell, rightly, masks nothing; only padding of the source is masked). A \
            causal mask would give row 1 the weights 1 0 0",
        why: "The source sentence is given in full before decoding starts and its positions are \
            not 'the future' of any target position; the lengths may even differ, so 'j > i' has \
            no meaning across the two sequences.",
        kind: Kind::Erratum,
        tests: &["tests/ch07_encoder_decoder.rs::cross_attention_has_no_causal_mask"],
    },
];

fn row_text(m: &DMatrix<f64>, r: usize) -> String {
    numpy_row(m, r)
}

/// The chapter's worked numbers, recomputed.
pub fn worked() -> Result<Vec<Worked>> {
    let mut rows = Vec::new();
    let mut g = NumpyMt19937::new(NUMPY_SEED);
    let first: Vec<String> = (0..4).map(|_| numpy_style(g.next_f64())).collect();
    rows.push(Worked::text(
        "numpy_seed_42_rand_starts_0_37454012_0_95071431",
        NUMPY,
        "np.random.seed(42); first four np.random.rand() (W_q's first row)",
        "0.37454012 0.95071431 0.73199394 0.59865848",
        first.join(" "),
    ));
    let cell = decoder_cell(DecoderReading::CELL)?;
    for (r, printed) in PRINTED_DECODER_OUTPUT.iter().enumerate() {
        rows.push(Worked::text(
            "decoder_cell_output_is_2_82896639",
            D3,
            format!("decoder cell output, row {}", r + 1),
            printed,
            row_text(&cell.output, r),
        ));
    }
    for (r, printed) in PRINTED_DECODER_LAYER_NORM.iter().enumerate() {
        rows.push(Worked::text(
            "decoder_cell_layer_norm_is_minus_0_46049196",
            D3,
            format!("decoder cell LayerNorm, row {}", r + 1),
            printed,
            row_text(&cell.normalised, r),
        ));
    }
    let text = decoder_cell(DecoderReading::TEXT)?;
    rows.push(Worked::erratum(
        "decoder_cell_applies_no_causal_mask",
        D3,
        "decoder output row 1 with the causal mask the text announces (unscaled, as the cell)",
        PRINTED_DECODER_OUTPUT[0],
        row_text(&decoder_cell(DecoderReading { causal: true, ..DecoderReading::CELL })?.output, 0),
    ));
    rows.push(Worked::erratum(
        "decoder_cell_does_not_scale_the_scores",
        D3,
        "decoder output row 1 with ÷√d_k (unmasked, as the cell)",
        PRINTED_DECODER_OUTPUT[0],
        row_text(&decoder_cell(DecoderReading { scale: true, ..DecoderReading::CELL })?.output, 0),
    ));
    rows.push(Worked::erratum(
        "decoder_layer_norm_divides_by_std_plus_eps",
        D3,
        "decoder LayerNorm row 1 by the stated (x − μ)/√(σ² + ε)",
        PRINTED_DECODER_LAYER_NORM[0],
        row_text(&normalise_rows(&cell.output, WORKED_EPSILON, Spread::SqrtVariancePlusEpsilon), 0),
    ));
    rows.push(Worked::erratum(
        "decoder_cell_as_the_text_describes_it",
        D3,
        "decoder LayerNorm row 1 as the text describes it (÷√d_k, causal mask, √(σ² + ε))",
        PRINTED_DECODER_LAYER_NORM[0],
        row_text(&text.normalised, 0),
    ));
    let cross = cross_cell(CrossReading::CELL)?;
    for r in 0..3 {
        rows.push(Worked::text(
            "cross_cell_weights_are_uniform",
            D3,
            format!("encoder–decoder weights, row {}", r + 1),
            PRINTED_CROSS_WEIGHTS,
            row_text(&cross.weights, r),
        ));
    }
    for r in 0..3 {
        rows.push(Worked::text(
            "cross_cell_output_is_minus_1_7888543",
            D3,
            format!("encoder–decoder output, row {}", r + 1),
            PRINTED_CROSS_OUTPUT,
            row_text(&cross.output, r),
        ));
    }
    rows.push(Worked::erratum(
        "cross_cell_transposes_the_weights",
        D3,
        "encoder–decoder output row 1 with Q = XW_Q, K = EW_K, V = EW_V as written",
        PRINTED_CROSS_OUTPUT,
        row_text(
            &cross_cell(CrossReading {
                orientation: Orientation::AsWritten,
                ..CrossReading::CELL
            })?
            .output,
            0,
        ),
    ));
    rows.push(Worked::text(
        "cross_cell_divides_by_sqrt_3_not_sqrt_4",
        D3,
        "encoder–decoder weights row 1 with the text's ÷√4 (equal to the printed ÷√3 row at 8 \
            decimals)",
        PRINTED_CROSS_WEIGHTS,
        row_text(
            &cross_cell(CrossReading { divisor: TEXT_SCORE_DIVISOR, ..CrossReading::CELL })?
                .weights,
            0,
        ),
    ));
    rows.push(Worked::erratum(
        "cross_attention_has_no_causal_mask",
        D3,
        "encoder–decoder weights row 1 under the text's step 4 mask",
        PRINTED_CROSS_WEIGHTS,
        row_text(&cross_cell(CrossReading { causal: true, ..CrossReading::CELL })?.weights, 0),
    ));
    let trained = chapter_model()?;
    let accuracy = trained.exact_match()?;
    rows.push(Worked::text(
        "trained_model_reverses_99_percent_of_held_out_sequences",
        THIS_CRATE,
        format!(
            "held-out exact match of greedy decoding ({} sources of {}–{} digits, disjoint from \
                training)",
            trained.held_out.len(),
            trained.config.task.min_len,
            trained.config.task.max_len
        ),
        "≥ 0.99",
        if accuracy >= 0.99 { "≥ 0.99".to_string() } else { format!("{accuracy:.3}") },
    ));
    Ok(rows)
}

// ───────────────────────────── walk-through and plots ─────────────────────────────

/// The chapter in the order the document derives it.
pub fn walk(out: &mut Walk) -> Result<()> {
    out.decimals = 8;
    out.step(
        "1. numpy's generator, reproduced: np.random.seed(42), then np.random.rand(4, 4) four \
            times",
    )?;
    let [w_q, w_k, w_v, w_o] = decoder_cell_weights();
    out.matrix("W_q", &w_q)?;
    out.matrix("W_k", &w_k)?;
    out.matrix("W_v", &w_v)?;
    out.matrix("W_o", &w_o)?;
    out.step("2. Decoder self-attention as the cell computes it: no mask, no ÷√d_k")?;
    let y = table(&Y_PLUS_PE);
    out.matrix("Y + PE (as typed in the cell)", &y)?;
    let cell = decoder_cell(DecoderReading::CELL)?;
    out.matrix("A = softmax(QKᵀ)", &cell.weights)?;
    out.matrix("A·V·W_o (printed as Attention₂)", &cell.output)?;
    out.matrix("(x − μ)/(σ + ε)", &cell.normalised)?;
    out.step("3. The same cell as the text describes it: causal mask, ÷√d_k, (x − μ)/√(σ² + ε)")?;
    let text = decoder_cell(DecoderReading::TEXT)?;
    out.matrix("A (masked, scaled)", &text.weights)?;
    out.matrix("A·V·W_o", &text.output)?;
    out.matrix("LayerNorm", &text.normalised)?;
    out.step("4. Encoder–decoder attention as the cell computes it: X·Wᵀ, ÷√3, no mask")?;
    let cross = cross_cell(CrossReading::CELL)?;
    out.matrix("scores (every row constant: the encoder rows are equal)", &cross.scores)?;
    out.matrix("weights", &cross.weights)?;
    out.matrix("output", &cross.output)?;
    out.step("5. Cross-attention done as the formulas say: X·W, ÷√d_k, no causal mask")?;
    let standard = cross_cell(CrossReading::STANDARD)?;
    out.matrix("weights", &standard.weights)?;
    out.matrix("output", &standard.output)?;
    out.step("6. A trained encoder–decoder reversing digit strings")?;
    out.decimals = 4;
    let trained = chapter_model()?;
    let c = trained.config;
    out.say(&format!(
        "model: width {}, {} heads, FFN {}, {} encoder + {} decoder layers, {} parameters",
        c.model.width,
        c.model.heads,
        c.model.hidden,
        c.model.encoder_layers,
        c.model.decoder_layers,
        trained.model.parameter_count()
    ))?;
    out.say(&format!(
        "task: reverse {}–{} digits ({:.0} possible sources); {} Adam steps of {} sources, peak α \
            = {}",
        c.task.min_len,
        c.task.max_len,
        c.task.possible_sequences(),
        c.steps,
        c.batch_size,
        c.learning_rate
    ))?;
    out.scalar("first training loss", trained.losses[0])?;
    out.scalar("last training loss", *trained.losses.last().unwrap_or(&f64::NAN))?;
    out.scalar("held-out exact match (1,000 sources)", trained.exact_match()?)?;
    let example = &trained.held_out[0];
    let decoded = trained.model.greedy_decode(std::slice::from_ref(example), START, END)?;
    out.say(&format!("example: {} → {}", digits(example), digits(&decoded[0])))?;
    out.matrix(
        "its cross-attention (rows: <start> and outputs; columns: source digits)",
        &trained.cross_attention_map(example)?,
    )?;
    Ok(())
}

/// Digits as a string, other tokens by name.
pub fn digits(tokens: &[usize]) -> String {
    tokens
        .iter()
        .map(|&t| match t {
            d if d < DIGITS => char::from(b'0' + d as u8).to_string(),
            PAD => "<pad>".into(),
            START => "<start>".into(),
            END => "<end>".into(),
            other => format!("<{other}>"),
        })
        .collect()
}

/// The held-out source the heatmap shows: the first one of the longest length.
pub fn heatmap_example(trained: &Trained) -> Vec<usize> {
    let longest = trained.held_out.iter().map(|s| s.len()).max().unwrap_or(0);
    trained.held_out.iter().find(|s| s.len() == longest).cloned().unwrap_or_default()
}

/// The chapter's figures as data: (file stem, figure).
pub fn figures() -> Result<Vec<(String, Figure)>> {
    let names = |m: &DMatrix<f64>| -> Vec<Vec<f64>> {
        (0..m.nrows()).map(|r| m.row(r).iter().copied().collect()).collect()
    };
    let cell = decoder_cell(DecoderReading::CELL)?;
    let text = decoder_cell(DecoderReading::TEXT)?;
    let tokens: Vec<String> = ["<start>", "de", "nada"].iter().map(|s| s.to_string()).collect();
    let decoder_weights = |title: &str, m: &DMatrix<f64>| {
        Figure::Heatmap(Heatmap {
            title: title.into(),
            x_label: "key (target token)".into(),
            y_label: "query (target token)".into(),
            values: names(m),
            col_names: tokens.clone(),
            row_names: tokens.clone(),
            annotate: true,
        })
    };
    let trained = chapter_model()?;
    let example = heatmap_example(trained);
    let map = trained.cross_attention_map(&example)?;
    let decoded = trained.model.greedy_decode(std::slice::from_ref(&example), START, END)?;
    let mut rows = vec!["<start>".to_string()];
    rows.extend(decoded[0].iter().map(|&t| digits(&[t])));
    let cross = Figure::Heatmap(Heatmap {
        title: format!(
            "Cross-attention of the trained model: {} → {}",
            digits(&example),
            digits(&decoded[0])
        ),
        x_label: "source digit (key)".into(),
        y_label: "decoder input (query)".into(),
        values: names(&map),
        col_names: example.iter().map(|&t| digits(&[t])).collect(),
        row_names: rows.into_iter().take(map.nrows()).collect(),
        annotate: true,
    });
    let loss = Figure::Line(LineChart {
        title: format!("Training loss, Adam, batches of {}", trained.config.batch_size),
        x_label: "step".into(),
        y_label: "mean cross-entropy per target token".into(),
        series: vec![Series::new(
            "training loss",
            trained.losses.iter().enumerate().map(|(i, &l)| (i as f64, l)).collect(),
        )],
        markers: false,
    });
    Ok(vec![
        (
            "ch07_decoder_cell_weights".into(),
            decoder_weights(
                "Decoder self-attention as the cell computes it (no mask, no ÷√d_k)",
                &cell.weights,
            ),
        ),
        (
            "ch07_decoder_text_weights".into(),
            decoder_weights(
                "Decoder self-attention as the text describes it (causal, ÷√d_k)",
                &text.weights,
            ),
        ),
        ("ch07_cross_attention".into(), cross),
        ("ch07_loss".into(), loss),
    ])
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    crate::plot::save_all(&figures()?, dir)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter = Chapter {
    number: 7,
    stem: "ch07_encoder_decoder",
    title: "The encoder–decoder transformer and cross-attention",
    worked,
    walk,
    plots,
    errata: ERRATA,
};
