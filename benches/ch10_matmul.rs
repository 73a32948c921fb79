//! Chapter 10's benchmark: how fast is our matrix product, next to faer's, nalgebra's and the
//! naive loop? It needs the `peers` feature (faer is an optional dependency, never built by
//! `cargo test`): `cargo bench --features peers --bench ch10_matmul`.
//!
//! The default run measures, in one process: the machine's FMA peak (a loop of independent fused
//! multiply-adds) and memory bandwidth; median GFLOP/s (2·m·n·k / time) of ours on 1 and 2
//! threads, faer's (`Par::Seq`), nalgebra's own product and the naive triple loop for square
//! n = 64 … 2048 and for the GPT step's products, in f32 and f64; and where a second thread
//! starts to pay. It prints the tables; with `-- --write` it saves the measurements to
//! `data/ch10_products.csv` and `data/ch10_crossover.csv`, then redraws from them: the chapter's
//! tables (`<!-- bench:… -->`, `<!-- threads:… -->` in `chapters/ch10_matmul.md`), the appendix's
//! sections (`<!-- ch10-products:… -->`, `<!-- ch10-threads:… -->` in `chapters/benchmarks.md`)
//! and the figures `chapters/img/ch10_gflops_*`, `ch10_roofline`, `ch10_threads`. `-- --redraw`
//! does only the redrawing, from the committed CSVs, measuring nothing (measure on one host,
//! redraw on another).
//!
//! `-- --threads 1,2,4,8,16` times the 2048³ product (`--n` to change it) on each thread count, in
//! f32 and f64, and prints GFLOP/s, speed-up and efficiency against the first count (with
//! `--write`: `data/ch10_threads.csv`, then the redraw). `-- gpt` times only the GPT's products
//! and two squares (prints only). `-- sweep` measures the blocking sweep that chose KC, MC and NC
//! (with `--write`, written between `<!-- sweep:begin/end -->` and drawn as `ch10_sweep`);
//! `-- shape M K N` times one product; `-- threads` times 1 thread against 2 on the products near
//! `PARALLEL_MIN_FLOPS` (prints only); `-- bf16` times the bf16 product of chapter 11 against
//! our f32 product on one thread (prints only). `-- --samples N` sets the samples per measurement;
//! `-- --help` lists it all. The built binary runs on its own (no cargo, no network): `cargo bench
//! --features peers --bench ch10_matmul --no-run` prints its path.
//!
//! Every implementation of a row is timed in turn, sample after sample, so a burst of load from
//! other programs hits them alike; the reported figure is the median of the samples. A
//! single-threaded contender is timed by the CPU time of its thread (on Linux), so the time the
//! scheduler gives to other programs is not counted against it; a multi-thread contender can only
//! be timed by the wall clock, and its ratios are taken against wall-clock figures of the same
//! samples.

#[path = "common/clock.rs"]
mod clock;
use clap::{Parser, Subcommand};
use clock::thread_cpu_seconds;
use clock::{cpu_name, load_average};
use llm_workbook::float::Float;
use llm_workbook::matmul::lab::Blocking;
use llm_workbook::matmul::{self, Element, Op, Settings, gemm_with};
use llm_workbook::plot::{Figure, LineChart, LogAxes, Series, image_dir};
use llm_workbook::rng::Rng;
use llm_workbook::simd::Kernel;
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
    /// Also save the measurements under data/ and redraw the chapter's table, the appendix's
    /// sections and the figures from them (without it, the benchmark only prints).
    #[arg(long, global = true)]
    write: bool,
    /// Measure nothing: redraw the tables and figures from the committed data/ch10_*.csv.
    #[arg(long, global = true)]
    redraw: bool,
    /// Thread scaling instead of the full run: the n×n×n product on each of these thread counts
    /// (a comma-separated list, e.g. 1,2,4,8,16).
    #[arg(long, global = true)]
    threads: Option<String>,
    /// The size n of the thread-scaling product.
    #[arg(long, global = true, default_value_t = 2048)]
    n: usize,
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
    /// Only the GPT step's products and two squares (prints only).
    Gpt,
    /// The blocking sweep over KC, MC and NC.
    Sweep,
    /// The roofline: the FMA peak, the read bandwidth of L1, L2, L3 and memory on one core, and
    /// the naive loop and ours on square f32 products (with --write: data/ch10_roofline.csv).
    Roofline,
    /// Where a second thread pays: 1 thread against 2 forced near the threshold (prints only).
    Threads,
    /// The bf16 product (chapter 11) against our f32 product, one thread: 1024³ and the GPT's
    /// large products, each path this CPU runs but the portable pairs (prints only).
    Bf16,
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
        ours_threads: usize,
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
        gemm_with(settings, T::one(), a, ta, b, tb, T::zero(), &mut *c).expect("shapes agree");
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

/// faer's product ([`faer::linalg::matmul::matmul`], `Par::Seq`: one thread) on the same
/// column-major storage, a transposed operand as a transposed view (no copy), C replaced.
trait FaerPeer: Element + Float {
    fn faer_gemm(a: &DMatrix<Self>, ta: Op, b: &DMatrix<Self>, tb: Op, c: &mut DMatrix<Self>);
}

macro_rules! faer_peer {
    ($t:ty) => {
        impl FaerPeer for $t {
            fn faer_gemm(a: &DMatrix<$t>, ta: Op, b: &DMatrix<$t>, tb: Op, c: &mut DMatrix<$t>) {
                fn view(x: &DMatrix<$t>, t: Op) -> faer::MatRef<'_, $t> {
                    let v =
                        faer::MatRef::from_column_major_slice(x.as_slice(), x.nrows(), x.ncols());
                    if t == Op::T { v.transpose() } else { v }
                }
                let (m, n) = c.shape();
                let dst = faer::MatMut::from_column_major_slice_mut(c.as_mut_slice(), m, n);
                faer::linalg::matmul::matmul(
                    dst,
                    faer::Accum::Replace,
                    view(a, ta),
                    view(b, tb),
                    1.0,
                    faer::Par::Seq,
                );
            }
        }
    };
}
faer_peer!(f32);
faer_peer!(f64);

fn faer_contender<'a, T: FaerPeer>(
    a: &'a DMatrix<T>,
    ta: Op,
    b: &'a DMatrix<T>,
    tb: Op,
    c: &'a mut DMatrix<T>,
) -> Contender<'a> {
    contender("faer (Par::Seq)", move || {
        T::faer_gemm(a, ta, b, tb, c);
        black_box(&c);
    })
}

// ───────────────────────────── one row of the tables ─────────────────────────────

/// One product's measurements, GFLOP/s (medians). Single-threaded contenders by the CPU time of
/// their thread, with the wall-clock figure of the same samples beside where a two-thread figure
/// is compared with them.
#[derive(Clone, Debug)]
struct Row {
    /// "square" or "gpt".
    group: String,
    label: String,
    shape: String,
    ty: String,
    flops: f64,
    naive: Option<f64>,
    nalgebra: f64,
    nalgebra_wall: f64,
    faer: f64,
    ours1: f64,
    ours1_wall: f64,
    /// Ours on two threads by the wall clock.
    ours2: f64,
    /// The threads the two-thread product actually used.
    threads2: usize,
}

/// The operands of op(A)·op(B) with op(A) m×k and op(B) k×n, stored as the ops need them.
fn operands<T: Element + Float>(
    (m, k, n): (usize, usize, usize),
    ta: Op,
    tb: Op,
    rng: &mut Rng,
) -> (DMatrix<T>, DMatrix<T>) {
    let a = if ta == Op::N { rng.normal_matrix(m, k, 1.0) } else { rng.normal_matrix(k, m, 1.0) };
    let b = if tb == Op::N { rng.normal_matrix(k, n, 1.0) } else { rng.normal_matrix(n, k, 1.0) };
    (a, b)
}

fn shape_text((m, k, n): (usize, usize, usize), ta: Op, tb: Op) -> String {
    format!(
        "{m}×{k} · {k}×{n}{}{}",
        if ta == Op::T { " (Aᵀ)" } else { "" },
        if tb == Op::T { " (Bᵀ)" } else { "" }
    )
}

#[allow(clippy::too_many_arguments)]
fn measure<T: FaerPeer>(
    group: &str,
    label: &str,
    (m, k, n): (usize, usize, usize),
    ta: Op,
    tb: Op,
    with_naive: bool,
    samples: usize,
    rng: &mut Rng,
) -> Row {
    let (a, b) = operands::<T>((m, k, n), ta, tb, rng);
    let flops = 2.0 * (m * n * k) as f64;
    let zeros = || DMatrix::<T>::zeros(m, n);
    let (mut c1, mut c2, mut c3, mut c4) = (zeros(), zeros(), zeros(), zeros());
    // Ours and faer side by side, then the rest: every sample times all of them in turn.
    let mut contenders = vec![
        contender("ours, 1 thread", ours(&a, ta, &b, tb, &mut c1, 1)),
        faer_contender(&a, ta, &b, tb, &mut c4),
        contender("ours, 2 threads", ours(&a, ta, &b, tb, &mut c2, 2)),
    ];
    const NALGEBRA: usize = 3;
    let ways = nalgebra_ways(&a, ta, &b, tb);
    let n_ways = ways.len();
    contenders.extend(ways);
    if with_naive && ta == Op::N && tb == Op::N {
        contenders.push(contender("naive", || naive(&a, &b, &mut c3)));
    }
    let secs = race(&mut contenders, samples, if flops > 5e9 { 0.0 } else { 0.02 });
    drop(contenders);
    // faer computed the same product: a peer that got it wrong would be no peer.
    let scale = c1.iter().fold(T::one(), |s, x| s.max(x.abs()));
    let worst = c1.iter().zip(c4.iter()).fold(T::zero(), |w, (x, y)| w.max((*x - *y).abs()));
    assert!(
        worst <= scale * T::epsilon() * T::of(4.0 * k as f64),
        "faer and ours differ by {worst:?} on {label}"
    );
    let threads2 = gemm_with(
        Settings { threads: Some(2), ..Settings::default() },
        T::one(),
        &a,
        ta,
        &b,
        tb,
        T::zero(),
        &mut zeros(),
    )
    .ok()
    .flatten()
    .map_or(0, |s| s.threads);
    let ways = &secs[NALGEBRA..NALGEBRA + n_ways];
    let nalgebra = ways.iter().map(|t| t.cpu).fold(f64::INFINITY, f64::min);
    let nalgebra_wall = ways.iter().map(|t| t.wall).fold(f64::INFINITY, f64::min);
    Row {
        group: group.to_string(),
        label: label.to_string(),
        shape: shape_text((m, k, n), ta, tb),
        ty: if size_of::<T>() == 4 { "f32" } else { "f64" }.to_string(),
        flops,
        naive: secs.get(NALGEBRA + n_ways).map(|s| gflops(flops, s.cpu)),
        nalgebra: gflops(flops, nalgebra),
        nalgebra_wall: gflops(flops, nalgebra_wall),
        faer: gflops(flops, secs[1].cpu),
        ours1: gflops(flops, secs[0].cpu),
        ours1_wall: gflops(flops, secs[0].wall),
        ours2: gflops(flops, secs[2].wall),
        threads2,
    }
}

// ───────────────────────────── the machine ─────────────────────────────

/// What the product is measured against, and when and where.
struct Machine {
    cpu: String,
    cores: usize,
    kernel: String,
    date: String,
    /// FMA peak (1 core, 2 cores) for f32, f64.
    peak: [(f64, f64); 2],
    bandwidth: (f64, f64),
    thread_start: (f64, f64),
    load_before: String,
    load_after: String,
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn peak_of(machine: &Machine, ty: &str, threads: usize) -> f64 {
    let p = if ty == "f32" { machine.peak[0] } else { machine.peak[1] };
    if threads >= 2 { p.1 } else { p.0 }
}

fn ratio(x: f64, y: f64) -> String {
    format!("{:.2}×", x / y)
}

// ───────────────────────────── the committed measurements (CSV) ─────────────────────────────

/// The measurements `--write` saves and `--redraw` draws from, under data/.
const PRODUCTS_CSV: &str = "data/ch10_products.csv";
const CROSSOVER_CSV: &str = "data/ch10_crossover.csv";
const THREADS_CSV: &str = "data/ch10_threads.csv";
const SWEEP_CSV: &str = "data/ch10_sweep.csv";

fn root_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// A CSV file as written here: `# key: value` lines (the machine, the date, the load), a header,
/// rows. Fields holding a comma are quoted (no field holds a quote).
struct Csv {
    meta: Vec<(String, String)>,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Csv {
    fn new(meta: Vec<(&str, String)>, header: &[&str]) -> Csv {
        Csv {
            meta: meta.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    fn text(&self) -> String {
        let field = |f: &String| if f.contains(',') { format!("\"{f}\"") } else { f.clone() };
        let mut out = String::new();
        for (k, v) in &self.meta {
            out.push_str(&format!("# {k}: {v}\n"));
        }
        for line in std::iter::once(&self.header).chain(&self.rows) {
            out.push_str(&line.iter().map(field).collect::<Vec<_>>().join(","));
            out.push('\n');
        }
        out
    }

    /// Writes the file whole or not at all (a temporary file renamed into place).
    fn save(&self, rel: &str) -> Result<(), String> {
        let path = root_path(rel);
        let tmp = path.with_extension("csv.tmp");
        std::fs::write(&tmp, self.text()).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))
    }

    fn load(rel: &str) -> Result<Csv, String> {
        let path = root_path(rel);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut csv = Csv { meta: Vec::new(), header: Vec::new(), rows: Vec::new() };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            if let Some(kv) = line.strip_prefix("# ") {
                let (k, v) = kv.split_once(": ").unwrap_or((kv, ""));
                csv.meta.push((k.to_string(), v.to_string()));
                continue;
            }
            let mut fields = Vec::new();
            let mut rest = line;
            while !rest.is_empty() || fields.len() < csv.header.len().max(1) {
                if let Some(q) = rest.strip_prefix('"') {
                    let end = q.find('"').ok_or_else(|| format!("{rel}: unclosed quote"))?;
                    fields.push(q[..end].to_string());
                    rest = q[end + 1..].strip_prefix(',').unwrap_or("");
                } else {
                    let (f, r) = rest.split_once(',').unwrap_or((rest, ""));
                    fields.push(f.to_string());
                    rest = r;
                }
                if rest.is_empty() {
                    break;
                }
            }
            if csv.header.is_empty() {
                csv.header = fields;
            } else if fields.len() != csv.header.len() {
                return Err(format!(
                    "{rel}: a row has {} fields, the header {}: {line}",
                    fields.len(),
                    csv.header.len()
                ));
            } else {
                csv.rows.push(fields);
            }
        }
        Ok(csv)
    }

    fn meta(&self, key: &str) -> Result<String, String> {
        self.meta
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("no `# {key}:` line"))
    }

    fn meta_f64(&self, key: &str) -> Result<f64, String> {
        self.meta(key)?.parse().map_err(|e| format!("`# {key}:` is not a number: {e}"))
    }

    /// The fields of row `i` by column name.
    fn get<'c>(&'c self, row: &'c [String], col: &str) -> Result<&'c str, String> {
        let j = self.header.iter().position(|h| h == col).ok_or(format!("no column {col}"))?;
        Ok(row[j].as_str())
    }

    fn num(&self, row: &[String], col: &str) -> Result<f64, String> {
        let v = self.get(row, col)?;
        v.parse().map_err(|e| format!("column {col}: {v:?} is not a number: {e}"))
    }
}

const MACHINE_KEYS: [&str; 14] = [
    "cpu",
    "cores",
    "kernel",
    "date (UTC)",
    "load before",
    "load after",
    "FMA peak f32, 1 core",
    "FMA peak f32, 2 cores",
    "FMA peak f64, 1 core",
    "FMA peak f64, 2 cores",
    "read bandwidth, 1 thread",
    "read bandwidth, 2 threads",
    "thread start, fastest",
    "thread start, median",
];

fn machine_meta(m: &Machine) -> Vec<(&'static str, String)> {
    let values = [
        m.cpu.clone(),
        m.cores.to_string(),
        m.kernel.clone(),
        m.date.clone(),
        m.load_before.clone(),
        m.load_after.clone(),
        format!("{:.2}", m.peak[0].0),
        format!("{:.2}", m.peak[0].1),
        format!("{:.2}", m.peak[1].0),
        format!("{:.2}", m.peak[1].1),
        format!("{:.2}", m.bandwidth.0),
        format!("{:.2}", m.bandwidth.1),
        format!("{:.1}", m.thread_start.0),
        format!("{:.1}", m.thread_start.1),
    ];
    MACHINE_KEYS.into_iter().zip(values).collect()
}

fn machine_from(csv: &Csv) -> Result<Machine, String> {
    let f = |k: &str| csv.meta_f64(k);
    Ok(Machine {
        cpu: csv.meta("cpu")?,
        cores: csv.meta("cores")?.parse().map_err(|_| "`# cores:` is not a number")?,
        kernel: csv.meta("kernel")?,
        date: csv.meta("date (UTC)")?,
        load_before: csv.meta("load before")?,
        load_after: csv.meta("load after")?,
        peak: [
            (f(MACHINE_KEYS[6])?, f(MACHINE_KEYS[7])?),
            (f(MACHINE_KEYS[8])?, f(MACHINE_KEYS[9])?),
        ],
        bandwidth: (f(MACHINE_KEYS[10])?, f(MACHINE_KEYS[11])?),
        thread_start: (f(MACHINE_KEYS[12])?, f(MACHINE_KEYS[13])?),
    })
}

const ROW_COLUMNS: [&str; 14] = [
    "group",
    "label",
    "shape",
    "type",
    "flops",
    "naive",
    "nalgebra",
    "nalgebra_wall",
    "faer",
    "ours_1t",
    "ours_1t_wall",
    "ours_2t_wall",
    "threads_2t",
    "samples",
];

fn products_csv(machine: &Machine, rows: &[Row], samples: usize) -> Csv {
    let mut csv = Csv::new(machine_meta(machine), &ROW_COLUMNS);
    let g = |x: f64| format!("{x:.3}");
    for r in rows {
        csv.rows.push(vec![
            r.group.clone(),
            r.label.clone(),
            r.shape.clone(),
            r.ty.clone(),
            format!("{:.0}", r.flops),
            r.naive.map_or(String::new(), g),
            g(r.nalgebra),
            g(r.nalgebra_wall),
            g(r.faer),
            g(r.ours1),
            g(r.ours1_wall),
            g(r.ours2),
            r.threads2.to_string(),
            samples.to_string(),
        ]);
    }
    csv
}

fn rows_from(csv: &Csv) -> Result<Vec<Row>, String> {
    csv.rows
        .iter()
        .map(|r| {
            let naive = csv.get(r, "naive")?;
            Ok(Row {
                group: csv.get(r, "group")?.to_string(),
                label: csv.get(r, "label")?.to_string(),
                shape: csv.get(r, "shape")?.to_string(),
                ty: csv.get(r, "type")?.to_string(),
                flops: csv.num(r, "flops")?,
                naive: if naive.is_empty() { None } else { Some(csv.num(r, "naive")?) },
                nalgebra: csv.num(r, "nalgebra")?,
                nalgebra_wall: csv.num(r, "nalgebra_wall")?,
                faer: csv.num(r, "faer")?,
                ours1: csv.num(r, "ours_1t")?,
                ours1_wall: csv.num(r, "ours_1t_wall")?,
                ours2: csv.num(r, "ours_2t_wall")?,
                threads2: csv.num(r, "threads_2t")? as usize,
            })
        })
        .collect()
}

// ───────────────────────────── the tables ─────────────────────────────

fn table(machine: &Machine, rows: &[Row], squares: bool) -> String {
    let mut out = String::new();
    out.push_str(if squares {
        "| n | type | naive | nalgebra | faer | ours 1T | ours 2T | ours ÷ faer \
         | ours ÷ nalgebra | 2T ÷ 1T | of peak: ours / faer / nalgebra |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n"
    } else {
        "| product | shape | type | nalgebra | faer | ours 1T | ours 2T | ours ÷ faer \
         | ours ÷ nalgebra | 2T ÷ 1T | of peak: ours / faer / nalgebra |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n"
    });
    for r in rows {
        let peak = peak_of(machine, &r.ty, 1);
        let shares = format!(
            "{:.0} / {:.0} / {:.0} %",
            100.0 * r.ours1 / peak,
            100.0 * r.faer / peak,
            100.0 * r.nalgebra / peak
        );
        let two = if r.threads2 >= 2 {
            format!("{:.1}", r.ours2)
        } else {
            format!("{:.1} (1 thread)", r.ours2)
        };
        let first = if squares {
            let naive = r.naive.map_or("—".to_string(), |g| format!("{g:.2}"));
            format!("| {} | {} | {naive} |", r.label, r.ty)
        } else {
            format!("| {} | {} | {} |", r.label, r.shape, r.ty)
        };
        out.push_str(&format!(
            "{first} {:.1} | {:.1} | {:.1} | {two} | {} | {} | {} | {shares} |\n",
            r.nalgebra,
            r.faer,
            r.ours1,
            ratio(r.ours1, r.faer),
            ratio(r.ours1, r.nalgebra),
            ratio(r.ours2, r.ours1_wall)
        ));
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
    let tmp = path.with_extension("md.tmp");
    std::fs::write(&tmp, new).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

fn chapter_path() -> PathBuf {
    root_path("chapters/ch10_matmul.md")
}

fn appendix_path() -> PathBuf {
    root_path("chapters/benchmarks.md")
}

/// A named product: label, (m, k, n), op(A), op(B).
type Shape = (&'static str, (usize, usize, usize), Op, Op);

/// The GPT step's products: nanoGPT's CPU configuration (width d = 128, 4 heads of 32, context
/// 64, batch 12 so T = 768 rows, vocabulary 65), forward and backward, with attention in the
/// fused step's causal blocks of 32 query rows (chapter 9, `fast::CAUSAL_BLOCK`).
fn gpt_shapes() -> Vec<Shape> {
    let (t, d, v, ctx, hs, blk) = (768, 128, 65, 64, 32, 32);
    vec![
        ("QKV projection X·W", (t, d, 3 * d), Op::N, Op::N),
        ("attention output X·W", (t, d, d), Op::N, Op::N),
        ("MLP up X·W₁", (t, d, 4 * d), Op::N, Op::N),
        ("MLP down H·W₂", (t, 4 * d, d), Op::N, Op::N),
        ("vocabulary X·Wᵤ", (t, d, v), Op::N, Op::N),
        ("logits X·Eᵀ (tied)", (t, d, v), Op::N, Op::T),
        ("grad X, logits: dZ·E", (t, v, d), Op::N, Op::N),
        ("grad E, logits: dZᵀ·X", (v, t, d), Op::T, Op::N),
        ("scores Q·Kᵀ, one head", (ctx, hs, ctx), Op::N, Op::T),
        ("A·V, one head", (ctx, ctx, hs), Op::N, Op::N),
        ("block scores Q·Kᵀ", (blk, hs, ctx), Op::N, Op::T),
        ("block A·V", (blk, ctx, hs), Op::N, Op::N),
        ("block grad V: Aᵀ·dO", (blk, ctx, hs), Op::T, Op::N),
        ("attention block 32×32·32×64", (32, 32, 64), Op::N, Op::N),
        ("attention block 64×64·64×32", (64, 64, 32), Op::N, Op::N),
        ("grad W, QKV: Xᵀ·dY", (d, t, 3 * d), Op::T, Op::N),
        ("grad X, QKV: dY·Wᵀ", (t, 3 * d, d), Op::N, Op::T),
        ("grad W, MLP down: Hᵀ·dY", (4 * d, t, d), Op::T, Op::N),
        ("grad X, MLP up: dY·W₁ᵀ", (t, 4 * d, d), Op::N, Op::T),
    ]
}

fn measure_machine(samples: usize) -> Machine {
    let kernel = llm_workbook::simd::best_kernel();
    let load_before = load_average();
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
    Machine {
        cpu: cpu_name(),
        cores: cores(),
        kernel: kernel.to_string(),
        date: clock::utc_now(),
        peak,
        bandwidth,
        thread_start,
        load_before,
        load_after: String::new(),
    }
}

fn run_all(samples: usize, write: bool, only_gpt: bool) -> Result<(), String> {
    println!(
        "CPU: {} · kernels: {:?} · using {} · op(B) read in place up to a step of {} values",
        cpu_name(),
        llm_workbook::simd::available_kernels(),
        llm_workbook::simd::best_kernel(),
        matmul::lab::IN_PLACE_MAX_STEP
    );
    let mut machine = measure_machine(samples);
    let mut rng = Rng::new(2026);
    let mut rows = Vec::new();
    let sizes: &[usize] = if only_gpt { &[256, 2048] } else { &[64, 128, 256, 512, 1024, 2048] };
    for &n in sizes {
        for f64_ in [false, true] {
            let with_naive = n <= 512; // the table's naive column stops at n = 512
            let label = n.to_string();
            let row = with_type!(f64_, T => measure::<T>(
                "square", &label, (n, n, n), Op::N, Op::N, with_naive, samples, &mut rng
            ));
            eprintln!("measured {} {} {}", row.label, row.shape, row.ty);
            rows.push(row);
        }
    }
    for f64_ in [false, true] {
        for (label, shape, ta, tb) in gpt_shapes() {
            let row = with_type!(f64_, T =>
                measure::<T>("gpt", label, shape, ta, tb, false, samples, &mut rng));
            eprintln!("measured {} {} {}", row.label, row.shape, row.ty);
            rows.push(row);
        }
    }
    let crossover = if only_gpt { Vec::new() } else { thread_crossover(samples, &mut rng) };
    machine.load_after = load_average();
    let products = products_csv(&machine, &rows, samples);
    let mut cross = Csv::new(machine_meta(&machine), &["n", "flops", "one_thread", "two_threads"]);
    for &(n, flops, one, two) in &crossover {
        cross.rows.push(vec![
            n.to_string(),
            format!("{flops:.0}"),
            format!("{one:.3}"),
            format!("{two:.3}"),
        ]);
    }
    println!("\n{}", report(&machine, &rows, &cross)?);
    if write {
        if only_gpt {
            return Err("`gpt` measures a subset: it prints, it does not --write".into());
        }
        products.save(PRODUCTS_CSV)?;
        cross.save(CROSSOVER_CSV)?;
        println!("wrote {PRODUCTS_CSV} and {CROSSOVER_CSV}");
        redraw()?;
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
         (load average {load_before} before, {} after; threshold now {:.1e}, pieces of at least \
         {:.1e} beyond two a thread):\n",
        load_average(),
        matmul::lab::PARALLEL_MIN_FLOPS,
        matmul::lab::PIECE_MIN_FLOPS
    );
    println!(
        "| product | shape | type | flops | 1 thread | 2 threads forced | 2 / 1 |\n\
         |---|---|---|---|---|---|---|"
    );
    for (_, line) in rows {
        println!("{line}");
    }
}

/// The appendix's full report: the machine, the ceilings, every product, the crossover.
fn report(machine: &Machine, rows: &[Row], crossover: &Csv) -> Result<String, String> {
    let mut out = String::new();
    out.push_str(&format!(
        "Measured by `cargo bench --features peers --bench ch10_matmul -- --write` on {} \
         ({} logical CPUs, kernel `{}`) at {} UTC, load average {} before and {} after; median \
         of the samples, GFLOP/s = 2·m·n·k / time. Every row times its contenders in turn, \
         sample after sample (ours and faer side by side), so a burst of load falls on all of \
         them. Single-threaded figures (naive, nalgebra, faer, ours 1T) are timed by the CPU time \
         of their thread, so time the scheduler gave to other programs does not count; ours 2T \
         only by the wall clock, and its ratio against ours 1T uses the wall-clock figure of the \
         same samples. faer runs with `Par::Seq` (one thread); nalgebra's figure for a \
         transposed operand is the faster of copying the transpose and its `gemm_tr`.\n\n",
        machine.cpu,
        machine.cores,
        machine.kernel,
        machine.date,
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
    let squares: Vec<Row> = rows.iter().filter(|r| r.group == "square").cloned().collect();
    let gpt: Vec<Row> = rows.iter().filter(|r| r.group == "gpt").cloned().collect();
    out.push_str("Square products (naive: the textbook triple loop, only up to n = 512):\n\n");
    out.push_str(&table(machine, &squares, true));
    out.push_str(
        "\nThe GPT step's products (nanoGPT's CPU configuration: T = 12·64 = 768 rows, d = 128, \
         4 heads of 32, vocabulary 65; attention in blocks of 32 query rows):\n\n",
    );
    out.push_str(&table(machine, &gpt, false));
    if !crossover.rows.is_empty() {
        out.push_str(
            "\nWhere a second thread pays (f32 squares, 2 threads forced even below the \
             threshold):\n\n\
             | n | flops | 1 thread | 2 threads forced | 2 / 1 |\n\
             |---|---|---|---|---|\n",
        );
        for r in &crossover.rows {
            let (one, two) = (crossover.num(r, "one_thread")?, crossover.num(r, "two_threads")?);
            out.push_str(&format!(
                "| {} | {:.1e} | {one:.1} | {two:.1} | {} |\n",
                crossover.get(r, "n")?,
                crossover.num(r, "flops")?,
                ratio(two, one)
            ));
        }
    }
    Ok(out)
}

/// The chapter's table: what teaches (ours, faer and nalgebra against the peak, single-threaded,
/// on the squares and the GPT's skinniest products); the full log is in the appendix.
fn chapter_table(machine: &Machine, rows: &[Row]) -> String {
    let mut out = format!(
        "Single thread, GFLOP/s (median) and share of the measured FMA peak of one core \
         ({:.0} GFLOP/s f32, {:.0} f64), on {} at {} UTC; the full tables, the two-thread \
         figures and the load are in the \
         [benchmarks appendix](benchmarks.md#chapter-10-the-product).\n\n\
         | product | type | nalgebra | faer | ours | ours ÷ faer \
         | of peak: ours / faer / nalgebra |\n\
         |---|---|---|---|---|---|---|\n",
        machine.peak[0].0, machine.peak[1].0, machine.cpu, machine.date
    );
    let teach = |r: &&Row| {
        r.group == "square" && ["256", "1024", "2048"].contains(&r.label.as_str())
            || r.group == "gpt"
                && (r.label.starts_with("QKV")
                    || r.label.starts_with("vocabulary")
                    || r.label.starts_with("block"))
    };
    for r in rows.iter().filter(teach) {
        let peak = peak_of(machine, &r.ty, 1);
        let name = if r.group == "square" {
            format!("{0}×{0} · {0}×{0}", r.label)
        } else {
            format!("{}: {}", r.label, r.shape)
        };
        // The chapter writes its formulas as $…$ (the appendix keeps the terminal's Unicode).
        let name = llm_workbook::tex::markdown_cell(&name);
        out.push_str(&format!(
            "| {name} | {} | {:.1} | {:.1} | {:.1} | {} | {:.0} / {:.0} / {:.0} % |\n",
            r.ty,
            r.nalgebra,
            r.faer,
            r.ours1,
            ratio(r.ours1, r.faer),
            100.0 * r.ours1 / peak,
            100.0 * r.faer / peak,
            100.0 * r.nalgebra / peak
        ));
    }
    out
}

/// `--redraw`: the chapter's table, the appendix's sections and the figures, from the committed
/// CSVs under data/, measuring nothing. A missing thread-scaling file leaves its section alone.
fn redraw() -> Result<(), String> {
    let products = Csv::load(PRODUCTS_CSV)?;
    let machine = machine_from(&products).map_err(|e| format!("{PRODUCTS_CSV}: {e}"))?;
    let rows = rows_from(&products).map_err(|e| format!("{PRODUCTS_CSV}: {e}"))?;
    let crossover = Csv::load(CROSSOVER_CSV)?;
    replace_block(&chapter_path(), "bench", &chapter_table(&machine, &rows))?;
    replace_block(&appendix_path(), "ch10-products", &report(&machine, &rows, &crossover)?)?;
    let mut figs = figures(&machine, &rows);
    if root_path(THREADS_CSV).is_file() {
        let threads = Csv::load(THREADS_CSV)?;
        let table = scaling_table(&threads)?;
        replace_block(&chapter_path(), "threads", &table)?;
        replace_block(&appendix_path(), "ch10-threads", &table)?;
        figs.push(scaling_figure(&threads)?);
    }
    figs.push(("ch10_roofline".into(), roofline_figure()?));
    if root_path(SWEEP_CSV).is_file() {
        let (table, sweep) = sweep_report(&Csv::load(SWEEP_CSV)?)?;
        replace_block(&chapter_path(), "sweep", &table)?;
        figs.extend(sweep);
    }
    for (stem, fig) in &figs {
        fig.save(&image_dir(), stem).map_err(|e| e.to_string())?;
    }
    println!(
        "redrew the tables in {} and {}, and {} figures in {}",
        chapter_path().display(),
        appendix_path().display(),
        figs.len(),
        image_dir().display()
    );
    Ok(())
}

fn figures(machine: &Machine, rows: &[Row]) -> Vec<(String, Figure)> {
    let squares: Vec<&Row> = rows.iter().filter(|r| r.group == "square").collect();
    let n_of = |r: &Row| (r.flops / 2.0).cbrt().round();
    let mut figs = Vec::new();
    for ty in ["f32", "f64"] {
        let rows: Vec<&&Row> = squares.iter().filter(|r| r.ty == ty).collect();
        let line = |label: &str, f: &dyn Fn(&Row) -> Option<f64>| {
            Series::new(label, rows.iter().filter_map(|r| f(r).map(|g| (n_of(r), g))).collect())
        };
        let (lo, hi) = (64.0, 2048.0);
        let flat = |label: &str, y: f64| Series::new(label, vec![(lo, y), (hi, y)]);
        let series = vec![
            line("ours, 2 threads", &|r| Some(r.ours2)),
            line("ours, 1 thread", &|r| Some(r.ours1)),
            line("faer, 1 thread", &|r| Some(r.faer)),
            line("nalgebra, 1 thread", &|r| Some(r.nalgebra)),
            line("naive loop", &|r| r.naive),
            flat("FMA peak, 1 core", peak_of(machine, ty, 1)),
            flat("FMA peak, 2 cores", peak_of(machine, ty, 2)),
        ];
        figs.push((
            format!("ch10_gflops_{ty}"),
            Figure::LogLine(
                LineChart {
                    title: format!("Square {ty} products, GFLOP/s against n: {}", machine.cpu),
                    x_label: "n (log scale)".into(),
                    y_label: "GFLOP/s (median)".into(),
                    series,
                    markers: true,
                },
                LogAxes::X,
            ),
        ));
    }
    figs
}

// ───────────────────────────── the roofline ─────────────────────────────

/// The size in bytes of cache `index` of CPU 0 (sysfs writes `32K`, `512K`, `32M`); 0 unknown.
fn cache_bytes(index: u32) -> u64 {
    let path = format!("/sys/devices/system/cpu/cpu0/cache/index{index}/size");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let text = text.trim();
    let (digits, unit) = match text.strip_suffix('K') {
        Some(d) => (d, 1u64 << 10),
        None => text.strip_suffix('M').map_or((text, 1), |d| (d, 1 << 20)),
    };
    digits.parse::<u64>().map_or(0, |d| d * unit)
}

/// Read bandwidth in GB/s from a buffer of `bytes` on one thread: the buffer summed over and
/// over (64 independent sums, so the additions never wait on each other) for at least 20 ms a
/// sample, timed by the thread's CPU time; the fastest of `samples`.
fn read_rate(bytes: u64, samples: usize) -> f64 {
    let len = (bytes as usize / 4).max(64);
    let data: Vec<f32> = (0..len).map(|i| (i % 7) as f32).collect();
    let pass = |data: &[f32]| {
        let mut acc = [0f32; 64];
        for c in data.chunks_exact(64) {
            for (a, &x) in acc.iter_mut().zip(c) {
                *a += x;
            }
        }
        acc.iter().sum::<f32>()
    };
    black_box(pass(&data));
    // Passes between two readings of the clock: reading it is a system call, as slow as a pass
    // over a few KiB of L1, so it is read once per 64 MiB read.
    let batch = ((64u64 << 20) / (len as u64 * 4)).max(1);
    let mut best = 0.0f64;
    for _ in 0..samples {
        let (c0, mut passes) = (thread_cpu_seconds(), 0u64);
        while thread_cpu_seconds() - c0 < 0.02 {
            for _ in 0..batch {
                black_box(pass(black_box(&data)));
            }
            passes += batch;
        }
        let secs = thread_cpu_seconds() - c0;
        best = best.max((passes * len as u64 * 4) as f64 / secs / 1e9);
    }
    best
}

/// `roofline`: measures the roofs and the points of the roofline figure (see
/// `llm_workbook::ch10_matmul::roofline`); with `--write` saves them and redraws the figure.
fn run_roofline(samples: usize, write: bool) -> Result<(), String> {
    use llm_workbook::ch10_matmul::roofline::{
        Point, Roof, Roofline, points_above_roofs, roofline_text,
    };
    use llm_workbook::ch10_matmul::{blocked_traffic_bytes, flops, intensity, naive_traffic_bytes};
    let load_before = load_average();
    let kernel = llm_workbook::simd::best_kernel();
    let peak = fma_peak::<f32>(kernel, 1, samples);
    let mut roofs = Vec::new();
    for (index, level) in [(0, "L1"), (2, "L2"), (3, "L3")] {
        let bytes = cache_bytes(index);
        if bytes > 0 {
            // Half the level, so that the buffer stays in it alongside what else lives there.
            let gbs = read_rate(bytes / 2, samples);
            println!("{level} ({bytes} bytes): {gbs:.1} GB/s");
            roofs.push(Roof { level: level.into(), bytes: Some(bytes), gbs });
        }
    }
    let memory = read_rate(256 << 20, samples.min(3));
    println!("memory (256 MiB): {memory:.1} GB/s; FMA peak {peak:.1} GFLOP/s");
    roofs.push(Roof { level: "memory".into(), bytes: None, gbs: memory });
    let blocking = matmul::lab::default_blocking::<f32>(kernel).map_err(|e| e.to_string())?;
    let mut rng = Rng::new(64);
    let mut points = Vec::new();
    for n in [64usize, 128, 256, 512, 1024, 2048] {
        let (a, b) = operands::<f32>((n, n, n), Op::N, Op::N, &mut rng);
        let (mut c1, mut c2) = (DMatrix::<f32>::zeros(n, n), DMatrix::<f32>::zeros(n, n));
        let mut cs = vec![contender("ours", ours(&a, Op::N, &b, Op::N, &mut c1, 1))];
        if n <= 512 {
            let (a, b) = (&a, &b);
            cs.push(contender("naive loop", move || naive(a, b, &mut c2)));
        }
        let secs = race(&mut cs, samples, 0.03);
        let work = flops(n, n, n);
        let set = 3 * (n * n * 4) as u64;
        for (c, s) in cs.iter().zip(secs) {
            let bytes = if c.name == "ours" {
                blocked_traffic_bytes(n, n, n, 4, blocking)
            } else {
                naive_traffic_bytes(n, n, n, 4)
            };
            let g = gflops(work as f64, s.cpu);
            println!("{} n = {n}: {g:.1} GFLOP/s", c.name);
            points.push(Point {
                contender: c.name.clone(),
                n,
                working_set: set,
                intensity: intensity(work, bytes),
                gflops: g,
            });
        }
    }
    let meta = vec![
        ("cpu".to_string(), cpu_name()),
        ("kernel".to_string(), kernel.to_string()),
        ("date (UTC)".to_string(), clock::utc_now()),
        ("load before".to_string(), load_before),
        ("load after".to_string(), load_average()),
    ];
    let r = Roofline { meta, peak, roofs, points };
    let above = points_above_roofs(&r).map_err(|e| e.to_string())?;
    for line in &above {
        println!("ABOVE ITS ROOF: {line}");
    }
    let text = roofline_text(&r);
    print!("{text}");
    if write {
        let path = root_path(llm_workbook::ch10_matmul::roofline::ROOFLINE_FILE);
        let tmp = path.with_extension("csv.tmp");
        std::fs::write(&tmp, &text).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
        let parsed = llm_workbook::ch10_matmul::roofline::parse_roofline(&text)
            .map_err(|e| e.to_string())?;
        llm_workbook::ch10_matmul::book::roofline_figure(&parsed)
            .and_then(|f| f.save(&image_dir(), "ch10_roofline"))
            .map_err(|e| e.to_string())?;
        println!("wrote {} and the figure", path.display());
    }
    Ok(())
}

/// The roofline figure from the committed measurements (the file as it is now, not as it was
/// compiled: `--redraw` follows a fresh `roofline --write`).
fn roofline_figure() -> Result<Figure, String> {
    use llm_workbook::ch10_matmul::roofline::{ROOFLINE_FILE, parse_roofline};
    let path = root_path(ROOFLINE_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let r = parse_roofline(&text).map_err(|e| e.to_string())?;
    llm_workbook::ch10_matmul::book::roofline_figure(&r).map_err(|e| e.to_string())
}

// ───────────────────────────── thread scaling ─────────────────────────────

/// Parses `--threads 1,2,4,8,16`.
fn thread_list(text: &str) -> Result<Vec<usize>, String> {
    let list: Vec<usize> =
        text.split(',').map(|t| t.trim().parse::<usize>()).collect::<Result<_, _>>().map_err(
            |e| format!("--threads: expected a list like 1,2,4,8,16, got {text:?} ({e})"),
        )?;
    if list.is_empty() || list.contains(&0) {
        return Err(format!("--threads: every count must be at least 1, got {text:?}"));
    }
    Ok(list)
}

/// `--threads 1,2,4,8,16`: the n×n×n product (n = 2048 by default) on each thread count, in f32
/// and f64, the counts timed in turn round after round by the wall clock (medians).
fn run_scaling(list: &[usize], n: usize, samples: usize, write: bool) -> Result<(), String> {
    let load_before = load_average();
    let date = clock::utc_now();
    let mut rng = Rng::new(2048);
    let mut csv_rows = Vec::new();
    for f64_ in [false, true] {
        let ty = if f64_ { "f64" } else { "f32" };
        let (secs, used) = with_type!(f64_, T => {
            let (a, b) = operands::<T>((n, n, n), Op::N, Op::N, &mut rng);
            let mut cs: Vec<DMatrix<T>> = list.iter().map(|_| DMatrix::zeros(n, n)).collect();
            let used: Vec<usize> = list
                .iter()
                .zip(cs.iter_mut())
                .map(|(&t, c)| {
                    let s = Settings { threads: Some(t), ..Settings::default() };
                    let ran = gemm_with(s, 1.0, &a, Op::N, &b, Op::N, 0.0, c).ok().flatten();
                    ran.map_or(0, |s| s.threads)
                })
                .collect();
            let mut contenders: Vec<Contender> = list
                .iter()
                .zip(cs.iter_mut())
                .map(|(&t, c)| {
                    contender(format!("{t} threads"), ours(&a, Op::N, &b, Op::N, c, t))
                })
                .collect();
            (race(&mut contenders, samples, 0.0), used)
        });
        let flops = 2.0 * (n as f64).powi(3);
        for ((&t, s), u) in list.iter().zip(&secs).zip(used) {
            csv_rows.push(vec![
                ty.to_string(),
                n.to_string(),
                t.to_string(),
                u.to_string(),
                format!("{:.3}", gflops(flops, s.wall)),
                samples.to_string(),
            ]);
        }
    }
    let meta = vec![
        ("cpu", cpu_name()),
        ("cores", cores().to_string()),
        ("kernel", llm_workbook::simd::best_kernel().to_string()),
        ("date (UTC)", date),
        ("load before", load_before),
        ("load after", load_average()),
    ];
    let mut csv =
        Csv::new(meta, &["type", "n", "threads", "threads_used", "gflops_wall", "samples"]);
    csv.rows = csv_rows;
    println!("{}", scaling_table(&csv)?);
    if write {
        csv.save(THREADS_CSV)?;
        println!("wrote {THREADS_CSV}");
        redraw()?;
    }
    Ok(())
}

/// The thread-scaling table from its CSV: GFLOP/s, speed-up and efficiency against the first
/// thread count (1 in the usual list).
fn scaling_table(csv: &Csv) -> Result<String, String> {
    let mut out = format!(
        "`cargo bench --features peers --bench ch10_matmul -- --threads {}` on {} ({} \
         logical CPUs, kernel `{}`) at {} UTC, load average {} before and {} after: the n×n×n \
         product by the wall clock, median of the samples, the thread counts timed in turn. \
         Efficiency = speed-up ÷ threads.\n\n\
         | type | n | threads | used | GFLOP/s | speed-up | efficiency |\n\
         |---|---|---|---|---|---|---|\n",
        {
            let mut ts: Vec<&str> = Vec::new();
            for r in &csv.rows {
                let t = csv.get(r, "threads")?;
                if !ts.contains(&t) {
                    ts.push(t);
                }
            }
            ts.join(",")
        },
        csv.meta("cpu")?,
        csv.meta("cores")?,
        csv.meta("kernel")?,
        csv.meta("date (UTC)")?,
        csv.meta("load before")?,
        csv.meta("load after")?
    );
    let mut base: Option<(String, f64, f64)> = None;
    for r in &csv.rows {
        let (ty, t, g) = (csv.get(r, "type")?, csv.num(r, "threads")?, csv.num(r, "gflops_wall")?);
        if base.as_ref().is_none_or(|b| b.0 != ty) {
            base = Some((ty.to_string(), t, g));
        }
        let (_, t0, g0) = base.clone().unwrap_or_default();
        let speed_up = g / g0;
        out.push_str(&format!(
            "| {ty} | {} | {t} | {} | {g:.1} | {speed_up:.2}× | {:.0} % |\n",
            csv.get(r, "n")?,
            csv.get(r, "threads_used")?,
            100.0 * speed_up / (t / t0)
        ));
    }
    Ok(out)
}

fn scaling_figure(csv: &Csv) -> Result<(String, Figure), String> {
    let mut series: Vec<Series> = Vec::new();
    for ty in ["f32", "f64"] {
        let mut pts = Vec::new();
        for r in csv.rows.iter().filter(|r| r[0] == ty) {
            pts.push((csv.num(r, "threads")?, csv.num(r, "gflops_wall")?));
        }
        if let Some(&(t0, g0)) = pts.first() {
            let linear = pts.iter().map(|&(t, _)| (t, g0 * t / t0)).collect();
            series.push(Series::new(format!("{ty}, measured"), pts));
            series.push(Series::new(format!("{ty}, linear from the first"), linear));
        }
    }
    Ok((
        "ch10_threads".into(),
        Figure::LogLine(
            LineChart {
                title: format!(
                    "The n = {} product on more threads",
                    csv.rows.first().map_or("?", |r| r[1].as_str())
                ),
                x_label: "threads (log scale)".into(),
                y_label: "GFLOP/s (log scale)".into(),
                series,
                markers: true,
            },
            LogAxes::Both,
        ),
    ))
}

// ───────────────────────────── the sweep ─────────────────────────────

/// GFLOP/s (median) of each blocking in `variants` on an n×n×n product, all timed in turn sample
/// by sample so that load from other programs falls on every variant alike.
fn sweep_line<T: Element + Float>(
    kernel: Kernel,
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
            let s = Settings {
                kernel: Some(kernel),
                blocking: Some(blocking),
                threads: Some(1),
                ..Settings::default()
            };
            let (a, b) = (&a, &b);
            contender(format!("{blocking:?}"), move || {
                gemm_with(s, T::one(), a, Op::N, b, Op::N, T::zero(), &mut *c).expect("shapes");
            })
        })
        .collect();
    let secs = race(&mut contenders, samples, 0.03);
    secs.into_iter().map(|s| gflops(2.0 * (n * n * n) as f64, s.cpu)).collect()
}

/// The sweep's values of KC, MC and NC, each varied alone from the defaults, and the square size
/// each is timed on.
const SWEEP_LINES: [(&str, &[usize], usize); 3] = [
    ("KC", &[32, 64, 128, 192, 256, 384, 512, 768], 1024),
    ("MC", &[24, 48, 72, 96, 144, 192, 288, 384, 576], 1024),
    ("NC", &[252, 510, 1020, 2040, 4080], 2048),
];

/// The tuned blocking of `kernel` (the constants the sweep varies), f64 or f32.
fn tuned_blocking(kernel: Kernel, f64_: bool) -> Blocking {
    match (kernel, f64_) {
        (Kernel::Avx2, false) => matmul::lab::AVX2_F32_BLOCKING,
        (Kernel::Avx2, true) => matmul::lab::AVX2_F64_BLOCKING,
        (Kernel::Avx512, false) => matmul::lab::AVX512_F32_BLOCKING,
        (Kernel::Avx512, true) => matmul::lab::AVX512_F64_BLOCKING,
        (Kernel::Scalar, _) => matmul::lab::SCALAR_BLOCKING,
    }
}

/// One line: the model's KC, MC and NC on this machine beside the tuned constants.
fn model_line(model: &matmul::lab::ModelBlocking, tuned: Blocking) -> String {
    format!(
        "the analytical model on this machine's caches: KC {} (tuned {}, kept), MC {} (tuned {}), \
         NC {} (tuned {})",
        model.model_kc, tuned.kc, model.blocking.mc, tuned.mc, model.blocking.nc, tuned.nc
    )
}

fn run_sweep(samples: usize, write: bool) -> Result<(), String> {
    let kernel = llm_workbook::simd::best_kernel();
    let mut rng = Rng::new(99);
    let load_before = load_average();
    let mut rows = Vec::new();
    for f64_ in [false, true] {
        let ty = if f64_ { "f64" } else { "f32" };
        // The sweep varies the kernel's tuned constants (the committed defaults), whatever this
        // machine's caches; where the analytical model puts MC and NC here is printed beside it.
        let base = tuned_blocking(kernel, f64_);
        let tile = with_type!(f64_, T => matmul::lab::tile_shape::<T>(kernel))
            .map_err(|e| e.to_string())?;
        let elem = if f64_ { 8 } else { 4 };
        let model = matmul::lab::machine_caches()
            .and_then(|c| matmul::lab::model_blocking(&c, tile, elem, base.kc));
        match &model {
            Some(model) => println!("{ty}: {}", model_line(model, base)),
            None => println!("{ty}: this machine's caches cannot be read; the model has no say"),
        }
        for (name, values, n) in SWEEP_LINES {
            // The model's MC and NC for this machine join their lines, where they fall.
            let mut values = values.to_vec();
            let modelled = match (name, &model) {
                ("MC", Some(m)) => Some(m.blocking.mc),
                ("NC", Some(m)) => Some(m.blocking.nc),
                _ => None,
            };
            if let Some(v) = modelled.filter(|v| !values.contains(v)) {
                values.push(v);
                values.sort_unstable();
            }
            let variants: Vec<Blocking> = values
                .iter()
                .map(|&v| match name {
                    "KC" => Blocking { kc: v, ..base },
                    "MC" => Blocking { mc: v, ..base },
                    _ => Blocking { nc: v, ..base },
                })
                .collect();
            // The kernel the table is labelled with, whatever LLM_WORKBOOK_KERNEL says.
            let g = with_type!(f64_, T => sweep_line::<T>(kernel, n, &variants, samples, &mut rng));
            for (&v, &x) in values.iter().zip(&g) {
                let mark = if Some(v) == modelled { " (the model's)" } else { "" };
                println!("{ty} {name} {v}: {x:.1}{mark}");
                rows.push(vec![
                    ty.to_string(),
                    base.mc.to_string(),
                    base.kc.to_string(),
                    base.nc.to_string(),
                    name.to_string(),
                    v.to_string(),
                    n.to_string(),
                    format!("{x:.1}"),
                ]);
            }
        }
    }
    let meta = vec![
        ("cpu", cpu_name()),
        ("kernel", kernel.to_string()),
        ("date (UTC)", clock::utc_now()),
        ("load before", load_before),
        ("load after", load_average()),
        ("samples", samples.to_string()),
    ];
    let mut csv = Csv::new(meta, &SWEEP_COLUMNS);
    csv.rows = rows;
    let (table, figs) = sweep_report(&csv)?;
    println!("\n{table}");
    if write {
        csv.save(SWEEP_CSV)?;
        replace_block(&chapter_path(), "sweep", &table)?;
        for (stem, fig) in figs {
            fig.save(&image_dir(), &stem).map_err(|e| e.to_string())?;
        }
        println!("wrote {SWEEP_CSV}, the chapter's table and the figures");
    }
    Ok(())
}

/// The columns of [`SWEEP_CSV`]: the type, its default MC, KC, NC, the constant varied, its
/// value, the size n of the square product and the median GFLOP/s.
const SWEEP_COLUMNS: [&str; 8] = ["type", "mc", "kc", "nc", "constant", "value", "n", "gflops"];

/// The chapter's sweep table and the two sweep figures (one per type, the machine named in the
/// caption), from the sweep's CSV.
fn sweep_report(csv: &Csv) -> Result<(String, Vec<(String, Figure)>), String> {
    let (cpu, kernel) = (csv.meta("cpu")?, csv.meta("kernel")?);
    let mut out = format!(
        "Single-threaded GFLOP/s (median of {} samples) of kernel `{kernel}` on square \
         products, varying one constant at a time from the defaults, every value of a line timed \
         in turn sample by sample by the CPU time of its thread; measured by `cargo bench --bench \
         ch10_matmul -- sweep --write` on {cpu} on {} UTC while the machine was shared (load \
         average {} before, {} after); the measurements are in \
         [`data/ch10_sweep.csv`](../data/ch10_sweep.csv).\n\n",
        csv.meta("samples")?,
        csv.meta("date (UTC)")?,
        csv.meta("load before")?,
        csv.meta("load after")?
    );
    let mut figs = Vec::new();
    for ty in ["f32", "f64"] {
        let rows: Vec<&Vec<String>> = csv.rows.iter().filter(|r| r[0] == ty).collect();
        let Some(first) = rows.first() else { continue };
        out.push_str(&format!(
            "**{ty}** (defaults MC = {}, KC = {}, NC = {}):\n\n\
             | constant | value | n | GFLOP/s | of the line's best |\n\
             |---|---|---|---|---|\n",
            csv.get(first, "mc")?,
            csv.get(first, "kc")?,
            csv.get(first, "nc")?
        ));
        let mut series = Vec::new();
        for (name, _, _) in SWEEP_LINES {
            let line: Vec<&&Vec<String>> = rows.iter().filter(|r| r[4] == name).collect();
            let mut pts = Vec::new();
            for r in &line {
                pts.push((csv.num(r, "value")?, csv.num(r, "gflops")?));
            }
            let best = pts.iter().map(|p| p.1).fold(0.0, f64::max);
            for (r, &(v, x)) in line.iter().zip(&pts) {
                out.push_str(&format!(
                    "| {name} | {v} | {} | {x:.1} | {:.0} % |\n",
                    csv.get(r, "n")?,
                    100.0 * x / best
                ));
            }
            let n = line.first().map_or("?", |r| r[6].as_str());
            series.push(Series::new(format!("{name} (others at default), n = {n}"), pts));
        }
        out.push('\n');
        figs.push((
            format!("ch10_sweep_{ty}"),
            Figure::LogLine(
                LineChart {
                    title: format!("Blocking sweep, {ty}, one thread: {cpu}, kernel {kernel}"),
                    x_label: "block size (KC: depth, MC: rows, NC: columns; log scale)".into(),
                    y_label: "GFLOP/s (median)".into(),
                    series,
                    markers: true,
                },
                LogAxes::X,
            ),
        ));
    }
    Ok((out, figs))
}

fn run_shape<T: FaerPeer>(
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
    let (mut c, mut c2) = (DMatrix::<T>::zeros(m, n), DMatrix::<T>::zeros(m, n));
    let mut cs = vec![
        contender(format!("ours, {threads} thread(s)"), ours(&a, ta, &b, tb, &mut c, threads)),
        faer_contender(&a, ta, &b, tb, &mut c2),
    ];
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
    let result = if cli.redraw {
        redraw()
    } else if let Some(list) = &cli.threads {
        thread_list(list).and_then(|l| run_scaling(&l, cli.n, samples, cli.write))
    } else {
        match cli.command.unwrap_or(Command::All) {
            Command::All => run_all(samples, cli.write, false),
            Command::Gpt => run_all(samples, false, true),
            Command::Sweep => run_sweep(samples, cli.write),
            Command::Roofline => run_roofline(samples, cli.write),
            Command::Threads => {
                run_threads(samples);
                Ok(())
            }
            Command::Bf16 => {
                run_bf16(samples);
                Ok(())
            }
            Command::Shape { m, k, n, ta, tb, f64, ours_threads: threads } => {
                let (ta, tb) = (if ta { Op::T } else { Op::N }, if tb { Op::T } else { Op::N });
                with_type!(f64, T => run_shape::<T>(m, k, n, ta, tb, threads, samples));
                Ok(())
            }
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

// ───────────────────────────── the bf16 product ─────────────────────────────

/// Our f32 product on one thread against each bf16 path this CPU runs (the portable pairs, a
/// specification in scalar Rust, left out), on 1024³ and the GPT step's products of more than
/// 10⁷ flops, inputs alternating in each sample; GFLOP/s count 2·m·n·k whatever the format.
fn run_bf16(samples: usize) {
    use llm_workbook::matmul::lab::{
        Bf16Method, Bf16Path, available_bf16_paths, gemm_bf16, widen_bf16,
    };
    use llm_workbook::simd::Kernel;
    // The portable pairs (pairs on the scalar kernel) are the specification, too slow to time.
    let portable = |p: &Bf16Path| p.method == Bf16Method::Pairs && p.kernel == Kernel::Scalar;
    let paths: Vec<Bf16Path> =
        available_bf16_paths().into_iter().filter(|p| !portable(p)).collect();
    println!(
        "{} ({} kernel, fastest bf16 path {}), load average {}: one thread, median of {samples} \
         samples",
        cpu_name(),
        llm_workbook::simd::active_kernel(),
        llm_workbook::matmul::lab::best_bf16_path().name(),
        load_average()
    );
    let mut header = "| product | f32 GFLOP/s |".to_string();
    for p in &paths {
        header.push_str(&format!(" {} GFLOP/s | ÷ f32 |", p.name()));
    }
    println!("{header}");
    let mut shapes: Vec<Shape> = vec![("square 1024³", (1024, 1024, 1024), Op::N, Op::N)];
    shapes
        .extend(gpt_shapes().into_iter().filter(|(_, (m, k, n), _, _)| 2 * m * k * n > 10_000_000));
    let mut rng = Rng::new(11);
    for (name, (m, k, n), ta, tb) in shapes {
        let (a, b) = operands::<f32>((m, k, n), ta, tb, &mut rng);
        // The top half of each f32 (truncated: how it is rounded does not change the time).
        let top = |x: &DMatrix<f32>| x.map(|v| (v.to_bits() >> 16) as u16);
        let (a16, b16) = (top(&a), top(&b));
        let (aw, bw) = (a16.map(widen_bf16), b16.map(widen_bf16));
        let mut c32 = DMatrix::zeros(m, n);
        let mut cs: Vec<DMatrix<f32>> = paths.iter().map(|_| DMatrix::zeros(m, n)).collect();
        let mut contenders = vec![contender("f32", ours(&aw, ta, &bw, tb, &mut c32, 1))];
        for (&path, c) in paths.iter().zip(cs.iter_mut()) {
            let (a16, b16) = (&a16, &b16);
            // One thread, as the f32 product above: the clock is this thread's CPU time, which
            // would not count the work of threads the product starts.
            contenders.push(contender(path.name(), move || {
                gemm_bf16(path.on_threads(1), 1.0, a16, ta, b16, tb, 0.0, c).expect("shapes agree");
            }));
        }
        let times = race(&mut contenders, samples, 0.05);
        let flops = 2.0 * (m * n * k) as f64;
        let f32_rate = gflops(flops, times[0].cpu);
        let mut line = format!("| {name} {} | {f32_rate:.1} |", shape_text((m, k, n), ta, tb));
        for t in &times[1..] {
            let rate = gflops(flops, t.cpu);
            line.push_str(&format!(" {rate:.1} | {} |", ratio(rate, f32_rate)));
        }
        println!("{line}");
    }
}
