//! How many threads a large product may use: the thread-count policy.
//!
//! One place decides the process's count: the environment variable `LLM_WORKBOOK_THREADS` (read
//! once), else every core the machine offers ([`std::thread::available_parallelism`]). A product
//! whose settings name no count ([`crate::matmul::Settings::threads`]) asks [`default_threads`]
//! when it is large enough to split; the optimisers and chapter 9's step ask it too, unless they
//! were given a count by argument (chapter 9's batch shards give their products the threads left
//! over). Nothing here depends on the thread that asks.
//!
//! It is also the crate's one scheduler: every computation shared between threads goes through
//! [`share_pieces`], a fork and join over pieces the caller cuts (a product's blocks of C, a
//! one-row product's runs of columns, an optimiser's runs of parameters, the training step's
//! shards and the pieces of their sum) on rayon's pool. No other module starts a thread for
//! computing (a repository test holds it); the exercises' runner starts processes and reads their
//! output on a thread, which is waiting, not computing shared out. Chapter 10 gives the
//! measurements that chose rayon's pool over threads started for each use.

use std::sync::{Mutex, OnceLock, PoisonError};

/// The environment variable that sets how many threads a large product may use.
pub const THREADS_ENV: &str = "LLM_WORKBOOK_THREADS";

/// How many threads a large product may use when its settings name no count:
/// `LLM_WORKBOOK_THREADS` if set to a positive integer, otherwise the cores the machine offers
/// this process ([`std::thread::available_parallelism`], which follows CPU affinity and cgroup
/// quotas on Linux).
pub fn default_threads() -> usize {
    process_threads()
}

/// The thread count an `LLM_WORKBOOK_THREADS` setting asks for: `None` when unset (or empty),
/// else a whole number ≥ 1; anything else is the reason it is ignored.
pub fn parse_threads(setting: Option<&str>) -> Result<Option<usize>, String> {
    let Some(text) = setting.map(str::trim).filter(|t| !t.is_empty()) else { return Ok(None) };
    match text.parse::<usize>() {
        Ok(t) if t >= 1 => Ok(Some(t)),
        _ => Err(format!("{text:?} is not a whole number of threads ≥ 1")),
    }
}

/// The process-wide thread count: `LLM_WORKBOOK_THREADS` or the cores, read once (a setting
/// that is no count is warned about on standard error and ignored).
fn process_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let setting = std::env::var(THREADS_ENV).ok();
        match parse_threads(setting.as_deref()) {
            Ok(Some(t)) => t,
            Ok(None) => cores,
            Err(reason) => {
                // Warned like a bad LLM_WORKBOOK_KERNEL: the run goes on with the cores.
                eprintln!("llm-workbook: ignoring {THREADS_ENV}: {reason}; using {cores} threads");
                cores
            }
        }
    })
}

/// Runs `work(state, piece)` on every piece, on as many threads as there are `states` (never
/// more than pieces), each thread with its own state (a product's packing buffers, say): the
/// caller with `states[0]`, and a task for each further state on [rayon]'s pool (one thread per
/// core, started once per process and asleep between uses). Returns the pieces' results in piece
/// order.
///
/// The threads take the pieces one at a time from a shared queue, so a thread that finishes early
/// (or a core another program lent back) takes the next. Which thread ran a piece depends on
/// timing, but the pieces are the caller's, fixed before any thread starts, and each writes only
/// what it owns: the results do not depend on the thread count, bit for bit. A count above the
/// cores gives the same pieces, run by at most the pool's threads and the caller at once. What a
/// piece computes with (a product's settings, say) it takes from `work`'s captures, so it is the
/// same on whichever thread takes it. A panic in a piece is raised again here. With no state
/// there is nothing to run on: an internal error, and a panic.
///
/// [rayon]: https://docs.rs/rayon
pub fn share_pieces<S: Send, P: Send, R: Send>(
    states: &mut [S],
    pieces: Vec<P>,
    work: impl Fn(&mut S, P) -> R + Sync,
) -> Vec<R> {
    let count = pieces.len();
    let threads = states.len().min(count).max(1);
    let Some((mine, helpers)) = states.split_first_mut() else {
        assert!(count == 0, "share_pieces: {count} pieces and no state to run them with");
        return Vec::new();
    };
    if threads == 1 {
        return pieces.into_iter().map(|p| work(mine, p)).collect();
    }
    let queue = Mutex::new(pieces.into_iter().enumerate());
    let done = Mutex::new(Vec::with_capacity(count));
    // Takes pieces until the queue is empty. A lock is held only to take a piece or to hand in
    // the results; a poisoned lock (a piece panicked) still holds valid data.
    let drain = |state: &mut S| {
        let mut mine = Vec::new();
        loop {
            let next = queue.lock().unwrap_or_else(PoisonError::into_inner).next();
            let Some((i, piece)) = next else { break };
            mine.push((i, work(state, piece)));
        }
        done.lock().unwrap_or_else(PoisonError::into_inner).extend(mine);
    };
    let drain = &drain;
    rayon::in_place_scope(|scope| {
        for state in &mut helpers[..threads - 1] {
            scope.spawn(move |_| drain(state));
        }
        drain(mine);
    });
    let mut slots: Vec<Option<R>> = (0..count).map(|_| None).collect();
    for (i, r) in done.into_inner().unwrap_or_else(PoisonError::into_inner) {
        slots[i] = Some(r);
    }
    slots.into_iter().map(|r| r.expect("every piece was taken from the queue")).collect()
}
