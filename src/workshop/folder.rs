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
//! generation, after it the new one. The generation the pointer named before the commit is kept
//! until the next save, so a reader that read the pointer a moment before the switch still finds
//! every file of the generation it named; and a loader that meets a generation removed under it
//! reads the pointer again ([`read_consistent`]). So no reader ever sees a moment in between.
//! Only after the commit are older generations and leftover temporaries removed. What is
//! drawn from the saved state (the loss plot) is written into the temporary folder before the
//! commit too ([`save_generation_with`]), so it belongs to the same save. An
//! interrupted save, at any byte, therefore leaves the previous checkpoint as it was; a run
//! killed before its first save leaves a folder with no `CURRENT`, which [`resolve`] refuses
//! with a message saying so, and which `gpt train` reuses without `--force`. A complete
//! generation whose pointer is missing (deleted by hand) is found again: the newest one holding
//! a model is read, and the next save keeps it.
//!
//! A save removes only what it can prove is its own: names in the exact formats above
//! ([`is_generation`]: `gen-` and at least six digits as `{:06}` writes them; [`is_temporary`])
//! and the lock file. A user's `gen-7/`, `gen-2024/` or `.draft.tmp-1` are never touched
//! ([`foreign_entries`] lists them, and `gpt train` refuses such a folder without `--force`).
//!
//! A folder has one writer at a time: the writer holds [`Lock`], an exclusive lock on the file
//! [`LOCK_FILE`] in the folder (`flock(2)`, released by the kernel when the process ends, even by
//! `kill -9`), with its process id written inside, for the whole run, from before its first
//! look at the folder. A second writer is refused in one line naming the folder and that id.
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
/// The digits of a generation's number, at least (`{:06}`).
pub const GENERATION_DIGITS: usize = 6;
/// The lock file a writer holds ([`Lock`]); it holds the writer's process id.
pub const LOCK_FILE: &str = "LOCK";
/// The plots drawn into a generation before its commit leave temporaries `.STEM.tmp-PID.EXT`
/// with these extensions.
const PLOT_EXTENSIONS: [&str; 2] = ["png", "svg"];
/// How many times a reader reads the pointer again when the generation it named went away
/// under it (two saves while it read).
pub const READ_ATTEMPTS: usize = 5;

/// The loss plot's file stem in a run's folder (`loss.png`, `loss.svg`).
pub const LOSS_PLOT: &str = "loss";

/// A failed file operation on `path`, as the crate's error naming it.
pub(super) fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
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

/// The number of a generation folder's name as a save writes it (`gen-000042` → 42): `gen-` and
/// at least [`GENERATION_DIGITS`] digits, exactly as `{:06}` prints the number (`gen-7`,
/// `gen-2024` and `gen-0000042` are not ours).
pub fn generation_number(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(GENERATION_PREFIX)?;
    if digits.len() < GENERATION_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    (format!("{n:06}") == digits).then_some(n)
}

/// Whether `name` is a generation folder's name in the format a save writes.
pub fn is_generation(name: &str) -> bool {
    generation_number(name).is_some()
}

/// Whether `name` is a temporary a save writes: `.gen-N.tmp-PID` (a generation being written),
/// `.CURRENT.tmp-PID` (the pointer), or a plot's `.loss.tmp-PID.png` / `.svg` (inside a
/// generation). Nothing else with `.tmp-` in its name is ours (`.draft.tmp-1` is not).
pub fn is_temporary(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('.') else { return false };
    let Some((stem, tail)) = rest.rsplit_once(".tmp-") else { return false };
    let (pid, ext) = match tail.split_once('.') {
        Some((pid, ext)) => (pid, Some(ext)),
        None => (tail, None),
    };
    let pid_ok = !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit());
    let ours = match ext {
        None => is_generation(stem) || stem == POINTER_FILE,
        Some(ext) => stem == LOSS_PLOT && PLOT_EXTENSIONS.contains(&ext),
    };
    pid_ok && ours
}

/// Whether a save wrote `name` at a folder's top: the pointer, the lock file, a generation or a
/// temporary.
pub fn is_ours(name: &str) -> bool {
    name == POINTER_FILE || name == LOCK_FILE || is_generation(name) || is_temporary(name)
}

/// The entries of `dir` a save did not write (sorted): a user's own files, or a checkpoint of
/// the older flat layout. Empty when `dir` does not exist.
pub fn foreign_entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = entries(dir).into_iter().filter(|n| !is_ours(n)).collect();
    v.sort();
    v
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

/// Whether `dir` holds a checkpoint a new run would replace: a pointer, a complete generation
/// (see [`newest_complete`]), or (the older layout) a `config.json` or `model.safetensors` at its
/// top.
pub fn holds_checkpoint(dir: &Path) -> bool {
    ["CURRENT", "config.json", "model.safetensors"].iter().any(|f| dir.join(f).exists())
        || newest_complete(dir).is_some()
}

/// The checkpoint folder whose saves would remove `path`, if any: `path` or one of the folders
/// above it is named as a generation or a temporary ([`is_generation`], [`is_temporary`]) inside
/// a folder that holds a checkpoint or a lock. A save removes every generation it did not write
/// last, so a folder written there (`--out CK/gen-000099`) would be lost at CK's next save.
pub fn owning_checkpoint(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    // Through symbolic links too, as far as the path exists.
    let existing = absolute.ancestors().find(|a| a.exists()).and_then(|a| {
        let rest = absolute.strip_prefix(a).ok()?;
        Some(std::fs::canonicalize(a).ok()?.join(rest))
    });
    for candidate in [Some(absolute.clone()), existing].into_iter().flatten() {
        for at in candidate.ancestors() {
            let (Some(name), Some(parent)) = (at.file_name(), at.parent()) else { continue };
            let name = name.to_string_lossy();
            let saved = holds_checkpoint(parent) || parent.join(LOCK_FILE).exists();
            if (is_generation(&name) || is_temporary(&name)) && saved {
                return Some(parent.to_path_buf());
            }
        }
    }
    None
}

/// The files a generation holds when its save completed: every save writes them, and a
/// generation folder is renamed into place only once all its files are written.
const COMPLETE_FILES: [&str; 2] = ["config.json", "model.safetensors"];

/// The newest generation of `dir` (by number, in the format a save writes) that holds a model:
/// what a folder whose pointer is missing is read from.
pub fn newest_complete(dir: &Path) -> Option<String> {
    let mut gens: Vec<(u64, String)> =
        entries(dir).into_iter().filter_map(|n| generation_number(&n).map(|g| (g, n))).collect();
    gens.sort();
    gens.into_iter()
        .rev()
        .map(|(_, n)| n)
        .find(|n| COMPLETE_FILES.iter().all(|f| dir.join(n).join(f).is_file()))
}

/// A checkpoint folder's files, found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The folder that holds the files (a generation folder, or the folder itself).
    pub path: PathBuf,
    /// True for a folder without a pointer read as it is (written before generations existed,
    /// or Hugging Face's files).
    pub flat: bool,
    /// True for a generation found without its pointer (the newest complete one, see
    /// [`newest_complete`]).
    pub recovered: bool,
}

/// Finds the complete checkpoint in `dir`: the generation its pointer names; without a pointer,
/// the newest complete generation ([`newest_complete`]), else the folder itself when it has a
/// `config.json`. A folder with none of these is refused with a message that says what it is: a
/// run killed before its first save (it left a generation, a temporary or a lock no one holds),
/// or a folder that never was a checkpoint.
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
            Ok(Resolved { path, flat: false, recovered: false })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !dir.exists() {
                return Err(io(dir)(e));
            }
            if let Some(name) = newest_complete(dir) {
                return Ok(Resolved { path: dir.join(name), flat: false, recovered: true });
            }
            if dir.join("config.json").exists() {
                return Ok(Resolved { path: dir.to_path_buf(), flat: true, recovered: false });
            }
            // Only a writer leaves generations, temporaries or a lock no one holds behind:
            // without them the folder never was a checkpoint.
            let traces =
                entries(dir).iter().any(|n| is_generation(n) || is_temporary(n)) || stale_lock(dir);
            let reason = if traces {
                "no complete checkpoint (a run stopped before its first save); run it again"
            } else {
                "not a checkpoint folder (no CURRENT, no generation, no config.json)"
            };
            let file = dir.display().to_string();
            Err(Error::Parse { file, line: None, reason: reason.to_string() })
        }
        Err(e) => Err(io(&pointer)(e)),
    }
}

/// Runs `load` on the checkpoint [`resolve`] finds in `dir`. When it fails and the pointer has
/// moved meanwhile (a writer committed a new generation, and a later save removed the one that
/// was read), the pointer is read again, up to [`READ_ATTEMPTS`] times: a reader never fails
/// because a save happened while it read.
pub fn read_consistent<T>(dir: &Path, mut load: impl FnMut(&Resolved) -> Result<T>) -> Result<T> {
    let pointer = |dir: &Path| std::fs::read_to_string(dir.join(POINTER_FILE)).ok();
    let mut attempt = 0;
    loop {
        let before = pointer(dir);
        let result = resolve(dir).and_then(|r| load(&r));
        attempt += 1;
        match result {
            Err(_) if attempt < READ_ATTEMPTS && pointer(dir) != before => continue,
            other => return other,
        }
    }
}

/// Removes what earlier saves left behind in `dir`: temporaries ([`is_temporary`], inside the
/// generations `keep` too) and every generation folder ([`is_generation`]) not in `keep`.
/// Nothing else is touched. Best effort: what cannot be removed stays for the next save. Only a
/// process holding the folder's [`Lock`] may call it (another writer's temporaries are its own).
pub fn clean(dir: &Path, keep: &[&str]) {
    for k in keep {
        for name in entries(&dir.join(k)) {
            if is_temporary(&name) {
                let _ = std::fs::remove_file(dir.join(k).join(&name));
            }
        }
    }
    for name in entries(dir) {
        let path = dir.join(&name);
        let old_generation = is_generation(&name) && !keep.contains(&name.as_str());
        if is_temporary(&name) || old_generation {
            if path.is_dir() {
                let _ = std::fs::remove_dir_all(&path);
            } else {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

/// The generation a folder's readers see now: the one its pointer names, else the newest
/// complete one.
fn current_generation(dir: &Path) -> Option<String> {
    match std::fs::read_to_string(dir.join(POINTER_FILE)) {
        Ok(text) => Some(text.trim().to_string()),
        Err(_) => newest_complete(dir),
    }
}

/// Saves `files` (name, contents) as the next generation of `dir` through `sink`, switches the
/// pointer to it, then removes leftover temporaries and the generations older than the one the
/// pointer named before (which stays until the next save). Returns the new generation's folder.
/// If any write fails, the pointer still names the previous generation.
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
    let current = current_generation(dir);
    let current = current.as_deref();
    // Leftovers of a killed save go first; every generation stays until the commit (a reader
    // may be reading the previous one).
    let present: Vec<String> = entries(dir).into_iter().filter(|n| is_generation(n)).collect();
    clean(dir, &present.iter().map(String::as_str).collect::<Vec<_>>());
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
    // The previous generation stays until the next save: a reader that read the pointer just
    // before the switch has a whole save interval to read it.
    let keep: Vec<&str> = [Some(name.as_str()), current].into_iter().flatten().collect();
    clean(dir, &keep);
    Ok(generation)
}

/// A folder's one writer: an exclusive lock on `DIR/LOCK` (see the module's text), held until
/// dropped or the process ends. Dropped, it removes the lock file, and the folders it created
/// too while they are empty (a run refused before its first save).
#[derive(Debug)]
pub struct Lock {
    file: std::fs::File,
    dir: PathBuf,
    /// The folders this lock created, `dir` first, then its missing parents.
    created: Vec<PathBuf>,
}

/// How many times (10 ms apart) a refused writer reads the lock file for the holder's process
/// id, which the holder writes just after it takes the lock.
const HOLDER_ID_ATTEMPTS: usize = 20;

/// The most bytes a refused writer reads of the lock file: a process id has at most 10 digits,
/// so anything longer is not one (and is not quoted).
const HOLDER_ID_BYTES: u64 = 24;

impl Lock {
    /// Takes the lock of `dir` (created, with its parents, if missing) for `command` (named in
    /// the error): refused in one line naming the folder and the holder's process id when
    /// another process holds it, or naming the lock file when it is not a plain file of its own
    /// (a symbolic link is never followed, so its target is never written).
    pub fn take(dir: &Path, command: &'static str) -> Result<Lock> {
        Lock::take_with(dir, command, &mut |_| {})
    }

    /// [`Lock::take`] with `between(dir)` called on every attempt after the folder is made and
    /// before the lock file is opened: a test removes the folder there, as another writer that
    /// created it removes it when its run fails before the first save. The folder is then made
    /// again and the lock taken in it.
    #[doc(hidden)]
    pub fn take_with(
        dir: &Path,
        command: &'static str,
        between: &mut dyn FnMut(&Path),
    ) -> Result<Lock> {
        let path = dir.join(LOCK_FILE);
        let mut created: Vec<PathBuf> = Vec::new();
        // The file is opened again when a releasing writer removed it (or its folder) between our
        // open and our lock: then we would hold a lock on a name no one else sees.
        for _ in 0..READ_ATTEMPTS {
            let missing = dir
                .ancestors()
                .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
                .map(Path::to_path_buf);
            for d in missing.collect::<Vec<_>>() {
                if !created.contains(&d) {
                    created.push(d);
                }
            }
            // The deepest first: that is the order they are removed in.
            created.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
            std::fs::create_dir_all(dir).map_err(|e| {
                invalid(command, "folder", format!("cannot create {}: {e}", dir.display()))
            })?;
            between(dir);
            // A folder, a device or a pipe where the lock file should be is never opened.
            let meta = std::fs::symlink_metadata(&path);
            if meta.is_ok_and(|m| !m.is_file() && !m.file_type().is_symlink()) {
                return Err(lock_refused(&path, None));
            }
            let mut file = match open_lock(&path) {
                Ok(file) => file,
                // The folder went away since it was made (its maker's run failed): make it again.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(lock_refused(&path, Some(e))),
            };
            if !plain_file_of_its_own(&file) {
                return Err(lock_refused(&path, None));
            }
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    let who = match holder_id(&mut file) {
                        Some(pid) => format!("process {pid}"),
                        None => "another process".to_string(),
                    };
                    // The lock file's path already names the folder: the reason does not repeat
                    // it, so the line stays within 100 columns for any short folder name.
                    let reason =
                        format!("the folder is being written by {who}; wait, or choose another");
                    return Err(Error::Parse {
                        file: path.display().to_string(),
                        line: None,
                        reason,
                    });
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(lock_refused(&path, Some(e))),
            }
            if !same_file(&file, &path) {
                continue;
            }
            file.set_len(0).map_err(io(&path))?;
            file.write_all(format!("{}\n", std::process::id()).as_bytes()).map_err(io(&path))?;
            return Ok(Lock { file, dir: dir.to_path_buf(), created });
        }
        Err(lock_refused(&path, Some(std::io::Error::other("the lock file keeps changing"))))
    }
}

/// Opens (or creates) the lock file at `path` for reading and writing, never through a symbolic
/// link: on Unix with `O_NOFOLLOW`, elsewhere after a look at the name itself.
fn open_lock(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
    }
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(std::io::Error::from_raw_os_error(LINK_REFUSED));
    }
    options.open(path)
}

/// The operating system's error for a symbolic link met where `O_NOFOLLOW` forbids one.
#[cfg(unix)]
const LINK_REFUSED: i32 = rustix::io::Errno::LOOP.raw_os_error();
#[cfg(not(unix))]
const LINK_REFUSED: i32 = 1;

/// Whether the open `file` is a plain file with no other name (not a folder, a device, a pipe,
/// or a hard link to a file of the user's, which writing the process id would overwrite; a file
/// a releasing writer unlinked meanwhile has no name at all, and is opened again).
fn plain_file_of_its_own(file: &std::fs::File) -> bool {
    let Ok(meta) = file.metadata() else { return false };
    #[cfg(unix)]
    let one_name = {
        use std::os::unix::fs::MetadataExt;
        meta.nlink() <= 1
    };
    #[cfg(not(unix))]
    let one_name = true;
    meta.is_file() && one_name
}

/// The one-line refusal naming the lock file at `path` that cannot be used: a symbolic link
/// (never followed), not a plain file of its own (a folder, a device, a hard link to another
/// file), or another failure `error` to open or lock it.
fn lock_refused(path: &Path, error: Option<std::io::Error>) -> Error {
    let reason = match error {
        Some(e) if e.raw_os_error() == Some(LINK_REFUSED) => {
            "a symbolic link, never followed as a lock; remove it".to_string()
        }
        None => "not a plain file of its own (a folder, a device, a hard link); remove it".into(),
        Some(e) => format!("cannot open or lock it as the folder's lock: {e}"),
    };
    Error::Parse { file: path.display().to_string(), line: None, reason }
}

/// The process id a lock's holder wrote into the lock `file`, read through the refused writer's
/// own handle and at most [`HOLDER_ID_BYTES`] of it; none when it holds anything else (two
/// lines, a megabyte of digits).
fn holder_id(file: &mut std::fs::File) -> Option<u32> {
    use std::io::{Read, Seek, SeekFrom};
    for _ in 0..HOLDER_ID_ATTEMPTS {
        let mut bytes = Vec::new();
        let read = file.seek(SeekFrom::Start(0)).is_ok()
            && (&*file).take(HOLDER_ID_BYTES).read_to_end(&mut bytes).is_ok();
        let text = String::from_utf8_lossy(&bytes);
        if read && !text.trim().is_empty() {
            return text.trim().parse().ok();
        }
        // The holder writes its id just after taking the lock: give it a moment.
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    None
}

/// Whether `dir` holds a lock file no one holds: a writer was killed there (a live one holds it;
/// this process's own lock counts as held too).
fn stale_lock(dir: &Path) -> bool {
    let path = dir.join(LOCK_FILE);
    if std::fs::symlink_metadata(&path).map_or(true, |m| !m.is_file()) {
        return false;
    }
    std::fs::File::open(&path).is_ok_and(|f| f.try_lock_shared().is_ok())
}

/// Whether the open `file` is the one at `path` now.
#[cfg(unix)]
fn same_file(file: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_: &std::fs::File, path: &Path) -> bool {
    path.exists()
}

impl Drop for Lock {
    fn drop(&mut self) {
        // The lock file goes with the writer (a killed one leaves it, and the next writer takes
        // it over), and the folder too if this writer made it and saved nothing. The lock is
        // still held while the file goes, so no other writer holds it; one that opened the file
        // meanwhile finds its name gone after locking and opens it again ([`Lock::take`]).
        let _ = std::fs::remove_file(self.dir.join(LOCK_FILE));
        for d in &self.created {
            // Only an empty folder goes: one holding a save or anything else stays.
            if std::fs::remove_dir(d).is_err() {
                break;
            }
        }
        let _ = self.file.unlock();
    }
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
