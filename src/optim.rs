//! Optimisers: how a gradient becomes a change of the parameters.
//!
//! Plain gradient descent (θ ← θ − α∇θ) and Adam (chapter 7) live here; AdamW joins them with
//! chapter 9, reusing [`AdamMoments`]. Every optimiser takes the parameters and their gradients
//! as parallel lists of matrices and checks that they pair up.

use crate::error::{Error, Result, invalid, shape_error};
use crate::float::Float;
use nalgebra::DMatrix;

/// Checks a learning rate: finite and strictly positive.
pub fn check_learning_rate(op: &'static str, lr: f64) -> Result<()> {
    if lr.is_finite() && lr > 0.0 {
        Ok(())
    } else {
        Err(invalid(op, "learning rate α", format!("must be finite and > 0, got {lr}")))
    }
}

fn check_pairs<T: Float>(
    op: &'static str,
    params: &[&mut DMatrix<T>],
    grads: &[&DMatrix<T>],
) -> Result<()> {
    if params.len() != grads.len() {
        return Err(invalid(
            op,
            "gradients",
            format!("{} parameter tensors but {} gradients", params.len(), grads.len()),
        ));
    }
    for (i, (p, g)) in params.iter().zip(grads).enumerate() {
        if p.shape() != g.shape() {
            return Err(shape_error(
                op,
                "parameter and gradient",
                format!("gradient {i} to be {}×{}", p.nrows(), p.ncols()),
                format!("{}×{}", g.nrows(), g.ncols()),
            ));
        }
        // A fold rather than `any`: without the early exit the test runs as vector code.
        if !g.as_slice().iter().fold(true, |all, x| all & x.is_finite()) {
            return Err(Error::NonFinite { op, arg: "gradient", at: format!("tensor {i}") });
        }
    }
    Ok(())
}

/// Plain gradient descent: θ ← θ − α·∇θ.
#[derive(Clone, Copy, Debug)]
pub struct Sgd {
    /// The learning rate α.
    pub learning_rate: f64,
}

impl Sgd {
    /// Gradient descent with learning rate α (finite, > 0).
    pub fn new(learning_rate: f64) -> Result<Self> {
        check_learning_rate("Sgd::new", learning_rate)?;
        Ok(Sgd { learning_rate })
    }

    /// One step over every parameter tensor. Shapes must pair up; gradients must be finite.
    pub fn step<T: Float>(
        &self,
        params: &mut [&mut DMatrix<T>],
        grads: &[&DMatrix<T>],
    ) -> Result<()> {
        check_pairs("Sgd::step", params, grads)?;
        let lr = T::of(self.learning_rate);
        for (p, g) in params.iter_mut().zip(grads) {
            p.zip_apply(*g, |w, dw| *w -= lr * dw);
        }
        Ok(())
    }
}

/// Adam's hyper-parameters (Kingma and Ba, 2015).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamConfig {
    /// The learning rate α.
    pub learning_rate: f64,
    /// β₁, the decay of the first moment (the running mean of the gradient); in [0, 1).
    pub beta1: f64,
    /// β₂, the decay of the second moment (the running mean of the squared gradient); in [0, 1).
    pub beta2: f64,
    /// ε, added to √v̂ so the step stays finite where the gradient has been zero; > 0.
    pub epsilon: f64,
}

impl Default for AdamConfig {
    /// The paper's defaults: α = 10⁻³, β₁ = 0.9, β₂ = 0.999, ε = 10⁻⁸.
    fn default() -> Self {
        AdamConfig { learning_rate: 1e-3, beta1: 0.9, beta2: 0.999, epsilon: 1e-8 }
    }
}

impl AdamConfig {
    /// Checks every field: α finite and > 0, β₁ and β₂ in [0, 1), ε finite and > 0.
    pub fn check(&self, op: &'static str) -> Result<()> {
        check_learning_rate(op, self.learning_rate)?;
        for (arg, beta) in [("β₁", self.beta1), ("β₂", self.beta2)] {
            if !(beta.is_finite() && (0.0..1.0).contains(&beta)) {
                return Err(invalid(op, arg, format!("must lie in [0, 1), got {beta}")));
            }
        }
        if !(self.epsilon.is_finite() && self.epsilon > 0.0) {
            return Err(invalid(op, "ε", format!("must be finite and > 0, got {}", self.epsilon)));
        }
        Ok(())
    }
}

/// The state Adam keeps per parameter tensor: the moments m and v (same shapes as the
/// parameters) and the step count t. Shared by Adam and its weight-decay variants, which differ
/// only in what they do to θ besides the moment step.
#[derive(Clone, Debug, Default)]
pub struct AdamMoments<T: Float> {
    m: Vec<DMatrix<T>>,
    v: Vec<DMatrix<T>>,
    t: u64,
    /// The most threads a step may share its parameters between (`None`: the process's,
    /// [`crate::threads::default_threads`]). Any count gives the same bits.
    pub threads: Option<usize>,
}

impl<T: Float> AdamMoments<T> {
    /// Empty moments; the first step sizes them from the parameters.
    pub fn new() -> Self {
        AdamMoments { m: Vec::new(), v: Vec::new(), t: 0, threads: None }
    }

    /// Steps taken so far (t).
    pub fn steps(&self) -> u64 {
        self.t
    }

    /// The first moments m, one per parameter tensor (empty before the first step).
    pub fn first(&self) -> &[DMatrix<T>] {
        &self.m
    }

    /// The second moments v, one per parameter tensor (empty before the first step).
    pub fn second(&self) -> &[DMatrix<T>] {
        &self.v
    }

    /// One moment step: t ← t + 1; m ← β₁m + (1 − β₁)g; v ← β₂v + (1 − β₂)g²;
    /// m̂ = m/(1 − β₁ᵗ); v̂ = v/(1 − β₂ᵗ); θ ← θ − α·m̂/(√v̂ + ε), element by element.
    ///
    /// Errors (and leaves everything unchanged) when the parameters and gradients do not pair
    /// up, a gradient is not finite, or the parameters are not the ones the moments were sized
    /// for.
    pub fn step(
        &mut self,
        op: &'static str,
        config: &AdamConfig,
        params: &mut [&mut DMatrix<T>],
        grads: &[&DMatrix<T>],
    ) -> Result<()> {
        config.check(op)?;
        check_pairs(op, params, grads)?;
        if self.t == 0 {
            self.m = params.iter().map(|p| DMatrix::zeros(p.nrows(), p.ncols())).collect();
            self.v = self.m.clone();
        } else if self.m.len() != params.len()
            || self.m.iter().zip(params.iter()).any(|(m, p)| m.shape() != p.shape())
        {
            return Err(shape_error(
                op,
                "parameters",
                format!(
                    "the {} tensors the moments were sized for ({})",
                    self.m.len(),
                    shapes(self.m.iter())
                ),
                format!("{} tensors ({})", params.len(), shapes(params.iter().map(|p| &**p))),
            ));
        }
        self.t += 1;
        let update = MomentUpdate::new(config, self.t);
        let mut work: Vec<Entry<'_, T>> = params
            .iter_mut()
            .zip(grads)
            .zip(self.m.iter_mut().zip(self.v.iter_mut()))
            .map(|((p, g), (m, v))| {
                (p.as_mut_slice(), g.as_slice(), m.as_mut_slice(), v.as_mut_slice())
            })
            .collect();
        // Every entry is updated on its own, so the parameters can be shared out between threads
        // without changing a bit: as many runs of about equal length as there are threads (a
        // tensor may be cut between two), each run at least `PARAMETERS_PER_THREAD` long.
        let total: usize = work.iter().map(|w| w.0.len()).sum();
        let threads = if total >= PARALLEL_MIN_PARAMETERS {
            let allowed = self.threads.unwrap_or_else(crate::threads::default_threads);
            allowed.min(total / PARAMETERS_PER_THREAD).max(1)
        } else {
            1
        };
        if threads == 1 {
            work.iter_mut().for_each(|w| update.apply(w));
            return Ok(());
        }
        let groups = share_out(work, total.div_ceil(threads));
        crate::threads::share_pieces(&mut vec![(); threads], groups, |(), mut group| {
            group.iter_mut().for_each(|w| update.apply(w))
        });
        Ok(())
    }
}

/// Below this many parameters an Adam step runs on one thread: starting and joining a thread
/// costs 20 to 60 µs (chapter 10 measures it), and one thread updates 10⁵ f32 parameters in about
/// 150 µs (chapter 9's 0.8 million in about 1.2 ms), so a smaller step cannot gain from a second.
pub const PARALLEL_MIN_PARAMETERS: usize = 100_000;

/// The fewest parameters one thread of an Adam step is given (about 75 µs of work, a few times
/// what starting the thread costs), so more threads than the step can use are not started.
pub const PARAMETERS_PER_THREAD: usize = 50_000;

/// Cuts the entries into consecutive runs of `run` parameters (the last may be shorter), cutting a
/// tensor between two runs where needed. The same entries in the same order, so the same bits.
fn share_out<'a, T>(work: Vec<Entry<'a, T>>, run: usize) -> Vec<Vec<Entry<'a, T>>> {
    let mut groups = vec![Vec::new()];
    let mut room = run.max(1);
    for (mut p, mut g, mut m, mut v) in work {
        while !p.is_empty() {
            if room == 0 {
                groups.push(Vec::new());
                room = run.max(1);
            }
            let take = room.min(p.len());
            let (p0, p1) = std::mem::take(&mut p).split_at_mut(take);
            let (m0, m1) = std::mem::take(&mut m).split_at_mut(take);
            let (v0, v1) = std::mem::take(&mut v).split_at_mut(take);
            let (g0, g1) = g.split_at(take);
            groups.last_mut().expect("one group at least").push((p0, g0, m0, v0));
            (p, g, m, v) = (p1, g1, m1, v1);
            room -= take;
        }
    }
    groups
}

/// One tensor's share of an Adam step: the parameter, its gradient, and its two moments.
type Entry<'a, T> = (&'a mut [T], &'a [T], &'a mut [T], &'a mut [T]);

/// The per-entry Adam update with this step's constants.
struct MomentUpdate<T> {
    b1: T,
    b2: T,
    lr: T,
    eps: T,
    c1: T,
    c2: T,
}

impl<T: Float> MomentUpdate<T> {
    fn new(config: &AdamConfig, t: u64) -> Self {
        MomentUpdate {
            b1: T::of(config.beta1),
            b2: T::of(config.beta2),
            lr: T::of(config.learning_rate),
            eps: T::of(config.epsilon),
            // Bias corrections: the moments start at 0, so early averages are scaled up by
            // 1/(1 − βᵗ).
            c1: T::of(1.0 - config.beta1.powf(t as f64)),
            c2: T::of(1.0 - config.beta2.powf(t as f64)),
        }
    }

    /// m ← β₁m + (1 − β₁)g; v ← β₂v + (1 − β₂)g²; θ ← θ − α·m̂/(√v̂ + ε) over one tensor, on the
    /// storage slices (which the compiler vectorises).
    fn apply(&self, (p, g, m, v): &mut Entry<'_, T>) {
        let (b1, b2, one) = (self.b1, self.b2, T::one());
        for (((w, &dw), mi), vi) in p.iter_mut().zip(g.iter()).zip(m.iter_mut()).zip(v.iter_mut()) {
            *mi = b1 * *mi + (one - b1) * dw;
            *vi = b2 * *vi + (one - b2) * dw * dw;
            let m_hat = *mi / self.c1;
            let v_hat = *vi / self.c2;
            *w -= self.lr * m_hat / (v_hat.sqrt() + self.eps);
        }
    }
}

fn shapes<'a, T: 'a>(ms: impl Iterator<Item = &'a DMatrix<T>>) -> String {
    ms.map(|m| format!("{}×{}", m.nrows(), m.ncols())).collect::<Vec<_>>().join(", ")
}

/// Adam: gradient descent on bias-corrected running means of the gradient and of its square,
/// θ ← θ − α·m̂/(√v̂ + ε) (Kingma and Ba, 2015). Each parameter moves by about α per step at
/// most, whatever the scale of its gradient.
#[derive(Clone, Debug)]
pub struct Adam<T: Float> {
    /// The hyper-parameters.
    pub config: AdamConfig,
    /// The moments and step count.
    pub moments: AdamMoments<T>,
}

impl<T: Float> Adam<T> {
    /// Adam with checked hyper-parameters and empty moments.
    pub fn new(config: AdamConfig) -> Result<Self> {
        config.check("Adam::new")?;
        Ok(Adam { config, moments: AdamMoments::new() })
    }

    /// Adam with the default β₁, β₂, ε and this learning rate.
    pub fn with_learning_rate(learning_rate: f64) -> Result<Self> {
        Self::new(AdamConfig { learning_rate, ..AdamConfig::default() })
    }

    /// One step over every parameter tensor, always passed in the same order. Shapes must pair
    /// up with the gradients and with the previous steps; gradients must be finite.
    pub fn step(&mut self, params: &mut [&mut DMatrix<T>], grads: &[&DMatrix<T>]) -> Result<()> {
        self.moments.step("Adam::step", &self.config, params, grads)
    }
}

impl<T: Float> AdamMoments<T> {
    /// Moments restored from a checkpoint: m and v (one pair of equal shapes per parameter
    /// tensor) after t steps. t = 0 requires empty moments (the first step sizes them).
    pub fn from_parts(first: Vec<DMatrix<T>>, second: Vec<DMatrix<T>>, steps: u64) -> Result<Self> {
        const OP: &str = "AdamMoments::from_parts";
        if first.len() != second.len() {
            return Err(invalid(
                OP,
                "moments",
                format!("{} first moments but {} second moments", first.len(), second.len()),
            ));
        }
        if let Some(i) = first.iter().zip(&second).position(|(m, v)| m.shape() != v.shape()) {
            return Err(shape_error(
                OP,
                "m and v",
                shape_of_text(&first[i]),
                shape_of_text(&second[i]),
            ));
        }
        if (steps == 0) != first.is_empty() {
            return Err(invalid(
                OP,
                "steps",
                format!("{steps} steps do not go with {} moment tensors", first.len()),
            ));
        }
        if first.iter().chain(&second).any(|m| m.iter().any(|x| !x.is_finite()))
            || second.iter().any(|v| v.iter().any(|x| *x < T::zero()))
        {
            return Err(invalid(
                OP,
                "moments",
                "must be finite, and the second moments non-negative",
            ));
        }
        Ok(AdamMoments { m: first, v: second, t: steps, threads: None })
    }
}

fn shape_of_text<T>(m: &DMatrix<T>) -> String {
    format!("{}×{}", m.nrows(), m.ncols())
}

/// AdamW (Loshchilov and Hutter, 2019): Adam plus a *decoupled* weight decay,
/// θ ← θ − α·λ·θ − α·m̂/(√v̂ + ε), applied only to the tensors marked for decay (weight matrices
/// and embeddings; not biases or LayerNorm gains and shifts, whose scale carries meaning).
///
/// Decoupled means the decay never enters the moments: with Adam plus an L2 term λθ in the
/// gradient, a parameter whose gradient is large would be decayed less (the decay is divided by
/// √v̂ like everything else); here every decayed parameter shrinks by the same factor 1 − αλ.
/// This is PyTorch's `AdamW`: decay with the current α, then the Adam step.
#[derive(Clone, Debug)]
pub struct AdamW<T: Float> {
    /// α, β₁, β₂, ε. Change `config.learning_rate` between steps to follow a schedule.
    pub config: AdamConfig,
    /// λ, the decay rate per unit of learning rate (finite, ≥ 0).
    pub weight_decay: f64,
    /// The moments and step count, shared in form with [`Adam`].
    pub moments: AdamMoments<T>,
}

impl<T: Float> AdamW<T> {
    /// AdamW with checked hyper-parameters and empty moments.
    pub fn new(config: AdamConfig, weight_decay: f64) -> Result<Self> {
        config.check("AdamW::new")?;
        if !(weight_decay.is_finite() && weight_decay >= 0.0) {
            return Err(invalid(
                "AdamW::new",
                "weight decay λ",
                format!("must be finite and ≥ 0, got {weight_decay}"),
            ));
        }
        Ok(AdamW { config, weight_decay, moments: AdamMoments::new() })
    }

    /// One step. `decay[i]` says whether tensor i is decayed. Everything is checked before any
    /// parameter changes, so an error leaves parameters and moments as they were.
    pub fn step(
        &mut self,
        params: &mut [&mut DMatrix<T>],
        grads: &[&DMatrix<T>],
        decay: &[bool],
    ) -> Result<()> {
        const OP: &str = "AdamW::step";
        self.config.check(OP)?;
        check_pairs(OP, params, grads)?;
        if decay.len() != params.len() {
            return Err(invalid(
                OP,
                "decay",
                format!("{} flags for {} parameter tensors", decay.len(), params.len()),
            ));
        }
        let sized = self.moments.first();
        if self.moments.steps() > 0
            && (sized.len() != params.len()
                || sized.iter().zip(params.iter()).any(|(m, p)| m.shape() != p.shape()))
        {
            return Err(shape_error(
                OP,
                "parameters",
                format!(
                    "the {} tensors the moments were sized for ({})",
                    sized.len(),
                    shapes(sized.iter())
                ),
                format!("{} tensors ({})", params.len(), shapes(params.iter().map(|p| &**p))),
            ));
        }
        let shrink = T::of(1.0 - self.config.learning_rate * self.weight_decay);
        if self.weight_decay > 0.0 {
            for (p, _) in params.iter_mut().zip(decay).filter(|(_, d)| **d) {
                p.as_mut_slice().iter_mut().for_each(|w| *w *= shrink);
            }
        }
        self.moments.step(OP, &self.config, params, grads)
    }
}
