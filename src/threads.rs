//! How many threads a large product may use: the thread-count policy.
//!
//! One place decides it, in this order: a [`with_threads`] choice of the current thread (scoped,
//! so tests and chapter 9's batch shards cannot disturb each other), the environment variable
//! `LLM_WORKBOOK_THREADS` (read once), else every core the machine offers
//! ([`std::thread::available_parallelism`]). [`crate::matmul`] asks
//! [`default_threads`] when a product is large enough to split; the optimisers and chapter 9's
//! shards ask it too. [`crate::matmul::product_choices`] carries the choice into a new thread.

use std::cell::Cell;
use std::sync::OnceLock;

/// The environment variable that sets how many threads a large product may use.
pub const THREADS_ENV: &str = "LLM_WORKBOOK_THREADS";

thread_local! {
    static THREAD_THREADS: Cell<Option<usize>> = const { Cell::new(None) };
}

/// How many threads a large product may use: the [`with_threads`] choice of this thread if there
/// is one, else `LLM_WORKBOOK_THREADS` if set to a positive integer, otherwise the cores the
/// machine offers this process ([`std::thread::available_parallelism`], which follows CPU affinity
/// and cgroup quotas on Linux).
pub fn default_threads() -> usize {
    THREAD_THREADS.with(Cell::get).unwrap_or_else(process_threads)
}

/// Runs `f` with products started on this thread limited to `threads` threads (at least 1), then
/// restores the previous choice. Work that is already split over threads (chapter 9's batch
/// shards) runs each part's products on one thread this way, so two levels of threads never
/// compete for the same cores.
pub fn with_threads<R>(threads: usize, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            THREAD_THREADS.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(THREAD_THREADS.with(|c| c.replace(Some(threads.max(1)))));
    f()
}

/// This thread's [`with_threads`] choice (carried into new threads by
/// [`crate::matmul::ProductChoices`]).
pub(crate) fn thread_choice() -> Option<usize> {
    THREAD_THREADS.with(Cell::get)
}

/// Sets this thread's choice (`None`: back to the process-wide count).
pub(crate) fn set_thread_choice(threads: Option<usize>) {
    THREAD_THREADS.with(|c| c.set(threads));
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
