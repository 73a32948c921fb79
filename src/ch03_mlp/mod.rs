//! Chapter 3: the multi-layer perceptron, backpropagation by hand, and how an MLP can store a fact.
//!
//! A dense layer computes z = xW + b for a batch x (N×in, one sample per row), an activation
//! a = f(z) bends it, and stacking the two gives the multi-layer perceptron. Backpropagation is the
//! chain rule applied layer by layer from the cost back to the input. The prose is
//! [`chapters/ch03_mlp.md`](../../chapters/ch03_mlp.md); the tests are `tests/ch03_mlp.rs`.
//!
//! The lesson, in the order of the forward pass:
//! - [`activations`]: sigmoid, ReLU and GELU (exact, through the error function erf written
//!   here, and GPT-2's tanh form, also in fast f32), f(z) and f′(z), elementwise on matrices;
//! - [`dense`]: the dense layer z = xW + b and its backward pass ∂C/∂x = ∂C/∂z Wᵀ,
//!   ∂C/∂W = xᵀ ∂C/∂z, ∂C/∂b = Σ_rows ∂C/∂z; the cost C = (1/N) Σₖ Σⱼ (aⱼ − yⱼ)² and
//!   ∂C/∂a = 2(a − y)/N;
//! - [`mlp`]: the MLP of any depth, its forward and backward passes, mini-batch gradient descent;
//! - [`chain`]: the document's chain of one-neuron layers, backpropagated by hand:
//!   ∂C₀/∂w⁽ᴸ⁾ = a⁽ᴸ⁻¹⁾ σ′(z⁽ᴸ⁾) 2(a⁽ᴸ⁾ − y), and its sum over the neurons of a wider layer;
//! - [`sin_fit`]: a least-squares line against an MLP on sin(x);
//! - [`fact`]: an MLP that stores "Michael Jordan plays basketball", read as a key–value memory,
//!   and GPT-3's MLPs counted;
//! - [`superposition`]: nearly perpendicular directions, the Welch bound, packing unit vectors.
//!
//! [`book`] holds what the book shows about the chapter: the worked numbers, the errata, the
//! walk-through and the figures.
//!
//! The dense layer and the activations ([`dense_forward`], [`dense_backward`], [`Activation`],
//! [`activation_forward`], [`activation_backward`]) are the contract later chapters (XOR, the
//! transformer block, the GPT) are built on.

pub mod activations;
pub mod book;
pub mod chain;
pub mod dense;
pub mod fact;
pub mod mlp;
pub mod sin_fit;
pub mod superposition;

pub use activations::{
    Activation, GELU_TANH_CUBIC, GELU_TANH_SCALE, TANH_F32_CLAMP, TANH_F32_DENOMINATOR,
    TANH_F32_MAX_ERROR, TANH_F32_NUMERATOR, activation_backward, activation_backward_in_place,
    activation_forward, activation_forward_into, erf, erfc, gelu_tanh_derivative_f32,
    gelu_tanh_f32, normal_cdf, normal_pdf, tanh_f32,
};
pub use chain::{
    Chain, ChainAverage, ChainGrads, ChainTrace, chapter_chain, d_c0_d_a_last, d_c0_d_a_prev,
    d_c0_d_a_prev_sum, d_c0_d_b_last, d_c0_d_w_last, multi_neuron_matrix_form,
};
pub use dense::{DenseGrads, dense_backward, dense_forward, mse, mse_backward};
pub use fact::{
    FACT_DIM, FACT_DIRECTIONS, FACT_SEED, FIRING, FactMlp, GPT3_MLP, GPT3_TOTAL_PARAMETERS,
    MlpShape, fact_mlp, key_value_read, orthonormal_rows, softmax_memory_read,
};
pub use mlp::{Layer, LayerGrads, Mlp, Trace, TrainConfig, train};
pub use sin_fit::{
    SIN_BIAS_STD, SIN_INPUT_SCALE, SIN_POINTS, SIN_SEED, SIN_SIZES, SIN_TRAIN, SinFits, fit_sin,
    least_squares_line, linspace,
};
pub use superposition::{
    ANGLE_DIMS, ANGLE_SEED, ANGLE_VECTORS, AngleSample, NEAR_ORTHOGONAL_DEGREES, PACK_D, PACK_N,
    PACK_SEED, PACK_STEP, PACK_STEPS, PACK_TEST_STEPS, Packing, angle_samples, coherence,
    near_orthogonal_probability, pack_unit_vectors, pairwise_cosines, random_unit_vectors,
    two_bases, welch_bound, welch_capacity,
};
