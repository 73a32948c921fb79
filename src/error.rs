//! The crate's one error type.
//!
//! Every public function that can be handed bad input returns [`Result`]. The messages name the
//! argument and, for shape errors, both shapes, so a learner sees at once what went wrong.

use std::fmt;

/// Every way a public function of the workbook can refuse its input.
#[derive(Debug)]
pub enum Error {
    /// Two arguments whose shapes must agree do not.
    Shape {
        /// What was being computed, e.g. `"matmul"`.
        op: &'static str,
        /// Which argument (or pair of arguments) is wrong, e.g. `"w and x"`.
        arg: &'static str,
        /// What the shape should have been, in words or as `rows×cols`.
        expected: String,
        /// What the shape was.
        got: String,
    },
    /// An argument that must hold at least one element is empty.
    Empty {
        /// What was being computed.
        op: &'static str,
        /// Which argument is empty.
        arg: &'static str,
    },
    /// An argument holds NaN or an infinity where a finite number is required.
    NonFinite {
        /// What was being computed.
        op: &'static str,
        /// Which argument.
        arg: &'static str,
        /// Where the first offending entry sits (a flat index or `row, col`).
        at: String,
    },
    /// A value is outside the range the operation accepts (a label that is not 0 or 1, α ≤ 0 …).
    InvalidValue {
        /// What was being computed.
        op: &'static str,
        /// Which argument.
        arg: &'static str,
        /// What it should be and what it was.
        reason: String,
    },
    /// A file could not be read or written.
    Io {
        /// The file.
        path: String,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A file was read but its contents are malformed.
    Parse {
        /// The file (or a name for the input when it did not come from a file).
        file: String,
        /// 1-based line, when the format has lines.
        line: Option<usize>,
        /// What is wrong.
        reason: String,
    },
    /// Drawing a plot failed.
    Plot {
        /// The file being drawn.
        path: String,
        /// What the plotting backend said.
        reason: String,
    },
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Shape { op, arg, expected, got } => {
                write!(f, "{op}: shape mismatch in {arg}: expected {expected}, got {got}")
            }
            Error::Empty { op, arg } => write!(f, "{op}: {arg} is empty"),
            Error::NonFinite { op, arg, at } => {
                write!(f, "{op}: {arg} holds a non-finite value (NaN or ±∞) at {at}")
            }
            Error::InvalidValue { op, arg, reason } => write!(f, "{op}: invalid {arg}: {reason}"),
            Error::Io { path, source } => write!(f, "{path}: {source}"),
            Error::Parse { file, line, reason } => match line {
                Some(l) => write!(f, "{file}:{l}: {reason}"),
                None => write!(f, "{file}: {reason}"),
            },
            Error::Plot { path, reason } => write!(f, "drawing {path}: {reason}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// `rows×cols`, the way every shape is printed in this crate.
pub fn shape_of<T>(m: &nalgebra::DMatrix<T>) -> String {
    format!("{}×{}", m.nrows(), m.ncols())
}

/// Shorthand for a [`Error::Shape`] built from two shapes written as strings.
pub fn shape_error(
    op: &'static str,
    arg: &'static str,
    expected: impl Into<String>,
    got: impl Into<String>,
) -> Error {
    Error::Shape { op, arg, expected: expected.into(), got: got.into() }
}

/// Shorthand for an [`Error::InvalidValue`].
pub fn invalid(op: &'static str, arg: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidValue { op, arg, reason: reason.into() }
}
