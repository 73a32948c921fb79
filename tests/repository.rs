//! The repository's own files, checked: the newcomer's path through the README and the chapter
//! pages (links, bad-input rows, what each page links), the shape of the code (the import rule,
//! lesson files' length, line width, where `unsafe` may be) and the pages beside the chapters
//! (sources, errata, the book's table of contents, the notation every page writes its math in).
//! These read the committed sources and pages, never what a run leaves in the working tree.

/// The newcomer's path, checked on the repository's own files: the README's bad-input table names
/// tests that exist, every relative link in the README and the chapter pages resolves, each
/// chapter page links its tests, snapshots, plots and the functions behind its formulas, and
/// `unsafe` stays inside the SIMD kernel module.
mod newcomer {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    fn root() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The markdown pages a reader walks: the README and every chapter page.
    fn pages() -> Vec<PathBuf> {
        let mut pages = vec![root().join("README.md")];
        pages.extend(
            llm_workbook::book::chapters()
                .iter()
                .map(|c| root().join("chapters").join(format!("{}.md", c.stem))),
        );
        pages.extend(
            ["sources.md", "benchmarks.md", "introduction.md", "exercises.md", "errata.md"]
                .map(|p| root().join("chapters").join(p)),
        );
        pages
    }

    /// Every `(text, target)` of an inline markdown link or image outside fenced code blocks;
    /// an image's text starts with `!` (`![alt](target)` gives `("!alt", target)`).
    fn links(markdown: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut in_block = false;
        for line in markdown.lines() {
            if line.trim_start().starts_with("```") {
                in_block = !in_block;
                continue;
            }
            if in_block {
                continue;
            }
            let mut rest = line;
            while let Some(close) = rest.find("](") {
                let before = &rest[..close];
                let after = &rest[close + 2..];
                let Some(end) = after.find(')') else { break };
                let (text, image) = before.rfind('[').map_or(("", false), |open| {
                    (&before[open + 1..], before[..open].ends_with('!'))
                });
                out.push((
                    format!("{}{text}", if image { "!" } else { "" }),
                    after[..end].trim().to_string(),
                ));
                rest = &after[end + 1..];
            }
        }
        out
    }

    fn is_relative(target: &str) -> bool {
        !(target.is_empty()
            || target.starts_with('#')
            || target.contains("://")
            || target.starts_with("mailto:"))
    }

    #[test]
    fn every_relative_link_in_the_readme_and_the_chapter_pages_resolves() {
        let mut broken = Vec::new();
        let mut checked = 0;
        for page in pages() {
            let dir = page.parent().expect("a page sits in a folder");
            for (_, target) in links(&read(&page)) {
                if !is_relative(&target) {
                    continue;
                }
                let file = target.split('#').next().unwrap_or_default();
                checked += 1;
                if !dir.join(file).exists() {
                    broken.push(format!("{}: {target}", page.display()));
                }
            }
        }
        assert!(checked > 100, "only {checked} relative links found: the link parser is broken");
        assert!(broken.is_empty(), "links that resolve to no file:\n{}", broken.join("\n"));
    }

    #[test]
    fn the_link_checker_sees_a_broken_link() {
        let md = concat!(
            "see [a](no/such/file.md) and ![b](img/x.png), not `[c](d)` in code\n",
            "```\n[e](f)\n```\n"
        );
        let found = links(md);
        assert_eq!(
            found.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>(),
            ["no/such/file.md", "img/x.png", "d"]
        );
        assert_eq!(found.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(), ["a", "!b", "c"]);
        assert!(!root().join("no/such/file.md").exists());
    }

    #[test]
    fn every_chapter_page_links_its_tests_snapshots_plots_and_functions() {
        let snapshots: Vec<String> = std::fs::read_dir(root().join("snapshots"))
            .expect("snapshots/")
            .map(|e| e.expect("an entry").file_name().to_string_lossy().into_owned())
            .collect();
        let images: Vec<String> = std::fs::read_dir(root().join("chapters").join("img"))
            .expect("chapters/img/")
            .map(|e| e.expect("an entry").file_name().to_string_lossy().into_owned())
            .collect();
        let mut missing = Vec::new();
        for ch in llm_workbook::book::chapters() {
            let page = root().join("chapters").join(format!("{}.md", ch.stem));
            let found = links(&read(&page));
            let targets: BTreeSet<&str> = found.iter().map(|(_, t)| t.as_str()).collect();
            if !targets.contains(format!("../tests/{}.rs", ch.stem).as_str()) {
                missing.push(format!("{}: no link to ../tests/{}.rs", ch.stem, ch.stem));
            }
            let prefix = format!("{}__", ch.stem);
            if snapshots.iter().any(|s| s.starts_with(&prefix))
                && !targets.iter().any(|t| t.starts_with(&format!("../snapshots/{prefix}")))
            {
                missing.push(format!("{}: has snapshots but links none of them", ch.stem));
            }
            // Every PNG the chapter draws is shown on its page as an image, so it renders.
            let img_prefix = format!("ch{:02}_", ch.number);
            for png in images.iter().filter(|f| f.starts_with(&img_prefix) && f.ends_with(".png")) {
                let target = format!("img/{png}");
                if !found.iter().any(|(text, t)| text.starts_with('!') && *t == target) {
                    missing
                        .push(format!("{}: chapters/img/{png} is not shown on the page", ch.stem));
                }
            }
            // Formulas link the code that computes them: at least three links whose text names a
            // function or type, and each named item exists in the linked file.
            let mut named = 0;
            for (text, target) in &found {
                let Some(file) = target.strip_prefix("../src/") else { continue };
                let name = text.trim_matches('`');
                if text.starts_with('`')
                    && !name.is_empty()
                    && name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == ':')
                {
                    named += 1;
                    let item = name.rsplit("::").next().unwrap_or(name);
                    let path = root().join("src").join(file.split('#').next().unwrap_or_default());
                    let code = if path.is_dir() { String::new() } else { read(&path) };
                    let defines =
                        ["fn", "struct", "enum", "const", "static", "trait", "type", "mod"]
                            .iter()
                            .any(|kw| code.contains(&format!("{kw} {item}")));
                    if !defines {
                        missing.push(format!(
                            "{}: [`{name}`] links {target}, which defines no {item}",
                            ch.stem
                        ));
                    }
                }
            }
            if named < 3 {
                missing.push(format!(
                    "{}: only {named} links from the prose to a named function or type",
                    ch.stem
                ));
            }
        }
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }

    /// The rows of the README's "Bad input" table: (entry point, test path).
    fn bad_input_rows() -> Vec<(String, String)> {
        let readme = read(&root().join("README.md"));
        let start =
            readme.find("\n## Bad input").expect("README.md has a \"## Bad input\" section");
        let section = &readme[start + 1..];
        let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
        let mut rows = Vec::new();
        for line in section.lines().filter(|l| l.starts_with('|')) {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            if cells.len() < 4 || cells[0].starts_with("---") || cells[0] == "entry point" {
                continue;
            }
            rows.push((cells[0].to_string(), cells[cells.len() - 1].to_string()));
        }
        rows
    }

    #[test]
    fn every_bad_input_row_names_a_test_function_that_exists_in_the_named_file() {
        let rows = bad_input_rows();
        assert!(rows.len() >= 40, "only {} rows in the bad-input table", rows.len());
        let mut wrong = Vec::new();
        let mut stems_covered = BTreeSet::new();
        let mut cli_rows = 0;
        for (entry, cell) in &rows {
            // The cell holds one or more `tests/<stem>.rs::<name>` references.
            let refs: Vec<&str> = cell
                .split('`')
                .filter(|s| s.starts_with("tests/") && s.contains(".rs::"))
                .collect();
            if refs.is_empty() {
                wrong.push(format!("{entry}: names no test (`tests/<stem>.rs::<name>`): {cell}"));
            }
            for r in refs {
                let (file, name) = r.split_once("::").unwrap_or_default();
                let name = name.rsplit("::").next().unwrap_or(name);
                let path = root().join(file);
                match std::fs::read_to_string(&path) {
                    Err(e) => wrong.push(format!("{entry}: {file}: {e}")),
                    Ok(code) if !code.contains(&format!("fn {name}(")) => {
                        wrong.push(format!("{entry}: {file} has no fn {name}"))
                    }
                    Ok(code) => {
                        // A bad-input test that asserts nothing would prove nothing.
                        let body = &code[code.find(&format!("fn {name}(")).unwrap_or(0)..];
                        let body = &body[..body[3..]
                            .find("\nfn ")
                            .or_else(|| body[3..].find("\n    fn "))
                            .map_or(body.len(), |e| e + 3)];
                        if !body.contains("assert")
                            && !body.contains("unwrap_err")
                            && !body.contains("expect_err")
                        {
                            wrong.push(format!("{entry}: {file}::{name} asserts nothing"));
                        }
                        if let Some(stem) =
                            file.strip_prefix("tests/").and_then(|f| f.strip_suffix(".rs"))
                        {
                            stems_covered.insert(stem.to_string());
                        }
                    }
                }
            }
            if entry.contains("llm-workbook") {
                cli_rows += 1;
            }
        }
        for ch in llm_workbook::book::chapters() {
            if !stems_covered.contains(ch.stem) {
                wrong.push(format!("no row tests chapter {} ({})", ch.number, ch.stem));
            }
        }
        if cli_rows < 3 {
            wrong.push(format!("only {cli_rows} rows for the command line (`llm-workbook …`)"));
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn unsafe_code_is_denied_outside_the_simd_kernel_module() {
        let lib = read(&root().join("src").join("lib.rs"));
        assert!(lib.contains("#![deny(unsafe_code)]"), "src/lib.rs must deny unsafe code");
        assert!(!lib.contains("allow(unsafe_code)"), "src/lib.rs must not allow unsafe code");
        let simd = read(&root().join("src").join("simd").join("mod.rs"));
        let allows: Vec<&str> = simd.lines().filter(|l| l.contains("allow(unsafe_code)")).collect();
        assert_eq!(
            allows.len(),
            1,
            "exactly one allow(unsafe_code) in src/simd/mod.rs: {allows:?}"
        );
        let after = &simd[simd.find("allow(unsafe_code)").unwrap_or(0)..];
        assert!(
            after.lines().nth(1).is_some_and(|l| l.trim() == "mod x86;"),
            "the allow must sit on `mod x86;`"
        );
        // No other file (binaries included, which the crate attribute does not reach) opts out
        // or writes `unsafe`.
        let mut offenders = Vec::new();
        let mut stack = vec![
            root().join("src"),
            root().join("tests"),
            root().join("benches"),
            root().join("examples"),
        ];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") || path.ends_with("src/simd/x86.rs") {
                    continue;
                }
                let code = read(&path);
                let own = path.ends_with("tests/repository.rs");
                for (i, line) in code.lines().enumerate() {
                    let code_part = line.split("//").next().unwrap_or_default();
                    let hit = code_part.contains("unsafe {")
                        || code_part.contains("unsafe fn")
                        || code_part.contains("unsafe impl")
                        || (code_part.contains("unsafe_code")
                            && !code_part.contains("deny(unsafe_code)")
                            && !code_part.contains("forbid(unsafe_code)")
                            && !path.ends_with("src/simd/mod.rs"));
                    if hit && !own {
                        offenders.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                    }
                }
            }
        }
        assert!(offenders.is_empty(), "unsafe outside src/simd/x86.rs:\n{}", offenders.join("\n"));
    }

    /// How the words of an identifier that names an instruction set or a CPU feature begin.
    const INSTRUCTION_SETS: [&str; 6] = ["avx", "sse", "fma", "neon", "vnni", "amx"];

    /// The words of a CamelCase identifier, lowercased (`PairsAvx512` → pairs, avx512).
    fn camel_words(identifier: &str) -> Vec<String> {
        let mut words: Vec<String> = Vec::new();
        for c in identifier.chars() {
            match words.last_mut() {
                Some(w) if !c.is_ascii_uppercase() => w.push(c.to_ascii_lowercase()),
                _ => words.push(c.to_ascii_lowercase().to_string()),
            }
        }
        words
    }

    /// Where `code` (a file of `src/` outside the dispatcher) asks the CPU what it runs or declares
    /// an enum with a variant named after an instruction set: the breaches of the one-dispatcher
    /// rule, as `line: text`.
    fn dispatch_breaches(code: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut in_enum = false;
        for (i, line) in code.lines().enumerate() {
            let code_part = line.split("//").next().unwrap_or_default().trim();
            let asks =
                ["is_x86_feature_detected", "is_aarch64_feature_detected", "cpuid", "::detect()"]
                    .iter()
                    .any(|q| code_part.contains(q));
            if asks {
                out.push(format!("{}: asks the CPU: {code_part}", i + 1));
            }
            if code_part.contains("enum ") && code_part.ends_with('{') {
                in_enum = true;
                continue;
            }
            if in_enum {
                if code_part.starts_with('}') {
                    in_enum = false;
                    continue;
                }
                let variant = code_part.split(['(', '{', ',', ' ', '=']).next().unwrap_or_default();
                let named = camel_words(variant)
                    .iter()
                    .any(|word| INSTRUCTION_SETS.iter().any(|set| word.starts_with(set)));
                if !variant.starts_with('#') && named {
                    out.push(format!("{}: an enum names an instruction set: {variant}", i + 1));
                }
            }
        }
        out
    }

    /// `path:line: breach` for every Rust file under `src/` (but the folders `skip`) and every
    /// breach `rule` finds in it; fails if the walk read too few files to mean anything.
    fn breaches_under_src(skip: &[&str], rule: fn(&str) -> Vec<String>) -> Vec<String> {
        let mut breaches = Vec::new();
        let mut stack = vec![root().join("src")];
        let mut files = 0;
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    if !skip.iter().any(|s| path.ends_with(s)) {
                        stack.push(path);
                    }
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files += 1;
                    for b in rule(&read(&path)) {
                        breaches.push(format!("{}:{b}", path.display()));
                    }
                }
            }
        }
        assert!(files > 50, "only {files} files read");
        breaches
    }

    #[test]
    fn only_the_dispatcher_asks_the_cpu_or_names_an_instruction_set_in_an_enum() {
        let breaches = breaches_under_src(&["src/simd"], dispatch_breaches);
        assert!(breaches.is_empty(), "outside src/simd/:\n{}", breaches.join("\n"));
    }

    #[test]
    fn the_dispatcher_rule_catches_a_chapters_own_path_enum_and_feature_query() {
        // The quantized dot's path as chapter 11 once held it, and the bf16 product's.
        let chapter = "pub enum DotPath {\n    /// the reference\n    Reference,\n    Avx2,\n}\n\
                       fn f() { if crate::simd::Avx2::detect().is_some() {} }\n\
                       pub enum Bf16Path { Widened, PairsPortable, PairsAvx512 }\n";
        let found = dispatch_breaches(chapter);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].starts_with("4: an enum names an instruction set: Avx2"), "{found:?}");
        assert!(found[1].starts_with("6: asks the CPU"), "{found:?}");
        let feature = "let ok = std::arch::is_x86_feature_detected!(\"avx\"); // avx\n";
        assert_eq!(dispatch_breaches(feature).len(), 1);
        // An enum of methods, not instruction sets, a word that only contains one ("Passed"), and
        // a comment naming one, are fine.
        let fine =
            "pub enum Bf16Method {\n    Widened,\n    Pairs,\n    Passed,\n}\n// Avx2::detect()";
        assert!(dispatch_breaches(fine).is_empty());
    }

    /// The statics a thread keeps for itself that `src/` may declare: the product's reused packing
    /// buffers. Settings, tallies and records are passed or returned, never kept per thread.
    const THREAD_LOCAL_BUFFERS: [&str; 2] = ["F32_WORKSPACES", "F64_WORKSPACES"];

    /// `line: name` of every static declared inside a `thread_local!` block of `code` that is not
    /// one of [`THREAD_LOCAL_BUFFERS`] (comments ignored).
    fn thread_local_breaches(code: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut inside = false;
        for (i, line) in code.lines().enumerate() {
            let line = line.split("//").next().unwrap_or_default().trim();
            if line.contains("thread_local!") {
                inside = true;
            }
            if inside && let Some(rest) = line.split("static ").nth(1) {
                let name: String =
                    rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !THREAD_LOCAL_BUFFERS.contains(&name.as_str()) {
                    out.push(format!("{}: {name}", i + 1));
                }
            }
            if inside && line.starts_with('}') {
                inside = false;
            }
        }
        out
    }

    #[test]
    fn no_thread_keeps_state_of_its_own_but_the_packing_buffers() {
        let breaches = breaches_under_src(&[], thread_local_breaches);
        assert!(breaches.is_empty(), "thread-local state in src/:\n{}", breaches.join("\n"));
    }

    #[test]
    fn the_thread_local_rule_catches_a_kernel_kept_per_thread() {
        // The kernel choice as the dispatcher once kept it, beside the buffers the rule allows.
        let planted = "thread_local! {\n    static THREAD_KERNEL: Cell<Option<Kernel>> = \
                       const { Cell::new(None) };\n}\n\
                       thread_local! {\n    static F32_WORKSPACES: RefCell<Vec<W>> = \
                       const { RefCell::new(Vec::new()) };\n}\n\
                       // thread_local! { static IN_A_COMMENT: u8 = 0; }\n";
        assert_eq!(thread_local_breaches(planted), ["2: THREAD_KERNEL"]);
    }
}

/// The shape of the code, checked on the repository's own files: a chapter's lesson files hold
/// the lesson (no book machinery, at most [`LESSON_MAX_LINES`] lines each), the core uses no
/// chapter, and no line of code is wider than [`MAX_LINE_CHARS`] characters.
mod shape {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    /// The most lines a lesson file may have: a student reads one topic file in one sitting.
    const LESSON_MAX_LINES: usize = 600;
    /// The widest line of Rust code, in characters (rustfmt's default `max_width`).
    const MAX_LINE_CHARS: usize = 100;
    /// The core modules of book machinery; outside them only a chapter's `book.rs` may use them.
    const BOOK_MODULES: [&str; 4] = ["plot", "report", "errata", "book"];

    fn root() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
    }

    /// Every `.rs` file below `dir`, sorted.
    fn rust_files(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else { continue };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        out.sort();
        out
    }

    /// The code of a line without its `//` comment (string contents stay: a path in a string is
    /// no import).
    fn code_part(line: &str) -> &str {
        line.split("//").next().unwrap_or_default()
    }

    /// Which crate modules a file's code names through `crate::` paths, including grouped imports
    /// such as `use crate::{plot, report::Walk}`; with the line number of each.
    fn crate_modules_used(code: &str) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        let mut group: Option<usize> = None;
        for (i, line) in code.lines().enumerate() {
            let c = code_part(line);
            if let Some(depth) = group.as_mut() {
                // Inside `use crate::{ … }` spanning lines: each top-level name is a module.
                for part in c.split(',') {
                    let name = part.trim().trim_start_matches('{').trim();
                    if *depth == 1 && !name.is_empty() && !name.starts_with('}') {
                        let module: String = name
                            .chars()
                            .take_while(|ch| ch.is_alphanumeric() || *ch == '_')
                            .collect();
                        out.push((i + 1, module));
                    }
                }
                *depth += c.matches('{').count();
                *depth -= c.matches('}').count().min(*depth);
                if *depth == 0 {
                    group = None;
                }
                continue;
            }
            let mut rest = c;
            while let Some(at) = rest.find("crate::") {
                let after = &rest[at + "crate::".len()..];
                if let Some(inner) = after.strip_prefix('{') {
                    let depth = 1 + inner.matches('{').count() - inner.matches('}').count().min(1);
                    for part in inner.split(',') {
                        let module: String = part
                            .trim()
                            .chars()
                            .take_while(|ch| ch.is_alphanumeric() || *ch == '_')
                            .collect();
                        if !module.is_empty() {
                            out.push((i + 1, module));
                        }
                    }
                    if !inner.contains('}') {
                        group = Some(depth);
                    }
                    break;
                }
                let module: String =
                    after.chars().take_while(|ch| ch.is_alphanumeric() || *ch == '_').collect();
                out.push((i + 1, module));
                rest = after;
            }
        }
        out
    }

    /// The chapter number of a module or folder name `chNN_…` (`ch09_gpt` → 9), if it is one.
    fn chapter_number(name: &str) -> Option<u32> {
        let digits = name.strip_prefix("ch")?.get(..2)?;
        let rest = name.get(4..)?;
        (rest.starts_with('_') && digits.chars().all(|c| c.is_ascii_digit()))
            .then(|| digits.parse().ok())
            .flatten()
    }

    /// The chapters a line's comment names as a module path: `crate::chNN_…` or `chNN_…::`
    /// (a link to a chapter's page, `chapters/chNN_….md`, names no module).
    fn chapters_named_in_comment(line: &str) -> Vec<String> {
        let Some((_, comment)) = line.split_once("//") else { return Vec::new() };
        let mut out = Vec::new();
        for (at, _) in comment.match_indices("ch") {
            let before = comment[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '/' || c == '.') {
                continue;
            }
            let name: String =
                comment[at..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let after = &comment[at + name.len()..];
            let as_path = comment[..at].ends_with("crate::") || after.starts_with("::");
            if chapter_number(&name).is_some() && as_path {
                out.push(name);
            }
        }
        out
    }

    /// The import rule for one file: a lesson file (under `src/chNN_*/`, not `book.rs`) uses no
    /// book module; a file of chapter n (its book.rs too) uses no chapter after n; a core file
    /// (`src/*.rs`, `src/matmul/`) uses no chapter, names none as a module path even in a
    /// comment or doc link, and, unless it is a book module itself, uses no book module; the
    /// workshop (`src/workshop/`) and the command line (`src/cli/`) build on the chapters and use
    /// no book module, and no lesson uses the workshop. Returns one line per breach.
    fn import_breaches(relative: &Path, code: &str) -> Vec<String> {
        let parts: Vec<String> =
            relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        let file = parts.last().cloned().unwrap_or_default();
        let own_chapter = parts.get(1).filter(|_| parts.len() > 2).and_then(|d| chapter_number(d));
        let in_chapter = own_chapter.is_some();
        let in_workshop = parts.len() > 2 && (parts[1] == "workshop" || parts[1] == "cli");
        let stem = file.trim_end_matches(".rs");
        let is_book_file = (in_chapter && file == "book.rs")
            || (parts.len() == 2 && BOOK_MODULES.contains(&stem))
            || matches!(stem, "lib" | "main");
        let mut out = Vec::new();
        let is_core = !in_chapter && !in_workshop && !is_book_file;
        for (line, module) in crate_modules_used(code) {
            let used = chapter_number(&module);
            let chapter = used.is_some();
            let later = own_chapter.zip(used).filter(|(own, used)| used > own);
            if BOOK_MODULES.contains(&module.as_str()) && !is_book_file {
                out.push(format!("{}:{line}: uses crate::{module}", relative.display()));
            } else if module == "workshop" && in_chapter && !is_book_file {
                out.push(format!("{}:{line}: a lesson uses the workshop", relative.display()));
            } else if chapter && is_core {
                out.push(format!("{}:{line}: the core uses chapter {module}", relative.display()));
            } else if let Some((own, later)) = later {
                out.push(format!(
                    "{}:{line}: chapter {own} uses the later chapter {later} ({module})",
                    relative.display()
                ));
            }
        }
        if is_core {
            for (i, l) in code.lines().enumerate() {
                for module in chapters_named_in_comment(l) {
                    out.push(format!(
                        "{}:{}: the core names chapter {module} in a comment",
                        relative.display(),
                        i + 1
                    ));
                }
            }
        }
        if in_chapter && file != "book.rs" {
            for (i, l) in code.lines().enumerate() {
                let c = code_part(l);
                if c.contains("super::book") || c.contains("self::book::") {
                    out.push(format!(
                        "{}:{}: a lesson reaches into book.rs",
                        relative.display(),
                        i + 1
                    ));
                }
            }
        }
        out
    }

    #[test]
    fn lessons_use_no_book_machinery_and_the_core_uses_no_chapter() {
        let src = root().join("src");
        let mut breaches = Vec::new();
        let mut lessons = 0;
        for path in rust_files(&src) {
            let relative = path.strip_prefix(root()).unwrap_or(&path);
            if relative.starts_with("src/bin") {
                continue;
            }
            let code = std::fs::read_to_string(&path).unwrap_or_default();
            breaches.extend(import_breaches(relative, &code));
            lessons += usize::from(relative.components().count() > 2);
        }
        assert!(lessons > 20, "only {lessons} files found in chapter folders");
        assert!(breaches.is_empty(), "the import rule is broken:\n{}", breaches.join("\n"));
    }

    #[test]
    fn the_import_rule_catches_a_lesson_that_plots_and_a_core_that_reads_a_chapter() {
        let lesson = Path::new("src/ch06_attention/attention.rs");
        let planted = "use crate::error::Result;\nuse crate::plot::Figure;\n\
                       use crate::{float::Float, report::Walk};\n\
                       use crate::{\n    errata::Erratum,\n    rng::Rng,\n};\n\
                       fn f() { crate::report::with_commas(1); }\n// crate::plot in a comment\n";
        let found = import_breaches(lesson, planted);
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(found[0].contains(":2: uses crate::plot"), "{found:?}");
        assert!(found[1].contains(":3: uses crate::report"), "{found:?}");
        assert!(found[2].contains(":5: uses crate::errata"), "{found:?}");
        assert!(found[3].contains(":8: uses crate::report"), "{found:?}");
        // The same lines are allowed in the chapter's book.rs and in the core's book modules.
        assert!(import_breaches(Path::new("src/ch06_attention/book.rs"), planted).is_empty());
        assert!(import_breaches(Path::new("src/report.rs"), planted).is_empty());
        // The core may not use a chapter, nor may a core module that is not a book module plot.
        let core = "use crate::ch06_attention::attention_forward;\nuse crate::plot::Figure;\n";
        let found = import_breaches(Path::new("src/optim.rs"), core);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("the core uses chapter ch06_attention"), "{found:?}");
        let reach = "use super::book::CHAPTER;\n";
        assert_eq!(import_breaches(lesson, reach).len(), 1);
    }

    #[test]
    fn the_import_rule_catches_a_chapter_that_uses_a_later_one_and_a_core_comment_naming_one() {
        // Chapter 9 may use chapters 1 to 8 and itself, in any file, its book.rs too.
        let planted = "use crate::ch08_tokens::Tokenizer;\nuse crate::ch11_precision::mixed;\n\
                       use crate::{ch09_gpt::model::Gpt, ch10_matmul::tiles};\n\
                       fn f() { crate::ch11_precision::format::pow2(1); }\n\
                       // crate::ch11_precision in a comment is no use\n";
        for file in ["src/ch09_gpt/fast/precision.rs", "src/ch09_gpt/book.rs"] {
            let found = import_breaches(Path::new(file), planted);
            assert_eq!(found.len(), 3, "{found:?}");
            assert!(found[0].contains(":2: chapter 9 uses the later chapter 11"), "{found:?}");
            assert!(found[1].contains(":3: chapter 9 uses the later chapter 10"), "{found:?}");
            assert!(found[2].contains(":4: chapter 9 uses the later chapter 11"), "{found:?}");
        }
        // The last chapter may use them all.
        assert!(import_breaches(Path::new("src/ch11_precision/runs.rs"), planted).is_empty());
        // The core names no chapter as a module path, not even in a doc comment or a doc link;
        // a link to a chapter's page and the word "chapter" are no breach.
        let core = "//! Taught in [chapter 11](../../chapters/ch11_precision.md).\n\
                    /// The order of `ch11_precision::quant_step::column_dot_reference`.\n\
                    /// See [`Precision`](crate::ch11_precision::Precision), chapter 11.\n\
                    fn f() {} // as crate::ch09_gpt::fast rounds\n\
                    /// Not a path: ch11_precision.md, arch10_x::y, ch1_x::y.\n";
        let found = import_breaches(Path::new("src/matmul/inputs.rs"), core);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].contains(":2: the core names chapter ch11_precision"), "{found:?}");
        assert!(found[1].contains(":3: the core names chapter ch11_precision"), "{found:?}");
        assert!(found[2].contains(":4: the core names chapter ch09_gpt"), "{found:?}");
        // The same comments are fine in a chapter, the workshop and the command line.
        for file in ["src/ch10_matmul/tiles.rs", "src/workshop/run.rs", "src/cli/gpt.rs"] {
            assert!(import_breaches(Path::new(file), core).is_empty(), "{file}");
        }
    }

    #[test]
    fn the_import_rule_catches_a_lesson_that_uses_the_workshop() {
        let planted = "use crate::ch09_gpt::model::Gpt;\nuse crate::workshop::budget;\n\
                       use crate::{error::Result, workshop::run::RUN_FILE};\n\
                       fn f() { crate::workshop::folder::fnv1a64(b\"\"); }\n";
        let found = import_breaches(Path::new("src/ch09_gpt/train.rs"), planted);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].contains("train.rs:2: a lesson uses the workshop"), "{found:?}");
        assert!(found[1].contains(":3: a lesson uses the workshop"), "{found:?}");
        assert!(found[2].contains(":4: a lesson uses the workshop"), "{found:?}");
        // A model file deeper in the chapter is a lesson too; the chapter's book.rs may use the
        // workshop (the loss plot's file name), and the workshop may use the chapters.
        assert_eq!(import_breaches(Path::new("src/ch09_gpt/model/step.rs"), planted).len(), 3);
        assert!(import_breaches(Path::new("src/ch09_gpt/book.rs"), planted).is_empty());
        let workshop = "use crate::ch09_gpt::model::Gpt;\nuse crate::ch08_tokens::Tokenizer;\n";
        assert!(import_breaches(Path::new("src/workshop/run.rs"), workshop).is_empty());
        // The workshop draws nothing: a plot there is a breach.
        let plots = "use crate::plot::Figure;\n";
        assert_eq!(import_breaches(Path::new("src/workshop/run.rs"), plots).len(), 1);
    }

    /// Files of the chapter folders, book.rs excepted, longer than the limit.
    fn long_lessons(files: &[(PathBuf, usize)]) -> Vec<String> {
        files
            .iter()
            .filter(|(p, _)| p.file_name().is_some_and(|f| f != "book.rs"))
            .filter(|(_, n)| *n > LESSON_MAX_LINES)
            .map(|(p, n)| format!("{}: {n} lines", p.display()))
            .collect()
    }

    #[test]
    fn every_chapter_is_a_folder_and_no_lesson_file_is_over_600_lines() {
        let mut files = Vec::new();
        for ch in llm_workbook::book::chapters() {
            let dir = root().join("src").join(ch.stem);
            assert!(dir.join("mod.rs").is_file(), "src/{}/mod.rs is missing", ch.stem);
            assert!(dir.join("book.rs").is_file(), "src/{}/book.rs is missing", ch.stem);
            assert!(!root().join("src").join(format!("{}.rs", ch.stem)).exists());
            for path in rust_files(&dir) {
                let n = std::fs::read_to_string(&path).unwrap_or_default().lines().count();
                files.push((path.strip_prefix(root()).unwrap_or(&path).to_path_buf(), n));
            }
        }
        let long = long_lessons(&files);
        assert!(
            long.is_empty(),
            "lesson files over {LESSON_MAX_LINES} lines:\n{}",
            long.join("\n")
        );
        let planted =
            [(PathBuf::from("src/ch03_mlp/mlp.rs"), 601), ("src/ch03_mlp/book.rs".into(), 900)];
        assert_eq!(long_lessons(&planted), ["src/ch03_mlp/mlp.rs: 601 lines"]);
    }

    /// A file's module below the crate root: `src/a.rs` and `src/a/mod.rs` are `a`, `src/a/b.rs`
    /// is `a::b`; `None` for the crate root and the binary (`main.rs`, `src/cli/`, `src/bin/`).
    fn module_of(relative: &Path) -> Option<Vec<String>> {
        let parts: Vec<String> =
            relative.iter().skip(1).map(|p| p.to_string_lossy().into_owned()).collect();
        let (last, dirs) = parts.split_last()?;
        if dirs.is_empty() && matches!(last.as_str(), "lib.rs" | "main.rs") {
            return None;
        }
        if dirs.first().is_some_and(|d| d == "cli" || d == "bin") {
            return None;
        }
        let mut module = dirs.to_vec();
        if last != "mod.rs" {
            module.push(last.trim_end_matches(".rs").to_string());
        }
        Some(module)
    }

    /// The one cycle still open: a configuration's tensor shapes come from the model's parameter
    /// table, which is built from the configuration. Empty once the table no longer needs it.
    const OPEN_CYCLES: [&str; 0] = [];

    /// The code a file builds outside its tests: comments dropped, and every block opened by a
    /// `#[cfg(test)]` line before a `mod … {` at the left margin, up to its closing `}` there.
    fn non_test_code(code: &str) -> String {
        let lines: Vec<&str> = code.lines().map(code_part).collect();
        let mut out = Vec::new();
        let mut i = 0;
        while i < lines.len() {
            let test_mod = lines[i].trim() == "#[cfg(test)]"
                && lines.get(i + 1).is_some_and(|l| l.starts_with("mod ") && l.ends_with('{'));
            if test_mod {
                while i < lines.len() && lines[i] != "}" {
                    i += 1;
                }
            } else {
                out.push(lines[i]);
            }
            i += 1;
        }
        out.join("\n")
    }

    /// The paths of one path tree at `s[*i..]`: `a::{b, c::d}` gives `a::b` and `a::c::d`; a
    /// glob or a turbofish ends a path; `x as y` keeps `x`.
    fn path_tree(s: &[char], i: &mut usize) -> Vec<Vec<String>> {
        let skip_spaces = |i: &mut usize| {
            while s.get(*i).is_some_and(|c| c.is_whitespace()) {
                *i += 1;
            }
        };
        skip_spaces(i);
        if s.get(*i) == Some(&'{') {
            *i += 1;
            let mut out = Vec::new();
            loop {
                skip_spaces(i);
                match s.get(*i) {
                    None => return out,
                    Some('}') => {
                        *i += 1;
                        return out;
                    }
                    Some(',') => *i += 1,
                    Some(_) => {
                        let before = *i;
                        out.extend(path_tree(s, i));
                        *i = (*i).max(before + 1);
                    }
                }
            }
        }
        let ident = |i: &mut usize| {
            let start = *i;
            while s.get(*i).is_some_and(|c| c.is_alphanumeric() || *c == '_') {
                *i += 1;
            }
            s[start..*i].iter().collect::<String>()
        };
        let name = ident(i);
        if name.is_empty() {
            return vec![Vec::new()];
        }
        if s.get(*i) == Some(&':') && s.get(*i + 1) == Some(&':') {
            *i += 2;
            let mut tails = path_tree(s, i);
            for tail in &mut tails {
                tail.insert(0, name.clone());
            }
            return tails;
        }
        let mut j = *i;
        skip_spaces(&mut j);
        if s[j..].starts_with(&['a', 's', ' ']) {
            j += 3;
            skip_spaces(&mut j);
            ident(&mut j);
            *i = j;
        }
        vec![vec![name]]
    }

    /// Every path the code writes from `crate::` or `super::` (grouped imports spelled out), as
    /// segments starting with `crate` or `super`.
    fn written_paths(code: &str) -> Vec<Vec<String>> {
        let s: Vec<char> = code.chars().collect();
        let mut out = Vec::new();
        let mut i = 0;
        while i < s.len() {
            let after_word = i > 0 && (s[i - 1].is_alphanumeric() || s[i - 1] == '_');
            let starts = ["crate::", "super::"]
                .into_iter()
                .find(|k| !after_word && s[i..].starts_with(&k.chars().collect::<Vec<_>>()));
            match starts {
                Some(k) => {
                    let mut at = i;
                    let paths = path_tree(&s, &mut at);
                    let root = &k[..k.len() - 2];
                    out.extend(paths.into_iter().filter(|p| p.first().is_some_and(|f| f == root)));
                    i = at.max(i + 1);
                }
                None => i += 1,
            }
        }
        out
    }

    /// The module a path written in `module` names: the longest head of it that is one of
    /// `modules` (`crate::a::b::f` is `a::b` when `a::b` is a module, `super::` is the parent).
    fn named_module(
        module: &[String],
        path: &[String],
        modules: &BTreeSet<Vec<String>>,
    ) -> Option<Vec<String>> {
        let mut found = match path.first()?.as_str() {
            "crate" => Vec::new(),
            "super" => module[..module.len().saturating_sub(1)].to_vec(),
            _ => return None,
        };
        let mut rest = &path[1..];
        while rest.first().is_some_and(|s| s == "super") {
            found.pop();
            rest = &rest[1..];
        }
        for segment in rest {
            let mut next = found.clone();
            next.push(segment.clone());
            if !modules.contains(&next) {
                break;
            }
            found = next;
        }
        Some(found)
    }

    /// The groups of modules that reach each other through their imports (`a` uses `b` and `b`,
    /// directly or through others, uses `a`), given each file's path and code; a module's use
    /// of its own submodules or of its parents does not count. One line per group.
    fn module_cycles(files: &[(PathBuf, String)]) -> Vec<String> {
        let owned: Vec<(Vec<String>, String)> = files
            .iter()
            .filter_map(|(path, code)| Some((module_of(path)?, non_test_code(code))))
            .collect();
        let modules: BTreeSet<Vec<String>> = owned.iter().map(|(m, _)| m.clone()).collect();
        let mut uses: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for (module, code) in &owned {
            for path in written_paths(code) {
                let Some(target) = named_module(module, &path, &modules) else { continue };
                let related = target.starts_with(module) || module.starts_with(&target);
                if !related {
                    uses.entry(module.clone()).or_default().insert(target);
                }
            }
        }
        let reach = |from: &Vec<String>| {
            let mut seen = BTreeSet::new();
            let mut stack = vec![from.clone()];
            while let Some(m) = stack.pop() {
                for next in uses.get(&m).into_iter().flatten() {
                    if seen.insert(next.clone()) {
                        stack.push(next.clone());
                    }
                }
            }
            seen
        };
        let reached: BTreeMap<&Vec<String>, BTreeSet<Vec<String>>> =
            modules.iter().map(|m| (m, reach(m))).collect();
        let mut groups = BTreeSet::new();
        for (m, seen) in &reached {
            let group: Vec<String> = seen
                .iter()
                .filter(|other| reached.get(other).is_some_and(|back| back.contains(*m)))
                .map(|other| other.join("::"))
                .collect();
            if group.len() > 1 {
                groups.insert(group.join(" ↔ "));
            }
        }
        groups.into_iter().collect()
    }

    #[test]
    fn no_two_modules_import_each_other() {
        let src = root().join("src");
        let files: Vec<(PathBuf, String)> = rust_files(&src)
            .into_iter()
            .map(|path| {
                let code = std::fs::read_to_string(&path).unwrap_or_default();
                (path.strip_prefix(root()).unwrap_or(&path).to_path_buf(), code)
            })
            .collect();
        assert!(files.len() > 50, "only {} files found under src/", files.len());
        let cycles = module_cycles(&files);
        let new: Vec<&String> =
            cycles.iter().filter(|c| !OPEN_CYCLES.contains(&c.as_str())).collect();
        assert!(new.is_empty(), "modules that import each other:\n{new:?}");
        let gone: Vec<&&str> =
            OPEN_CYCLES.iter().filter(|c| !cycles.iter().any(|f| f == *c)).collect();
        assert!(gone.is_empty(), "no longer a cycle, take it off OPEN_CYCLES: {gone:?}");
    }

    #[test]
    fn the_cycle_finder_sees_planted_cycles_and_nothing_else() {
        let file = |path: &str, code: &str| (PathBuf::from(path), code.to_string());
        let planted = [
            file("src/ch08_tokens/mod.rs", "pub mod bpe;\nuse chars::CharTokenizer;\n"),
            file("src/ch08_tokens/chars.rs", "use super::{TokenId, Tokenizer};\n"),
            file("src/ch08_tokens/bpe.rs", "use super::gpt2::split as gpt2_split;\n"),
            file(
                "src/ch08_tokens/gpt2.rs",
                "use super::{\n    bpe::{Bpe, encode},\n    chars,\n};",
            ),
            file("src/x.rs", "use crate::{\n    error::Result,\n    y::f,\n};\n"),
            file("src/y.rs", "fn g() { crate::z::h::<f32>(); } // crate::error\n"),
            file("src/z.rs", "fn h() {}\n#[cfg(test)]\nmod tests {\n    use crate::x;\n}\n"),
            file("src/error.rs", "use crate::x as planted;\n"),
            file("src/main.rs", "use crate::y;\n"),
        ];
        // bpe and gpt2 use each other; so do x and error; x → y → z, but z uses x only in
        // its tests; the chapter's files use their parent's items and the parent its files.
        assert_eq!(module_cycles(&planted), ["ch08_tokens::bpe ↔ ch08_tokens::gpt2", "error ↔ x"]);
        // The test module's use of x is no cycle: z's tests may use what uses z.
        let z_used = [file("src/x.rs", "use crate::z;\n"), planted[6].clone()];
        assert!(module_cycles(&z_used).is_empty());
    }

    /// Lines of `code` wider than the limit, counted in characters (not bytes: `σ` is one).
    fn wide_lines(name: &str, code: &str) -> Vec<String> {
        code.lines()
            .enumerate()
            .filter(|(_, l)| l.chars().count() > MAX_LINE_CHARS)
            .map(|(i, l)| format!("{name}:{}: {} characters", i + 1, l.chars().count()))
            .collect()
    }

    #[test]
    fn no_line_of_code_is_wider_than_100_characters() {
        let mut wide = Vec::new();
        let mut files = 0;
        for dir in ["src", "tests", "benches", "examples"] {
            for path in rust_files(&root().join(dir)) {
                let code = std::fs::read_to_string(&path).unwrap_or_default();
                let name = path.strip_prefix(root()).unwrap_or(&path).display().to_string();
                wide.extend(wide_lines(&name, &code));
                files += 1;
            }
        }
        assert!(files > 50, "only {files} Rust files found");
        assert!(wide.is_empty(), "lines over {MAX_LINE_CHARS} characters:\n{}", wide.join("\n"));
        let planted = format!("fn f() {{}}\n// {}\n{}\n", "σ".repeat(97), "x".repeat(101));
        assert_eq!(wide_lines("t.rs", &planted), ["t.rs:3: 101 characters"]);
    }

    /// The crate's one scheduler: the only module that starts threads to compute.
    const SCHEDULER: &str = "src/threads.rs";
    /// Modules that start threads for something other than computing: the exercises' runner
    /// starts `cargo` processes and a thread to read each one's output, which is waiting on
    /// processes, not computing shared out.
    const NOT_COMPUTE_THREADS: [&str; 1] = ["src/cli/exercises.rs"];
    /// How a thread is started: scoped, detached, built, or by a pool.
    const THREAD_STARTS: [&str; 4] = ["thread::scope", "thread::spawn", "thread::Builder", "rayon"];

    /// Each line of `code` (comments left out) that starts a thread, as "name:line: text".
    fn thread_starts(name: &str, code: &str) -> Vec<String> {
        code.lines()
            .enumerate()
            .filter(|(_, line)| THREAD_STARTS.iter().any(|s| code_part(line).contains(s)))
            .map(|(i, line)| format!("{name}:{}: {}", i + 1, line.trim()))
            .collect()
    }

    #[test]
    fn only_the_scheduler_starts_threads_for_computing() {
        let mut starts = Vec::new();
        let files = rust_files(&root().join("src"));
        assert!(files.len() > 50, "only {} Rust files found", files.len());
        for path in files {
            let name = path.strip_prefix(root()).unwrap_or(&path).display().to_string();
            if name == SCHEDULER || NOT_COMPUTE_THREADS.contains(&name.as_str()) {
                continue;
            }
            let code = std::fs::read_to_string(&path).unwrap_or_default();
            starts.extend(thread_starts(&name, &code));
        }
        assert!(starts.is_empty(), "threads started outside {SCHEDULER}:\n{}", starts.join("\n"));
        let scheduler = std::fs::read_to_string(root().join(SCHEDULER)).unwrap_or_default();
        assert!(!thread_starts(SCHEDULER, &scheduler).is_empty(), "{SCHEDULER} starts no thread");
        let planted = "fn f() {\n    // std::thread::scope in a comment\n    \
                       std::thread::scope(|s| { s.spawn(|| 1); });\n}\n";
        assert_eq!(
            thread_starts("x.rs", planted),
            ["x.rs:3: std::thread::scope(|s| { s.spawn(|| 1); });"]
        );
    }
}

/// The pages beside the chapters: the sources page drawn from
/// [`llm_workbook::sources::SOURCES`], the notation every page writes its math in, and the links
/// that tie them together.
mod pages {
    use llm_workbook::sources::SOURCES;
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    fn root() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn chapter_pages() -> Vec<PathBuf> {
        llm_workbook::book::chapters()
            .iter()
            .map(|c| root().join("chapters").join(format!("{}.md", c.stem)))
            .collect()
    }

    /// The sources table as the page must carry it, from the code's table.
    fn sources_table() -> String {
        let mut out = String::from(
            "| id | title (as the document gives it) | author | kind |\n|---|---|---|---|\n",
        );
        for s in SOURCES {
            out.push_str(&format!("| {} | {} | {} | {} |\n", s.id, s.title, s.author, s.kind));
        }
        out
    }

    /// What is wrong with a sources page: its table disagrees with `SOURCES`, or a document has
    /// no `## Dn` section.
    fn sources_page_faults(page: &str) -> Vec<String> {
        let mut faults = Vec::new();
        match llm_workbook::report::prose_block(page, "sources") {
            None => faults.push("no <!-- sources:begin/end --> block".to_string()),
            Some(table) if table != sources_table().trim() => faults.push(format!(
                "the table differs from src/sources.rs; it should read:\n{}",
                sources_table()
            )),
            Some(_) => {}
        }
        for s in SOURCES {
            if !page.lines().any(|l| l == format!("## {}", s.id)) {
                faults.push(format!("no \"## {}\" section", s.id));
            }
        }
        faults
    }

    #[test]
    fn the_sources_page_carries_the_code_s_table_of_documents() {
        let page = read(&root().join("chapters").join("sources.md"));
        let faults = sources_page_faults(&page);
        assert!(faults.is_empty(), "chapters/sources.md: {}", faults.join("\n"));
        // A planted mistake: one title changed, one section missing.
        let planted = page
            .replace("| D3 | The Math Behind GPT Models", "| D3 | The Maths Behind GPT Models")
            .replace("## D4\n", "## D four\n");
        assert_eq!(sources_page_faults(&planted).len(), 2, "{planted}");
    }

    /// What is wrong with the sources page's counts of register rows: a document's count line
    /// is not the register's ([`llm_workbook::book::sources_page`]) or not in its own section,
    /// or the prose outside those lines states a count in words ("three errata"), which nothing
    /// keeps in step with the register.
    fn sources_count_faults(page: &str) -> Vec<String> {
        let mut faults = Vec::new();
        match llm_workbook::book::sources_page(page) {
            None => faults.push("a document has no <!-- Dn-errata:begin/end --> block".into()),
            Some(expected) if expected != page => faults.push(format!(
                "the errata counts differ from the register: run `cargo run --release`; the \
                 page should read:\n{expected}"
            )),
            Some(_) => {}
        }
        for s in SOURCES {
            let tag = format!("<!-- {}:begin -->", llm_workbook::book::document_errata_tag(s.id));
            let (Some(section), Some(block)) =
                (page.find(&format!("\n## {}\n", s.id)), page.find(&tag))
            else {
                continue;
            };
            let next = page[section + 1..].find("\n## ").map_or(page.len(), |i| section + 1 + i);
            if !(section < block && block < next) {
                faults.push(format!("{}'s count of errata is outside its section", s.id));
            }
        }
        const COUNTS: [&str; 14] = [
            "no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
            "eleven", "twelve", "thirteen",
        ];
        let mut outside = page.to_string();
        for s in SOURCES {
            let tag = llm_workbook::book::document_errata_tag(s.id);
            outside = llm_workbook::report::replace_block(&outside, &tag, "").unwrap_or(outside);
        }
        let words: Vec<String> = outside
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        for pair in words.windows(2) {
            let counted = COUNTS.contains(&pair[0].as_str()) || pair[0].parse::<u32>().is_ok();
            if counted && matches!(pair[1].as_str(), "errata" | "erratum") {
                faults.push(format!(
                    "\"{} {}\": a count the register does not write",
                    pair[0], pair[1]
                ));
            }
        }
        faults
    }

    /// The sources page counts each document's rows of the register as the register does, in
    /// the line the main job writes into each document's section, and nowhere else.
    #[test]
    fn the_sources_page_counts_errata_from_the_register() {
        let page = read(&root().join("chapters").join("sources.md"));
        let faults = sources_count_faults(&page);
        assert!(faults.is_empty(), "chapters/sources.md: {}", faults.join("\n"));
        let line = llm_workbook::book::document_errata_line(llm_workbook::sources::D3);
        assert!(line.contains("chapter 6, ") && line.contains("1 simplification"), "{line}");
        // Planted mistakes: a stale count in the generated line; a count in the prose.
        let stale = page.replacen("chapter 1, 3 errata", "chapter 1, 2 errata", 1);
        assert_ne!(stale, page, "the planted count must be in the page");
        assert_eq!(sources_count_faults(&stale).len(), 1, "{stale}");
        let prose = page.replacen("replayed; its errata", "replayed; three errata", 1);
        assert_ne!(prose, page);
        assert_eq!(sources_count_faults(&prose).len(), 1, "{prose}");
    }

    /// The committed errata page is what the main job would write from the register now.
    #[test]
    fn the_errata_page_is_the_register_as_the_main_job_writes_it() {
        let page = read(&root().join("chapters").join("errata.md"));
        let expected = llm_workbook::book::errata_page();
        assert!(
            page == expected,
            "chapters/errata.md differs from the register: run `cargo run --release`; \
             it should read:\n{expected}"
        );
        let rows = llm_workbook::book::errata_register();
        assert_eq!(page.matches("\n| D").count(), rows.len(), "one table row per erratum");
        for (stem, e) in &rows {
            assert!(page.contains(&format!("({stem}.md)")), "no link to {stem}.md");
            for t in e.tests {
                assert!(page.contains(&format!("`{t}`")), "{t} is missing");
            }
        }
        // A planted stale page: one row's document id changed.
        let stale = page.replacen("\n| D", "\n| D9", 1);
        assert_ne!(stale, page);
        assert_ne!(stale, expected);
    }

    /// The public names of a module file: its items declared `pub` at the left margin and the
    /// names its `pub use` lines re-export (the last segment of each path, or its `as` name).
    fn public_names(code: &str) -> BTreeSet<String> {
        const KINDS: [&str; 8] =
            ["fn", "struct", "enum", "trait", "const", "static", "type", "mod"];
        let mut names = BTreeSet::new();
        let mut lines = code.lines();
        while let Some(line) = lines.next() {
            if let Some(rest) = line.strip_prefix("pub use ") {
                let mut text = rest.to_string();
                while !text.contains(';') {
                    let Some(more) = lines.next() else { break };
                    text.push_str(more);
                }
                let text = text.trim_end_matches(';');
                let list = match text.split_once('{') {
                    Some((_, inner)) => inner.trim_end_matches('}').to_string(),
                    None => text.to_string(),
                };
                for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                    let name = item.rsplit(" as ").next().unwrap_or(item);
                    names.insert(name.rsplit("::").next().unwrap_or(name).to_string());
                }
            } else if let Some(rest) = line.strip_prefix("pub ") {
                let mut words = rest.split_whitespace();
                if words.next().is_some_and(|k| KINDS.contains(&k)) {
                    let name: String = words
                        .next()
                        .unwrap_or_default()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    names.insert(name);
                }
            }
        }
        names
    }

    /// What is wrong with the page's list of a module's public names (the table between
    /// `<!-- matmul-api:begin/end -->`, one row per name, its link the file that declares it):
    /// a public name missing, a listed name that is not public, or a link to another file.
    /// `files` reads a linked file (relative to the page).
    fn api_list_faults(code: &str, page: &str, files: &dyn Fn(&str) -> String) -> Vec<String> {
        block_list_faults("matmul-api", code, page, files)
    }

    /// [`api_list_faults`] for the table between `<!-- {block}:begin/end -->`.
    fn block_list_faults(
        block: &str,
        code: &str,
        page: &str,
        files: &dyn Fn(&str) -> String,
    ) -> Vec<String> {
        let Some(block) = llm_workbook::report::prose_block(page, block) else {
            return vec![format!("no <!-- {block}:begin/end --> block")];
        };
        let public = public_names(code);
        let mut listed = BTreeSet::new();
        let mut faults = Vec::new();
        for row in block.lines().filter(|l| l.starts_with("| [`")) {
            let name = row[4..].split('`').next().unwrap_or_default().to_string();
            let link = row.split("](").nth(1).and_then(|r| r.split(')').next()).unwrap_or("");
            let declared =
                ["fn", "struct", "enum", "trait", "const", "type", "mod"].iter().any(|k| {
                    let file = files(link);
                    [
                        format!("pub {k} {name}("),
                        format!("pub {k} {name}<"),
                        format!("pub {k} {name}:"),
                    ]
                    .iter()
                    .chain([format!("pub {k} {name};")].iter())
                    .chain([format!("pub {k} {name} ")].iter())
                    .any(|d| file.contains(d.as_str()))
                });
            if !declared {
                faults.push(format!("{name}: {link} does not declare it"));
            }
            listed.insert(name);
        }
        for name in public.difference(&listed) {
            faults.push(format!("{name} is public in matmul but not listed"));
        }
        for name in listed.difference(&public) {
            faults.push(format!("{name} is listed but not public in matmul"));
        }
        faults
    }

    /// The most public names `matmul` shows: the products, their views and settings, what they
    /// report, and the `lab` and `inputs` modules (whose names are not counted).
    const MATMUL_FACE_MAX: usize = 15;

    #[test]
    fn chapter_10_lists_every_public_name_of_matmul() {
        let code = read(&root().join("src").join("matmul").join("mod.rs"));
        let page = read(&root().join("chapters").join("ch10_matmul.md"));
        let files = |link: &str| {
            std::fs::read_to_string(root().join("chapters").join(link)).unwrap_or_default()
        };
        let faults = api_list_faults(&code, &page, &files);
        assert!(faults.is_empty(), "chapters/ch10_matmul.md:\n{}", faults.join("\n"));
        let face = public_names(&code);
        assert!(face.len() > 10 && face.len() <= MATMUL_FACE_MAX, "{} names: {face:?}", face.len());
        // Planted: one more public function makes the face too wide.
        let wider = code.replacen("\nfn check_inner(", "\npub fn check_inner(", 1);
        assert_eq!(public_names(&wider).len(), MATMUL_FACE_MAX + 1, "{face:?}");
        for (module, block, at_least) in [("lab", "matmul-lab", 20), ("inputs", "matmul-inputs", 6)]
        {
            let code = read(&root().join("src").join("matmul").join(format!("{module}.rs")));
            let faults = block_list_faults(block, &code, &page, &files);
            assert!(faults.is_empty(), "ch10_matmul.md, matmul::{module}:\n{}", faults.join("\n"));
            assert!(public_names(&code).len() > at_least, "{:?}", public_names(&code));
        }
        // Planted: one more public item, one more re-export, one row linking the wrong file.
        let planted = code.replacen("\nfn product<", "\npub fn product<", 1).replacen(
            "pub use stats::ProductStats;",
            "pub use stats::{A_IN_PLACE_MAX_SPAN, ProductStats};",
            1,
        );
        let wrong = page.replacen(
            "| [`ProductStats`](../src/matmul/stats.rs)",
            "| [`ProductStats`](../src/matmul/blocked.rs)",
            1,
        );
        assert_eq!(
            api_list_faults(&planted, &wrong, &files),
            [
                "ProductStats: ../src/matmul/blocked.rs does not declare it",
                "A_IN_PLACE_MAX_SPAN is public in matmul but not listed",
                "product is public in matmul but not listed",
            ]
        );
    }

    /// The code of a Rust file a user's program runs: comment lines left out, a `#[cfg(test)]`
    /// declaration of a test file (`mod tests;`) left out, and nothing from any other
    /// `#[cfg(test)]` item on (a test module's uses are not uses; test modules come last).
    fn shipped_code(text: &str) -> String {
        let mut kept = Vec::new();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if line.trim() == "#[cfg(test)]" {
                match lines.next() {
                    Some(item) if item.trim_end().ends_with(';') => continue,
                    _ => break,
                }
            }
            if !line.trim_start().starts_with("//") {
                kept.push(line);
            }
        }
        kept.join("\n")
    }

    /// Whether `name` occurs in `code` as a whole identifier.
    fn names(code: &str, name: &str) -> bool {
        let ident = |c: char| c.is_alphanumeric() || c == '_';
        code.match_indices(name).any(|(i, _)| {
            let before = code[..i].chars().next_back();
            let after = code[i + name.len()..].chars().next();
            !before.is_some_and(ident) && !after.is_some_and(ident)
        })
    }

    /// The public names of `matmul` that no code outside it uses (`others`: the shipped code of
    /// every other file of `src/` and `benches/`).
    fn unused_public_names(matmul: &str, others: &[String]) -> Vec<String> {
        public_names(matmul)
            .into_iter()
            .filter(|name| !others.iter().any(|code| names(code, name)))
            .collect()
    }

    #[test]
    fn every_public_name_of_matmul_is_used_outside_it() {
        let code = read(&root().join("src").join("matmul").join("mod.rs"));
        let matmul_dir = root().join("src").join("matmul");
        let mut stack = vec![root().join("src"), root().join("benches")];
        let mut others = Vec::new();
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() && path != matmul_dir {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs")
                {
                    others.push(shipped_code(&read(&path)));
                }
            }
        }
        assert!(others.len() > 50, "{} files", others.len());
        assert_eq!(unused_public_names(&code, &others), Vec::<String>::new());
        let lab = read(&matmul_dir.join("lab.rs"));
        assert_eq!(unused_public_names(&lab, &others), Vec::<String>::new(), "matmul::lab");
        let inputs = read(&matmul_dir.join("inputs.rs"));
        assert_eq!(unused_public_names(&inputs, &others), Vec::<String>::new(), "matmul::inputs");
        // Planted: a public item nobody calls, and a use that sits only in a comment or a test.
        let planted = code.replacen("\nfn check_inner(", "\npub fn check_inner(", 1);
        assert_eq!(unused_public_names(&planted, &others), ["check_inner"]);
        let planted = lab.replacen("\nfn packed_slivers<", "\npub fn packed_slivers<", 1);
        assert_eq!(unused_public_names(&planted, &others), ["packed_slivers"]);
        let only_tested = "// product(…)\n#[cfg(test)]\nmod tests;\nfn f() {}\n#[cfg(test)]\n\
                           mod t {\n    fn g() { product(); }\n}";
        assert_eq!(shipped_code(only_tested), "fn f() {}");
        assert!(!names("a_product_b(", "product") && names("x = product(", "product"));
    }

    /// The names `code` imports from `crate::matmul` (in `use crate::matmul::{…};` or
    /// `use crate::matmul::name;`) that are not public names of `matmul`.
    fn private_matmul_imports(code: &str, public: &BTreeSet<String>) -> Vec<String> {
        let mut found = Vec::new();
        for part in code.split("use crate::matmul::").skip(1) {
            let list = part.split(';').next().unwrap_or_default().trim();
            // `use crate::matmul::inputs::{…}`: the names of a public submodule.
            let list = match list.split_once("::") {
                Some((module, rest)) if public.contains(module) => rest,
                _ => list,
            };
            let list = list.trim_start_matches('{').trim_end_matches('}');
            for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                let name = name.rsplit("::").next().unwrap_or(name);
                if name != "self" && !public.contains(name) {
                    found.push(name.to_string());
                }
            }
        }
        found
    }

    #[test]
    fn the_fast_path_takes_only_public_names_from_matmul() {
        let matmul = root().join("src").join("matmul");
        let mut public = public_names(&read(&matmul.join("mod.rs")));
        for module in ["inputs", "lab"] {
            public.extend(public_names(&read(&matmul.join(format!("{module}.rs")))));
        }
        let dir = root().join("src").join("ch09_gpt");
        let mut files = vec![dir.join("fast.rs")];
        for entry in std::fs::read_dir(dir.join("fast")).unwrap().flatten() {
            files.push(entry.path());
        }
        assert!(files.len() >= 6, "{files:?}");
        for f in &files {
            let found = private_matmul_imports(&read(f), &public);
            assert!(found.is_empty(), "{} imports {found:?} from matmul", f.display());
        }
        // Planted: a crate-private item of matmul imported beside public ones.
        let planted = "use crate::matmul::{MatRef, Op, kernel_calls};\nuse crate::matmul::gemm;\n";
        assert_eq!(private_matmul_imports(planted, &public), ["kernel_calls"]);
    }

    /// The pages `chapters/SUMMARY.md` lists, in order.
    fn summary_pages(summary: &str) -> Vec<String> {
        summary
            .lines()
            .filter_map(|l| l.split("](").nth(1)?.split(')').next())
            .map(str::to_string)
            .collect()
    }

    /// The book's table of contents lists every chapter in the code's order, and every page in
    /// chapters/ once.
    #[test]
    fn the_book_lists_every_chapter_in_order_and_every_page() {
        let listed = summary_pages(&read(&root().join("chapters").join("SUMMARY.md")));
        let chapters: Vec<String> =
            llm_workbook::book::chapters().iter().map(|c| format!("{}.md", c.stem)).collect();
        let in_summary: Vec<&String> = listed.iter().filter(|p| chapters.contains(p)).collect();
        assert_eq!(in_summary, chapters.iter().collect::<Vec<_>>(), "chapters out of order");
        let mut on_disk: Vec<String> = std::fs::read_dir(root().join("chapters"))
            .expect("chapters/")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".md") && n != "SUMMARY.md")
            .collect();
        on_disk.sort();
        let mut sorted = listed.clone();
        sorted.sort();
        assert_eq!(sorted, on_disk, "SUMMARY.md and the pages in chapters/ differ");
        // Planted: two chapters swapped, one page missing.
        let swapped = "- [a](ch02_softmax.md)\n- [b](ch01_logistic.md)\n[c](errata.md)\n";
        let pages = summary_pages(swapped);
        assert_eq!(pages, ["ch02_softmax.md", "ch01_logistic.md", "errata.md"]);
        assert_ne!(pages[..2], chapters[..2]);
    }

    /// The first line (1-based) linking the sources page, if any.
    fn first_sources_link(page: &str) -> Option<usize> {
        page.lines()
            .position(|l| l.contains("](sources.md") || l.contains("](chapters/sources.md"))
            .map(|i| i + 1)
    }

    #[test]
    fn the_readme_and_every_chapter_page_link_the_sources_page_near_the_top() {
        let mut missing = Vec::new();
        for page in chapter_pages() {
            match first_sources_link(&read(&page)) {
                Some(line) if line <= 20 => {}
                found => missing.push(format!("{}: first link at {found:?}", page.display())),
            }
        }
        let readme = read(&root().join("README.md"));
        if first_sources_link(&readme).is_none() {
            missing.push("README.md links no chapters/sources.md".to_string());
        }
        assert!(missing.is_empty(), "{}", missing.join("\n"));
        assert_eq!(first_sources_link("# t\n\nno link\n"), None);
        assert_eq!(first_sources_link("# t\nSources: [D3](sources.md#d3)\n"), Some(2));
    }

    #[test]
    fn every_link_into_the_sources_page_names_a_document_it_has() {
        let sources = read(&root().join("chapters").join("sources.md"));
        let mut pages = chapter_pages();
        pages.push(root().join("chapters").join("benchmarks.md"));
        let mut broken = Vec::new();
        for page in pages {
            for (i, line) in read(&page).lines().enumerate() {
                for part in line.split("](sources.md#").skip(1) {
                    let anchor = part.split(')').next().unwrap_or_default();
                    if !sources.lines().any(|l| l.to_lowercase() == format!("## {anchor}")) {
                        broken.push(format!("{}:{}: #{anchor}", page.display(), i + 1));
                    }
                }
            }
        }
        assert!(broken.is_empty(), "anchors the sources page lacks:\n{}", broken.join("\n"));
    }

    /// The anchor GitHub (and mdBook) gives a heading: lower case, every character but letters,
    /// digits, `-`, `_` and spaces dropped, spaces as `-`. `## 8. Quantized weights: int8` is
    /// `#8-quantized-weights-int8`.
    fn heading_anchor(heading: &str) -> String {
        heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect()
    }

    /// The `](page.md#anchor)` links of `text` whose page has no heading with that anchor;
    /// `page` reads a linked page by its path relative to the linking one (`None`: not a page).
    fn broken_anchors(text: &str, page: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
        let mut broken = Vec::new();
        for part in text.split("](").skip(1) {
            let target = part.split(')').next().unwrap_or_default();
            let Some((file, anchor)) = target.split_once('#') else { continue };
            if file.is_empty() || !file.ends_with(".md") || file.contains("://") {
                continue;
            }
            let Some(linked) = page(file) else {
                broken.push(format!("{target}: no such page"));
                continue;
            };
            let mut in_code = false;
            let anchors: Vec<String> = linked
                .lines()
                .filter(|l| {
                    in_code ^= l.starts_with("```");
                    !in_code && l.starts_with('#')
                })
                .map(|l| heading_anchor(l.trim_start_matches('#')))
                .collect();
            if !anchors.iter().any(|a| a == anchor) {
                broken.push(target.to_string());
            }
        }
        broken
    }

    /// Every link from the README or a page of the book to a heading of a page of the book lands
    /// on a heading that page has (a renumbered or renamed section breaks it).
    #[test]
    fn every_link_to_a_section_of_a_page_names_a_heading_it_has() {
        let chapters = root().join("chapters");
        let mut faults = Vec::new();
        let mut pages: Vec<PathBuf> = std::fs::read_dir(&chapters)
            .expect("chapters/")
            .map(|e| e.expect("a page").path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        pages.push(root().join("README.md"));
        for path in &pages {
            let dir = path.parent().expect("a folder").to_path_buf();
            let reader = |file: &str| std::fs::read_to_string(dir.join(file)).ok();
            for b in broken_anchors(&read(path), &reader) {
                faults.push(format!("{}: {b}", path.display()));
            }
        }
        assert!(faults.is_empty(), "links to headings that do not exist:\n{}", faults.join("\n"));
        // A planted link to a section under its old number, and one to a missing page.
        let planted = "[x](ch11.md#quantized-weights-int8) [y](ch11.md#8-quantized-weights-int8) \
                       [z](none.md#a)";
        let page =
            |file: &str| (file == "ch11.md").then(|| "## 8. Quantized weights: int8\n".into());
        assert_eq!(broken_anchors(planted, &page).len(), 2);
    }

    #[test]
    fn no_page_names_a_document_by_its_file_number() {
        let mut pages = chapter_pages();
        pages.push(root().join("README.md"));
        pages.push(root().join("chapters").join("benchmarks.md"));
        let mut found = Vec::new();
        for page in pages {
            for (i, line) in read(&page).lines().enumerate() {
                if file_number_citation(line) {
                    found.push(format!("{}:{}: {line}", page.display(), i + 1));
                }
            }
        }
        assert!(found.is_empty(), "say D0…D4 instead:\n{}", found.join("\n"));
        assert!(file_number_citation("as document 003 prints"));
        // A file name, built here so that this file names none itself.
        assert!(file_number_citation(&format!("see 001_{}.txt", "a269190d72ad5dbb")));
        assert!(!file_number_citation("as D3 prints, 0.003"));
        assert!(!file_number_citation("`softmax_of_1000_1001_1002_equals`"));
    }

    /// Whether a line cites a document as "document 00n", "documents 000 and …" or by file name.
    fn file_number_citation(line: &str) -> bool {
        let lower = line.to_lowercase();
        let bytes = lower.as_bytes();
        // A seed file name: 00n_ followed by 16 hexadecimal digits, not inside a longer word.
        let file_name = (0..bytes.len().saturating_sub(19)).any(|i| {
            (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'))
                && bytes[i..i + 2] == *b"00"
                && (b'0'..=b'4').contains(&bytes[i + 2])
                && bytes[i + 3] == b'_'
                && bytes[i + 4..i + 20].iter().all(u8::is_ascii_hexdigit)
        });
        file_name
            || ["document 00", "documents 00", "document 0", "documents 0"]
                .iter()
                .any(|p| lower.contains(p))
    }

    /// Constructs GitHub's math renderer is known to mangle inside `$…$`: Markdown takes a
    /// backslash before ASCII punctuation as an escape before the math is typeset, so `\{` `\}`
    /// (set braces), `\,` `\;` `\!` `\:` (spaces), `\\` (a line break), `\|` (a norm), `\%`, `\#`,
    /// `\&` and `\_` reach the renderer without their backslash (`\%` then comments out the rest
    /// of the formula). Write `\lbrace`, `\rbrace`, `\thinspace`, `\Vert`, `\text{%}` instead.
    const BAD_MATH: [&str; 12] =
        ["\\{", "\\}", "\\,", "\\;", "\\!", "\\:", "\\\\", "\\|", "\\%", "\\#", "\\&", "\\_"];

    /// Unicode that writes a formula: a page writes these inside `$…$` (as `\partial`, `\sum`,
    /// `^\top`, `_1`, …) or inside code, never in its prose. Worked matrices and program output
    /// stay in code blocks, where Unicode is what the program prints.
    const FORMULA_CHARS: [char; 26] = [
        '∂', '∑', 'Σ', '∇', '√', '⊙', 'ᵀ', '₀', '₁', '₂', '₃', '₄', '₅', '₆', '₇', '₈', '₉', 'ᵢ',
        'ⱼ', 'ₖ', '⁻', '²', '∞', '≤', '≥', '≠',
    ];

    /// Plain-text math in prose that Markdown shows as typed: a power or an index with a
    /// bracket (`e^(−x)`, `x_(i)`) or a caret between letters (`e^x`).
    fn plain_math(prose: &str) -> bool {
        let chars: Vec<char> = prose.chars().collect();
        chars.windows(3).any(|w| {
            (w[1] == '^' || w[1] == '_') && w[0].is_alphanumeric() && (w[2] == '(' || w[2] == '{')
                || w[1] == '^' && w[0].is_alphanumeric() && w[2].is_alphanumeric()
        })
    }

    /// The chapters whose prose is in `$…$` throughout: all eleven; the Unicode rule of
    /// [`notation_faults`] holds on these (the appendix pages quote measured products and are
    /// held only to the rules GitHub's renderer needs).
    const ONE_NOTATION: [&str; 11] = [
        "ch01_logistic",
        "ch02_softmax",
        "ch03_mlp",
        "ch04_xor",
        "ch05_positions",
        "ch06_attention",
        "ch07_encoder_decoder",
        "ch08_tokens",
        "ch09_gpt",
        "ch10_matmul",
        "ch11_precision",
    ];

    /// The `$…$` and `$$…$$` spans of a line (already without code spans), and the text outside
    /// them. An unmatched `$` leaves the rest of the line outside.
    fn split_math(text: &str) -> (Vec<String>, String) {
        let (mut math, mut prose) = (Vec::new(), String::new());
        let mut rest = text;
        while let Some(open) = rest.find('$') {
            prose.push_str(&rest[..open]);
            let delim = if rest[open..].starts_with("$$") { "$$" } else { "$" };
            let body = &rest[open + delim.len()..];
            match body.find(delim) {
                Some(close) => {
                    math.push(body[..close].to_string());
                    rest = &body[close + delim.len()..];
                }
                None => {
                    prose.push_str(&rest[open..]);
                    rest = "";
                }
            }
        }
        prose.push_str(rest);
        (math, prose)
    }

    /// Whether the underscores of these formulas, taken together as Markdown reads the line,
    /// can open and then close an emphasis: GitHub then italicises the text between two
    /// formulas and the math breaks (`$\hat{y}_{i}$ … $x_{j}$`). An underscore can open when
    /// the character before it is punctuation or nothing and the one after is not a space; it
    /// can close when the one before is not a space and is a letter or digit, or is punctuation
    /// with a space or punctuation after (CommonMark's flanking rules, github/markup#1575);
    /// `x_i` and `x_{ij}` are safe, an underscore after `}` or `)` is what breaks.
    fn underscores_pair(formulas: &[String]) -> bool {
        let mut opened = false;
        for f in formulas {
            let chars: Vec<char> = f.chars().collect();
            for (i, &c) in chars.iter().enumerate() {
                if c != '_' {
                    continue;
                }
                let before = if i == 0 { ' ' } else { chars[i - 1] };
                let after = chars.get(i + 1).copied().unwrap_or(' ');
                let punct = |ch: char| ch.is_ascii_punctuation();
                let left = !after.is_whitespace()
                    && (!punct(after) || before.is_whitespace() || punct(before));
                let right = !before.is_whitespace()
                    && (!punct(before) || after.is_whitespace() || punct(after));
                let can_open = left && (!right || punct(before));
                let can_close = right && (!left || punct(after));
                if opened && can_close {
                    return true;
                }
                opened |= can_open;
            }
        }
        false
    }

    /// Every line of a page, outside fenced code blocks and inline code spans, that holds a
    /// construct of [`BAD_MATH`] inside math, an odd number of single `$`, a `$` glued to a
    /// formula's outside (`$a$b`, `x$a$`, `$a$$b$`) or a space just inside one (`$ a$`),
    /// underscores that pair up as emphasis ([`underscores_pair`]), or — when `unicode` — a
    /// character of [`FORMULA_CHARS`] or `σ(` in prose outside `$…$`; as `page:line: reason`;
    /// and an unclosed `$$` block. Generated tables are held to it too: the worked, errata and
    /// benchmark tables write their cells through [`llm_workbook::tex::markdown_cell`] (the
    /// terminal keeps the Unicode).
    fn notation_faults(name: &str, page: &str, unicode: bool) -> Vec<String> {
        let mut faults = Vec::new();
        let (mut fenced, mut display) = (false, 0usize);
        for (i, line) in page.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            if fenced {
                continue;
            }
            // A tab or other control character: `\t` of `\top` read as an escape on its way in.
            if line.chars().any(char::is_control) {
                faults.push(format!("{name}:{}: a control character (a tab?)", i + 1));
            }
            // Drop inline code spans and escaped dollars.
            let text: String = line
                .split('`')
                .enumerate()
                .filter(|(k, _)| k % 2 == 0)
                .map(|(_, s)| s)
                .collect::<Vec<_>>()
                .join(" ")
                .replace("\\$", "");
            let at = |reason: &str| format!("{name}:{}: {reason}", i + 1);
            let (math, prose) = split_math(&text);
            for bad in BAD_MATH {
                if math.iter().any(|m| m.contains(bad)) {
                    faults.push(at(bad));
                }
            }
            // `$$` opens or closes display math only at the start or end of a line; inside
            // one it is two inline formulas glued together, which GitHub does not render.
            let trimmed = text.trim();
            let glued = trimmed
                .match_indices("$$")
                .filter(|(k, _)| *k != 0 && k + 2 != trimmed.len())
                .count();
            if glued > 0 {
                faults.push(at("two formulas glued: $a$$b$"));
            }
            let delimiters = trimmed.matches("$$").count() - glued;
            // A line inside a $$ … $$ block (or opening or closing one) is math, not prose.
            let in_display = display % 2 == 1 || delimiters > 0;
            display += delimiters;
            let single = trimmed.matches('$').count() - 2 * delimiters;
            if single % 2 == 1 {
                faults.push(at("unbalanced $"));
            }
            if !text.contains("$$") {
                let glued = text.split('$').collect::<Vec<_>>();
                for (k, part) in glued.iter().enumerate() {
                    let inside = k % 2 == 1;
                    let (first, last) = (part.chars().next(), part.chars().last());
                    if inside && k + 1 < glued.len() {
                        if first.is_some_and(char::is_whitespace)
                            || last.is_some_and(char::is_whitespace)
                        {
                            faults.push(at("space just inside $…$"));
                        }
                    } else if !inside {
                        let touches = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
                        if (k > 0 && touches(first)) || (k + 1 < glued.len() && touches(last)) {
                            faults.push(at("a letter or digit touching a $"));
                        }
                    }
                }
            }
            if underscores_pair(&math) {
                faults
                    .push(at("underscores that Markdown pairs as emphasis (write `}_` as `} _`)"));
            }
            if unicode && !in_display {
                let formula = prose.chars().any(|c| FORMULA_CHARS.contains(&c))
                    || prose.contains("σ(")
                    || plain_math(&prose);
                if formula {
                    faults.push(at("a formula in Unicode outside $…$"));
                }
            }
        }
        if display % 2 == 1 {
            faults.push(format!("{name}: a $$ block is not closed"));
        }
        faults
    }

    #[test]
    fn every_page_writes_math_github_renders() {
        let mut pages = chapter_pages();
        for p in ["sources.md", "benchmarks.md", "introduction.md", "exercises.md", "errata.md"] {
            pages.push(root().join("chapters").join(p));
        }
        let mut faults = Vec::new();
        for page in &pages {
            let name = page.strip_prefix(root()).unwrap_or(page).display().to_string();
            let stem = page.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            faults.extend(notation_faults(&name, &read(page), ONE_NOTATION.contains(&stem)));
        }
        assert!(faults.is_empty(), "math GitHub mangles:\n{}", faults.join("\n"));
        // Planted: inline \{ and \,, a lone $, an unclosed $$; code is exempt.
        let planted = "ok $a$ and `\\{` and\n```\n\\, $\n```\n$y \\in \\{0, 1\\}$\n\
                       $a\\,b$ and $5\n$$\nx\n";
        assert_eq!(
            notation_faults("p.md", planted, false),
            [
                "p.md:5: \\{",
                "p.md:5: \\}",
                "p.md:6: \\,",
                "p.md:6: unbalanced $",
                "p.md: a $$ block is not closed"
            ]
        );
        // Planted: `\top` whose `\t` became a tab.
        assert_eq!(
            notation_faults("p.md", "so $W^\\top$ and\n$W^\top$\n", false),
            ["p.md:2: a control character (a tab?)"]
        );
        // Planted: glued and spaced dollars, emphasis across two formulas, \% and \\.
        let planted = "the $n$th one\n$\\alpha$$\\beta$\n$ a$ b\n\
                       $\\hat{y}_{i}$ and $x_{j}$\n$x_i$ and $x_{ij}$\n$50\\%$ and $a \\\\ b$\n";
        assert_eq!(
            notation_faults("p.md", planted, false),
            [
                "p.md:1: a letter or digit touching a $",
                "p.md:2: two formulas glued: $a$$b$",
                "p.md:3: space just inside $…$",
                "p.md:4: underscores that Markdown pairs as emphasis (write `}_` as `} _`)",
                "p.md:6: \\\\",
                "p.md:6: \\%",
            ]
        );
        // Planted: a formula in Unicode prose, a generated table's too; inside $…$ or code it is
        // fine.
        let planted = "so ∂L/∂z = ŷ − y\nσ(z) is\nso $\\partial L$ and `∂L`\n```\nWᵀx\n```\n\
                       <!-- products:begin -->\n| Σᵢ xᵢ |\n<!-- products:end -->\nx₁ and x₂\n";
        assert_eq!(
            notation_faults("p.md", planted, true),
            [
                "p.md:1: a formula in Unicode outside $…$",
                "p.md:2: a formula in Unicode outside $…$",
                "p.md:8: a formula in Unicode outside $…$",
                "p.md:10: a formula in Unicode outside $…$",
            ]
        );
        assert!(notation_faults("p.md", planted, false).is_empty());
        // Planted: plain-text powers, indices and comparisons; a $$ block's lines are math.
        let planted = "gets e^(−x) here\nand e^c too\nthe x_(i) term\nat T ≤ 0\n\
                       $$\ne^{z_i} \\le 1\n$$\nso $e^{-x}$ and x_i and 2^10 bytes\n";
        assert_eq!(
            notation_faults("p.md", planted, true),
            [
                "p.md:1: a formula in Unicode outside $…$",
                "p.md:2: a formula in Unicode outside $…$",
                "p.md:3: a formula in Unicode outside $…$",
                "p.md:4: a formula in Unicode outside $…$",
                "p.md:8: a formula in Unicode outside $…$",
            ]
        );
    }
}
