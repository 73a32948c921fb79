//! The multi-layer perceptron: dense layers and activations in order, the forward pass that keeps
//! what backpropagation needs, the backward pass layer by layer, and mini-batch gradient descent.

use super::activations::{Activation, activation_backward, activation_forward};
use super::dense::{dense_backward, dense_forward, mse, mse_backward};
use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::{Float, ensure_finite};
use crate::optim::Sgd;
use crate::rng::Rng;
use nalgebra::DMatrix;

// ───────────────────────────── the multi-layer perceptron ─────────────────────────────

/// One layer: z = xW + b, then a = f(z) (or a = z for a linear layer).
#[derive(Clone, Debug, PartialEq)]
pub struct Layer<T: Float> {
    /// in×out weights (the document's W transposed: one column per neuron of this layer).
    pub w: DMatrix<T>,
    /// 1×out biases, one per neuron.
    pub b: DMatrix<T>,
    /// The nonlinearity, or `None` for a linear (identity) layer such as a regression output.
    pub activation: Option<Activation>,
}

/// The gradients of one layer's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerGrads<T: Float> {
    /// ∂C/∂W, in×out.
    pub d_w: DMatrix<T>,
    /// ∂C/∂b, 1×out.
    pub d_b: DMatrix<T>,
}

/// What the forward pass keeps for the backward pass: each layer's input and pre-activation.
#[derive(Clone, Debug)]
pub struct Trace<T: Float> {
    /// a⁽ˡ⁻¹⁾ for every layer l (the first is the batch itself).
    pub inputs: Vec<DMatrix<T>>,
    /// z⁽ˡ⁾ = a⁽ˡ⁻¹⁾W⁽ˡ⁾ + b⁽ˡ⁾ for every layer.
    pub pre: Vec<DMatrix<T>>,
    /// The network's output a⁽ᴸ⁾.
    pub output: DMatrix<T>,
}

/// A multi-layer perceptron of any depth and width: layers applied in order, each a dense layer
/// and an optional activation. The layer widths are checked to chain when it is built.
#[derive(Clone, Debug, PartialEq)]
pub struct Mlp<T: Float> {
    layers: Vec<Layer<T>>,
}

impl<T: Float> Mlp<T> {
    /// An MLP from given layers. Errors when there are none, when a layer's W is empty, when
    /// consecutive widths do not chain (W⁽ˡ⁾ has as many rows as W⁽ˡ⁻¹⁾ has columns), when a bias
    /// is not 1×out, or when any parameter is NaN or infinite.
    pub fn from_layers(layers: Vec<Layer<T>>) -> Result<Self> {
        const OP: &str = "Mlp::from_layers";
        if layers.is_empty() {
            return Err(Error::Empty { op: OP, arg: "layers" });
        }
        for (l, layer) in layers.iter().enumerate() {
            if layer.w.nrows() == 0 || layer.w.ncols() == 0 {
                return Err(Error::Empty { op: OP, arg: "a layer's w" });
            }
            if layer.b.nrows() != 1 || layer.b.ncols() != layer.w.ncols() {
                return Err(shape_error(
                    OP,
                    "a layer's b",
                    format!("layer {l}: b 1×{} for w {}", layer.w.ncols(), shape_of(&layer.w)),
                    format!("b {}", shape_of(&layer.b)),
                ));
            }
            if l > 0 && layers[l - 1].w.ncols() != layer.w.nrows() {
                return Err(shape_error(
                    OP,
                    "consecutive layers (widths do not chain)",
                    format!(
                        "layer {l}'s w to have {} rows (layer {}'s outputs)",
                        layers[l - 1].w.ncols(),
                        l - 1
                    ),
                    format!(
                        "layer {}: w {}, layer {l}: w {}",
                        l - 1,
                        shape_of(&layers[l - 1].w),
                        shape_of(&layer.w)
                    ),
                ));
            }
            ensure_finite(OP, "a layer's w", &layer.w)?;
            ensure_finite(OP, "a layer's b", &layer.b)?;
        }
        Ok(Mlp { layers })
    }

    /// A randomly initialised MLP with the given widths `[in, h₁, …, out]`: weights
    /// N(0, gain/fan_in) with gain 2 for ReLU and GELU hidden layers (He) and 1 for sigmoid
    /// (Xavier-like), biases N(0, bias_std²). Hidden layers use `hidden`, the last layer `output`.
    pub fn random(
        sizes: &[usize],
        hidden: Activation,
        output: Option<Activation>,
        bias_std: f64,
        rng: &mut Rng,
    ) -> Result<Self> {
        const OP: &str = "Mlp::random";
        if sizes.len() < 2 {
            return Err(invalid(
                OP,
                "sizes",
                format!("need at least an input and an output width, got {sizes:?}"),
            ));
        }
        if let Some(i) = sizes.iter().position(|&s| s == 0) {
            return Err(invalid(OP, "sizes", format!("width {i} is zero in {sizes:?}")));
        }
        if !(bias_std.is_finite() && bias_std >= 0.0) {
            return Err(invalid(OP, "bias_std", format!("must be finite and ≥ 0, got {bias_std}")));
        }
        let gain = if hidden == Activation::Sigmoid { 1.0 } else { 2.0 };
        let last = sizes.len() - 2;
        let layers = sizes
            .windows(2)
            .enumerate()
            .map(|(l, pair)| Layer {
                w: rng.normal_matrix(pair[0], pair[1], (gain / pair[0] as f64).sqrt()),
                b: rng.normal_matrix(1, pair[1], bias_std),
                activation: if l == last { output } else { Some(hidden) },
            })
            .collect();
        Mlp::from_layers(layers)
    }

    /// The layers, first to last.
    pub fn layers(&self) -> &[Layer<T>] {
        &self.layers
    }

    /// The widths `[in, h₁, …, out]`.
    pub fn sizes(&self) -> Vec<usize> {
        std::iter::once(self.layers[0].w.nrows())
            .chain(self.layers.iter().map(|l| l.w.ncols()))
            .collect()
    }

    /// The number of weights and biases.
    pub fn parameter_count(&self) -> usize {
        self.layers.iter().map(|l| l.w.len() + l.b.len()).sum()
    }

    /// The forward pass, keeping what the backward pass needs. x: N×in → output N×out.
    /// Errors on an empty batch, a wrong input width, or NaN inputs (through [`dense_forward`]).
    pub fn forward(&self, x: &DMatrix<T>) -> Result<Trace<T>> {
        let mut inputs = Vec::with_capacity(self.layers.len());
        let mut pre = Vec::with_capacity(self.layers.len());
        let mut a = x.clone();
        for layer in &self.layers {
            let z = dense_forward(&a, &layer.w, &layer.b)?; // z⁽ˡ⁾ = a⁽ˡ⁻¹⁾W⁽ˡ⁾ + b⁽ˡ⁾
            let next = match layer.activation {
                Some(act) => activation_forward(act, &z), // a⁽ˡ⁾ = f(z⁽ˡ⁾)
                None => z.clone(),
            };
            inputs.push(a);
            pre.push(z);
            a = next;
        }
        Ok(Trace { inputs, pre, output: a })
    }

    /// The output only.
    pub fn predict(&self, x: &DMatrix<T>) -> Result<DMatrix<T>> {
        Ok(self.forward(x)?.output)
    }

    /// Backpropagation: from ∂C/∂a⁽ᴸ⁾ (N×out) to every layer's (∂C/∂W, ∂C/∂b), and ∂C/∂x.
    pub fn backward(
        &self,
        trace: &Trace<T>,
        d_out: &DMatrix<T>,
    ) -> Result<(Vec<LayerGrads<T>>, DMatrix<T>)> {
        if d_out.shape() != trace.output.shape() {
            return Err(shape_error(
                "Mlp::backward",
                "d_out",
                shape_of(&trace.output),
                shape_of(d_out),
            ));
        }
        let mut grads = Vec::with_capacity(self.layers().len());
        let mut d_a = d_out.clone();
        for (l, layer) in self.layers().iter().enumerate().rev() {
            let d_z = match layer.activation {
                // a = f(z) ⇒ ∂C/∂z = f′(z) ⊙ ∂C/∂a
                Some(act) => activation_backward(act, &trace.pre[l], &d_a)?,
                None => d_a,
            };
            let g = dense_backward(&trace.inputs[l], &layer.w, &d_z)?; // z = a⁽ˡ⁻¹⁾W + b
            grads.push(LayerGrads { d_w: g.d_w, d_b: g.d_b });
            d_a = g.d_x; // the previous layer's ∂C/∂a
        }
        grads.reverse();
        Ok((grads, d_a))
    }

    /// The cost [`mse`] on (x, y) and the gradient of every layer's parameters.
    pub fn loss_and_gradients(
        &self,
        x: &DMatrix<T>,
        y: &DMatrix<T>,
    ) -> Result<(T, Vec<LayerGrads<T>>)> {
        let trace = self.forward(x)?;
        let cost = mse(&trace.output, y)?;
        let (grads, _) = self.backward(&trace, &mse_backward(&trace.output, y)?)?;
        Ok((cost, grads))
    }

    /// One gradient-descent step W ← W − α ∂C/∂W, b ← b − α ∂C/∂b on every layer.
    pub fn step(&mut self, grads: &[LayerGrads<T>], sgd: &Sgd) -> Result<()> {
        if grads.len() != self.layers.len() {
            return Err(invalid(
                "Mlp::step",
                "grads",
                format!("{} layers but {} gradients", self.layers.len(), grads.len()),
            ));
        }
        let mut params: Vec<&mut DMatrix<T>> =
            self.layers.iter_mut().flat_map(|l| [&mut l.w, &mut l.b]).collect();
        let g: Vec<&DMatrix<T>> = grads.iter().flat_map(|g| [&g.d_w, &g.d_b]).collect();
        sgd.step(&mut params, &g)
    }
}

/// How to train an MLP by mini-batch gradient descent.
#[derive(Clone, Copy, Debug)]
pub struct TrainConfig {
    /// The learning rate α (finite, > 0).
    pub learning_rate: f64,
    /// Passes over the data.
    pub epochs: usize,
    /// Samples per gradient step (≥ 1; the last batch of an epoch may be smaller). A batch size
    /// of at least N is full-batch gradient descent.
    pub batch_size: usize,
    /// Seed of the per-epoch shuffle.
    pub seed: u64,
}

/// Mini-batch gradient descent on the cost [`mse`]: every epoch shuffles the rows, cuts them into
/// batches and takes one step per batch on that batch's average gradient. Returns the cost on
/// the whole data set before training and after every epoch (`epochs + 1` values).
pub fn train<T: Float>(
    mlp: &mut Mlp<T>,
    x: &DMatrix<T>,
    y: &DMatrix<T>,
    config: TrainConfig,
) -> Result<Vec<f64>> {
    const OP: &str = "train";
    let sgd = Sgd::new(config.learning_rate)?;
    if config.batch_size == 0 {
        return Err(invalid(OP, "batch_size", "must be at least 1"));
    }
    if x.nrows() != y.nrows() {
        return Err(shape_error(
            OP,
            "x and y",
            format!("y with {} rows (one per sample)", x.nrows()),
            format!("x {}, y {}", shape_of(x), shape_of(y)),
        ));
    }
    let mut costs = vec![mse(&mlp.predict(x)?, y)?.as_f64()];
    let mut rng = Rng::new(config.seed);
    let mut order: Vec<usize> = (0..x.nrows()).collect();
    let full = config.batch_size >= x.nrows();
    for _ in 0..config.epochs {
        if full {
            let (_, grads) = mlp.loss_and_gradients(x, y)?;
            mlp.step(&grads, &sgd)?;
        } else {
            rng.shuffle(&mut order);
            for batch in order.chunks(config.batch_size) {
                let xb = x.select_rows(batch);
                let yb = y.select_rows(batch);
                let (_, grads) = mlp.loss_and_gradients(&xb, &yb)?;
                mlp.step(&grads, &sgd)?;
            }
        }
        let cost = mse(&mlp.predict(x)?, y)?.as_f64();
        if !cost.is_finite() {
            return Err(invalid(
                OP,
                "learning rate α",
                format!("training diverged (cost {cost}) at α = {}", config.learning_rate),
            ));
        }
        costs.push(cost);
    }
    Ok(costs)
}
