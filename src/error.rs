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

/// `message` without the ` at line L column C` that serde_json appends to its errors (the line
/// goes into [`Error::Parse`]'s own field instead).
pub fn without_position(message: &str) -> &str {
    let Some(at) = message.rfind(" at line ") else { return message };
    let tail = &message[at + " at line ".len()..];
    let mut words = tail.split(' ');
    let well_formed = matches!(
        (words.next(), words.next(), words.next(), words.next()),
        (Some(l), Some("column"), Some(c), None)
            if l.bytes().all(|b| b.is_ascii_digit()) && c.bytes().all(|b| b.is_ascii_digit())
    );
    if well_formed { &message[..at] } else { message }
}

/// A serde_json error as a [`Error::Parse`] naming `file`, the line where serde_json gives one,
/// and what was wrong; input that ends too early says "truncated".
pub fn json_error(file: &str, e: &serde_json::Error) -> Error {
    let text = e.to_string();
    let what = without_position(&text);
    let hint = if e.is_eof() { " (the input ends here: truncated?)" } else { "" };
    Error::Parse {
        file: file.to_string(),
        line: (e.line() > 0).then_some(e.line()),
        reason: format!("JSON: {what}{hint}"),
    }
}

/// Reads `bytes` as one JSON object into `T` (with serde), naming the field at fault: a
/// [`Error::Parse`] naming `file`, the field's path (e.g. `n_head`), what was wrong and the line.
/// Anything but an object is refused first, so a struct is never filled from an array.
pub fn from_json_object<T: serde::de::DeserializeOwned>(bytes: &[u8], file: &str) -> Result<T> {
    let first = bytes.iter().find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first != Some(&b'{') {
        let line = 1 + bytes.iter().take_while(|&&b| b != b'{').filter(|&&b| b == b'\n').count();
        return Err(Error::Parse {
            file: file.to_string(),
            line: Some(line.min(1 + bytes.iter().filter(|&&b| b == b'\n').count())),
            reason: "JSON: expected one JSON object, starting with '{'".into(),
        });
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        match json_error(file, e.inner()) {
            Error::Parse { file, line, reason } if path != "." && !path.is_empty() => {
                Error::Parse { file, line, reason: format!("{path}: {reason}") }
            }
            other => other,
        }
    })?;
    de.end().map_err(|e| json_error(file, &e))?;
    Ok(value)
}
