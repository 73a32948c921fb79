//! A 2-2-1 network learned by chapter 3's backprop, and how often training from random weights
//! fails.

use super::data::{accuracy, xor_data};
use crate::ch03_mlp::{Activation, Mlp, TrainConfig, train};
use crate::error::Result;
use crate::rng::Rng;
use std::ops::Range;

/// The seed of the learned network's starting weights.
pub const LEARN_SEED: u64 = 1;
/// How it trains: full-batch gradient descent on the squared error (chapter 3's cost).
pub const LEARN_TRAIN: TrainConfig =
    TrainConfig { learning_rate: 2.0, epochs: 4000, batch_size: 4, seed: 0 };
/// The bias spread of the starting weights.
pub const LEARN_BIAS_STD: f64 = 1.0;
/// Seeds in the survey of how often training fails.
pub const SURVEY_SEEDS: Range<u64> = 0..200;

/// A 2-2-1 sigmoid network learned from `seed`.
#[derive(Clone, Debug)]
pub struct Learned {
    /// The trained network.
    pub mlp: Mlp<f64>,
    /// The cost before training and after each epoch.
    pub costs: Vec<f64>,
    /// Its accuracy on the four points.
    pub accuracy: f64,
}

/// Trains a 2-2-1 network with sigmoid hidden and output neurons from random weights drawn from
/// `seed`, by chapter 3's backprop and gradient descent.
pub fn learn_xor(seed: u64, config: TrainConfig) -> Result<Learned> {
    let (x, y) = xor_data();
    let mut mlp = Mlp::random(
        &[2, 2, 1],
        Activation::Sigmoid,
        Some(Activation::Sigmoid),
        LEARN_BIAS_STD,
        &mut Rng::new(seed),
    )?;
    let costs = train(&mut mlp, &x, &y, config)?;
    let accuracy = accuracy(&mlp, &x, &y)?;
    Ok(Learned { mlp, costs, accuracy })
}

/// How many seeds of a range fail to reach 100 %.
#[derive(Clone, Debug, PartialEq)]
pub struct SeedSurvey {
    /// Seeds tried.
    pub tried: usize,
    /// Those that did not reach 100 % accuracy.
    pub failures: Vec<u64>,
    /// The final cost of each failure, in the same order (about 1/8 when two points are stuck at
    /// an output of 0.5, about 1/6 when three are stuck at their average 1/3 or 2/3).
    pub failure_costs: Vec<f64>,
}

impl SeedSurvey {
    /// failures / tried.
    pub fn failure_rate(&self) -> f64 {
        self.failures.len() as f64 / self.tried.max(1) as f64
    }

    /// How many failures ended with a cost within 0.01 of `level` (e.g. 1/8 or 1/6).
    pub fn stuck_near(&self, level: f64) -> usize {
        self.failure_costs.iter().filter(|c| (*c - level).abs() < 0.01).count()
    }
}

/// Trains from every seed in `seeds` with `config` and records which fail.
pub fn seed_survey(seeds: Range<u64>, config: TrainConfig) -> Result<SeedSurvey> {
    let (mut failures, mut failure_costs) = (Vec::new(), Vec::new());
    let tried = seeds.clone().count();
    for s in seeds {
        let l = learn_xor(s, config)?;
        if l.accuracy < 1.0 {
            failures.push(s);
            failure_costs.push(l.costs[l.costs.len() - 1]);
        }
    }
    Ok(SeedSurvey { tried, failures, failure_costs })
}
