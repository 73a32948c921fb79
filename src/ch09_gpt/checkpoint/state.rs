//! The training state beside a checkpoint's model: `training_state.safetensors` (see the
//! parent module).

use super::{MODEL_FILE, STATE_FILE, io_error, model_from_safetensors, parse_error, read_config};
use crate::ch09_gpt::config::Config;
use crate::ch09_gpt::model::{Param, spec_of};
use crate::ch09_gpt::safetensors::{SafeTensors, TensorOut, serialize, write_atomic};
use crate::ch09_gpt::train::{StepRecord, Trainer};
use crate::ch09_gpt::trainable::Trainable;
use crate::error::Result;
use crate::float::Float;
use crate::matmul::inputs::Precision;
use crate::optim::AdamMoments;
use crate::rng::Rng;
use nalgebra::DMatrix;
use std::path::Path;

/// Saves a trainer into a plain folder: the model (with its step in the metadata), then the
/// training state, each atomically (a run's folder is saved as one unit instead, see
/// [`trainer_files`] and [`crate::workshop::folder`]).
pub fn save_trainer<T: Float, M: Trainable<T>>(trainer: &Trainer<T, M>, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    for (name, bytes) in trainer_files(trainer)? {
        write_atomic(&dir.join(name), &bytes)?;
    }
    Ok(())
}

/// The files of a trainer (name, contents): the model's ([`Trainable::model_files`]: for
/// chapter 9's model `model.safetensors` and `config.json`, see
/// [`model_files`](super::model_files)), the step in the weights' metadata, then
/// `training_state.safetensors`, AdamW's moments under the names of
/// [`Trainable::parameter_names`] in the model's own orientation.
pub fn trainer_files<T: Float, M: Trainable<T>>(
    trainer: &Trainer<T, M>,
) -> Result<Vec<(String, Vec<u8>)>> {
    let step = trainer.step.to_string();
    let mut files = trainer.model.model_files(&[("step".into(), step.clone())])?;
    let names: Vec<String> = trainer.model.parameter_names();
    let mut tensors = Vec::new();
    for (which, moments) in
        [("m", trainer.optimizer.moments.first()), ("v", trainer.optimizer.moments.second())]
    {
        for (name, m) in names.iter().zip(moments) {
            tensors.push(TensorOut::matrix(
                format!("adam.{which}.{name}"),
                m,
                vec![m.nrows(), m.ncols()],
            ));
        }
    }
    let h = &trainer.history;
    tensors.push(TensorOut::f64s("history.loss", &h.iter().map(|r| r.loss).collect::<Vec<_>>()));
    tensors.push(TensorOut::f64s("history.lr", &h.iter().map(|r| r.lr).collect::<Vec<_>>()));
    tensors.push(TensorOut::f64s(
        "history.grad_norm",
        &h.iter().map(|r| r.grad_norm).collect::<Vec<_>>(),
    ));
    tensors.push(TensorOut::f64s(
        "history.tokens",
        &h.iter().map(|r| r.tokens as f64).collect::<Vec<_>>(),
    ));
    let rng = trainer.rng.state().iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",");
    let meta = vec![
        ("format".to_string(), "llm-workbook training state 1".to_string()),
        ("step".to_string(), step),
        ("adam_steps".to_string(), trainer.optimizer.moments.steps().to_string()),
        ("rng_state".to_string(), rng),
        ("weight_decay".to_string(), format!("{:?}", trainer.optimizer.weight_decay)),
        ("adam_config".to_string(), format!("{:?}", trainer.optimizer.config)),
        // The current loss scale S (chapter 11), which every skipped step halved.
        ("loss_scale".to_string(), format!("{:?}", trainer.precision().loss_scale)),
    ];
    files.push((STATE_FILE.to_string(), serialize(&tensors, &meta)?));
    Ok(files)
}

/// The moment `which` ("m" or "v") of tensor `name` (rows×cols) from a training state. States
/// written while the model held W_Q, W_K and W_V as three tensors name their moments
/// `h.{l}.attn.q.weight`, `….k.…`, `….v.…` (and the biases likewise): where `c_attn`'s moment is
/// missing, those three are read and put side by side, as W_QKV holds the maps.
fn moment<T: Float>(
    state: &SafeTensors,
    which: &str,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<DMatrix<T>> {
    let key = format!("adam.{which}.{name}");
    let fused = spec_of(Param::WQkv).name.rsplit_once('.').map_or("", |(stem, _)| stem);
    let split = name.rsplit_once('.').and_then(|(stem, kind)| {
        let block = stem.strip_suffix(fused)?; // "h.{l}."
        Some((block.to_string(), kind.to_string()))
    });
    match split {
        Some((block, kind)) if state.info(&key).is_none() && cols.is_multiple_of(3) => {
            let mut m = DMatrix::zeros(rows, cols);
            for (k, map) in ["q", "k", "v"].into_iter().enumerate() {
                let part = format!("adam.{which}.{block}attn.{map}.{kind}");
                m.columns_mut(k * cols / 3, cols / 3).copy_from(&state.matrix::<T>(
                    &part,
                    rows,
                    cols / 3,
                )?);
            }
            Ok(m)
        }
        _ => state.matrix::<T>(&key, rows, cols),
    }
}

/// Loads a trainer saved by [`save_trainer`]: model, moments, generator, step and history.
/// `fresh` supplies the optimiser's hyper-parameters (a resumed run keeps its schedule).
pub fn load_trainer<T: Float>(dir: &Path, fresh: &Trainer<T>) -> Result<Trainer<T>> {
    let config = read_config(dir)?;
    let model_file = SafeTensors::read(&dir.join(MODEL_FILE))?;
    let state = SafeTensors::read(&dir.join(STATE_FILE))?;
    trainer_from_safetensors(config, &model_file, &state, fresh)
}

/// The work of [`load_trainer`] on files already parsed: the model from `model_file` (see
/// [`model_from_safetensors`]), then the moments, generator, step and history from `state`,
/// each checked against the model and against each other.
pub fn trainer_from_safetensors<T: Float>(
    config: Config,
    model_file: &SafeTensors,
    state: &SafeTensors,
    fresh: &Trainer<T>,
) -> Result<Trainer<T>> {
    let model = model_from_safetensors::<T>(config, model_file)?;
    trainer_from_state(model, model_file, state, fresh)
}

/// The trainer of `model`, already read from `model_file`, at the state `state` holds: the
/// moments (under [`Trainable::parameter_names`], each of the model's shape), the generator,
/// the step and the history, each checked against the model and against each other; `fresh`
/// supplies the optimiser's hyper-parameters and the products' format.
pub fn trainer_from_state<T: Float, M: Trainable<T>>(
    mut model: M,
    model_file: &SafeTensors,
    state: &SafeTensors,
    fresh: &Trainer<T, M>,
) -> Result<Trainer<T, M>> {
    let file = state.file.clone();
    let meta = |key: &str| {
        state.meta(key).ok_or_else(|| parse_error(&file, format!("metadata {key} is missing")))
    };
    let number = |key: &str| -> Result<u64> {
        meta(key)?
            .parse::<u64>()
            .map_err(|_| parse_error(&file, format!("metadata {key} is not a whole number")))
    };
    let step = number("step")?;
    if model_file.meta("step") != Some(meta("step")?) {
        return Err(parse_error(
            &file,
            format!(
                "the training state is for step {step} but {MODEL_FILE} is for step {} (an \
                    interrupted save?)",
                model_file.meta("step").unwrap_or("unknown")
            ),
        ));
    }
    let adam_steps = number("adam_steps")?;
    let parts: Vec<u64> = meta("rng_state")?
        .split(',')
        .map(|s| s.parse::<u64>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| parse_error(&file, "rng_state is not four integers"))?;
    let rng_state: [u64; 4] =
        parts.try_into().map_err(|_| parse_error(&file, "rng_state is not four integers"))?;
    let names = model.parameter_names();
    let shapes: Vec<(String, usize, usize)> = names
        .into_iter()
        .zip(model.parameters_mut())
        .map(|(n, m)| (n, m.nrows(), m.ncols()))
        .collect();
    let mut first = Vec::new();
    let mut second = Vec::new();
    if adam_steps > 0 {
        for (name, r, c) in &shapes {
            first.push(moment(state, "m", name, *r, *c)?);
            second.push(moment(state, "v", name, *r, *c)?);
        }
    }
    let moments = AdamMoments::from_parts(first, second, adam_steps)
        .map_err(|e| parse_error(&file, e.to_string()))?;
    let column = |key: &str| -> Result<Vec<f64>> {
        let n = state.info(key).map(|t| t.shape.iter().product()).unwrap_or(0);
        state.values_f64(key, &[n])
    };
    let (loss, lr, norm, tokens) = (
        column("history.loss")?,
        column("history.lr")?,
        column("history.grad_norm")?,
        column("history.tokens")?,
    );
    if [lr.len(), norm.len(), tokens.len()].iter().any(|&n| n != loss.len())
        || loss.len() as u64 != step
    {
        return Err(parse_error(
            &file,
            format!("the history holds {} records for step {step}", loss.len()),
        ));
    }
    let history = (0..loss.len())
        .map(|i| StepRecord {
            step: i,
            loss: loss[i],
            lr: lr[i],
            grad_norm: norm[i],
            tokens: tokens[i] as usize,
            skipped: norm[i] == f64::INFINITY, // a diverging run is never saved
        })
        .collect();
    let mut optimizer = fresh.optimizer.clone();
    optimizer.moments = moments;
    // `fresh`'s products' format with the S the run reached (older states: `fresh`'s S).
    let mut precision = fresh.precision();
    if let Some(s) = state.meta("loss_scale") {
        let scale = s.parse::<f64>().ok().and_then(|s| Precision::new(precision.inputs, s).ok());
        let why = || format!("loss_scale {s} is not a power of two from 1 to 2^24");
        precision = scale.ok_or_else(|| parse_error(&file, why()))?;
    }
    let mut workspace = crate::ch09_gpt::fast::FusedStep::new();
    workspace.set_precision(precision);
    Ok(Trainer {
        model,
        optimizer,
        rng: Rng::from_state(rng_state),
        step: step as usize,
        history,
        workspace,
        own: M::Workspace::default(),
    })
}
