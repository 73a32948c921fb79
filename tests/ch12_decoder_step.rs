//! Chapter 12's decoder step with kept buffers (`decoder::fast::DecoderStep`) against the
//! reference `Decoder::loss_and_grads`: the loss and every gradient in f64 and f32, for H_kv = H,
//! a divisor of H and 1, tied and untied, both pairings and both gates; several steps in a row on
//! one workspace; the same bits for any thread count; finite differences of its own; the trainer
//! taking it; the configurations it leaves to the reference.

use llm_workbook::ch09_gpt::data::Batch;
use llm_workbook::ch09_gpt::schedule::Schedule;
use llm_workbook::ch09_gpt::train::{StepPath, TrainConfig, Trainer};
use llm_workbook::ch12_modern::decoder::fast::{DecoderStep, supports};
use llm_workbook::ch12_modern::{
    Decoder, DecoderConfig, Gate, MlpKind, NormKind, Pairing, PositionKind,
};
use llm_workbook::float::Float;
use llm_workbook::gradcheck::{Config, check};
use llm_workbook::matmul::Settings;
use llm_workbook::rng::Rng;
use nalgebra::DMatrix;

/// V = 11, n_ctx = 8, 2 blocks, H = 4, C = 16 (d_h = 4), F = 12, rotary, RMSNorm, gated MLP.
fn config(n_kv_heads: usize, tied: bool, pairing: Pairing, gate: Gate) -> DecoderConfig {
    DecoderConfig {
        hidden: 12,
        n_kv_heads,
        tied,
        positions: PositionKind::Rotary { base: 30.0, pairing },
        norm: NormKind::Rms,
        mlp: MlpKind::Gated(gate),
        biases: false,
        eps: 1e-5,
        ..DecoderConfig::gpt2(11, 8, 2, 4, 16)
    }
}

/// The configurations compared: MHA tied (halves, SwiGLU, as `gpt train --arch llama`), GQA
/// untied, MQA tied in adjacent pairs, GQA untied with GeGLU.
fn configurations() -> Vec<(&'static str, DecoderConfig)> {
    vec![
        ("H_kv = H, tied", config(4, true, Pairing::Halves, Gate::Swish)),
        ("H_kv = 2, untied", config(2, false, Pairing::Halves, Gate::Swish)),
        ("H_kv = 1, tied, adjacent", config(1, true, Pairing::Adjacent, Gate::Swish)),
        ("H_kv = 2, untied, GeGLU", config(2, false, Pairing::Adjacent, Gate::Gelu)),
    ]
}

/// B = 3 sequences of T = 7 random tokens, some positions unscored.
fn batch(seed: u64) -> Batch {
    let mut rng = Rng::new(seed);
    let inputs: Vec<u32> = (0..21).map(|_| rng.below(11) as u32).collect();
    let targets = (0..21).map(|r| (r % 5 != 3).then(|| rng.below(11) as u32)).collect();
    Batch { inputs, targets, batch: 3, seq_len: 7 }
}

/// A decoder whose weights are large enough that every path carries a gradient.
fn model<T: Float>(c: DecoderConfig, seed: u64) -> Decoder<T> {
    let mut m = Decoder::<T>::new(c, seed).unwrap();
    let mut rng = Rng::new(seed + 1);
    for (name, t) in m.tensors_mut() {
        let (r, k) = t.shape();
        let v = rng.normal_matrix(r, k, 0.3);
        *t = if name.ends_with("gamma") { v.add_scalar(1.0) } else { v }.map(T::of);
    }
    m
}

/// The largest |a − b| over the entries, relative to the largest |b| (at least 1e-30).
fn relative(a: &DMatrix<f64>, b: &DMatrix<f64>) -> f64 {
    let scale = b.iter().fold(1e-30_f64, |m, v| m.max(v.abs()));
    a.iter().zip(b.iter()).fold(0.0_f64, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// The step's loss and gradients against the reference's, within `tol` relative (per tensor).
fn assert_matches<T: Float>(
    what: &str,
    m: &Decoder<T>,
    b: &Batch,
    step: &mut DecoderStep<T>,
    tol: f64,
) {
    let reference = m.loss_and_grads(b).unwrap();
    let (loss, grads) = step.loss_and_grads(m, b, Settings::default()).unwrap();
    let rel = (loss - reference.loss).abs() / reference.loss.abs();
    assert!(rel < tol, "{what}: loss {loss} against {} ({rel:e})", reference.loss);
    let named = reference.grads.tensors();
    assert_eq!(grads.len(), named.len(), "{what}");
    for ((name, want), got) in named.iter().zip(grads.iter()) {
        let e = relative(&got.map(|x| x.as_f64()), &want.map(|x| x.as_f64()));
        assert!(e < tol, "{what}: ∂{name} differs by {e:e} relative");
    }
}

#[test]
fn the_step_equals_the_reference_in_f64_for_every_kind_of_head_sharing_tied_and_untied() {
    for (k, (what, c)) in configurations().into_iter().enumerate() {
        let m = model::<f64>(c, 40 + k as u64);
        assert!(supports(&m), "{what}");
        assert_matches(what, &m, &batch(7), &mut DecoderStep::new(), 1e-12);
    }
}

#[test]
fn the_step_equals_the_reference_in_f32_within_rounding() {
    // f32: the step computes SwiGLU's σ in f32 where the reference widens to f64, and the
    // attention and residual sums are grouped otherwise: 1e-4 relative per tensor.
    for (k, (what, c)) in configurations().into_iter().enumerate() {
        let m = model::<f32>(c, 50 + k as u64);
        assert_matches(what, &m, &batch(8), &mut DecoderStep::new(), 1e-4);
    }
}

#[test]
fn one_workspace_serves_several_steps_batches_and_models_in_a_row() {
    // A buffer that kept a value of the step before (a gradient not zeroed, an accumulation
    // that starts from the last step's sum) makes the second or third step differ.
    let mut step = DecoderStep::new();
    for (k, (what, c)) in configurations().into_iter().enumerate() {
        let (a, b) = (model::<f64>(c, 60 + k as u64), model::<f64>(c, 70 + k as u64));
        for (m, seed) in [(&a, 1), (&a, 2), (&b, 1), (&a, 1)] {
            assert_matches(what, m, &batch(seed), &mut step, 1e-12);
        }
        let short =
            Batch { inputs: vec![3, 1, 4, 1], targets: vec![Some(5); 4], batch: 2, seq_len: 2 };
        assert_matches(what, &a, &short, &mut step, 1e-12);
    }
}

#[test]
fn the_step_gives_the_same_bits_on_one_thread_and_on_three() {
    let m = model::<f32>(config(2, false, Pairing::Halves, Gate::Swish), 80);
    let b = batch(9);
    let run = |threads: usize| {
        // Every product split over the threads, however small.
        let s = Settings {
            threads: Some(threads),
            min_parallel_flops: Some(0.0),
            ..Settings::default()
        };
        let mut step = DecoderStep::new();
        let (loss, g) = step.loss_and_grads(&m, &b, s).unwrap();
        (loss, g.to_vec())
    };
    let (one, three) = (run(1), run(3));
    assert_eq!(one.0.to_bits(), three.0.to_bits());
    for (x, y) in one.1.iter().zip(&three.1) {
        assert!(x.iter().zip(y.iter()).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

#[test]
fn the_steps_gradients_pass_finite_differences_on_every_tensor() {
    // Smaller than the others (V = 11, C = 8, H = 2, H_kv = 1, F = 6, 2 sequences of 5): every
    // entry is nudged twice.
    let c = DecoderConfig {
        width: 8,
        n_heads: 2,
        hidden: 6,
        ..config(1, false, Pairing::Halves, Gate::Swish)
    };
    let m = model::<f64>(c, 90);
    let mut b = batch(10);
    (b.batch, b.seq_len) = (2, 5);
    b.inputs.truncate(10);
    b.targets.truncate(10);
    let mut step = DecoderStep::new();
    let grads = step.loss_and_grads(&m, &b, Settings::default()).unwrap().1.to_vec();
    let named = m.tensors();
    let inputs: Vec<(&str, DMatrix<f64>)> =
        named.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let wide = Config { step: 1e-5, tolerance: 1e-6, floor: 1e-3 };
    let report = check(wide, &inputs, &grads, |tensors| {
        let mut nudged = m.clone();
        nudged.set_tensors(tensors).unwrap();
        step.loss_and_grads(&nudged, &b, Settings::default()).unwrap().0
    });
    assert!(report.passed(), "{report}");
    assert_eq!(report.tensors.len(), named.len());
}

#[test]
fn the_trainer_steps_through_the_kept_buffers_where_they_cover_the_decoder() {
    let tc = TrainConfig::new(3, Schedule::new(1e-3, 1e-4, 2, 10).unwrap());
    let m = model::<f64>(config(2, false, Pairing::Halves, Gate::Swish), 100);
    let b = batch(11);
    let want = m.loss_and_grads(&b).unwrap().loss;
    let mut trainer = Trainer::new(m, &tc, 1).unwrap();
    assert_eq!(trainer.path(), StepPath::Own);
    assert_eq!(trainer.path().name(), "own");
    let record = trainer.step_on(&b, &tc).unwrap();
    assert!((record.loss - want).abs() < 1e-12 * want, "{} against {want}", record.loss);
    // QK-norm is left to the reference, and the step refuses it in one line naming `model`.
    let mut c = config(2, false, Pairing::Halves, Gate::Swish);
    c.qk_norm = true;
    let other = model::<f64>(c, 101);
    assert!(!supports(&other));
    assert_eq!(Trainer::new(other.clone(), &tc, 1).unwrap().path(), StepPath::Reference);
    let e = DecoderStep::new().loss_and_grads(&other, &b, Settings::default()).unwrap_err();
    let e = e.to_string();
    assert!(e.contains("model") && !e.contains('\n') && e.chars().count() <= 100, "{e}");
}

#[test]
fn supports_names_the_configurations_the_step_covers() {
    let base = config(2, true, Pairing::Halves, Gate::Swish);
    assert!(supports(&model::<f64>(base, 1)));
    let learned = DecoderConfig { positions: PositionKind::Learned, ..base };
    let layer = DecoderConfig { norm: NormKind::Layer, ..base };
    let gelu = DecoderConfig { mlp: MlpKind::Gelu, ..base };
    for (what, c) in [("learned", learned), ("LayerNorm", layer), ("GELU MLP", gelu)] {
        assert!(!supports(&model::<f64>(c, 2)), "{what}");
    }
    // A tensor of another shape than the configuration's is refused too.
    let mut m = model::<f64>(base, 3);
    m.layers[1].attn.w_o = DMatrix::zeros(3, 3);
    assert!(!supports(&m));
}
