//! What a chapter reports: its worked-number table, its walk-through, and its entry in the book.
//!
//! A [`Worked`] row sets a number the document prints beside the number our code computes and
//! says how they compare: [`Status::Match`] at the printed precision, [`Status::Rounding`] (off by
//! one in the last printed digit, as rounded inputs cause), [`Status::Erratum`] (the document is
//! wrong; the register explains), or [`Status::Illustrative`] (printed without the inputs that
//! would determine it). [`Status::Mismatch`] is what no chapter may ship: a test asserts its
//! absence.

use crate::errata::{Erratum, Kind};
use crate::float::Float;
use crate::snapshot::fixed;
use crate::sources::Source;
use nalgebra::DMatrix;
use std::io::Write;
use std::path::{Path, PathBuf};

/// How a printed number compares with ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Equal at the printed precision.
    Match,
    /// Off by at most one unit in the last printed digit.
    Rounding,
    /// The document is wrong; the errata register holds the row.
    Erratum,
    /// The document's notation, read literally, gives another value; the register's row (of
    /// kind notation) says what it means.
    Notation,
    /// The document's worked example leaves out a step of the model it describes; the register's
    /// row (of kind simplification) says which, and its printed value is right for what it
    /// computes. `ours` is the value with the step.
    Simplification,
    /// The document gives no inputs for it; nothing to check.
    Illustrative,
    /// Differs and is not explained: a defect.
    Mismatch,
}

impl Status {
    /// The word printed in tables.
    pub fn word(self) -> &'static str {
        match self {
            Status::Match => "match",
            Status::Rounding => "rounding",
            Status::Erratum => "erratum",
            Status::Notation => "notation",
            Status::Simplification => "simplification",
            Status::Illustrative => "illustrative",
            Status::Mismatch => "MISMATCH",
        }
    }
}

/// One row of a chapter's worked-number table.
#[derive(Clone, Debug, PartialEq)]
pub struct Worked {
    /// The test that pins it (a function name in `tests/<chapter>.rs`).
    pub test: &'static str,
    /// The source document it comes from.
    pub document: &'static Source,
    /// What the number is, in words.
    pub quantity: String,
    /// As printed in the document.
    pub printed: String,
    /// As our code computes it, at the printed precision.
    pub ours: String,
    /// How they compare.
    pub status: Status,
}

/// Number of decimals in a printed number such as `"0.997"` (3) or `"10"` (0).
pub fn decimals_of(printed: &str) -> usize {
    printed
        .split_once('.')
        .map_or(0, |(_, d)| d.trim_end_matches(|c: char| !c.is_ascii_digit()).len())
}

impl Worked {
    /// Compares `ours` with the `printed` number at the printed number of decimals.
    pub fn number(
        test: &'static str,
        document: &'static Source,
        quantity: impl Into<String>,
        printed: &str,
        ours: f64,
    ) -> Self {
        let d = decimals_of(printed);
        let ours_text = fixed(ours, d);
        let status = match printed.trim().parse::<f64>() {
            Ok(p) if ours_text == fixed(p, d) => Status::Match,
            Ok(p) if (p - ours).abs() <= 1.000_001 * 10f64.powi(-(d as i32)) => Status::Rounding,
            _ => Status::Mismatch,
        };
        Worked {
            test,
            document,
            quantity: quantity.into(),
            printed: printed.to_string(),
            ours: ours_text,
            status,
        }
    }

    /// A row whose printed value the errata register corrects; `ours` is the correct value.
    /// Becomes [`Status::Mismatch`] if the printed text happens to equal ours (then it is no
    /// erratum).
    pub fn erratum(
        test: &'static str,
        document: &'static Source,
        quantity: impl Into<String>,
        printed: &str,
        ours: impl Into<String>,
    ) -> Self {
        Worked::explained(Status::Erratum, test, document, quantity, printed, ours)
    }

    /// A row whose printed value a notation of the document explains (the register's row of kind
    /// notation); `ours` is the value the notation means. A mismatch if the two are equal.
    pub fn notation(
        test: &'static str,
        document: &'static Source,
        quantity: impl Into<String>,
        printed: &str,
        ours: impl Into<String>,
    ) -> Self {
        Worked::explained(Status::Notation, test, document, quantity, printed, ours)
    }

    /// A row whose printed value leaves out a step of the model (the register's row of kind
    /// simplification); `ours` is the value with the step. A mismatch if the two are equal.
    pub fn simplification(
        test: &'static str,
        document: &'static Source,
        quantity: impl Into<String>,
        printed: &str,
        ours: impl Into<String>,
    ) -> Self {
        Worked::explained(Status::Simplification, test, document, quantity, printed, ours)
    }

    fn explained(
        status: Status,
        test: &'static str,
        document: &'static Source,
        quantity: impl Into<String>,
        printed: &str,
        ours: impl Into<String>,
    ) -> Self {
        let ours = ours.into();
        let status = if ours == printed { Status::Mismatch } else { status };
        Worked {
            test,
            document,
            quantity: quantity.into(),
            printed: printed.to_string(),
            ours,
            status,
        }
    }

    /// A row compared as text (a formula, a vector, a word) rather than as one number.
    pub fn text(
        test: &'static str,
        document: &'static Source,
        quantity: impl Into<String>,
        printed: &str,
        ours: impl Into<String>,
    ) -> Self {
        let ours = ours.into();
        let status = if ours == printed { Status::Match } else { Status::Mismatch };
        Worked {
            test,
            document,
            quantity: quantity.into(),
            printed: printed.to_string(),
            ours,
            status,
        }
    }

    /// A number printed without the inputs that would determine it.
    pub fn illustrative(
        document: &'static Source,
        quantity: impl Into<String>,
        printed: &str,
    ) -> Self {
        Worked {
            test: "",
            document,
            quantity: quantity.into(),
            printed: printed.to_string(),
            ours: "—".to_string(),
            status: Status::Illustrative,
        }
    }
}

/// The rows as a GitHub Markdown table, the form the chapters' prose carries.
pub fn worked_markdown(rows: &[Worked]) -> String {
    let mut out = String::from(
        "| quantity | document | printed | ours | status | test |\n|---|---|---|---|---|---|\n",
    );
    for w in rows {
        let test = if w.test.is_empty() { String::new() } else { format!("`{}`", w.test) };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            crate::tex::markdown_cell(&w.quantity).replace('|', "\\|"),
            w.document,
            crate::tex::markdown_cell(&grouped(&w.printed)).replace('|', "\\|"),
            crate::tex::markdown_cell(&grouped(&w.ours)).replace('|', "\\|"),
            w.status.word(),
            test
        ));
    }
    out
}

/// Worked tables longer than this many rows fold into a `<details>` block on the page.
pub const FOLD_ROWS: usize = 20;

/// The worked-number table as the chapter page carries it: [`worked_markdown`], folded into
/// `<details><summary>All N worked numbers</summary>` … `</details>` when it has more than
/// [`FOLD_ROWS`] rows (blank lines around the table so GitHub renders it inside).
pub fn worked_block(rows: &[Worked]) -> String {
    let table = worked_markdown(rows);
    if rows.len() <= FOLD_ROWS {
        return table;
    }
    format!(
        "<details><summary>All {} worked numbers</summary>\n\n{}\n</details>\n",
        rows.len(),
        table
    )
}

/// The text between `<!-- {tag}:begin -->` and `<!-- {tag}:end -->` in a chapter's prose,
/// trimmed; `None` when the markers are missing.
pub fn prose_block<'a>(markdown: &'a str, tag: &str) -> Option<&'a str> {
    let begin = format!("<!-- {tag}:begin -->");
    let end = format!("<!-- {tag}:end -->");
    let start = markdown.find(&begin)? + begin.len();
    let stop = markdown[start..].find(&end)? + start;
    Some(markdown[start..stop].trim())
}

/// A printer for a chapter's walk-through: every intermediate quantity with its name, shape and
/// value, in the order the document derives it.
pub struct Walk<'a> {
    out: &'a mut dyn Write,
    /// Decimals for matrices and scalars.
    pub decimals: usize,
}

impl<'a> Walk<'a> {
    /// A walk printing to `out` with 4 decimals.
    pub fn new(out: &'a mut dyn Write) -> Self {
        Walk { out, decimals: 4 }
    }

    fn put(&mut self, s: &str) -> crate::Result<()> {
        writeln!(self.out, "{s}")
            .map_err(|source| crate::Error::Io { path: "<standard output>".into(), source })
    }

    /// A heading for the next step.
    pub fn step(&mut self, title: &str) -> crate::Result<()> {
        self.put(&format!("\n── {title}"))
    }

    /// A line of explanation; one wider than [`TERMINAL_WIDTH`] columns is wrapped (keeping its
    /// indent), one that fits is printed as it is (aligned columns stay aligned).
    pub fn say(&mut self, text: &str) -> crate::Result<()> {
        for line in text.split('\n') {
            if 3 + line.chars().count() <= TERMINAL_WIDTH {
                self.put(&format!("   {line}"))?;
                continue;
            }
            let indent = 3 + line.chars().take_while(|c| *c == ' ').count();
            for part in wrap(line, TERMINAL_WIDTH.saturating_sub(indent).max(20)) {
                self.put(&format!("{:indent$}{part}", ""))?;
            }
        }
        Ok(())
    }

    /// A named scalar.
    pub fn scalar<T: Float>(&mut self, name: &str, x: T) -> crate::Result<()> {
        let d = self.decimals;
        self.put(&format!("   {name} = {}", fixed(x, d)))
    }

    /// A named matrix with its shape. Rows that would not fit [`TERMINAL_WIDTH`] columns are
    /// printed in blocks of columns (each headed "columns a–b of n"), as numpy wraps a wide array.
    pub fn matrix<T: Float>(&mut self, name: &str, m: &DMatrix<T>) -> crate::Result<()> {
        self.put(&format!("   {name}  ({}×{})", m.nrows(), m.ncols()))?;
        for line in matrix_lines(m, self.decimals, TERMINAL_WIDTH) {
            self.put(&line)?;
        }
        Ok(())
    }
}

/// Indent of a matrix row under its name in a walk-through.
const MATRIX_INDENT: usize = 5;

/// The rows of `m` as a walk-through prints them, `[a, b, …]` indented by five spaces,
/// every entry right-aligned to the widest; when a row is wider than `width`, the columns are
/// split into blocks that fit, each block headed by the columns it holds (1-based).
pub fn matrix_lines<T: Float>(m: &DMatrix<T>, decimals: usize, width: usize) -> Vec<String> {
    let cells: Vec<Vec<String>> = (0..m.nrows())
        .map(|r| (0..m.ncols()).map(|c| fixed(m[(r, c)], decimals)).collect())
        .collect();
    let cell = cells.iter().flatten().map(|s| s.chars().count()).max().unwrap_or(0);
    // A row of k entries takes indent + "[" + k cells + (k − 1) ", " + "]".
    let fits = |k: usize| MATRIX_INDENT + 2 + k * cell + k.saturating_sub(1) * 2 <= width;
    let per_block = (1..=m.ncols().max(1)).take_while(|&k| fits(k)).last().unwrap_or(1);
    let row_text = |row: &[String]| {
        let padded: Vec<String> = row.iter().map(|s| format!("{s:>cell$}")).collect();
        format!("{:MATRIX_INDENT$}[{}]", "", padded.join(", "))
    };
    if per_block >= m.ncols() {
        return cells.iter().map(|row| row_text(row)).collect();
    }
    let mut out = Vec::new();
    for start in (0..m.ncols()).step_by(per_block) {
        let stop = (start + per_block).min(m.ncols());
        out.push(format!("{:MATRIX_INDENT$}columns {}–{} of {}", "", start + 1, stop, m.ncols()));
        out.extend(cells.iter().map(|row| row_text(&row[start..stop])));
    }
    out
}

/// A chapter as the main job sees it. Each chapter module exposes one `CHAPTER` constant;
/// [`crate::book::chapters`] lists them in order.
#[derive(Clone, Copy)]
pub struct Chapter {
    /// 1 to 13.
    pub number: u32,
    /// The stem shared by its prose, source, test and snapshot files, e.g. `ch01_logistic`.
    pub stem: &'static str,
    /// A short title.
    pub title: &'static str,
    /// Its worked-number table, recomputed.
    pub worked: fn() -> crate::Result<Vec<Worked>>,
    /// Its walk-through.
    pub walk: fn(&mut Walk) -> crate::Result<()>,
    /// Draws its plots into the folder given; returns the files written.
    pub plots: fn(&Path) -> crate::Result<Vec<PathBuf>>,
    /// Its rows of the errata register.
    pub errata: &'static [Erratum],
}

/// `markdown` with the text between the `tag` markers replaced by `content`; `None` when the
/// markers are missing.
pub fn replace_block(markdown: &str, tag: &str, content: &str) -> Option<String> {
    let begin = format!("<!-- {tag}:begin -->");
    let end = format!("<!-- {tag}:end -->");
    let start = markdown.find(&begin)? + begin.len();
    let stop = markdown[start..].find(&end)? + start;
    Some(format!("{}\n{}\n{}", &markdown[..start], content.trim(), &markdown[stop..]))
}

/// Rewrites the worked-number and errata tables of `chapters/<stem>.md` under `root` from the
/// code, so the prose can never drift from what the tests pin. Returns whether the file changed.
pub fn sync_prose(root: &Path, chapter: &Chapter) -> crate::Result<bool> {
    let path = root.join("chapters").join(format!("{}.md", chapter.stem));
    let io = |source| crate::Error::Io { path: path.display().to_string(), source };
    let old = std::fs::read_to_string(&path).map_err(io)?;
    let rows = (chapter.worked)()?;
    let missing = |tag: &str| crate::Error::Parse {
        file: path.display().to_string(),
        line: None,
        reason: format!("no <!-- {tag}:begin --> … <!-- {tag}:end --> markers"),
    };
    let new =
        replace_block(&old, "worked", &worked_block(&rows)).ok_or_else(|| missing("worked"))?;
    let new = replace_block(&new, "errata", &crate::errata::markdown_table(chapter.errata))
        .ok_or_else(|| missing("errata"))?;
    write_if_changed(&path, &new)
}

/// Writes `content` to `path` unless the file already holds exactly that, through a temporary
/// file beside it and a rename, so a reader never sees half a page. Returns whether it wrote.
pub fn write_if_changed(path: &Path, content: &str) -> crate::Result<bool> {
    let io = |source| crate::Error::Io { path: path.display().to_string(), source };
    match std::fs::read_to_string(path) {
        Ok(old) if old == content => return Ok(false),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, content).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    Ok(true)
}

// ───────────────────────── printed matrices ─────────────────────────

/// Matrices as documents print them; see [`crate::snapshot::parse_printed`].
pub use crate::snapshot::parse_printed;

/// `ours` written the way `printed` is: each entry with as many decimals as the printed entry
/// shows, or `decimals` if that is more (numpy drops trailing zeros: `1.1957622` is 8-decimal
/// output). Rows are separated by `; `. A shape that differs from the printed one is written in
/// full.
pub fn matrix_like<T: Float>(printed: &str, decimals: usize, ours: &DMatrix<T>) -> String {
    let places = |r: usize, c: usize| -> usize {
        parse_printed(printed)
            .and_then(|p| p.get(r).and_then(|row| row.get(c)).map(|s| decimals_of(s).max(decimals)))
            .unwrap_or(decimals)
    };
    (0..ours.nrows())
        .map(|r| {
            (0..ours.ncols())
                .map(|c| fixed(ours[(r, c)], places(r, c)))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl Worked {
    /// Compares a whole printed matrix with ours, entry by entry, each at its printed precision
    /// (at least `decimals`): [`Status::Match`] when every entry agrees, [`Status::Rounding`] when
    /// every entry is within one unit of its last printed digit, otherwise [`Status::Mismatch`]
    /// (also when the shapes differ).
    pub fn matrix<T: Float>(
        test: &'static str,
        document: &'static Source,
        quantity: impl Into<String>,
        printed: &str,
        decimals: usize,
        ours: &DMatrix<T>,
    ) -> Self {
        let ours_text = matrix_like(printed, decimals, ours);
        let status = match parse_printed(printed) {
            Some(p) if p.len() == ours.nrows() && p[0].len() == ours.ncols() => {
                let mut status = Status::Match;
                for (r, row) in p.iter().enumerate() {
                    for (c, s) in row.iter().enumerate() {
                        let d = decimals_of(s).max(decimals);
                        let value: f64 = s.parse().unwrap_or(f64::NAN);
                        let x = ours[(r, c)].as_f64();
                        if fixed(x, d) != fixed(value, d) {
                            let near = (x - value).abs() <= 1.000_001 * 10f64.powi(-(d as i32));
                            status = if near && status != Status::Mismatch {
                                Status::Rounding
                            } else {
                                Status::Mismatch
                            };
                        }
                    }
                }
                status
            }
            _ => Status::Mismatch,
        };
        Worked {
            test,
            document,
            quantity: quantity.into(),
            printed: printed.to_string(),
            ours: ours_text,
            status,
        }
    }
}

/// Counts as the documents print them; see [`crate::snapshot::with_commas`].
pub use crate::snapshot::with_commas;

// ───────────────────────── the terminal ─────────────────────────

/// The widest line, in characters, that the terminal formatters ([`worked_terminal`],
/// [`errata_terminal`]) write when given it as their width.
pub const TERMINAL_WIDTH: usize = 100;

/// The columns `text` takes on a terminal: a combining accent (the tilde of `B̃`) takes none, a
/// wide character two, every other character one.
pub fn columns(text: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(text)
}

/// A whole number of five digits or more with thousands separators (`617558016` →
/// `617,558,016`); any other text unchanged.
pub fn grouped(value: &str) -> String {
    let digits = value.strip_prefix('-').unwrap_or(value);
    if digits.len() < 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return value.to_string();
    }
    let mut out = String::from(&value[..value.len() - digits.len()]);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// `text` broken into lines of at most `width` terminal [`columns`] (at least 1): at spaces where
/// it can, inside a word longer than a line where it must; a newline in `text` always breaks.
/// Runs of spaces collapse to one. Empty text gives one empty line.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    for paragraph in text.split('\n') {
        let mut line = String::new();
        let mut len = 0;
        for word in paragraph.split_whitespace() {
            let mut word = word.to_string();
            let mut cols = columns(&word);
            if len > 0 && len + 1 + cols <= width {
                line.push(' ');
                line.push_str(&word);
                len += 1 + cols;
                continue;
            }
            if len > 0 {
                lines.push(std::mem::take(&mut line));
            }
            while cols > width {
                // The longest head of the word that fits, an accent kept with its letter.
                let mut cut = 0;
                for (i, c) in word.char_indices().skip(1) {
                    if columns(&word[..i]) > width {
                        break;
                    }
                    if unicode_width::UnicodeWidthChar::width(c) != Some(0) {
                        cut = i;
                    }
                }
                let cut = if cut == 0 { word.len() } else { cut };
                let rest = word.split_off(cut);
                lines.push(std::mem::replace(&mut word, rest));
                cols = columns(&word);
            }
            len = cols;
            line = word;
        }
        lines.push(line);
    }
    lines
}

/// The rows as a table for a terminal no wider than `width` characters: the quantity, the
/// source document's short id, the value the document printed, ours, and the status. Columns
/// that do not fit are narrowed (the widest first) and their cells wrapped onto more lines.
pub fn worked_terminal(rows: &[Worked], width: usize) -> String {
    const INDENT: &str = "  ";
    const GAP: &str = "  ";
    let heads = ["quantity", "doc", "printed", "ours", "status"];
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|r| {
            let status = r.status.word().to_string();
            let id = r.document.id.to_string();
            let text = crate::tex::terminal_text;
            [text(&r.quantity), id, text(&grouped(&r.printed)), text(&grouped(&r.ours)), status]
        })
        .collect();
    let natural =
        |i: usize| cells.iter().map(|c| columns(&c[i])).chain([heads[i].len()]).max().unwrap_or(0);
    // A column is never narrower than its heading or its longest number: a number is not split.
    let number = |w: &&str| {
        let t = w.trim_matches(|c: char| matches!(c, '(' | ')' | '[' | ']' | ';' | ':'));
        t.contains(|c: char| c.is_ascii_digit())
            && t.chars().all(|c| c.is_ascii_digit() || matches!(c, '.' | ',' | '-' | '−'))
    };
    let least = |i: usize| {
        let numbers = cells.iter().flat_map(|c| c[i].split_whitespace()).filter(number);
        numbers.map(columns).chain([heads[i].len()]).max().unwrap_or(0)
    };
    let mut w: Vec<usize> = (0..5).map(natural).collect();
    // The document and status columns keep their width; the three others share what is left,
    // the widest that can still give narrowed first.
    let fixed = INDENT.len() + 4 * GAP.len() + w[1] + w[4];
    let room = width.saturating_sub(fixed);
    let wrapped = [0, 2, 3];
    while wrapped.iter().map(|&i| w[i]).sum::<usize>() > room {
        let Some(widest) =
            wrapped.iter().copied().filter(|&i| w[i] > least(i)).max_by_key(|&i| (w[i], i))
        else {
            break; // too narrow to honour: the columns keep their headings' and numbers' widths
        };
        w[widest] -= 1;
    }
    let mut out = String::new();
    let mut put = |cols: [&str; 5]| {
        let mut line = String::from(INDENT);
        for (i, c) in cols.iter().enumerate() {
            if i > 0 {
                line.push_str(GAP);
            }
            line.push_str(c);
            if i < 4 {
                line.extend(std::iter::repeat_n(' ', w[i].saturating_sub(columns(c))));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    };
    put(heads);
    for row in &cells {
        let parts: Vec<Vec<String>> = (0..5)
            .map(|i| if wrapped.contains(&i) { wrap(&row[i], w[i]) } else { vec![row[i].clone()] })
            .collect();
        let height = parts.iter().map(Vec::len).max().unwrap_or(1);
        for k in 0..height {
            let at = |i: usize| parts[i].get(k).map_or("", String::as_str);
            put([at(0), at(1), at(2), at(3), at(4)]);
        }
    }
    out
}

/// The rows as text for a terminal no wider than `width` characters: one block per erratum, its
/// document and section on the first line (and its kind, unless it is an erratum), then what is
/// printed, what is correct, why, and the tests that pin it, each wrapped under its label; a
/// blank line between blocks.
pub fn errata_terminal(rows: &[Erratum], width: usize) -> String {
    const LABEL: usize = 9; // "pinned by"
    const INDENT: usize = 2;
    let mut out = String::new();
    for (k, e) in rows.iter().enumerate() {
        if k > 0 {
            out.push('\n');
        }
        let kind = match e.kind {
            Kind::Erratum => String::new(),
            other => format!(" ({})", other.word()),
        };
        let heading = format!("{}, {}{kind}", e.document.id, e.section);
        for line in wrap(&heading, width) {
            out.push_str(&line);
            out.push('\n');
        }
        let room = width.saturating_sub(INDENT + LABEL + 2);
        let tests = e.tests.join(", ");
        for (label, text) in
            [("printed", e.printed), ("correct", e.correct), ("why", e.why), ("pinned by", &tests)]
        {
            for (i, line) in wrap(text, room).into_iter().enumerate() {
                let label = if i == 0 { label } else { "" };
                let row = format!("{:INDENT$}{label:<LABEL$}  {line}", "");
                out.push_str(row.trim_end());
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errata::markdown_table;

    #[test]
    fn numbers_compare_at_the_printed_precision() {
        assert_eq!(
            Worked::number("t", crate::sources::D0, "q", "0.997", 0.99664).status,
            Status::Match
        );
        assert_eq!(
            Worked::number("t", crate::sources::D0, "q", "0.996", 0.99664).status,
            Status::Rounding
        );
        assert_eq!(
            Worked::number("t", crate::sources::D0, "q", "0.990", 0.99664).status,
            Status::Mismatch
        );
        assert_eq!(
            Worked::number("t", crate::sources::D0, "q", "2.304", 2.30401).status,
            Status::Match
        );
        assert_eq!(decimals_of("0.35667494"), 8);
        assert_eq!(decimals_of("10"), 0);
    }

    #[test]
    fn an_erratum_that_equals_ours_is_a_mismatch() {
        assert_eq!(
            Worked::erratum("t", crate::sources::D0, "q", "1.5", "1.5").status,
            Status::Mismatch
        );
        assert_eq!(
            Worked::erratum("t", crate::sources::D0, "q", "1.5", "2.0").status,
            Status::Erratum
        );
    }

    #[test]
    fn long_tables_fold_and_short_ones_do_not() {
        let row = Worked::number("t", crate::sources::D0, "x", "0.5", 0.5);
        let short = vec![row.clone(); FOLD_ROWS];
        assert_eq!(worked_block(&short), worked_markdown(&short));
        let long = vec![row; FOLD_ROWS + 1];
        let folded = worked_block(&long);
        let summary =
            format!("<details><summary>All {} worked numbers</summary>\n\n", FOLD_ROWS + 1);
        assert!(folded.starts_with(&summary), "{folded}");
        assert!(folded.contains(&worked_markdown(&long)));
        assert!(folded.ends_with("|\n\n</details>\n"), "{folded}");
    }

    #[test]
    fn wrap_breaks_at_spaces_and_inside_words_too_long_for_a_line() {
        assert_eq!(wrap("a bb ccc", 4), ["a bb", "ccc"]);
        assert_eq!(wrap("abcdefghij x", 4), ["abcd", "efgh", "ij x"]);
        assert_eq!(wrap("one\ntwo", 80), ["one", "two"]);
        assert_eq!(wrap("", 10), [""]);
        for line in wrap(&"σ′(z) = σ(z)(1 − σ(z)) ".repeat(20), 17) {
            assert!(line.chars().count() <= 17, "{line:?}");
        }
    }

    /// A planted row far wider than the terminal: the table must wrap it, keep every line within
    /// the width, and lose no word of it.
    #[test]
    fn an_over_long_row_is_wrapped_within_the_width() {
        let long = "the attention weights of every head at every position ".repeat(6);
        let matrix = (0..40).map(|i| format!("0.{i:04}")).collect::<Vec<_>>().join(" ");
        let rows = vec![
            Worked::text("t", crate::sources::D3, long.trim(), &matrix, matrix.clone()),
            Worked::illustrative(crate::sources::D1, "a short one", "12,288"),
        ];
        let natural = rows[0].quantity.len() + 2 * matrix.len();
        assert!(natural > 3 * TERMINAL_WIDTH, "the planted row is not over-long");
        let text = worked_terminal(&rows, TERMINAL_WIDTH);
        let widest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        assert!(widest <= TERMINAL_WIDTH, "a line of {widest} characters:\n{text}");
        assert!(text.lines().count() > 4, "nothing was wrapped:\n{text}");
        let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        let all = words(&text);
        for w in words(&long).iter().chain(&words(&matrix)) {
            assert!(all.contains(w), "{w} was lost");
        }
        assert!(text.starts_with("  quantity"), "{text}");
        assert!(text.contains("D3") && text.contains("D1") && text.contains("illustrative"));
        // The old formatter's way, cutting cells at 60 characters, keeps lines over 100 wide:
        // the check above is what catches it.
        let cut = |s: &str| s.chars().take(60).collect::<String>();
        let old = format!("  {}  {}  {}  match", cut(&long), cut(&matrix), cut(&matrix));
        assert!(old.chars().count() > TERMINAL_WIDTH);
    }

    /// A cell wraps between numbers, never inside one; `B̃` takes one column, so its row lines
    /// up with the others; counts of five digits or more are grouped by thousands.
    #[test]
    fn cells_wrap_between_numbers_and_line_up_by_terminal_columns() {
        let matrix = "4.42554033 5.58924100 6.99844643 4.79288192; 4.55176485 5.61224940 \
            7.09923364 4.82144704; 4.21254506 5.31988824 6.84520426 4.79017392";
        let rows = vec![
            Worked::text("t", crate::sources::D3, "Concat · W_O, the 3×4 product", matrix, matrix),
            Worked::text("t", crate::sources::D3, "B̃ = B − 1", "0.5", "0.5"),
            Worked::text("t", crate::sources::D3, "B = B − 1", "0.5", "0.5"),
            Worked::number("t", crate::sources::D1, "GPT-3 embedding", "617558016", 617558016.0),
        ];
        for width in [100, 60, 48] {
            let text = worked_terminal(&rows, width);
            let numbers: Vec<&str> = matrix.split_whitespace().chain(["0.5"]).collect();
            for word in text.split_whitespace().filter(|w| w.contains('.')) {
                assert!(numbers.contains(&word), "{word:?} is a piece of a number:\n{text}");
            }
            let line = |start: &str| text.lines().find(|l| l.contains(start)).unwrap();
            let (tilde, plain) = (line("B̃ = B"), line("B = B"));
            assert_eq!(columns(tilde), columns(plain), "\n{tilde}\n{plain}");
            let at = |line: &str| line.find("D3").map(|i| columns(&line[..i]));
            assert_eq!(at(tilde), at(plain), "\n{tilde}\n{plain}");
            assert_eq!(line("GPT-3").matches("617,558,016").count(), 2, "{text}");
        }
        assert_eq!(columns("B̃"), 1);
        assert_eq!(grouped("617558016"), "617,558,016");
        assert_eq!(grouped("-12388"), "-12,388");
        for same in ["1024", "0.5", "12,288", "27938x", ""] {
            assert_eq!(grouped(same), same);
        }
    }

    /// The widest matrix a walk-through prints is chapter 6's 3×8 concatenation of heads at 8
    /// decimals (101 columns unwrapped); it and a far wider planted one are split into column
    /// blocks within the width, losing no entry; a narrow one stays one block.
    #[test]
    fn a_wide_matrix_is_printed_in_column_blocks_within_the_width() {
        let concat = DMatrix::from_fn(3, 8, |r, c| 2.11372594 - 0.1 * (r * 8 + c) as f64);
        let planted = DMatrix::from_fn(2, 40, |r, c| -(r as f64) * 100.0 - c as f64 / 7.0);
        for (m, decimals) in [(&concat, 8), (&planted, 4)] {
            let lines = matrix_lines(m, decimals, TERMINAL_WIDTH);
            let widest = lines.iter().map(|l| l.chars().count()).max().unwrap_or(0);
            assert!(widest <= TERMINAL_WIDTH, "{widest} columns:\n{}", lines.join("\n"));
            let text = lines.join("\n");
            for x in m.iter() {
                assert!(text.contains(&fixed(*x, decimals)), "{x} lost:\n{text}");
            }
            assert!(text.contains("columns 1–"), "{text}");
        }
        // Unwrapped, the concatenation is one column too wide: the check above has teeth.
        let one_block = (0..3)
            .map(|r| (0..8).map(|c| fixed(concat[(r, c)], 8)).collect::<Vec<_>>().join(", "))
            .map(|row| format!("{:MATRIX_INDENT$}[{row}]", ""));
        assert!(one_block.map(|l| l.chars().count()).max() > Some(TERMINAL_WIDTH));
        let small = DMatrix::from_row_slice(2, 2, &[1.0, -0.5, 0.25, 2.0]);
        assert_eq!(
            matrix_lines(&small, 2, TERMINAL_WIDTH),
            ["     [ 1.00, -0.50]", "     [ 0.25,  2.00]"]
        );
        let mut buf = Vec::new();
        let mut walk = Walk::new(&mut buf);
        walk.decimals = 2;
        walk.matrix("A", &small).unwrap();
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "   A  (2×2)\n     [ 1.00, -0.50]\n     [ 0.25,  2.00]\n"
        );
    }

    /// Every chapter's worked-number table as the terminal shows it fits the width (the main job
    /// and `-- chapter N` print exactly this; nothing here runs them).
    #[test]
    fn every_chapters_worked_table_fits_the_terminal() {
        for ch in crate::book::chapters() {
            let rows = (ch.worked)().unwrap();
            let text = worked_terminal(&rows, TERMINAL_WIDTH);
            for line in text.lines() {
                let n = columns(line);
                assert!(n <= TERMINAL_WIDTH, "chapter {}: {n} characters: {line}", ch.number);
            }
            for r in &rows {
                assert!(text.contains(r.status.word()) && text.contains(r.document.id));
            }
            assert!(text.lines().count() > rows.len(), "chapter {}: no table", ch.number);
        }
    }

    #[test]
    fn blocks_are_found_and_replaced() {
        let md = "a\n<!-- x:begin -->\nold\n<!-- x:end -->\nb";
        assert_eq!(prose_block(md, "x"), Some("old"));
        let new = replace_block(md, "x", "new table").unwrap();
        assert_eq!(prose_block(&new, "x"), Some("new table"));
        assert!(new.starts_with("a\n") && new.ends_with("\nb"));
        assert_eq!(prose_block(md, "y"), None);
    }

    // ── the errata register in the terminal ──

    const LONG: Erratum = Erratum {
        document: crate::sources::D3,
        section: "§ 4, the feed-forward network",
        printed: "W₁ = [[0.1 0.2 0.3 0.4 0.5 0.6], [0.1 0.2 0.3 0.4 0.5 0.6], \
            [0.1 0.2 0.3 0.4 0.5 0.6], [0.1 0.2 0.3 0.4 0.5 0.6]] with an inner width of six",
        correct: "an inner width of 4 × d = 16 for d = 4",
        why: "the text states the usual rule, four times the model width, and then its example \
            uses six columns, which no rule it gives produces; the products that follow are \
            right for six columns, so only the stated width is wrong, and a reader who follows \
            the rule gets matrices of the wrong shape",
        kind: Kind::Erratum,
        tests: &[
            "tests/ch07_encoder_decoder.rs::a_planted_test_name_that_is_long_enough_to_matter",
        ],
    };

    /// The whole register as `-- errata` prints it fits the width, and says every field.
    #[test]
    fn the_whole_register_fits_the_terminal() {
        let register: Vec<Erratum> =
            crate::book::errata_register().into_iter().map(|(_, e)| *e).collect();
        assert!(!register.is_empty());
        let text = errata_terminal(&register, TERMINAL_WIDTH);
        for line in text.lines() {
            let n = columns(line);
            assert!(n <= TERMINAL_WIDTH, "{n} characters: {line}");
        }
        assert_eq!(text.matches("\n  pinned by  ").count(), register.len());
    }

    /// A planted erratum far longer than a line: every line within the width, every word kept,
    /// each field under its label.
    #[test]
    fn an_erratum_is_a_block_wrapped_within_the_width() {
        let text = errata_terminal(&[LONG, LONG], TERMINAL_WIDTH);
        let widest = text.lines().map(columns).max().unwrap_or(0);
        assert!(widest <= TERMINAL_WIDTH, "{widest} characters:\n{text}");
        assert!(LONG.why.chars().count() > 2 * TERMINAL_WIDTH);
        assert!(text.starts_with("D3, § 4, the feed-forward network\n  printed    W₁ = "));
        assert!(text.contains("\n  why        the text states"), "{text}");
        assert!(text.contains("\n  pinned by  tests/ch07_encoder_decoder.rs::"), "{text}");
        assert_eq!(text.matches("\n\nD3, ").count(), 1, "blocks are not separated:\n{text}");
        let words: Vec<&str> = text.split_whitespace().collect();
        for w in LONG.why.split_whitespace() {
            assert!(words.contains(&w), "{w} was lost");
        }
        // A tag-like `<start>` is escaped in the table, a comparison is not (it becomes math).
        let tagged = Erratum { why: "so <start> attends, and a < b, 1<2", ..LONG };
        let table = markdown_table(&[tagged]);
        assert!(table.contains("so &lt;start> attends, and $a < b$, 1<2 |"), "{table}");
        // The Markdown table, the old terminal output, has a line per erratum far over the width.
        let md = markdown_table(&[LONG]);
        assert!(md.lines().any(|l| l.chars().count() > TERMINAL_WIDTH));
    }
}
