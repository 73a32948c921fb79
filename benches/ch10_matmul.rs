//! Chapter 10's benchmark: how fast is our matrix product, next to nalgebra's and the naive loop?
//!
//! `cargo bench --bench ch10_matmul` measures, in one run: the machine's FMA peak (a loop of
//! independent fused multiply-adds) and memory bandwidth; median GFLOP/s (2·m·n·k / time) of ours
//! on 1 and 2 threads, nalgebra's own product and the naive triple loop for square n = 64 … 2048
//! and for the GPT's products, in f32 and f64; and where a second thread starts to pay. It prints
//! the tables; with `-- --write` it also writes them into `chapters/ch10_matmul.md` (between
//! `<!-- bench:begin -->` and `<!-- bench:end -->`) and draws
//! `chapters/img/ch10_gflops_*.png|svg` and `ch10_roofline`.
//!
//! `-- sweep` measures the blocking sweep that chose KC, MC and NC (with `--write`, written
//! between `<!-- sweep:begin/end -->` and drawn as `ch10_sweep`); `-- shape M K N` times one
//! product; `-- threads` times 1 thread against 2 on the products near `PARALLEL_MIN_FLOPS`
//! (prints only). `-- --samples N` sets the samples per measurement; `-- --help` lists it all.
//!
//! Every implementation of a row is timed in turn, sample after sample, so a burst of load from
//! other programs hits them alike; the reported figure is the median of the samples. A
//! single-threaded contender is timed by the CPU time of its thread (on Linux), so the time the
//! scheduler gives to other programs is not counted against it; a two-thread contender can only
//! be timed by the wall clock, and its ratios are taken against wall-clock figures of the same
//! samples.

use clap::{Parser, Subcommand};
use llm_workbook::float::Float;
use llm_workbook::matmul::{self, Blocking, Element, Kernel, Op, Settings, gemm_with};
use llm_workbook::plot::{Figure, LineChart, Series, image_dir};
use llm_workbook::rng::Rng;
use nalgebra::DMatrix;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "ch10_matmul",
    bin_name = "cargo bench --bench ch10_matmul --",
    about = "Chapter 10's matrix-product benchmark (see the chapter for how to read it)."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Also write the tables into chapters/ch10_matmul.md and redraw the chapter's measured
    /// figures in chapters/img/ (without it, the benchmark only prints).
    #[arg(long, global = true)]
    write: bool,
    /// Passed by `cargo bench` to every benchmark; ignored.
    #[arg(long, global = true, hide = true)]
    bench: bool,
    /// Samples per measurement (the median is reported).
    #[arg(long, global = true, default_value_t = 7)]
    samples: usize,
}

#[derive(Subcommand)]
enum Command {
    /// The full benchmark (the default).
    All,
    /// The blocking sweep over KC, MC and NC.
    Sweep,
    /// Where a second thread pays: 1 thread against 2 forced near the threshold (prints only).
    Threads,
    /// One product, ours against nalgebra: M K N.
    Shape {
        m: usize,
        k: usize,
        n: usize,
        /// Use op(A) = Aᵀ.
        #[arg(long)]
        ta: bool,
        /// Use op(B) = Bᵀ.
        #[arg(long)]
        tb: bool,
        /// Compute in f64 instead of f32.
        #[arg(long)]
        f64: bool,
        /// Threads for ours.
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
}

// ───────────────────────────── timing ─────────────────────────────

/// Runs `$body` with the type alias `$t` standing for f64 when `$f64` is true, f32 otherwise: the
/// one place the benchmark chooses its element type at run time.
macro_rules! with_type {
    ($f64:expr, $t:ident => $body:expr) => {
        if $f64 {
            type $t = f64;
            $body
        } else {
            type $t = f32;
            $body
        }
    };
}

/// One contender of a row: a name and the work it repeats.
struct Contender<'a> {
    name: String,
    run: Box<dyn FnMut() + 'a>,
}

fn contender<'a>(name: impl Into<String>, run: impl FnMut() + 'a) -> Contender<'a> {
    Contender { name: name.into(), run: Box::new(run) }
}

/// Seconds of CPU time the calling thread has used (Linux); elsewhere the wall clock since the
/// first call, so differences are still durations.
fn thread_cpu_seconds() -> f64 {
    #[cfg(target_os = "linux")]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
    }
    #[cfg(not(target_os = "linux"))]
    {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_secs_f64()
    }
}

/// Median seconds per call of one contender by each clock.
#[derive(Clone, Copy, Debug)]
struct Timing {
    /// By the wall clock: what a user waits, including time the scheduler gave to other programs.
    wall: f64,
    /// By the CPU time of the calling thread: the work of a single-threaded contender alone.
    cpu: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Median seconds per call of each contender, sampled in turn, by both clocks. Each sample repeats
/// the call enough times to last about `min_sample` seconds (after one warm-up call).
fn race(contenders: &mut [Contender], samples: usize, min_sample: f64) -> Vec<Timing> {
    let mut reps = Vec::new();
    for c in contenders.iter_mut() {
        (c.run)();
        let t = Instant::now();
        (c.run)();
        let once = t.elapsed().as_secs_f64().max(1e-9);
        reps.push(((min_sample / once).ceil() as usize).clamp(1, 100_000));
    }
    let mut wall = vec![Vec::new(); contenders.len()];
    let mut cpu = vec![Vec::new(); contenders.len()];
    for _ in 0..samples {
        for (i, c) in contenders.iter_mut().enumerate() {
            let (t, c0) = (Instant::now(), thread_cpu_seconds());
            for _ in 0..reps[i] {
                (c.run)();
            }
            cpu[i].push((thread_cpu_seconds() - c0) / reps[i] as f64);
            wall[i].push(t.elapsed().as_secs_f64() / reps[i] as f64);
        }
    }
    wall.into_iter().zip(cpu).map(|(w, c)| Timing { wall: median(w), cpu: median(c) }).collect()
}

fn gflops(flops: f64, secs: f64) -> f64 {
    flops / secs / 1e9
}

// ───────────────────────────── peak and bandwidth ─────────────────────────────

/// FMA peak in GFLOP/s of `kernel` in type T on `threads` threads (each running the probe): the
/// fastest of `samples` runs. Each thread's rate is taken over its own CPU time, so the figure is
/// what the cores can do while they run this code, however much of the time other programs get;
/// the rates of the threads add up.
fn fma_peak<T: Element>(kernel: Kernel, threads: usize, samples: usize) -> f64 {
    let iterations = 4_000_000;
    let mut rates = Vec::new();
    for _ in 0..samples {
        let rate: f64 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(move || {
                        let c0 = thread_cpu_seconds();
                        let flops = llm_workbook::peak::fma_probe::<T>(kernel, iterations)
                            .map_or(0, |r| black_box(r).0);
                        gflops(flops as f64, (thread_cpu_seconds() - c0).max(1e-9))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        });
        rates.push(rate);
    }
    // A ceiling is the best the machine can do: load from other programs only ever lowers a
    // sample, so the fastest sample is the estimate (products, by contrast, report medians).
    rates.into_iter().fold(0.0, f64::max)
}

/// Read bandwidth from memory in GB/s: summing a buffer eight times the L3 size, split over
/// `threads` threads; the fastest of `samples` runs.
fn read_bandwidth(threads: usize, samples: usize) -> f64 {
    let len: usize = (256 << 20) / 4; // 256 MiB of f32
    let data: Vec<f32> = (0..len).map(|i| (i % 7) as f32).collect();
    let chunk = len.div_ceil(threads);
    let mut rates = Vec::new();
    for _ in 0..samples {
        let t = Instant::now();
        let total: f32 = std::thread::scope(|s| {
            let hs: Vec<_> = data
                .chunks(chunk)
                .map(|part| {
                    s.spawn(move || {
                        let mut acc = [0f32; 16];
                        for c in part.chunks_exact(16) {
                            for (a, &x) in acc.iter_mut().zip(c) {
                                *a += x;
                            }
                        }
                        acc.iter().sum::<f32>()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        });
        black_box(total);
        rates.push((len * 4) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    rates.into_iter().fold(0.0, f64::max)
}

/// Microseconds to start and join one scoped thread that does nothing: (fastest, median) of 200.
fn thread_start_cost() -> (f64, f64) {
    let mut v: Vec<f64> = (0..200)
        .map(|_| {
            let t = Instant::now();
            std::thread::scope(|s| {
                s.spawn(|| black_box(1));
            });
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    v.sort_by(f64::total_cmp);
    (v[0], median(v))
}

// ───────────────────────────── contenders ─────────────────────────────

fn ours<'a, T: Element + Float>(
    a: &'a DMatrix<T>,
    ta: Op,
    b: &'a DMatrix<T>,
    tb: Op,
    c: &'a mut DMatrix<T>,
    threads: usize,
) -> impl FnMut() + 'a {
    let settings = Settings { threads: Some(threads), ..Settings::default() };
    move || {
        gemm_with(settings, T::one(), a, ta, b, tb, T::zero(), c).expect("shapes agree");
    }
}

/// nalgebra's own product into a preallocated C. For a transposed operand nalgebra has no
/// strided view, so a user either copies the transpose or calls `tr_mul` (dot products); we time
/// both and keep the faster (see `nalgebra_best`).
fn nalgebra_ways<'a, T: Float>(
    a: &'a DMatrix<T>,
    ta: Op,
    b: &'a DMatrix<T>,
    tb: Op,
) -> Vec<Contender<'a>> {
    let (m, n) = (
        if ta == Op::N { a.nrows() } else { a.ncols() },
        if tb == Op::N { b.ncols() } else { b.nrows() },
    );
    let mut c1 = DMatrix::<T>::zeros(m, n);
    let mut ways = vec![contender("nalgebra (copy transposes, gemm)", move || {
        let at = if ta == Op::T { Some(a.transpose()) } else { None };
        let bt = if tb == Op::T { Some(b.transpose()) } else { None };
        c1.gemm(T::one(), at.as_ref().unwrap_or(a), bt.as_ref().unwrap_or(b), T::zero());
        black_box(&c1);
    })];
    if ta == Op::T && tb == Op::N {
        let mut c2 = DMatrix::<T>::zeros(m, n);
        ways.push(contender("nalgebra (gemm_tr)", move || {
            c2.gemm_tr(T::one(), a, b, T::zero());
            black_box(&c2);
        }));
    }
    ways
}

/// The naive triple loop, the way it is first written: for each entry of C, a dot product of a
/// row of A (a stride-m walk through column-major storage) with a column of B.
fn naive<T: Float>(a: &DMatrix<T>, b: &DMatrix<T>, c: &mut DMatrix<T>) {
    let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
    for i in 0..m {
        for j in 0..n {
            let mut s = T::zero();
            for p in 0..k {
                s += a[(i, p)] * b[(p, j)];
            }
            c[(i, j)] = s;
        }
    }
}

// ───────────────────────────── one row of the tables ─────────────────────────────

#[derive(Clone, Debug)]
struct Row {
    label: String,
    shape: String,
    ty: &'static str,
    flops: f64,
    naive: Option<f64>,
    /// nalgebra by the CPU time of its thread (compared with `ours1`).
    nalgebra: f64,
    /// nalgebra by the wall clock of the same samples (compared with `ours2`).
    nalgebra_wall: f64,
    /// Ours on one thread by the CPU time of its thread.
    ours1: f64,
    /// Ours on one thread by the wall clock (compared with `ours2` in the 2T / 1T column).
    ours1_wall: f64,
    /// Ours on two threads by the wall clock.
    ours2: f64,
    threads2: usize,
}

#[allow(clippy::too_many_arguments)]
fn measure<T: Element + Float>(
    label: &str,
    (m, k, n): (usize, usize, usize),
    ta: Op,
    tb: Op,
    with_naive: bool,
    samples: usize,
    rng: &mut Rng,
) -> Row {
    let a = if ta == Op::N {
        rng.normal_matrix::<T>(m, k, 1.0)
    } else {
        rng.normal_matrix::<T>(k, m, 1.0)
    };
    let b = if tb == Op::N {
        rng.normal_matrix::<T>(k, n, 1.0)
    } else {
        rng.normal_matrix::<T>(n, k, 1.0)
    };
    let flops = 2.0 * (m * n * k) as f64;
    let (mut c1, mut c2, mut c3) =
        (DMatrix::<T>::zeros(m, n), DMatrix::<T>::zeros(m, n), DMatrix::<T>::zeros(m, n));
    let mut contenders = vec![
        contender("ours, 1 thread", ours(&a, ta, &b, tb, &mut c1, 1)),
        contender("ours, 2 threads", ours(&a, ta, &b, tb, &mut c2, 2)),
    ];
    let ways = nalgebra_ways(&a, ta, &b, tb);
    let n_ways = ways.len();
    contenders.extend(ways);
    if with_naive && ta == Op::N && tb == Op::N {
        contenders.push(contender("naive", || naive(&a, &b, &mut c3)));
    }
    let secs = race(&mut contenders, samples, if flops > 5e9 { 0.0 } else { 0.02 });
    drop(contenders);
    // The thread count the 2-thread product actually used.
    let threads2 = {
        let mut c = DMatrix::<T>::zeros(m, n);
        gemm_with(
            Settings { threads: Some(2), ..Settings::default() },
            T::one(),
            &a,
            ta,
            &b,
            tb,
            T::zero(),
            &mut c,
        )
        .map_or(0, |s| s.threads)
    };
    let nalgebra = secs[2..2 + n_ways].iter().map(|t| t.cpu).fold(f64::INFINITY, f64::min);
    let nalgebra_wall = secs[2..2 + n_ways].iter().map(|t| t.wall).fold(f64::INFINITY, f64::min);
    Row {
        label: label.to_string(),
        shape: format!(
            "{m}×{k} · {k}×{n}{}{}",
            if ta == Op::T { " (Aᵀ)" } else { "" },
            if tb == Op::T { " (Bᵀ)" } else { "" }
        ),
        ty: if size_of::<T>() == 4 { "f32" } else { "f64" },
        flops,
        naive: secs.get(2 + n_ways).map(|s| gflops(flops, s.cpu)),
        nalgebra: gflops(flops, nalgebra),
        nalgebra_wall: gflops(flops, nalgebra_wall),
        ours1: gflops(flops, secs[0].cpu),
        ours1_wall: gflops(flops, secs[0].wall),
        ours2: gflops(flops, secs[1].wall),
        threads2,
    }
}

// ───────────────────────────── the report ─────────────────────────────

struct Machine {
    cpu: String,
    kernel: Kernel,
    peak: [(f64, f64); 2], // (1 thread, 2 threads) for f32, f64
    bandwidth: (f64, f64),
    thread_start: (f64, f64),
    load_before: String,
    load_after: String,
}

fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn peak_of(machine: &Machine, ty: &str, threads: usize) -> f64 {
    let p = if ty == "f32" { machine.peak[0] } else { machine.peak[1] };
    if threads >= 2 { p.1 } else { p.0 }
}

fn ratio(x: f64, y: f64) -> String {
    format!("{:.2}×", x / y)
}

fn table(machine: &Machine, rows: &[Row], with_naive: bool) -> String {
    let mut out = String::new();
    out.push_str(if with_naive {
        "| n | type | naive | nalgebra | ours 1T | ours 2T | ours 1T / nalgebra \
         | ours 2T / nalgebra | 2T / 1T | ours 1T of peak | ours 2T of 2-core peak |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n"
    } else {
        "| product | shape | type | nalgebra | ours 1T | ours 2T | ours 1T / nalgebra \
         | ours 2T / nalgebra | 2T / 1T | ours 1T of peak |\n\
         |---|---|---|---|---|---|---|---|---|---|\n"
    });
    for r in rows {
        let share1 = 100.0 * r.ours1 / peak_of(machine, r.ty, 1);
        let share2 = 100.0 * r.ours2 / peak_of(machine, r.ty, 2);
        let two = if r.threads2 >= 2 {
            format!("{:.1}", r.ours2)
        } else {
            format!("{:.1} (1 thread)", r.ours2)
        };
        if with_naive {
            let naive = r.naive.map_or("—".to_string(), |g| format!("{g:.2}"));
            out.push_str(&format!(
                "| {} | {} | {naive} | {:.1} | {:.1} | {two} | {} | {} | {} | {share1:.0} % | \
                 {share2:.0} % |\n",
                r.label,
                r.ty,
                r.nalgebra,
                r.ours1,
                ratio(r.ours1, r.nalgebra),
                ratio(r.ours2, r.nalgebra_wall),
                ratio(r.ours2, r.ours1_wall)
            ));
        } else {
            out.push_str(&format!(
                "| {} | {} | {} | {:.1} | {:.1} | {two} | {} | {} | {} | {share1:.0} % |\n",
                r.label,
                r.shape,
                r.ty,
                r.nalgebra,
                r.ours1,
                ratio(r.ours1, r.nalgebra),
                ratio(r.ours2, r.nalgebra_wall),
                ratio(r.ours2, r.ours1_wall)
            ));
        }
    }
    out
}

fn replace_block(path: &PathBuf, tag: &str, body: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (begin, end) = (format!("<!-- {tag}:begin -->"), format!("<!-- {tag}:end -->"));
    let start =
        text.find(&begin).ok_or_else(|| format!("{} has no {begin} marker", path.display()))?
            + begin.len();
    let stop = text[start..]
        .find(&end)
        .ok_or_else(|| format!("{} has no {end} marker", path.display()))?
        + start;
    let new = format!("{}\n{}\n{}", &text[..start], body.trim(), &text[stop..]);
    std::fs::write(path, new).map_err(|e| format!("{}: {e}", path.display()))
}

fn chapter_path() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/chapters/ch10_matmul.md"))
}

/// The GPT's products: nanoGPT's CPU configuration (width d = 128, 4 heads of 32, context 64,
/// batch 12 so T = 768 rows, vocabulary 65), forward and backward.
/// A named product: label, (m, k, n), op(A), op(B).
type Shape = (&'static str, (usize, usize, usize), Op, Op);

fn gpt_shapes() -> Vec<Shape> {
    let (t, d, v, ctx, hs) = (768, 128, 65, 64, 32);
    vec![
        ("QKV projection X·W", (t, d, 3 * d), Op::N, Op::N),
        ("attention output X·W", (t, d, d), Op::N, Op::N),
        ("MLP up X·W₁", (t, d, 4 * d), Op::N, Op::N),
        ("MLP down H·W₂", (t, 4 * d, d), Op::N, Op::N),
        ("unembedding X·Wᵤ", (t, d, v), Op::N, Op::N),
        ("scores Q·Kᵀ (one head)", (ctx, hs, ctx), Op::N, Op::T),
        ("A·V (one head)", (ctx, ctx, hs), Op::N, Op::N),
        ("grad W, QKV: Xᵀ·dY", (d, t, 3 * d), Op::T, Op::N),
        ("grad X, QKV: dY·Wᵀ", (t, 3 * d, d), Op::N, Op::T),
        ("grad W, MLP down: Hᵀ·dY", (4 * d, t, d), Op::T, Op::N),
        ("grad X, MLP up: dY·W₁ᵀ", (t, 4 * d, d), Op::N, Op::T),
    ]
}

fn run_all(samples: usize, write: bool) -> Result<(), String> {
    let kernel = matmul::best_kernel();
    let load_before = load_average();
    println!("CPU: {} · kernels: {:?} · using {kernel}", cpu_name(), matmul::available_kernels());
    // Ceilings take the fastest of many short samples, so a quiet moment is likely among them.
    let tries = (3 * samples).max(21);
    let peak = [
        (fma_peak::<f32>(kernel, 1, tries), fma_peak::<f32>(kernel, 2, tries)),
        (fma_peak::<f64>(kernel, 1, tries), fma_peak::<f64>(kernel, 2, tries)),
    ];
    let bandwidth = (read_bandwidth(1, 5), read_bandwidth(2, 5));
    let thread_start = thread_start_cost();
    println!(
        "FMA peak f32 {:.1} / {:.1} GFLOP/s (1 / 2 threads), f64 {:.1} / {:.1}",
        peak[0].0, peak[0].1, peak[1].0, peak[1].1
    );
    println!("read bandwidth {:.1} / {:.1} GB/s (1 / 2 threads)", bandwidth.0, bandwidth.1);
    let mut rng = Rng::new(2026);
    let mut squares = Vec::new();
    for n in [64, 128, 256, 512, 1024, 2048] {
        for f64_ in [false, true] {
            let with_naive = n <= 512; // the table's naive column stops at n = 512
            let row = with_type!(f64_, T => measure::<T>(
                &n.to_string(),
                (n, n, n),
                Op::N,
                Op::N,
                with_naive,
                samples,
                &mut rng
            ));
            println!("{row:?}");
            squares.push(row);
        }
    }
    let mut gpt = Vec::new();
    for f64_ in [false, true] {
        for (label, shape, ta, tb) in gpt_shapes() {
            let row =
                with_type!(f64_, T => measure::<T>(label, shape, ta, tb, false, samples, &mut rng));
            println!("{row:?}");
            gpt.push(row);
        }
    }
    let crossover = thread_crossover(samples, &mut rng);
    let machine = Machine {
        cpu: cpu_name(),
        kernel,
        peak,
        bandwidth,
        thread_start,
        load_before,
        load_after: load_average(),
    };
    let report = report(&machine, &squares, &gpt, &crossover);
    println!("\n{report}");
    if write {
        replace_block(&chapter_path(), "bench", &report)?;
        for (stem, fig) in figures(&machine, &squares) {
            fig.save(&image_dir(), &stem).map_err(|e| e.to_string())?;
        }
        println!(
            "wrote the tables into {} and the plots into {}",
            chapter_path().display(),
            image_dir().display()
        );
    }
    Ok(())
}

/// 1 thread against 2 threads forced (the threshold switched off) on small f32 squares: where
/// does the second thread start to pay?
fn thread_crossover(samples: usize, rng: &mut Rng) -> Vec<(usize, f64, f64, f64)> {
    let mut out = Vec::new();
    for n in [32, 64, 96, 128, 160, 192, 256] {
        let (flops, one, two) = one_against_two::<f32>((n, n, n), Op::N, Op::N, samples, rng);
        out.push((n, flops, one, two));
    }
    out
}

/// One product on 1 thread against 2 threads forced (the threshold switched off), timed in turn
/// by the wall clock: (flops, GFLOP/s on 1 thread, GFLOP/s on 2 threads).
fn one_against_two<T: Element + Float>(
    (m, k, n): (usize, usize, usize),
    ta: Op,
    tb: Op,
    samples: usize,
    rng: &mut Rng,
) -> (f64, f64, f64) {
    let a = if ta == Op::N {
        rng.normal_matrix::<T>(m, k, 1.0)
    } else {
        rng.normal_matrix::<T>(k, m, 1.0)
    };
    let b = if tb == Op::N {
        rng.normal_matrix::<T>(k, n, 1.0)
    } else {
        rng.normal_matrix::<T>(n, k, 1.0)
    };
    let (mut c1, mut c2) = (DMatrix::<T>::zeros(m, n), DMatrix::<T>::zeros(m, n));
    let one = Settings { threads: Some(1), ..Settings::default() };
    let two = Settings { threads: Some(2), min_parallel_flops: Some(0.0), ..Settings::default() };
    let mut cs = vec![
        contender("1", || {
            gemm_with(one, T::one(), &a, ta, &b, tb, T::zero(), &mut c1).expect("shapes");
        }),
        contender("2", || {
            gemm_with(two, T::one(), &a, ta, &b, tb, T::zero(), &mut c2).expect("shapes");
        }),
    ];
    let secs = race(&mut cs, samples, 0.02);
    let flops = 2.0 * (m * n * k) as f64;
    (flops, gflops(flops, secs[0].wall), gflops(flops, secs[1].wall))
}

/// `-- threads`: where a second thread starts to pay, on the products near `PARALLEL_MIN_FLOPS`
/// that choose it: squares from 160 to 320 and the GPT's products from 10⁷ flops up (plus the
/// 768-row products of widths 64 to 256 around the attention output projection), in f32 and
/// f64, each 1 thread against 2 threads forced, sorted by flops. Prints only.
fn run_threads(samples: usize) {
    // The smaller GPT products are left out: two threads lose on all of them by far.
    const GPT_PRODUCTS_FROM_FLOPS: f64 = 1e7;
    let load_before = load_average();
    let mut rng = Rng::new(2027);
    let mut shapes: Vec<Shape> =
        [160, 192, 224, 240, 256, 288, 320].map(|n| ("square", (n, n, n), Op::N, Op::N)).to_vec();
    shapes.extend(
        [64, 96, 144, 160, 192, 256].map(|n| ("768 rows · 128×n", (768, 128, n), Op::N, Op::N)),
    );
    shapes.extend(
        gpt_shapes()
            .into_iter()
            .filter(|(_, (m, k, n), _, _)| 2.0 * (m * k * n) as f64 >= GPT_PRODUCTS_FROM_FLOPS),
    );
    let mut rows = Vec::new();
    for f64_ in [false, true] {
        for &(label, shape, ta, tb) in &shapes {
            let (flops, one, two) =
                with_type!(f64_, T => one_against_two::<T>(shape, ta, tb, samples, &mut rng));
            let (m, k, n) = shape;
            let ops = format!(
                "{}{}",
                if ta == Op::T { " (Aᵀ)" } else { "" },
                if tb == Op::T { " (Bᵀ)" } else { "" }
            );
            let ty = if f64_ { "f64" } else { "f32" };
            rows.push((
                flops,
                format!(
                    "| {label} | {m}×{k} · {k}×{n}{ops} | {ty} | {flops:.2e} | {one:.1} \
                     | {two:.1} | {} |",
                    ratio(two, one)
                ),
            ));
        }
    }
    rows.sort_by(|x, y| x.0.total_cmp(&y.0));
    println!(
        "1 thread against 2 threads forced, GFLOP/s by the wall clock, median of {samples} samples \
         (load average {load_before} before, {} after; threshold now {:.1e}):\n",
        load_average(),
        matmul::PARALLEL_MIN_FLOPS
    );
    println!(
        "| product | shape | type | flops | 1 thread | 2 threads forced | 2 / 1 |\n\
         |---|---|---|---|---|---|---|"
    );
    for (_, line) in rows {
        println!("{line}");
    }
}

fn report(
    machine: &Machine,
    squares: &[Row],
    gpt: &[Row],
    crossover: &[(usize, f64, f64, f64)],
) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "Measured by `cargo bench --bench ch10_matmul -- --write` on {} ({} cores, kernel `{}`), \
         median of the samples, GFLOP/s = 2·m·n·k / time. The machine was shared with other jobs \
         (load average {} before, {} after); every row times its contenders in turn to share the \
         noise fairly. Single-threaded figures (naive, nalgebra, ours 1T) are timed by the CPU \
         time of their thread, so time the scheduler gave to other programs does not count; ours \
         2T can only be timed by the wall clock, and its two ratios (against nalgebra and against \
         ours 1T) use wall-clock figures of the same samples, so they still compare like with \
         like.\n\n",
        machine.cpu,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        machine.kernel,
        machine.load_before,
        machine.load_after
    ));
    out.push_str(
        "| ceiling (fastest sample; FMA peak over each thread's CPU time) | f32 | f64 |\n\
         |---|---|---|\n",
    );
    out.push_str(&format!(
        "| FMA peak, 1 core | {:.1} GFLOP/s | {:.1} GFLOP/s |\n",
        machine.peak[0].0, machine.peak[1].0
    ));
    out.push_str(&format!(
        "| FMA peak, 2 cores | {:.1} GFLOP/s | {:.1} GFLOP/s |\n",
        machine.peak[0].1, machine.peak[1].1
    ));
    out.push_str(&format!(
        "| memory read bandwidth, 1 / 2 threads | {:.1} / {:.1} GB/s | same |\n",
        machine.bandwidth.0, machine.bandwidth.1
    ));
    out.push_str(&format!(
        "| start and join one scoped thread, fastest / median of 200 | {:.0} / {:.0} µs \
         | same |\n\n",
        machine.thread_start.0, machine.thread_start.1
    ));
    out.push_str("Square products (naive: the textbook triple loop, only up to n = 512):\n\n");
    out.push_str(&table(machine, squares, true));
    out.push_str(
        "\nThe GPT's products (nanoGPT's CPU configuration: T = 12·64 = 768 rows, d = 128, \
         4 heads of 32, vocabulary 65). ",
    );
    out.push_str(
        "For a transposed operand nalgebra's figure is the faster of copying the transpose and \
         its `tr_mul`/`gemm_tr`:\n\n",
    );
    out.push_str(&table(machine, gpt, false));
    out.push_str(
        "\nWhere a second thread pays (f32 squares, 2 threads forced even below the \
         threshold):\n\n\
         | n | flops | 1 thread | 2 threads forced | 2 / 1 |\n\
         |---|---|---|---|---|\n",
    );
    for &(n, flops, one, two) in crossover {
        out.push_str(&format!(
            "| {n} | {:.1e} | {one:.1} | {two:.1} | {} |\n",
            flops,
            ratio(two, one)
        ));
    }
    out
}

fn figures(machine: &Machine, squares: &[Row]) -> Vec<(String, Figure)> {
    let mut figs = Vec::new();
    for ty in ["f32", "f64"] {
        let rows: Vec<&Row> = squares.iter().filter(|r| r.ty == ty).collect();
        let x = |r: &Row| (r.flops / 2.0).cbrt().round().log2();
        let mut series = vec![
            Series::new("ours, 2 threads", rows.iter().map(|r| (x(r), r.ours2)).collect()),
            Series::new("ours, 1 thread", rows.iter().map(|r| (x(r), r.ours1)).collect()),
            Series::new("nalgebra", rows.iter().map(|r| (x(r), r.nalgebra)).collect()),
            Series::new(
                "naive loop",
                rows.iter().filter_map(|r| r.naive.map(|g| (x(r), g))).collect(),
            ),
        ];
        let (lo, hi) = (6.0, 11.0);
        series.push(Series::new(
            "FMA peak, 1 core",
            vec![(lo, peak_of(machine, ty, 1)), (hi, peak_of(machine, ty, 1))],
        ));
        series.push(Series::new(
            "FMA peak, 2 cores",
            vec![(lo, peak_of(machine, ty, 2)), (hi, peak_of(machine, ty, 2))],
        ));
        figs.push((
            format!("ch10_gflops_{ty}"),
            Figure::Line(LineChart {
                title: format!("Square {ty} products: GFLOP/s against n"),
                x_label: "log₂ n  (n = 64 … 2048)".into(),
                y_label: "GFLOP/s (median)".into(),
                series,
                markers: true,
            }),
        ));
    }
    // The roofline: attainable GFLOP/s = min(peak, bandwidth × flops per byte), log-log.
    let (peak, bw) = (peak_of(machine, "f32", 1), machine.bandwidth.0);
    let roof: Vec<(f64, f64)> = (-40..=80)
        .map(|i| i as f64 / 10.0)
        .map(|l| (l, (peak.min(bw * 2f64.powf(l))).log2()))
        .collect();
    let mut points_naive = Vec::new();
    let mut points_ours = Vec::new();
    let b = matmul::default_blocking::<f32>(machine.kernel).unwrap_or(matmul::SCALAR_BLOCKING);
    for r in squares.iter().filter(|r| r.ty == "f32") {
        let n = (r.flops / 2.0).cbrt().round();
        // The naive loop re-reads both operands from memory for every multiply-add (no reuse):
        // 2 flops per 8 bytes. Ours moves A once per NC-panel, B once, C once per KC-block.
        let traffic = 4.0
            * (n * n * (n / b.nc as f64).ceil() + n * n + 2.0 * n * n * (n / b.kc as f64).ceil());
        if let Some(g) = r.naive {
            points_naive.push((0.25f64.log2(), g.log2()));
        }
        points_ours.push(((r.flops / traffic).log2(), r.ours1.log2()));
    }
    figs.push((
        "ch10_roofline".into(),
        Figure::Line(LineChart {
            title: format!("Roofline, one core, f32: peak {peak:.0} GFLOP/s, memory {bw:.0} GB/s"),
            x_label: "log₂ arithmetic intensity (flops per byte from memory)".into(),
            y_label: "log₂ GFLOP/s".into(),
            series: vec![
                Series::new("roof: min(peak, bandwidth × intensity)", roof),
                Series::new("naive loop, n = 64 … 512", points_naive),
                Series::new("ours, n = 64 … 2048", points_ours),
            ],
            markers: true,
        }),
    ));
    figs
}

// ───────────────────────────── the sweep ─────────────────────────────

/// GFLOP/s (median) of each blocking in `variants` on an n×n×n product, all timed in turn sample
/// by sample so that load from other programs falls on every variant alike.
fn sweep_line<T: Element + Float>(
    n: usize,
    variants: &[Blocking],
    samples: usize,
    rng: &mut Rng,
) -> Vec<f64> {
    let a = rng.normal_matrix::<T>(n, n, 1.0);
    let b = rng.normal_matrix::<T>(n, n, 1.0);
    let mut cs: Vec<DMatrix<T>> = variants.iter().map(|_| DMatrix::<T>::zeros(n, n)).collect();
    let mut contenders: Vec<Contender> = variants
        .iter()
        .zip(cs.iter_mut())
        .map(|(&blocking, c)| {
            let s = Settings { blocking: Some(blocking), threads: Some(1), ..Settings::default() };
            let (a, b) = (&a, &b);
            contender(format!("{blocking:?}"), move || {
                gemm_with(s, T::one(), a, Op::N, b, Op::N, T::zero(), c).expect("shapes");
            })
        })
        .collect();
    let secs = race(&mut contenders, samples, 0.03);
    secs.into_iter().map(|s| gflops(2.0 * (n * n * n) as f64, s.cpu)).collect()
}

fn run_sweep(samples: usize, write: bool) -> Result<(), String> {
    let kernel = matmul::best_kernel();
    let mut rng = Rng::new(99);
    let load_before = load_average();
    let mut out = String::new();
    let mut figs = Vec::new();
    for f64_ in [false, true] {
        let ty = if f64_ { "f64" } else { "f32" };
        let base = with_type!(f64_, T => matmul::default_blocking::<T>(kernel))
            .map_err(|e| e.to_string())?;
        let line = |variants: &[Blocking], n: usize, rng: &mut Rng| {
            with_type!(f64_, T =>
                sweep_line::<T>(n, variants, samples, rng)
            )
        };
        out.push_str(&format!(
            "**{ty}** (defaults MC = {}, KC = {}, NC = {}):\n\n\
             | constant | value | n | GFLOP/s | of the line's best |\n\
             |---|---|---|---|---|\n",
            base.mc, base.kc, base.nc
        ));
        let kcs = [32, 64, 128, 192, 256, 384, 512, 768];
        let mcs = [24, 48, 72, 96, 144, 192, 288, 384, 576];
        let ncs = [252, 510, 1020, 2040, 4080];
        let mut series = Vec::new();
        for (name, values, n, make) in [
            (
                "KC",
                &kcs[..],
                1024,
                &(|v: usize| Blocking { kc: v, ..base }) as &dyn Fn(usize) -> Blocking,
            ),
            ("MC", &mcs[..], 1024, &|v: usize| Blocking { mc: v, ..base }),
            ("NC", &ncs[..], 2048, &|v: usize| Blocking { nc: v, ..base }),
        ] {
            let variants: Vec<Blocking> = values.iter().map(|&v| make(v)).collect();
            let g = line(&variants, n, &mut rng);
            let best = g.iter().copied().fold(0.0, f64::max);
            for (&v, &x) in values.iter().zip(&g) {
                println!("{ty} {name} {v}: {x:.1}");
                out.push_str(&format!(
                    "| {name} | {v} | {n} | {x:.1} | {:.0} % |\n",
                    100.0 * x / best
                ));
            }
            series.push(Series::new(
                format!("{ty}: {name} (others at default), n = {n}"),
                values.iter().map(|&v| (v as f64).log2()).zip(g).collect(),
            ));
        }
        out.push('\n');
        figs.push((
            format!("ch10_sweep_{ty}"),
            Figure::Line(LineChart {
                title: format!("Blocking sweep, {ty}, kernel {kernel}, one thread"),
                x_label: "log₂ block size (KC: depth, MC: rows, NC: columns)".into(),
                y_label: "GFLOP/s (median)".into(),
                series,
                markers: true,
            }),
        ));
    }
    let head = format!(
        "Single-threaded GFLOP/s (median of {samples} samples) of kernel `{kernel}` on square \
         products, varying one constant at a time from the defaults, every value of a line timed \
         in turn sample by sample by the CPU time of its thread; measured by `cargo bench --bench \
         ch10_matmul -- sweep --write` on {} while the machine was shared (load average {} before, \
         {} after).\n\n",
        cpu_name(),
        load_before,
        load_average()
    );
    let out = head + &out;
    println!("\n{out}");
    if write {
        replace_block(&chapter_path(), "sweep", &out)?;
        for (stem, fig) in figs {
            fig.save(&image_dir(), &stem).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

fn run_shape<T: Element + Float>(
    m: usize,
    k: usize,
    n: usize,
    ta: Op,
    tb: Op,
    threads: usize,
    samples: usize,
) {
    let mut rng = Rng::new(5);
    let a = if ta == Op::N {
        rng.normal_matrix::<T>(m, k, 1.0)
    } else {
        rng.normal_matrix::<T>(k, m, 1.0)
    };
    let b = if tb == Op::N {
        rng.normal_matrix::<T>(k, n, 1.0)
    } else {
        rng.normal_matrix::<T>(n, k, 1.0)
    };
    let mut c = DMatrix::<T>::zeros(m, n);
    let mut cs = vec![contender(
        format!("ours, {threads} thread(s)"),
        ours(&a, ta, &b, tb, &mut c, threads),
    )];
    cs.extend(nalgebra_ways(&a, ta, &b, tb));
    let secs = race(&mut cs, samples, 0.05);
    let flops = 2.0 * (m * n * k) as f64;
    for (c, s) in cs.iter().zip(secs) {
        println!(
            "{:<36} {:8.1} GFLOP/s by the wall clock, {:8.1} by the thread's CPU time",
            c.name,
            gflops(flops, s.wall),
            gflops(flops, s.cpu)
        );
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let samples = cli.samples.max(1);
    let result = match cli.command.unwrap_or(Command::All) {
        Command::All => run_all(samples, cli.write),
        Command::Sweep => run_sweep(samples, cli.write),
        Command::Threads => {
            run_threads(samples);
            Ok(())
        }
        Command::Shape { m, k, n, ta, tb, f64, threads } => {
            let (ta, tb) = (if ta { Op::T } else { Op::N }, if tb { Op::T } else { Op::N });
            with_type!(f64, T => run_shape::<T>(m, k, n, ta, tb, threads, samples));
            Ok(())
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
