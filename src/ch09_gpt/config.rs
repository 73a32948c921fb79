//! The shape of a GPT: vocabulary, context, layers, heads, width; and what those numbers cost in
//! parameters.
//!
//! Two ways of counting live here. [`Config::parameter_count`] counts every tensor our model (and
//! Hugging Face's GPT-2) holds, biases and LayerNorm gains included: for GPT-2 124M it gives
//! exactly 124,439,808. [`MatrixAccounting`] counts the way D1 does for GPT-3: only the
//! eight kinds of weight matrix (embedding, query, key, value-down, value-up, up-projection,
//! down-projection, unembedding), one query/key/value matrix per head, giving 27,938 matrices and
//! 175,181,291,520 weights.

use crate::error::{Result, invalid};

/// How token positions enter the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Positions {
    /// A learned table `wpe` (context × width), as in GPT-2.
    Learned,
    /// The fixed sine/cosine table of chapter 5 (no parameters); the width must be even.
    Sinusoidal,
}

/// The hyper-parameters that fix a GPT's tensors.
///
/// The MLP's hidden width is always 4 × `width` and the activation GELU in its tanh form, as in
/// GPT-2; the head width is `width / heads`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// Number of token ids V (rows of the embedding).
    pub vocab_size: usize,
    /// The longest sequence the model reads, n_ctx (rows of `wpe`).
    pub context: usize,
    /// Number of transformer blocks l.
    pub layers: usize,
    /// Attention heads per block h.
    pub heads: usize,
    /// The residual stream's width d (n_embd).
    pub width: usize,
    /// Whether the unembedding is the token embedding's transpose (GPT-2) or its own matrix.
    pub tied: bool,
    /// Learned or sinusoidal positions.
    pub positions: Positions,
    /// LayerNorm's ε, inside the square root (GPT-2: 10⁻⁵).
    pub layer_norm_epsilon: f64,
}

/// GPT-2's LayerNorm ε.
pub const GPT2_LAYER_NORM_EPSILON: f64 = 1e-5;

/// The LayerNorm ε a `config.json` may give, inclusive: BERT's 10⁻¹² (the smallest in common
/// use; below it ε vanishes next to any variance an `f32` can hold) to 10⁻² (beyond it ε is no
/// longer a guard against division by zero but changes what the layer computes). GPT-2 uses 10⁻⁵.
pub const LAYER_NORM_EPSILON_RANGE: (f64, f64) = (1e-12, 1e-2);

/// Refuses a `layer_norm_epsilon` outside [`LAYER_NORM_EPSILON_RANGE`], with the reason.
pub fn check_epsilon(epsilon: f64) -> std::result::Result<(), String> {
    let (low, high) = LAYER_NORM_EPSILON_RANGE;
    if (low..=high).contains(&epsilon) {
        return Ok(());
    }
    Err(format!("layer_norm_epsilon = {epsilon:e} lies outside {low:e} ..= {high:e}"))
}

/// Refuses a head count unlike the one a weights file `recorded` (our files record it; the
/// shapes cannot show it: the fused d×3d attention matrix is the same for every divisor of d).
pub fn check_heads(config: &Config, recorded: Option<&str>) -> std::result::Result<(), String> {
    match recorded {
        Some(h) if h.parse::<usize>().ok() != Some(config.heads) => {
            Err(format!("saved with n_head = {h}, but config.json says n_head = {}", config.heads))
        }
        _ => Ok(()),
    }
}

/// The MLP widens the stream by this factor.
pub const MLP_EXPANSION: usize = 4;

impl Config {
    /// A configuration with GPT-2's choices (tied, learned positions, ε = 10⁻⁵).
    pub fn new(
        vocab_size: usize,
        context: usize,
        layers: usize,
        heads: usize,
        width: usize,
    ) -> Config {
        Config {
            vocab_size,
            context,
            layers,
            heads,
            width,
            tied: true,
            positions: Positions::Learned,
            layer_norm_epsilon: GPT2_LAYER_NORM_EPSILON,
        }
    }

    /// GPT-2 "small", the 124M model: V = 50,257, n_ctx = 1,024, 12 layers, 12 heads, d = 768.
    pub fn gpt2_124m() -> Config {
        Config::new(50_257, 1_024, 12, 12, 768)
    }

    /// GPT-2 XL, the 1.5B model: 48 layers, 25 heads, d = 1,600.
    pub fn gpt2_xl() -> Config {
        Config::new(50_257, 1_024, 48, 25, 1_600)
    }

    /// GPT-3 175B as D0 and D1 describe it: V = 50,257, n_ctx = 2,048, 96 layers,
    /// 96 heads of width 128, d = 12,288.
    pub fn gpt3_175b() -> Config {
        Config::new(50_257, 2_048, 96, 96, 12_288)
    }

    /// The original GPT (2018): V = 40,478, n_ctx = 512, 12 layers, 12 heads, d = 768.
    pub fn gpt1() -> Config {
        Config::new(40_478, 512, 12, 12, 768)
    }

    /// The head width d / h.
    pub fn head_width(&self) -> usize {
        self.width / self.heads.max(1)
    }

    /// The MLP's hidden width, 4d.
    pub fn hidden(&self) -> usize {
        MLP_EXPANSION * self.width
    }

    /// Checks that the tensors this configuration describes exist: every size ≥ 1, the heads
    /// divide the width, an even width for sinusoidal positions, ε finite and > 0.
    pub fn validate(&self) -> Result<()> {
        const OP: &str = "Config::validate";
        for (arg, v) in [
            ("vocab_size", self.vocab_size),
            ("context", self.context),
            ("layers", self.layers),
            ("heads", self.heads),
            ("width", self.width),
        ] {
            if v == 0 {
                return Err(invalid(OP, arg, "must be at least 1, got 0"));
            }
        }
        if !self.width.is_multiple_of(self.heads) {
            return Err(invalid(
                OP,
                "heads",
                format!("{} heads do not divide the width {}", self.heads, self.width),
            ));
        }
        if self.positions == Positions::Sinusoidal && !self.width.is_multiple_of(2) {
            return Err(invalid(
                OP,
                "width",
                format!(
                    "sinusoidal positions pair sines with cosines, so the width must be even, \
                        got {}",
                    self.width
                ),
            ));
        }
        if !(self.layer_norm_epsilon.is_finite() && self.layer_norm_epsilon > 0.0) {
            return Err(invalid(
                OP,
                "layer_norm_epsilon",
                format!("must be finite and > 0, got {}", self.layer_norm_epsilon),
            ));
        }
        // Every tensor must be addressable: the largest are V×d, n_ctx×d and d×4d.
        // The size named is the one that overflows (the width itself when the MLP's does).
        for (arg, rows) in [
            ("vocab_size", self.vocab_size),
            ("context", self.context),
            ("width", self.width.saturating_mul(MLP_EXPANSION)),
        ] {
            if rows.checked_mul(self.width).is_none() {
                let value = if arg == "width" { self.width } else { rows };
                return Err(invalid(OP, arg, format!("{value} is too large for any memory")));
            }
        }
        Ok(())
    }
}

/// GPT-1's parameters: our count for its configuration less the final LayerNorm, which GPT-1
/// (a post-LN model) does not have.
pub fn gpt1_parameters() -> u64 {
    let c = Config::gpt1();
    c.parameter_count() - 2 * c.width as u64
}

/// D1's way of counting GPT-3: only the weight matrices, each attention head with its
/// own query, key and (low-rank, factored) value matrices, and no biases or LayerNorm parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatrixAccounting {
    /// The embedding W_E: V × d.
    pub embedding: u64,
    /// The unembedding W_U: V × d.
    pub unembedding: u64,
    /// The query matrix of one head: d_k × d.
    pub query_per_head: u64,
    /// One head: query, key, value-down (d_k × d each) and value-up (d × d_k), 4·d·d_k.
    pub per_head: u64,
    /// One multi-head attention layer: h heads.
    pub per_attention_layer: u64,
    /// All attention layers: l · h · 4 · d · d_k.
    pub attention: u64,
    /// The up-projection of one MLP: 4d × d.
    pub up_projection: u64,
    /// One MLP: up- and down-projection, 2 · 4d · d.
    pub per_mlp: u64,
    /// All MLPs.
    pub mlp: u64,
    /// Everything: embedding + unembedding + attention + MLP.
    pub total: u64,
    /// How many matrices: embedding and unembedding, per layer h query, h key and h value
    /// matrices, one output matrix (the value-up matrices of all heads side by side), one up- and
    /// one down-projection.
    pub matrices: u64,
}

impl MatrixAccounting {
    /// The accounting of a configuration.
    pub fn of(config: &Config) -> Result<MatrixAccounting> {
        config.validate()?;
        let (v, d, dk, h, l) = (
            config.vocab_size as u64,
            config.width as u64,
            config.head_width() as u64,
            config.heads as u64,
            config.layers as u64,
        );
        let embedding = v * d;
        let query_per_head = dk * d;
        let per_head = 4 * dk * d;
        let per_attention_layer = h * per_head;
        let attention = l * per_attention_layer;
        let up_projection = MLP_EXPANSION as u64 * d * d;
        let per_mlp = 2 * up_projection;
        let mlp = l * per_mlp;
        Ok(MatrixAccounting {
            embedding,
            unembedding: embedding,
            query_per_head,
            per_head,
            per_attention_layer,
            attention,
            up_projection,
            per_mlp,
            mlp,
            total: 2 * embedding + attention + mlp,
            matrices: 2 + l * (3 * h + 3),
        })
    }
}
