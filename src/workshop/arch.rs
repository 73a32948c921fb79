//! The two architectures a run trains: chapter 9's GPT-2 (`--arch gpt2`, GPT-2's files) and
//! chapter 12's decoder in Llama's choices (`--arch llama`, Hugging Face's Llama files).
//!
//! [`RunModel`] is what a run asks of a model beyond training ([`Trainable`]): to be read back
//! from a folder's `config.json` and `model.safetensors` within the memory budget, to continue a
//! prompt, and to say which training step it runs.

use crate::ch09_gpt::checkpoint::{self, CONFIG_FILE};
use crate::ch09_gpt::config::Config;
use crate::ch09_gpt::data::Token;
use crate::ch09_gpt::model::Gpt;
use crate::ch09_gpt::safetensors::SafeTensors;
use crate::ch09_gpt::sample::{Decoding, Generated, generate, generate_with};
use crate::ch09_gpt::trainable::Trainable;
use crate::ch12_modern::decoder::{Decoder, DecoderConfig};
use crate::ch12_modern::llama::{decoder_from_llama, is_llama_config, llama_config_from_json};
use crate::error::Result;
use crate::rng::Rng;
use std::path::Path;

/// A model a run trains, saves, resumes and samples.
pub trait RunModel: Trainable<f32> + Sized {
    /// The model of a folder's `config.json` (`config`, named `config_file` in errors) and
    /// `model.safetensors` (`f`), after `check` has seen the GPT-2 configuration its memory is
    /// estimated by (a budget), before anything is built.
    fn from_folder(
        config: &[u8],
        config_file: &str,
        f: &SafeTensors,
        check: &mut dyn FnMut(&Config) -> Result<()>,
    ) -> Result<Self>;

    /// n_ctx, the longest window.
    fn context(&self) -> usize;

    /// `max_new` tokens after `prompt` (the cached step, the window sliding at n_ctx).
    fn continue_prompt(
        &self,
        prompt: &[Token],
        max_new: usize,
        decoding: &Decoding,
        rng: &mut Rng,
    ) -> Result<Generated>;

    /// The training step's computation, for the run's header line.
    fn step_name(&self) -> &'static str;

    /// Whether every weight is finite (a run never saves one that is not).
    fn all_finite(&self) -> bool;
}

impl RunModel for Gpt<f32> {
    fn from_folder(
        config: &[u8],
        config_file: &str,
        f: &SafeTensors,
        check: &mut dyn FnMut(&Config) -> Result<()>,
    ) -> Result<Self> {
        let config = checkpoint::config_from_json(config, config_file)?;
        checkpoint::check_header_against_config(&config, f)?;
        check(&config)?;
        checkpoint::model_from_safetensors(config, f)
    }

    fn context(&self) -> usize {
        self.config.context
    }

    fn continue_prompt(
        &self,
        prompt: &[Token],
        max_new: usize,
        decoding: &Decoding,
        rng: &mut Rng,
    ) -> Result<Generated> {
        generate(self, prompt, max_new, decoding, rng, true)
    }

    fn step_name(&self) -> &'static str {
        match self.step_path() {
            crate::ch09_gpt::train::StepPath::Fused => "fast::FusedStep",
            crate::ch09_gpt::train::StepPath::Reference | crate::ch09_gpt::train::StepPath::Own => {
                "Gpt::loss_and_grads; the fused step does not cover this model"
            }
        }
    }

    fn all_finite(&self) -> bool {
        self.tensors().iter().all(|(_, m)| m.iter().all(|x| x.is_finite()))
    }
}

/// The GPT-2 configuration whose memory estimate stands for a decoder's: the same vocabulary,
/// context, layers, heads and width, with a 4C MLP (a gated MLP of hidden width F ≤ 4C holds
/// fewer activations; a wider one is estimated at 4C).
pub fn gpt_estimate_of(c: &DecoderConfig) -> Config {
    Config::new(c.vocab_size, c.context, c.layers, c.n_heads, c.width)
}

impl RunModel for Decoder<f32> {
    fn from_folder(
        config: &[u8],
        config_file: &str,
        f: &SafeTensors,
        check: &mut dyn FnMut(&Config) -> Result<()>,
    ) -> Result<Self> {
        let config = llama_config_from_json(config, config_file)?;
        check(&gpt_estimate_of(&config))?;
        decoder_from_llama(config, f)
    }

    fn context(&self) -> usize {
        self.config.context
    }

    fn continue_prompt(
        &self,
        prompt: &[Token],
        max_new: usize,
        decoding: &Decoding,
        rng: &mut Rng,
    ) -> Result<Generated> {
        generate_with(&mut &*self, prompt, max_new, decoding, rng, true)
    }

    fn step_name(&self) -> &'static str {
        if crate::ch12_modern::decoder::fast::supports(self) {
            "decoder::fast::DecoderStep, chapter 12's step with kept buffers"
        } else {
            "Decoder::loss_and_grads, chapter 12's reference pass"
        }
    }

    fn all_finite(&self) -> bool {
        self.tensors().iter().all(|(_, m)| m.iter().all(|x| x.is_finite()))
    }
}

/// Whether the folder `here` (a generation's files) holds a Llama `config.json`, read within the
/// memory `budget`. Errors when there is none.
pub fn holds_llama(here: &Path, budget: u64) -> Result<bool> {
    let bytes = super::budget::read_checkpoint_file(&here.join(CONFIG_FILE), budget)?;
    Ok(is_llama_config(&bytes))
}
