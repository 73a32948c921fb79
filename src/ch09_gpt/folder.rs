//! A checkpoint folder as one unit: numbered generation folders and a pointer switched by one
//! atomic rename.
//!
//! `rename(2)` can replace a file but not a non-empty folder, and a checkpoint is several files
//! (`config.json`, `model.safetensors`, `training_state.safetensors`, the tokenizer,
//! `train.json`) that are only useful together. So a run's folder `DIR` holds:
//!
//! ```text
//! DIR/CURRENT            one line: the name of the complete generation, e.g. gen-000007
//! DIR/gen-000007/        every file of one save
//! ```
//!
//! A save ([`save_generation`]) writes every file into a temporary folder `DIR/.gen-N.tmp-PID`
//! (each file flushed to the disk), renames that folder to `gen-N` (N one more than any
//! generation present), then writes the pointer to `DIR/.CURRENT.tmp-PID` and renames it onto
//! `CURRENT`. That last rename is the commit: before it every reader sees the previous
//! generation, after it the new one, and there is no moment in between. Only then are older
//! generations and leftover temporaries (`.*.tmp-PID`, from a killed save) removed. What is
//! drawn from the saved state (the loss plot) is written into the temporary folder before the
//! commit too ([`save_generation_with`]), so it belongs to the same save. An
//! interrupted save, at any byte, therefore leaves the previous checkpoint as it was; a run
//! killed before its first save leaves a folder with no `CURRENT`, which [`resolve`] refuses
//! with a message saying so, and which `gpt train` reuses without `--force`.
//!
//! A folder without `CURRENT` but with a `config.json` is read as it is: a checkpoint written
//! before generations existed, or Hugging Face's GPT-2 files ([`Resolved::flat`] says so, and the
//! command line prints a one-line note).
//!
//! Every write goes through a [`Sink`], so a test can swap the disk for one that stops after N
//! bytes and check that no such stop loses the last checkpoint.

use crate::error::{Error, Result, invalid};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The pointer file naming the folder's complete generation.
pub const POINTER_FILE: &str = "CURRENT";
/// The generation folders' prefix (`gen-000001`, …).
pub const GENERATION_PREFIX: &str = "gen-";

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.display().to_string(), source }
}

/// Where a save's bytes go: the disk ([`Disk`]), or in a test a writer that fails part-way.
pub trait Sink {
    /// Creates the folder `path` (its parent exists or is created too).
    fn create_dir(&mut self, path: &Path) -> std::io::Result<()>;
    /// Creates (or truncates) the file `path`, writes `bytes` and flushes them to the disk.
    fn write_file(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()>;
    /// Renames `from` to `to` (replacing a file `to`).
    fn rename(&mut self, from: &Path, to: &Path) -> std::io::Result<()>;
}

/// The real file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct Disk;

impl Sink for Disk {
    fn create_dir(&mut self, path: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(path)
    }

    fn write_file(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let mut f = std::fs::File::create(path)?;
        f.write_all(bytes)?;
        f.sync_all()
    }

    fn rename(&mut self, from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::rename(from, to)?;
        // Make the rename itself durable (best effort: not every system syncs a folder).
        if let Some(parent) = to.parent()
            && let Ok(d) = std::fs::File::open(parent)
        {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// The number of a generation folder's name (`gen-000042` → 42).
pub fn generation_number(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(GENERATION_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether `name` is a temporary left by a save (`.NAME.tmp-PID`, or a plot's
/// `.STEM.tmp-PID.EXT`).
pub fn is_temporary(name: &str) -> bool {
    name.starts_with('.')
        && name.rsplit_once(".tmp-").is_some_and(|(_, rest)| {
            let pid = rest.split_once('.').map_or(rest, |(pid, _)| pid);
            !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())
        })
}

fn entries(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Whether `dir` holds a checkpoint a new run would replace: a pointer, or (the older layout) a
/// `config.json` or `model.safetensors` at its top.
pub fn holds_checkpoint(dir: &Path) -> bool {
    ["CURRENT", "config.json", "model.safetensors"].iter().any(|f| dir.join(f).exists())
}

/// A checkpoint folder's files, found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The folder that holds the files (a generation folder, or the folder itself).
    pub path: PathBuf,
    /// True for a folder without a pointer read as it is (written before generations existed,
    /// or Hugging Face's files).
    pub flat: bool,
}

/// Finds the complete checkpoint in `dir`: the generation its pointer names, or the folder itself
/// when it has no pointer but a `config.json`. A folder with neither (a run killed before its
/// first save) is refused with a message that says so.
pub fn resolve(dir: &Path) -> Result<Resolved> {
    let pointer = dir.join(POINTER_FILE);
    match std::fs::read_to_string(&pointer) {
        Ok(text) => {
            let name = text.trim();
            let path = dir.join(name);
            if generation_number(name).is_none() || !path.is_dir() {
                return Err(invalid(
                    "checkpoint",
                    "CURRENT",
                    format!(
                        "{} names {name:?}, which is not a generation folder in {}",
                        pointer.display(),
                        dir.display()
                    ),
                ));
            }
            Ok(Resolved { path, flat: false })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !dir.exists() {
                return Err(io(dir)(e));
            }
            if dir.join("config.json").exists() {
                return Ok(Resolved { path: dir.to_path_buf(), flat: true });
            }
            Err(invalid(
                "checkpoint",
                "folder",
                format!(
                    "{} holds no complete checkpoint (no {POINTER_FILE}: a run stopped before \
                     its first save?); train into it again",
                    dir.display()
                ),
            ))
        }
        Err(e) => Err(io(&pointer)(e)),
    }
}

/// Removes what earlier saves left behind in `dir`: temporaries (`.*.tmp-PID`, inside the
/// generation `keep` too) and every generation folder but `keep`. Best effort: what cannot be
/// removed stays for the next save.
pub fn clean(dir: &Path, keep: Option<&str>) {
    if let Some(k) = keep {
        for name in entries(&dir.join(k)) {
            if is_temporary(&name) {
                let _ = std::fs::remove_file(dir.join(k).join(&name));
            }
        }
    }
    for name in entries(dir) {
        let path = dir.join(&name);
        let old_generation = generation_number(&name).is_some() && Some(name.as_str()) != keep;
        if is_temporary(&name) || old_generation {
            if path.is_dir() {
                let _ = std::fs::remove_dir_all(&path);
            } else {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

/// Saves `files` (name, contents) as the next generation of `dir` through `sink`, switches the
/// pointer to it, then removes older generations and leftover temporaries. Returns the new
/// generation's folder. If any write fails, the pointer still names the previous generation.
pub fn save_generation(
    sink: &mut dyn Sink,
    dir: &Path,
    files: &[(String, Vec<u8>)],
) -> Result<PathBuf> {
    save_generation_with(sink, dir, files, &mut |_| Ok(()))
}

/// [`save_generation`], with `finish` called on the temporary folder once every file is in it
/// and before the generation is committed: what it writes there (the loss plot) belongs to the
/// same save, and a failure or a kill inside it leaves the previous generation current and its
/// own temporaries inside the temporary folder, which the next save removes.
pub fn save_generation_with(
    sink: &mut dyn Sink,
    dir: &Path,
    files: &[(String, Vec<u8>)],
    finish: &mut dyn FnMut(&Path) -> Result<()>,
) -> Result<PathBuf> {
    sink.create_dir(dir).map_err(io(dir))?;
    let current = std::fs::read_to_string(dir.join(POINTER_FILE)).ok();
    let current = current.as_deref().map(str::trim);
    // Leftovers of a killed save go first (the generation the pointer names stays).
    clean(dir, current);
    let next = entries(dir)
        .iter()
        .filter_map(|n| generation_number(n))
        .chain(current.and_then(generation_number))
        .max()
        .unwrap_or(0)
        + 1;
    let name = format!("{GENERATION_PREFIX}{next:06}");
    let pid = std::process::id();
    let tmp = dir.join(format!(".{name}.tmp-{pid}"));
    sink.create_dir(&tmp).map_err(io(&tmp))?;
    for (file, bytes) in files {
        let path = tmp.join(file);
        sink.write_file(&path, bytes).map_err(io(&path))?;
    }
    finish(&tmp)?;
    let generation = dir.join(&name);
    sink.rename(&tmp, &generation).map_err(io(&generation))?;
    let pointer_tmp = dir.join(format!(".{POINTER_FILE}.tmp-{pid}"));
    sink.write_file(&pointer_tmp, format!("{name}\n").as_bytes()).map_err(io(&pointer_tmp))?;
    let pointer = dir.join(POINTER_FILE);
    sink.rename(&pointer_tmp, &pointer).map_err(io(&pointer))?;
    clean(dir, Some(&name));
    Ok(generation)
}

/// FNV-1a, 64 bits, of `bytes`: the fingerprint a run records for its tokenizer.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The fingerprint of a set of files (name, contents), independent of their order: FNV-1a 64
/// over each name, its length and its bytes, the files sorted by name, as 16 hex digits.
pub fn files_hash(files: &[(String, Vec<u8>)]) -> String {
    let mut sorted: Vec<&(String, Vec<u8>)> = files.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut all = Vec::new();
    for (name, bytes) in sorted {
        all.extend_from_slice(name.as_bytes());
        all.push(0);
        all.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        all.extend_from_slice(bytes);
    }
    format!("{:016x}", fnv1a64(&all))
}
