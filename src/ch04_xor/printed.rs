//! The document's two hand-set networks, a sigmoid one and a ReLU one, as chapter 3's MLPs.

use crate::ch03_mlp::{Activation, Layer, Mlp};
use crate::error::{Result, invalid};
use nalgebra::DMatrix;

/// A two-layer network as the document prints one: hidden h = f(W x + c) with one row of W per
/// hidden neuron, output f(w·h + b).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PrintedNet {
    /// W, one row per hidden neuron (the document's orientation).
    pub w_rows: [[f64; 2]; 2],
    /// c, the hidden biases.
    pub c: [f64; 2],
    /// w, the output weights.
    pub w_out: [f64; 2],
    /// b, the output bias.
    pub b_out: f64,
    /// The nonlinearity of both layers.
    pub activation: Activation,
}

/// The sigmoid network: W = [[20, 20], [−20, −20]], c = (−10, 30), w = (20, 20), b = −30.
/// Hidden neuron 1 is OR (on unless both inputs are 0), neuron 2 is NAND (on unless both are 1),
/// and the output is their AND.
pub const SIGMOID_NET: PrintedNet = PrintedNet {
    w_rows: [[20.0, 20.0], [-20.0, -20.0]],
    c: [-10.0, 30.0],
    w_out: [20.0, 20.0],
    b_out: -30.0,
    activation: Activation::Sigmoid,
};

/// The ReLU network: W = [[1, −1], [−1, 1]], c = (0, 0), w = (1, 1), b = −0.5, read with the
/// threshold 0.5. Hidden neuron 1 is ReLU(x₁ − x₂), neuron 2 is ReLU(x₂ − x₁).
pub const RELU_NET: PrintedNet = PrintedNet {
    w_rows: [[1.0, -1.0], [-1.0, 1.0]],
    c: [0.0, 0.0],
    w_out: [1.0, 1.0],
    b_out: -0.5,
    activation: Activation::Relu,
};

impl PrintedNet {
    /// As one of our MLPs. Our layers compute xW + b with one column per neuron, so the printed
    /// W (one row per neuron) enters transposed.
    pub fn mlp(&self) -> Result<Mlp<f64>> {
        let w = DMatrix::from_fn(2, 2, |i, j| self.w_rows[j][i]);
        self.mlp_with_hidden_weights(w)
    }

    /// The same numbers read the other way round, as x·W with the printed W untransposed (the
    /// convention of the document's ReLU code, `np.dot(x, W)`). For the symmetric ReLU W this is
    /// the same network; for the sigmoid W it is a different one.
    pub fn mlp_read_as_x_times_w(&self) -> Result<Mlp<f64>> {
        let w = DMatrix::from_fn(2, 2, |i, j| self.w_rows[i][j]);
        self.mlp_with_hidden_weights(w)
    }

    /// The printed network with the hidden layer's weights `w` (2×2, one column per neuron).
    fn mlp_with_hidden_weights(&self, w: DMatrix<f64>) -> Result<Mlp<f64>> {
        Mlp::from_layers(vec![
            Layer {
                w,
                b: DMatrix::from_row_slice(1, 2, &self.c),
                activation: Some(self.activation),
            },
            Layer {
                w: DMatrix::from_column_slice(2, 1, &self.w_out),
                b: DMatrix::from_element(1, 1, self.b_out),
                activation: Some(self.activation),
            },
        ])
    }
}

/// The hidden layer's pre-activations and activations (each N×2) of a two-layer MLP.
pub fn hidden_layer(mlp: &Mlp<f64>, x: &DMatrix<f64>) -> Result<(DMatrix<f64>, DMatrix<f64>)> {
    let t = mlp.forward(x)?;
    if t.inputs.len() < 2 {
        return Err(invalid("hidden_layer", "mlp", "needs at least two layers"));
    }
    Ok((t.pre[0].clone(), t.inputs[1].clone()))
}

/// The output layer's pre-activation (N×1) of a two-layer MLP.
pub fn output_pre_activation(mlp: &Mlp<f64>, x: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    let t = mlp.forward(x)?;
    Ok(t.pre[t.pre.len() - 1].clone())
}
