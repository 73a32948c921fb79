//! The table of contents: every chapter, in order, as the main job walks them.
//!
//! Adding a chapter means adding its `CHAPTER` constant to [`chapters`]; nothing else in the main
//! job changes.

use crate::errata::Erratum;
use crate::report::Chapter;

/// All chapters in reading order (one line each).
#[rustfmt::skip]
pub fn chapters() -> Vec<Chapter> {
    vec![
        crate::ch01_logistic::book::CHAPTER,
        crate::ch02_softmax::book::CHAPTER,
        crate::ch03_mlp::book::CHAPTER,
        crate::ch04_xor::book::CHAPTER,
        crate::ch05_positions::book::CHAPTER,
        crate::ch06_attention::book::CHAPTER,
        crate::ch07_encoder_decoder::book::CHAPTER,
        crate::ch08_tokens::book::CHAPTER,
        crate::ch09_gpt::book::CHAPTER,
        crate::ch10_matmul::book::CHAPTER,
    ]
}

/// The chapter with this number, if it exists.
pub fn chapter(number: u32) -> Option<Chapter> {
    chapters().into_iter().find(|c| c.number == number)
}

/// The errata register: every erratum of every chapter, with the chapter's stem.
pub fn errata_register() -> Vec<(&'static str, &'static Erratum)> {
    chapters().into_iter().flat_map(|c| c.errata.iter().map(move |e| (c.stem, e))).collect()
}

/// The newcomer's path, checked on the repository's own files: the README's bad-input table names
/// tests that exist, every relative link in the README and the chapter pages resolves, each
/// chapter page links its tests, snapshots, plots and the functions behind its formulas, and
/// `unsafe` stays inside the SIMD kernel module.
#[cfg(test)]
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
            super::chapters()
                .iter()
                .map(|c| root().join("chapters").join(format!("{}.md", c.stem))),
        );
        pages.extend(["sources.md", "benchmarks.md"].map(|p| root().join("chapters").join(p)));
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
        for ch in super::chapters() {
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
        for ch in super::chapters() {
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
        let matmul = read(&root().join("src").join("matmul").join("mod.rs"));
        let allows: Vec<&str> =
            matmul.lines().filter(|l| l.contains("allow(unsafe_code)")).collect();
        assert_eq!(
            allows.len(),
            1,
            "exactly one allow(unsafe_code) in src/matmul/mod.rs: {allows:?}"
        );
        let after = &matmul[matmul.find("allow(unsafe_code)").unwrap_or(0)..];
        assert!(
            after.lines().nth(1).is_some_and(|l| l.trim() == "mod simd;"),
            "the allow must sit on `mod simd;`"
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
                if path.extension().is_none_or(|e| e != "rs") || path.ends_with("matmul/simd.rs") {
                    continue;
                }
                let code = read(&path);
                let own = path.ends_with("src/book.rs");
                for (i, line) in code.lines().enumerate() {
                    let code_part = line.split("//").next().unwrap_or_default();
                    let hit = code_part.contains("unsafe {")
                        || code_part.contains("unsafe fn")
                        || code_part.contains("unsafe impl")
                        || (code_part.contains("allow(unsafe_code)")
                            && !path.ends_with("matmul/mod.rs"));
                    if hit && !own {
                        offenders.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "unsafe outside src/matmul/simd.rs:\n{}",
            offenders.join("\n")
        );
    }
}

/// The shape of the code, checked on the repository's own files: a chapter's lesson files hold
/// the lesson (no book machinery, at most [`LESSON_MAX_LINES`] lines each), the core uses no
/// chapter, and no line of code is wider than [`MAX_LINE_CHARS`] characters.
#[cfg(test)]
mod shape {
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

    /// The import rule for one file: a lesson file (under `src/chNN_*/`, not `book.rs`) uses no
    /// book module; a core file (`src/*.rs`, `src/matmul/`) uses no chapter and, unless it is a
    /// book module itself, no book module. Returns one line per breach.
    fn import_breaches(relative: &Path, code: &str) -> Vec<String> {
        let parts: Vec<String> =
            relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        let file = parts.last().cloned().unwrap_or_default();
        let in_chapter = parts.len() > 2 && parts[1].starts_with("ch") && parts[1].len() > 4;
        let stem = file.trim_end_matches(".rs");
        let is_book_file = (in_chapter && file == "book.rs")
            || (parts.len() == 2 && BOOK_MODULES.contains(&stem))
            || matches!(stem, "lib" | "main");
        let mut out = Vec::new();
        for (line, module) in crate_modules_used(code) {
            let chapter =
                module.starts_with("ch") && module[2..].starts_with(|c: char| c.is_ascii_digit());
            if BOOK_MODULES.contains(&module.as_str()) && !is_book_file {
                out.push(format!("{}:{line}: uses crate::{module}", relative.display()));
            } else if chapter && !in_chapter && !is_book_file {
                out.push(format!("{}:{line}: the core uses chapter {module}", relative.display()));
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
        for ch in super::chapters() {
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
}

/// The pages beside the chapters: the sources page drawn from [`crate::sources::SOURCES`], the
/// notation every page writes its math in, and the links that tie them together.
#[cfg(test)]
mod pages {
    use crate::sources::SOURCES;
    use std::path::{Path, PathBuf};

    fn root() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn chapter_pages() -> Vec<PathBuf> {
        super::chapters()
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
        match crate::report::prose_block(page, "sources") {
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
    const FORMULA_CHARS: [char; 22] = [
        '∂', '∑', 'Σ', '∇', '√', '⊙', 'ᵀ', '₀', '₁', '₂', '₃', '₄', '₅', '₆', '₇', '₈', '₉', 'ᵢ',
        'ⱼ', 'ₖ', '⁻', '²',
    ];

    /// The chapters whose prose has been converted to `$…$` throughout; the Unicode rule of
    /// [`notation_faults`] holds on these. Chapter 10 is not yet listed: its benchmark results
    /// (section 9) and exercise table still write products such as Hᵀ·dY in Unicode.
    const ONE_NOTATION: [&str; 9] = [
        "ch01_logistic",
        "ch02_softmax",
        "ch03_mlp",
        "ch04_xor",
        "ch05_positions",
        "ch06_attention",
        "ch07_encoder_decoder",
        "ch08_tokens",
        "ch09_gpt",
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
    /// and an unclosed `$$` block. Generated blocks (`<!-- worked -->`, `<!-- errata -->`) are
    /// what the terminal prints too, so the Unicode rule skips them.
    fn notation_faults(name: &str, page: &str, unicode: bool) -> Vec<String> {
        let mut faults = Vec::new();
        let (mut fenced, mut display, mut generated) = (false, 0usize, false);
        for (i, line) in page.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            if fenced {
                continue;
            }
            if line.contains(":begin -->") {
                generated = true;
            }
            if line.contains(":end -->") {
                generated = false;
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
            if unicode && !generated {
                let formula =
                    prose.chars().any(|c| FORMULA_CHARS.contains(&c)) || prose.contains("σ(");
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
        pages.push(root().join("chapters").join("sources.md"));
        pages.push(root().join("chapters").join("benchmarks.md"));
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
        // Planted: a formula in Unicode prose; inside $…$, code, or a generated table it is fine.
        let planted = "so ∂L/∂z = ŷ − y\nσ(z) is\nso $\\partial L$ and `∂L`\n```\nWᵀx\n```\n\
                       <!-- worked:begin -->\n| Σᵢ xᵢ |\n<!-- worked:end -->\nx₁ and x₂\n";
        assert_eq!(
            notation_faults("p.md", planted, true),
            [
                "p.md:1: a formula in Unicode outside $…$",
                "p.md:2: a formula in Unicode outside $…$",
                "p.md:10: a formula in Unicode outside $…$",
            ]
        );
        assert!(notation_faults("p.md", planted, false).is_empty());
    }
}

#[cfg(test)]
mod walks {
    use crate::report::{TERMINAL_WIDTH, Walk};

    /// Columns a line takes on a terminal: combining marks (the tilde of B̃) take none.
    fn columns(line: &str) -> usize {
        line.chars().filter(|c| !('\u{0300}'..='\u{036f}').contains(c)).count()
    }

    /// Chapter 6's walk-through prints the widest matrix of the book (the 3×8 concatenation of
    /// the heads at 8 decimals, 101 columns in one row); every line of it fits the terminal.
    #[test]
    fn chapter_6_s_walk_fits_the_terminal() {
        let mut buf = Vec::new();
        (crate::ch06_attention::book::CHAPTER.walk)(&mut Walk::new(&mut buf)).unwrap();
        let text = String::from_utf8(buf).unwrap();
        let wide: Vec<&str> = text.lines().filter(|l| columns(l) > TERMINAL_WIDTH).collect();
        assert!(wide.is_empty(), "lines over {TERMINAL_WIDTH} columns:\n{}", wide.join("\n"));
        assert!(text.contains("columns 1–"), "the concatenation no longer needs wrapping");
        assert_eq!(columns("B̃ sliver"), 8);
    }
}
