//! The date and time the benchmarks stamp on what they write, and the machine they name (its CPU
//! and load average), shared by the chapter 9 and
//! chapter 10 benches (`#[path]` modules: the standard library has no calendar, and a crate for
//! one function is not worth a dependency).

/// Now in UTC as `YYYY-MM-DD HH:MM`.
#[allow(dead_code)] // each bench that includes this module uses what it needs
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m) = ((secs % 86_400) / 3_600, (secs % 3_600) / 60);
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}")
}

/// Seconds of CPU time the calling thread has used (Linux), so that time the scheduler gives to
/// other programs on a shared machine is not counted; elsewhere the wall clock since the first
/// call, so differences are still durations.
#[allow(dead_code)] // each bench that includes this module uses what it needs
pub fn thread_cpu_seconds() -> f64 {
    #[cfg(target_os = "linux")]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
    }
    #[cfg(not(target_os = "linux"))]
    {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64()
    }
}

/// The CPU's model name from `/proc/cpuinfo`, or "unknown CPU".
#[allow(dead_code)] // each bench that includes this module uses what it needs
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|n| n.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// The 1-, 5- and 15-minute load averages from `/proc/loadavg`, or "unknown".
#[allow(dead_code)] // each bench that includes this module uses what it needs
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}
