//! Chapter 13: after pretraining — [chapters/ch13_finetune.md](../../chapters/ch13_finetune.md).
//!
//! Replace each `todo!()` with your answer, then run
//! `cargo test -p llm-workbook-exercises --test ch13_finetune`.
//!
//! Where a doc comment asks for an error, return one of `llm_workbook::Error`'s variants, whose
//! message is one line naming the argument: `Err(llm_workbook::error::invalid("op", "arg",
//! "why"))` for a bad value, `Err(llm_workbook::Error::Empty { op: "op", arg: "arg" })` for an
//! empty input and `Err(llm_workbook::error::shape_error("op", "arg", expected, got))` for shapes
//! that disagree. The main crate's chapters 1 to 11 are yours to call (`log_softmax_rows`,
//! `llm_workbook::rng::Rng` …).

use llm_workbook::Result;
use llm_workbook::ch13_finetune::{DpoPair, GrpoSample, GrpoSpec, Lora, LoraGrads};
use nalgebra::DMatrix;

/// **The masked cross-entropy and its gradient**: for logits z (T×V, row t predicting token
/// y_t = `targets[t]`) and the mask m (`mask[t]` true where y_t belongs to the answer), with
/// ℓ_t = ln softmax(z_t)_{y_t} and |M| = Σ_t m_t, return
/// (L, ∂L/∂z) = (−(1/|M|) Σ_t m_t ℓ_t, the T×V matrix m_t (softmax(z_t) − onehot(y_t)) / |M|),
/// zero on the prompt's rows. Return an error when z is empty, `targets` or `mask` is not of
/// length T, a target is ≥ V, no entry of the mask is true, or z is not finite. Tolerance:
/// 10⁻⁸ (rows thousands apart: shift each row by its maximum).
///
/// Chapter: [1. Supervised fine-tuning: the answer's tokens only][ch].
///
/// [ch]: ../../chapters/ch13_finetune.md#1-supervised-fine-tuning-the-answers-tokens-only
pub fn masked_cross_entropy(
    logits: &DMatrix<f64>,
    targets: &[usize],
    mask: &[bool],
) -> Result<(f64, DMatrix<f64>)> {
    #[cfg(feature = "solutions")]
    return solution::masked_cross_entropy(logits, targets, mask);
    todo!()
}

/// **A LoRA adapter at the start**: on the frozen W (d_in×d_out), rank r and scale α, the layer
/// `Lora { w, a, b, alpha }` with A = `Rng::new(seed).normal_matrix(r, d_in, 1/√d_in)`
/// (`llm_workbook::rng::Rng`, one draw of the whole r×d_in matrix) and B the d_out×r zeros, so
/// that the adapted layer y = xW + (α/r) x Aᵀ Bᵀ starts equal to xW. Return an error when W is
/// empty or not finite, r is 0 or above min(d_in, d_out), or α is not finite and > 0. Exact.
///
/// Chapter: [2. LoRA: a frozen weight and a low-rank update][ch].
///
/// [ch]: ../../chapters/ch13_finetune.md#2-lora-a-frozen-weight-and-a-low-rank-update
pub fn lora_new(w: DMatrix<f64>, rank: usize, alpha: f64, seed: u64) -> Result<Lora> {
    #[cfg(feature = "solutions")]
    return Lora::new(w, rank, alpha, seed);
    todo!()
}

/// **LoRA, backward**: for y = xW + s·u Bᵀ with u = x Aᵀ and s = α/r (`layer`: W d_in×d_out
/// frozen, A r×d_in, B d_out×r), return from ∂L/∂y (N×d_out) the gradients
/// `LoraGrads { d_x, d_a, d_b }`: ∂L/∂B = s (∂L/∂y)ᵀ u (d_out×r), ∂L/∂u = s ∂L/∂y B (N×r),
/// ∂L/∂A = (∂L/∂u)ᵀ x (r×d_in), ∂L/∂x = ∂L/∂y Wᵀ + ∂L/∂u A (N×d_in); no ∂L/∂W. Return an error
/// when the layer's shapes disagree, r is 0, α is not finite and > 0, x has no rows or is not
/// N×d_in, or ∂L/∂y is not N×d_out. Tolerance: 10⁻⁸.
///
/// Chapter: [2. LoRA: a frozen weight and a low-rank update][ch].
///
/// [ch]: ../../chapters/ch13_finetune.md#2-lora-a-frozen-weight-and-a-low-rank-update
pub fn lora_backward(layer: &Lora, x: &DMatrix<f64>, d_y: &DMatrix<f64>) -> Result<LoraGrads> {
    #[cfg(feature = "solutions")]
    return solution::lora_backward(layer, x, d_y);
    todo!()
}

/// **The DPO loss and its gradient**: for P pairs, each with the policy's sequence
/// log-probabilities of the chosen and rejected answers and the frozen reference's, the margin
/// m = β[(ln π(y_w) − ln π_ref(y_w)) − (ln π(y_l) − ln π_ref(y_l))] and the mean loss
/// L = (1/P) Σ −ln σ(m) (computed without overflow: ln(1 + e^{−m}) = max(−m, 0) +
/// ln(1 + e^{−|m|})). Return (L, ∂L/∂ln π(y_w) per pair, ∂L/∂ln π(y_l) per pair), the last two
/// β(σ(m) − 1)/P and β(1 − σ(m))/P. Return an error when there is no pair, β is not finite and
/// > 0, or a log-probability is not finite or is > 0. Tolerance: 10⁻⁸.
///
/// Chapter: [3. Preferences: DPO][ch].
///
/// [ch]: ../../chapters/ch13_finetune.md#3-preferences-dpo
pub fn dpo_loss_and_gradient(pairs: &[DpoPair], beta: f64) -> Result<(f64, Vec<f64>, Vec<f64>)> {
    #[cfg(feature = "solutions")]
    return solution::dpo_loss_and_gradient(pairs, beta);
    todo!()
}

/// **Group advantages**: for the rewards r_1 … r_G of one prompt's G answers,
/// A_i = (r_i − mean(r)) / (std(r) + ε) with std(r) = √((1/G) Σ (r_i − mean(r))²) (the
/// population's 1/G, two passes: the mean first). A group whose rewards are all equal has every
/// A_i = 0, also with ε = 0. Return an error when G < 2, a reward is not finite, or ε is not
/// finite and ≥ 0. Tolerance: 10⁻⁸.
///
/// Chapter: [4. Verifiable rewards: GRPO][ch].
///
/// [ch]: ../../chapters/ch13_finetune.md#4-verifiable-rewards-grpo
pub fn group_advantages(rewards: &[f64], eps: f64) -> Result<Vec<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch13_finetune::group_advantages(rewards, eps);
    todo!()
}

/// **The GRPO loss and its gradient**: for one sampled answer (`sample`: logits z T×V, tokens
/// y_t, mask m_t, ℓ_old,t = ln π_old(y_t) and ℓ_ref,t = ln π_ref(y_t) per row, the advantage A)
/// and `spec` (ε_c, β), with ℓ_t = ln softmax(z_t)_{y_t}, ρ_t = e^{ℓ_t − ℓ_old,t},
/// s_t = min(ρ_t A, clip(ρ_t, 1 − ε_c, 1 + ε_c) A) and the k3 estimate
/// k_t = e^{ℓ_ref,t − ℓ_t} − (ℓ_ref,t − ℓ_t) − 1, return L = −(1/|M|) Σ_t m_t (s_t − β k_t) and
/// ∂L/∂z (T×V): ∂L/∂ℓ_t = −(m_t/|M|)(ρ_t A·[ρ_t A is the minimum] − β(1 − e^{ℓ_ref,t − ℓ_t})),
/// then ∂L/∂z_t = ∂L/∂ℓ_t (onehot(y_t) − softmax(z_t)). Return an error as
/// [`masked_cross_entropy`] for z, the tokens and the mask, and when a log-probability list is
/// not one finite value ≤ 0 per row, ε_c is outside (0, 1), β is not finite and ≥ 0, or A is not
/// finite. Tolerance: 10⁻⁶ (a chain through the log-softmax).
///
/// Chapter: [4. Verifiable rewards: GRPO][ch].
///
/// [ch]: ../../chapters/ch13_finetune.md#4-verifiable-rewards-grpo
pub fn grpo_loss_and_gradient(spec: GrpoSpec, sample: GrpoSample) -> Result<(f64, DMatrix<f64>)> {
    #[cfg(feature = "solutions")]
    return solution::grpo_loss_and_gradient(spec, sample);
    todo!()
}

/// **Schulman's k3 estimator** of KL(π‖π_ref) at one sampled token, from ln π_ref (`log_ref`)
/// and ln π (`log_pi`): with ln q = ln π_ref − ln π, k3 = q − ln q − 1 = e^{ln q} − ln q − 1,
/// never negative and 0 exactly when π = π_ref. Tolerance: a few units of rounding of the three
/// terms, 4·2⁻⁵²·(q + |ln q| + 1).
///
/// Chapter: [4. Verifiable rewards: GRPO][ch].
///
/// [ch]: ../../chapters/ch13_finetune.md#4-verifiable-rewards-grpo
pub fn k3(log_ref: f64, log_pi: f64) -> f64 {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch13_finetune::k3(log_ref, log_pi);
    todo!()
}

// The `solutions` feature's adapters (src/solutions.rs).
#[cfg(feature = "solutions")]
use llm_workbook_exercises::solutions::ch13_finetune as solution;
