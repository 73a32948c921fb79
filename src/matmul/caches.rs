//! The cache blocking derived from the caches the machine reports, by the analytical model of Low,
//! Igual, Smith and Quintana-Ortí ("Analytical modeling is enough for high-performance BLIS",
//! ACM TOMS 43(2), 2016).
//!
//! A set-associative cache of S bytes with W ways and lines of L bytes has N = S/(W·L) sets; an
//! array streamed in order fills the sets evenly, so it occupies ⌈bytes/(N·L)⌉ of the W ways,
//! each way holding N·L = S/W bytes. Least-recently-used replacement evicts a line only when all
//! W ways of its set are taken, so an array that must survive while others stream past is given
//! whole ways, and one way is left free for what streams. Each packed block gets the cache level
//! it is re-read from:
//!
//! - **KC (L1)**: the KC×NR sliver of B̃ is read by every micro-kernel call of loop 1 while the
//!   MR×KC slivers of Ã stream past it. Giving Ã C_A ways and B̃ the share NR/MR of that in
//!   proportion, with one way free, C_A = ⌊(W₁ − 1)/(1 + NR/MR)⌋ and KC = C_A·(S₁/W₁)/(MR·s),
//!   s the bytes of one element.
//! - **MC (L2)**: the MC×KC block Ã is re-read for every NR columns (loop 2) while one KC×NR
//!   sliver of B̃ at a time passes through: B̃'s sliver takes C_B = ⌈KC·NR·s/(S₂/W₂)⌉ ways, one
//!   is left free, and Ã gets the rest: MC = (W₂ − 1 − C_B)·(S₂/W₂)/(KC·s), down to a multiple
//!   of MR.
//! - **NC (L3)**: the KC×NC panel B̃ is re-read for every MC rows (loop 3) while the MC×KC block
//!   Ã passes through: Ã takes C_A = ⌈MC·KC·s/(S₃/W₃)⌉ ways, one is left free, and B̃ gets the
//!   rest: NC = (W₃ − 1 − C_A)·(S₃/W₃)/(KC·s), down to a multiple of NR. An L3 shared by several
//!   cores gives each its share of every way (S₃ divided by the cores sharing it).
//!
//! KC is not taken from the model: it sets how the sum over k is cut into rank-KC updates, and so
//! the order of the additions and the bits of every product; it stays the kernel's constant, and
//! the model's KC is reported beside it. The product takes the model's MC, and its NC only where
//! that is smaller than the tuned one (measured: see `blocking_for`). MC and NC only decide how
//! the rows and columns of C are cut, which changes no sum: the same bits whatever the caches.

use super::Blocking;
use crate::simd::Kernel;
use std::path::Path;
use std::sync::OnceLock;

/// One cache level as the machine describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheLevel {
    /// Capacity in bytes.
    pub bytes: usize,
    /// Associativity: the ways of each set.
    pub ways: usize,
    /// Bytes per cache line.
    pub line: usize,
    /// Cores sharing the level (1 for a private cache).
    pub sharing: usize,
}

impl CacheLevel {
    /// The bytes one way holds for one core: S/(W·cores sharing) (N·L, N = S/(W·L) sets).
    fn way_bytes(&self) -> usize {
        self.bytes / (self.ways * self.sharing).max(1)
    }

    /// Whole ways an array of `bytes` bytes occupies, streamed in order over the sets.
    fn ways_of(&self, bytes: usize) -> usize {
        bytes.div_ceil(self.way_bytes().max(1))
    }

    /// Whether the description can feed the model (every field at least 1, more than one way,
    /// and a way at least a line).
    fn usable(&self) -> bool {
        self.ways > 1 && self.line > 0 && self.sharing > 0 && self.way_bytes() >= self.line
    }
}

/// The data caches of one core: L1d, L2 and, where there is one, L3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caches {
    /// The level-1 data cache.
    pub l1d: CacheLevel,
    /// The level-2 cache.
    pub l2: CacheLevel,
    /// The level-3 cache, if the machine has one.
    pub l3: Option<CacheLevel>,
}

/// What the model derives for one kernel and element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelBlocking {
    /// The model's KC (reported only: the product keeps the kernel's constant KC).
    pub model_kc: usize,
    /// The given KC, and the model's MC and NC for it.
    pub blocking: Blocking,
}

/// The model's blocking for a kernel with an `mr`×`nr` register tile on elements of `elem` bytes,
/// MC and NC derived for depth `kc` (the kernel's constant), from the caches `c` (see the module
/// notes for the three formulas). `None` when the description cannot feed the model (a level
/// with one way, a way smaller than a line, a zero size) or a block would get no way at all.
pub fn model_blocking(
    c: &Caches,
    (mr, nr): (usize, usize),
    elem: usize,
    kc: usize,
) -> Option<ModelBlocking> {
    if mr == 0 || nr == 0 || elem == 0 || kc == 0 || !c.l1d.usable() || !c.l2.usable() {
        return None;
    }
    // L1: Ã gets C_A = ⌊(W₁ − 1)·MR/(MR + NR)⌋ ways (= ⌊(W₁ − 1)/(1 + NR/MR)⌋).
    let ways_a = (c.l1d.ways - 1) * mr / (mr + nr);
    let model_kc = ways_a * c.l1d.way_bytes() / (mr * elem);
    // L2: Ã gets what B̃'s sliver and one free way leave.
    let ways_a2 = (c.l2.ways - 1).checked_sub(c.l2.ways_of(kc * nr * elem))?;
    let mc = (ways_a2 * c.l2.way_bytes() / (kc * elem)) / mr * mr;
    if mc == 0 || model_kc == 0 {
        return None;
    }
    // L3: B̃ gets what Ã's block and one free way leave; no L3 (or an unusable one): the panel is
    // bounded by L2 instead, as large as it leaves room for Ã.
    let nc = match c.l3.filter(CacheLevel::usable) {
        Some(l3) => {
            let ways_b = (l3.ways - 1).checked_sub(l3.ways_of(mc * kc * elem))?;
            ways_b * l3.way_bytes() / (kc * elem) / nr * nr
        }
        None => ways_a2 * c.l2.way_bytes() / (kc * elem) / nr * nr,
    };
    (nc > 0).then_some(ModelBlocking { model_kc, blocking: Blocking { mc, kc, nc } })
}

/// Parses one sysfs size such as `32K`, `512K`, `32768K` or `1M` into bytes.
fn parse_size(text: &str) -> Option<usize> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, ch)| !ch.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let n: usize = digits.parse().ok()?;
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// How many CPUs a sysfs list such as `0-1`, `0,2,4-7` or `3` names.
fn parse_cpu_count(text: &str) -> Option<usize> {
    let mut count = 0usize;
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        count += match part.split_once('-') {
            Some((a, b)) => b.parse::<usize>().ok()?.checked_sub(a.parse::<usize>().ok()?)? + 1,
            None => part.parse::<usize>().map(|_| 1).ok()?,
        };
    }
    (count > 0).then_some(count)
}

/// The caches described by the `index*` folders under `dir` (Linux's
/// `/sys/devices/system/cpu/cpu0/cache`: files `level`, `type`, `size`, `ways_of_associativity`,
/// `coherency_line_size`, `shared_cpu_list`). `None` when the folder cannot be read or lacks an
/// L1 data cache or an L2; a level whose files do not parse is left out.
fn read_caches(dir: &Path) -> Option<Caches> {
    let read = |p: &Path, name: &str| std::fs::read_to_string(p.join(name)).ok();
    let (mut l1d, mut l2, mut l3) = (None, None, None);
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let p = entry.path();
        if !entry.file_name().to_string_lossy().starts_with("index") {
            continue;
        }
        let level = read(&p, "level").and_then(|t| t.trim().parse::<u32>().ok());
        let kind = read(&p, "type").map(|t| t.trim().to_string());
        let described = (|| {
            Some(CacheLevel {
                bytes: parse_size(&read(&p, "size")?)?,
                ways: read(&p, "ways_of_associativity")?.trim().parse().ok()?,
                line: read(&p, "coherency_line_size")?.trim().parse().ok()?,
                sharing: read(&p, "shared_cpu_list").and_then(|t| parse_cpu_count(&t)).unwrap_or(1),
            })
        })();
        let Some(described) = described else { continue };
        match (level, kind.as_deref()) {
            (Some(1), Some("Data" | "Unified")) => l1d = Some(described),
            (Some(2), Some("Unified" | "Data")) => l2 = Some(described),
            (Some(3), Some("Unified" | "Data")) => l3 = Some(described),
            _ => {}
        }
    }
    Some(Caches { l1d: l1d?, l2: l2?, l3 })
}

/// This machine's caches (those of CPU 0, read once from sysfs), `None` where they cannot be read.
pub fn machine_caches() -> Option<Caches> {
    static CACHES: OnceLock<Option<Caches>> = OnceLock::new();
    *CACHES.get_or_init(|| read_caches(Path::new("/sys/devices/system/cpu/cpu0/cache")))
}

/// The blocking a kernel with tile `tile`, elements of `elem` bytes and tuned blocking `tuned`
/// runs with on caches `caches`: the tuned KC (it fixes the bits), the model's MC, and the smaller
/// of the model's NC and the tuned one; `tuned` itself where there is no description or it does
/// not feed the model.
///
/// NC is held to the tuned value because measurement disagreed with the model there. On the
/// 2-core Zen 3 (AVX2, f32, n = 2048, one thread, 2026-11-28, load 5 to 8) panels of 252 to 1020
/// columns ran at 59.5 to 70.3 GFLOP/s and the model's single panel (NC 9552) at 50.1; in f64
/// 31.0 at NC 1020 against 26.8 at the model's 7164; the Zen 4 sweep in chapter 10 lost 11 % with
/// a single 2048-column panel too. The L3 these virtual machines report is shared with cores they
/// do not report, so its share per core is smaller than the description says; the model's NC
/// remains the bound on a machine whose L3 is smaller than the tuned panel needs. The model's MC
/// measured as fast as or faster than the tuned one on the same machine (f32 67.3 against 61.1,
/// f64 26.9 against 23.5), so it is used as it is.
pub(super) fn blocking_for(
    caches: Option<Caches>,
    tuned: Blocking,
    tile: (usize, usize),
    elem: usize,
) -> Blocking {
    match caches.and_then(|c| model_blocking(&c, tile, elem, tuned.kc)) {
        Some(m) => Blocking { mc: m.blocking.mc, kc: tuned.kc, nc: m.blocking.nc.min(tuned.nc) },
        None => tuned,
    }
}

/// [`blocking_for`] on this machine's caches ([`machine_caches`]) for kernel family `kind`,
/// worked out on the first product of each family and element size and remembered: the model's
/// dozen integer divisions would otherwise cost a few per cent of a 32×32·32×64 product.
pub(super) fn machine_blocking(
    kind: Kernel,
    tuned: Blocking,
    tile: (usize, usize),
    elem: usize,
) -> Blocking {
    static KNOWN: [OnceLock<Blocking>; 2 * Kernel::ALL.len()] =
        [const { OnceLock::new() }; 2 * Kernel::ALL.len()];
    let slot = 2 * (kind as usize) + usize::from(elem > 4);
    *KNOWN[slot].get_or_init(|| blocking_for(machine_caches(), tuned, tile, elem))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The machine the AVX2 constants were tuned on, written out: L1d 32 KiB 8-way, L2 512 KiB
    /// 8-way (private), L3 32 MiB 16-way shared by the 2 cores, lines of 64 bytes.
    fn zen3() -> Caches {
        let level = |bytes, ways, sharing| CacheLevel { bytes, ways, line: 64, sharing };
        Caches {
            l1d: level(32 << 10, 8, 1),
            l2: level(512 << 10, 8, 1),
            l3: Some(level(32 << 20, 16, 2)),
        }
    }

    #[test]
    fn the_model_derives_the_blocking_worked_out_by_hand() {
        // AVX2 f32, 16×6 tile, 4-byte elements, KC = 384 (the constant):
        // L1: way = 32768/8 = 4096 B; C_A = ⌊7·16/22⌋ = 5; KC = 5·4096/(16·4) = 320.
        // L2: way = 65536 B; B̃'s sliver 384·6·4 = 9216 B → 1 way; Ã gets 8 − 1 − 1 = 6 ways =
        //     393,216 B; MC = 393216/(384·4) = 256 (a multiple of 16).
        // L3: way per core = 32 MiB/16/2 = 1 MiB; Ã 256·384·4 = 393,216 B → 1 way; B̃ gets 14
        //     ways = 14,680,064 B; NC = ⌊14680064/1536⌋ = 9557 → 9552 (a multiple of 6).
        let f32_avx2 = model_blocking(&zen3(), (16, 6), 4, 384).unwrap();
        assert_eq!(f32_avx2.model_kc, 320);
        assert_eq!(f32_avx2.blocking, Blocking { mc: 256, kc: 384, nc: 9552 });
        // AVX2 f64, 8×6 tile, 8-byte elements, KC = 256: C_A = ⌊7·8/14⌋ = 4, KC = 4·4096/64 =
        // 256; B̃'s sliver 12,288 B → 1 way, MC = 393216/2048 = 192; Ã 393,216 B → 1 way,
        // NC = ⌊14680064/2048⌋ = 7168 → 7164.
        let f64_avx2 = model_blocking(&zen3(), (8, 6), 8, 256).unwrap();
        assert_eq!(f64_avx2.model_kc, 256);
        assert_eq!(f64_avx2.blocking, Blocking { mc: 192, kc: 256, nc: 7164 });
        // Without an L3 the panel is held to L2's room: 6 ways = 393,216 B, /2048 = 192 → 192.
        let no_l3 = Caches { l3: None, ..zen3() };
        assert_eq!(model_blocking(&no_l3, (8, 6), 8, 256).unwrap().blocking.nc, 192);
        // A description that cannot feed the model: a direct-mapped L1, a block too deep for L2.
        let direct = Caches { l1d: CacheLevel { ways: 1, ..zen3().l1d }, ..zen3() };
        assert_eq!(model_blocking(&direct, (8, 6), 8, 256), None);
        assert_eq!(model_blocking(&zen3(), (8, 6), 8, 1 << 20), None);
    }

    #[test]
    fn sysfs_descriptions_parse_and_bad_ones_fall_back() {
        assert_eq!(parse_size("32K\n"), Some(32 << 10));
        assert_eq!(parse_size("32768K"), Some(32 << 20));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("64"), Some(64));
        assert_eq!(parse_size("32 KiB"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_cpu_count("0-1\n"), Some(2));
        assert_eq!(parse_cpu_count("0,2,4-7"), Some(6));
        assert_eq!(parse_cpu_count("3"), Some(1));
        assert_eq!(parse_cpu_count("7-3"), None);
        assert_eq!(parse_cpu_count("x"), None);
        // A folder written out as sysfs does, then spoiled one file at a time.
        let dir = std::env::temp_dir().join(format!("llm_workbook_caches_{}", std::process::id()));
        let put = |index: &str, level: &str, kind: &str, size: &str, ways: &str, shared: &str| {
            let d = dir.join(index);
            std::fs::create_dir_all(&d).unwrap();
            let files = [
                ("level", level),
                ("type", kind),
                ("size", size),
                ("ways_of_associativity", ways),
                ("coherency_line_size", "64"),
                ("shared_cpu_list", shared),
            ];
            for (name, text) in files {
                std::fs::write(d.join(name), format!("{text}\n")).unwrap();
            }
        };
        put("index0", "1", "Data", "32K", "8", "0");
        put("index1", "1", "Instruction", "32K", "8", "0");
        put("index2", "2", "Unified", "512K", "8", "0");
        put("index3", "3", "Unified", "32768K", "16", "0-1");
        assert_eq!(read_caches(&dir), Some(zen3()));
        // An L3 that does not parse is left out; an L2 that does not parse leaves no description.
        put("index3", "3", "Unified", "lots", "16", "0-1");
        assert_eq!(read_caches(&dir), Some(Caches { l3: None, ..zen3() }));
        put("index2", "2", "Unified", "512K", "eight", "0");
        assert_eq!(read_caches(&dir), None);
        assert_eq!(read_caches(&dir.join("absent")), None);
        std::fs::remove_dir_all(&dir).unwrap();
        // What a product runs with: the tuned KC, the model's MC, NC no larger than tuned (the
        // model's 9552 on the Zen 3 measured slower) unless the L3 is too small for it: a 4 MiB
        // L3 gives 128 KiB a way per core, Ã (393,216 B) 3 ways, B̃ 12 ways = 1,572,864 B,
        // NC = 1572864/1536 = 1024 → 1020.
        let tuned = Blocking { mc: 96, kc: 384, nc: 1032 };
        let used = blocking_for(Some(zen3()), tuned, (16, 6), 4);
        assert_eq!(used, Blocking { mc: 256, kc: 384, nc: 1032 });
        let small_l3 = CacheLevel { bytes: 4 << 20, ways: 16, line: 64, sharing: 2 };
        let small = Caches { l3: Some(small_l3), ..zen3() };
        assert_eq!(blocking_for(Some(small), tuned, (16, 6), 4).nc, 1020);
        assert_eq!(blocking_for(None, tuned, (16, 6), 4), tuned);
        // No description here: the tuned constants.
        let used = blocking_for(machine_caches(), tuned, (16, 6), 4);
        assert_eq!(used.kc, 384, "KC is always the kernel's constant");
        if machine_caches().is_none() {
            assert_eq!(used, tuned);
        }
    }
}
