//! How many threads a large product may use: the thread-count policy.
//!
//! One place decides it, in this order: a [`with_threads`] choice of the current thread (scoped,
//! so tests and chapter 9's batch shards cannot disturb each other), the environment variable
//! `LLM_WORKBOOK_THREADS` (read once), else every core the machine offers
//! ([`std::thread::available_parallelism`]). [`crate::matmul`] asks
//! [`default_threads`] when a product is large enough to split; the optimisers and chapter 9's
//! shards ask it too. [`share_pieces`] carries the choice (with the kernel and the backend) into
//! the threads it runs pieces on.
//!
//! It is also the crate's one scheduler: every computation shared between threads goes through
//! [`share_pieces`], a fork and join over pieces the caller cuts (a product's blocks of C, a
//! one-row product's runs of columns, an optimiser's runs of parameters, the training step's
//! shards and the pieces of their sum) on rayon's pool. No other module starts a thread for
//! computing (a repository test holds it); the exercises' runner starts processes and reads their
//! output on a thread, which is waiting, not computing shared out. Chapter 10 gives the
//! measurements that chose rayon's pool over threads started for each use.

use std::cell::Cell;
use std::sync::{Mutex, OnceLock, PoisonError};

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
/// [`share_pieces`]).
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

/// The choices a thread has made for the products it starts — its kernel
/// ([`crate::simd::with_kernel`]), backend ([`crate::backend::with_backend`]) and thread count
/// ([`with_threads`]) — which [`share_pieces`] carries into the pool's threads: thread-local
/// choices do not cross threads by themselves, so a test that forced a kernel would otherwise
/// measure another one in a piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Choices {
    kernel: Option<crate::simd::Kernel>,
    backend: Option<crate::backend::Backend>,
    threads: Option<usize>,
}

impl Choices {
    /// This thread's choices.
    fn here() -> Choices {
        Choices {
            kernel: crate::simd::thread_kernel(),
            backend: crate::backend::thread_choice(),
            threads: thread_choice(),
        }
    }

    /// Runs `f` on the current thread with these choices, then restores the thread's own.
    fn run<R>(self, f: impl FnOnce() -> R) -> R {
        struct Restore(Choices);
        impl Drop for Restore {
            fn drop(&mut self) {
                self.0.set();
            }
        }
        let _restore = Restore(Choices::here());
        self.set();
        f()
    }

    /// Makes these the current thread's choices.
    fn set(self) {
        crate::simd::set_thread_kernel(self.kernel);
        crate::backend::set_thread_choice(self.backend);
        set_thread_choice(self.threads);
    }
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
/// cores gives the same pieces, run by at most the pool's threads and the caller at once. Every
/// piece runs with the caller's choices of kernel, backend and thread count, on whichever thread
/// takes it. A panic in a piece is raised again here. With no state there is nothing to run on:
/// an internal error, and a panic.
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
    let choices = Choices::here();
    rayon::in_place_scope(|scope| {
        for state in &mut helpers[..threads - 1] {
            scope.spawn(move |_| choices.run(|| drain(state)));
        }
        drain(mine);
    });
    let mut slots: Vec<Option<R>> = (0..count).map(|_| None).collect();
    for (i, r) in done.into_inner().unwrap_or_else(PoisonError::into_inner) {
        slots[i] = Some(r);
    }
    slots.into_iter().map(|r| r.expect("every piece was taken from the queue")).collect()
}
