//! Text forms of numbers and matrices: matrices for insta snapshots, counts with commas.
//!
//! Every matrix snapshot starts with a header naming its shape and precision, then one line per
//! row with a fixed number of decimals, so a reader can set a snapshot beside the document's
//! printed matrix and compare digit by digit. The files live in the top-level `snapshots/` folder
//! ([`SNAPSHOT_DIR`]); the tests bind insta to it through the `snap!` macro of `tests/common`.

use crate::float::Float;
use nalgebra::DMatrix;

/// The one flat folder all snapshots live in: `snapshots/<test file>__<name>.snap`.
pub const SNAPSHOT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/snapshots");

/// `x` with `decimals` fixed decimals; a value that rounds to zero prints without a minus sign.
pub fn fixed<T: Float>(x: T, decimals: usize) -> String {
    let s = format!("{:.*}", decimals, x.as_f64());
    let is_negative_zero = s.starts_with('-') && s[1..].chars().all(|c| c == '0' || c == '.');
    if is_negative_zero { s[1..].to_string() } else { s }
}

/// A matrix as text: `shape: R×C, decimals: D`, then each row with aligned columns.
pub fn matrix_text<T: Float>(m: &DMatrix<T>, decimals: usize) -> String {
    let cells: Vec<Vec<String>> = (0..m.nrows())
        .map(|r| (0..m.ncols()).map(|c| fixed(m[(r, c)], decimals)).collect())
        .collect();
    let width = cells.iter().flatten().map(|s| s.len()).max().unwrap_or(0);
    let mut out = format!("shape: {}×{}, decimals: {}\n", m.nrows(), m.ncols(), decimals);
    for row in &cells {
        let line: Vec<String> = row.iter().map(|s| format!("{s:>width$}")).collect();
        out.push_str(&format!("[{}]\n", line.join(", ")));
    }
    out
}

/// Several named matrices in one snapshot, each with its own header.
pub fn matrices_text<T: Float>(named: &[(&str, &DMatrix<T>)], decimals: usize) -> String {
    named
        .iter()
        .map(|(name, m)| format!("{name}\n{}", matrix_text(m, decimals)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A whole number with commas between groups of three digits, as the documents print counts
/// (49152 → "49,152", 617558016 → "617,558,016"). A leading minus sign is kept apart.
pub fn with_commas(n: impl std::fmt::Display) -> String {
    let s = n.to_string();
    let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
    let mut out = String::from(sign);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Parses a matrix as a document prints it: rows separated by `;`, entries by spaces or commas,
/// e.g. `"1.5 1.1 2.6 0; 1.3415 1.6 2.3 0.6415"`. Returns each entry's text, row by row, or `None`
/// when the rows have different lengths or an entry is not a number.
pub fn parse_printed(printed: &str) -> Option<Vec<Vec<String>>> {
    let rows: Vec<Vec<String>> = printed
        .split(';')
        .map(|r| {
            r.split(|c: char| c.is_whitespace() || c == ',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .collect();
    let ok = !rows.is_empty()
        && rows.iter().all(|r| !r.is_empty() && r.len() == rows[0].len())
        && rows.iter().flatten().all(|s| s.parse::<f64>().is_ok());
    ok.then_some(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_commas_groups_digits_in_threes() {
        assert_eq!(with_commas(0u8), "0");
        assert_eq!(with_commas(999u32), "999");
        assert_eq!(with_commas(49152u64), "49,152");
        assert_eq!(with_commas(617_558_016usize), "617,558,016");
        assert_eq!(with_commas(-1234i64), "-1,234");
    }

    #[test]
    fn matrices_print_with_a_shape_header_and_fixed_decimals() {
        let m = DMatrix::from_row_slice(2, 3, &[1.0, -0.5, 0.25, -0.0000001, 10.0, 2.0 / 3.0]);
        assert_eq!(
            matrix_text(&m, 3),
            "shape: 2×3, decimals: 3\n[ 1.000, -0.500,  0.250]\n[ 0.000, 10.000,  0.667]\n"
        );
    }

    #[test]
    fn negative_zero_prints_as_zero() {
        assert_eq!(fixed(-0.0001_f64, 2), "0.00");
        assert_eq!(fixed(-0.006_f64, 2), "-0.01");
    }
}
