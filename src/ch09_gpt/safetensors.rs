//! The safetensors file format, read and written by hand.
//!
//! A file is: 8 bytes, the header's length N as a little-endian `u64`; N bytes of JSON (padded
//! with spaces), mapping each tensor's name to its `dtype`, `shape` and `data_offsets`
//! `[begin, end)` into the byte buffer that follows, plus an optional `__metadata__` object of
//! strings; then the byte buffer, every tensor row-major (C order) and little-endian.
//!
//! Why by hand rather than the `safetensors` crate: the format is one length, one JSON object
//! and raw bytes, which makes a good lesson in itself; our loader must turn every defect into
//! this crate's [`Error`] naming the file and the tensor; and the crate would bring serde and
//! serde_json into a dependency tree that has no other use for them. Our reader is at least as
//! strict as the reference implementation: the header must fit in the file, every tensor's byte
//! range must match its dtype and shape, and the ranges must tile the buffer exactly (no holes,
//! no overlaps, nothing after the last tensor), which is what keeps a file from hiding data or
//! pointing two tensors at the same bytes. A file written by the reference implementation (Python
//! `safetensors`) is read bit for bit by a test.

#![deny(clippy::unwrap_used, clippy::expect_used)]

use crate::error::{Error, Result};
use crate::float::Float;
use std::path::Path;

use crate::json::{self, Json};

/// The largest header accepted (the reference implementation's limit, 100 MB).
pub const MAX_HEADER: u64 = 100_000_000;

/// The element types safetensors names, with their sizes in bytes. We read and write `F32` and
/// `F64`; the others are recognised (so their byte ranges can be checked) but not converted.
pub const DTYPES: &[(&str, usize)] = &[
    ("BOOL", 1),
    ("U8", 1),
    ("I8", 1),
    ("F8_E4M3", 1),
    ("F8_E5M2", 1),
    ("I16", 2),
    ("U16", 2),
    ("F16", 2),
    ("BF16", 2),
    ("I32", 4),
    ("U32", 4),
    ("F32", 4),
    ("I64", 8),
    ("U64", 8),
    ("F64", 8),
];

/// Size in bytes of one element of `dtype`, if safetensors knows the name.
pub fn dtype_size(dtype: &str) -> Option<usize> {
    DTYPES.iter().find(|(n, _)| *n == dtype).map(|(_, s)| *s)
}

/// One tensor's entry in the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Its name.
    pub name: String,
    /// Its element type, e.g. `F32`.
    pub dtype: String,
    /// Its shape, outermost first; `[]` is a scalar.
    pub shape: Vec<usize>,
    /// First byte in the buffer.
    pub begin: usize,
    /// One past its last byte in the buffer.
    pub end: usize,
}

/// A whole safetensors file, validated, held in memory.
#[derive(Clone, Debug)]
pub struct SafeTensors {
    /// The file's name (for errors).
    pub file: String,
    /// The `__metadata__` strings, in file order.
    pub metadata: Vec<(String, String)>,
    /// The tensors, in header order.
    pub tensors: Vec<TensorInfo>,
    buffer: Vec<u8>,
}

fn parse_error(file: &str, reason: impl Into<String>) -> Error {
    Error::Parse { file: file.to_string(), line: None, reason: reason.into() }
}

fn shape_text(shape: &[usize]) -> String {
    format!("[{}]", shape.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", "))
}

impl SafeTensors {
    /// Reads and validates a file.
    pub fn read(path: &Path) -> Result<SafeTensors> {
        let name = path.display().to_string();
        let bytes =
            std::fs::read(path).map_err(|source| Error::Io { path: name.clone(), source })?;
        SafeTensors::parse(bytes, &name)
    }

    /// Validates the bytes of a file; `file` names it in errors.
    pub fn parse(mut bytes: Vec<u8>, file: &str) -> Result<SafeTensors> {
        if bytes.len() < 8 {
            return Err(parse_error(
                file,
                format!(
                    "truncated: {} bytes, fewer than the 8 that give the header's length",
                    bytes.len()
                ),
            ));
        }
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(&bytes[..8]);
        let n = u64::from_le_bytes(len8);
        if n > MAX_HEADER {
            return Err(parse_error(
                file,
                format!("the header claims {n} bytes, more than the {MAX_HEADER} allowed"),
            ));
        }
        let available = (bytes.len() - 8) as u64;
        if n > available {
            return Err(parse_error(
                file,
                format!(
                    "truncated: the header claims {n} bytes but only {available} follow the length"
                ),
            ));
        }
        let n = n as usize;
        let header = &bytes[8..8 + n];
        if header.first() != Some(&b'{') {
            return Err(parse_error(file, "the header does not start with '{'"));
        }
        let head = json::parse(header, &format!("{file} (header)"))?;
        let Json::Object(fields) = head else {
            return Err(parse_error(file, "the header is not a JSON object"));
        };
        let buffer_len = bytes.len() - 8 - n;
        let mut metadata = Vec::new();
        let mut tensors = Vec::new();
        for (name, v) in fields {
            if name == "__metadata__" {
                let Json::Object(pairs) = v else {
                    return Err(parse_error(file, "__metadata__ is not an object of strings"));
                };
                for (k, s) in pairs {
                    let Json::String(s) = s else {
                        return Err(parse_error(
                            file,
                            format!("__metadata__ entry {k:?} is not a string"),
                        ));
                    };
                    metadata.push((k, s));
                }
                continue;
            }
            tensors.push(tensor_info(file, name, &v, buffer_len)?);
        }
        // The byte ranges must tile the buffer: sorted by start, each begins where the last ended.
        let mut order: Vec<&TensorInfo> = tensors.iter().collect();
        order.sort_by_key(|t| (t.begin, t.end));
        let mut at = 0usize;
        for t in &order {
            if t.begin != at {
                let what = if t.begin < at {
                    "overlaps the tensor before it"
                } else {
                    "leaves a hole before it"
                };
                return Err(parse_error(
                    file,
                    format!(
                        "tensor {}: data_offsets [{}, {}) {what} (expected it to start at {at})",
                        t.name, t.begin, t.end
                    ),
                ));
            }
            at = t.end;
        }
        if at != buffer_len {
            return Err(parse_error(
                file,
                format!(
                    "the tensors cover {at} bytes of the data but the file holds {buffer_len} \
                        (truncated, or bytes not described by the header)"
                ),
            ));
        }
        bytes.drain(..8 + n);
        Ok(SafeTensors { file: file.to_string(), metadata, tensors, buffer: bytes })
    }

    /// The header entry of `name`.
    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The metadata value of `key`.
    pub fn meta(&self, key: &str) -> Option<&str> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The raw bytes of a tensor.
    pub fn bytes(&self, name: &str) -> Option<&[u8]> {
        self.info(name).map(|t| &self.buffer[t.begin..t.end])
    }

    /// A tensor's elements as `f64`, row-major, converted from `F32` or `F64`; `expected` is the
    /// shape it must have. Errors name the tensor, the dtype and both shapes.
    pub fn values_f64(&self, name: &str, expected: &[usize]) -> Result<Vec<f64>> {
        let t = self
            .info(name)
            .ok_or_else(|| parse_error(&self.file, format!("tensor {name} is missing")))?;
        if t.shape != expected {
            return Err(parse_error(
                &self.file,
                format!(
                    "tensor {name} has shape {} but {} was expected",
                    shape_text(&t.shape),
                    shape_text(expected)
                ),
            ));
        }
        let raw = &self.buffer[t.begin..t.end];
        match t.dtype.as_str() {
            "F32" => Ok(raw
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
                .collect()),
            "F64" => Ok(raw
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect()),
            other => Err(parse_error(
                &self.file,
                format!("tensor {name} has dtype {other}; only F32 and F64 can be loaded"),
            )),
        }
    }

    /// A tensor as a rows×cols matrix of `T`. A 1×n row also accepts the 1-D shape `[n]`, which
    /// is how biases and LayerNorm parameters are stored.
    pub fn matrix<T: Float>(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<nalgebra::DMatrix<T>> {
        let shape = match self.info(name) {
            Some(t) if rows == 1 && t.shape.len() == 1 => vec![cols],
            _ => vec![rows, cols],
        };
        let v = self.values_f64(name, &shape)?;
        Ok(nalgebra::DMatrix::from_row_iterator(rows, cols, v.into_iter().map(T::of)))
    }
}

fn tensor_info(file: &str, name: String, v: &Json, buffer_len: usize) -> Result<TensorInfo> {
    let bad = |what: String| parse_error(file, format!("tensor {name}: {what}"));
    let Json::Object(fields) = v else {
        return Err(bad("its entry is not an object".into()));
    };
    if let Some((k, _)) =
        fields.iter().find(|(k, _)| !matches!(k.as_str(), "dtype" | "shape" | "data_offsets"))
    {
        return Err(bad(format!("unknown field {k:?}")));
    }
    let dtype = v
        .get("dtype")
        .and_then(Json::as_str)
        .ok_or_else(|| bad("no dtype string".into()))?
        .to_string();
    let size = dtype_size(&dtype).ok_or_else(|| bad(format!("unknown dtype {dtype:?}")))?;
    let Some(Json::Array(dims)) = v.get("shape") else {
        return Err(bad("no shape array".into()));
    };
    let mut shape = Vec::with_capacity(dims.len());
    for d in dims {
        let d = d
            .as_u64()
            .and_then(|d| usize::try_from(d).ok())
            .ok_or_else(|| bad("a shape entry is not a non-negative integer".into()))?;
        shape.push(d);
    }
    let Some(Json::Array(offsets)) = v.get("data_offsets") else {
        return Err(bad("no data_offsets array".into()));
    };
    let offs: Vec<u64> = offsets.iter().filter_map(Json::as_u64).collect();
    if offsets.len() != 2 || offs.len() != 2 {
        return Err(bad("data_offsets must be two non-negative integers [begin, end]".into()));
    }
    let (begin, end) = (offs[0], offs[1]);
    if begin > end {
        return Err(bad(format!("data_offsets [{begin}, {end}) run backwards")));
    }
    if end > buffer_len as u64 {
        return Err(bad(format!(
            "data_offsets end at byte {end} but the data holds only {buffer_len} bytes (truncated \
                file or lying header)"
        )));
    }
    let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let expected = numel.and_then(|n| n.checked_mul(size));
    if expected != Some((end - begin) as usize) {
        return Err(bad(format!(
            "shape {} of {dtype} needs {} bytes but data_offsets [{begin}, {end}) span {}",
            shape_text(&shape),
            expected.map_or("more than addressable".to_string(), |e| e.to_string()),
            end - begin
        )));
    }
    Ok(TensorInfo { name, dtype, shape, begin: begin as usize, end: end as usize })
}

/// A tensor to write: name, shape and row-major values.
#[derive(Clone, Debug)]
pub struct TensorOut {
    /// Its name.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// `F32` or `F64`.
    pub dtype: &'static str,
    /// Its little-endian bytes, row-major.
    pub data: Vec<u8>,
}

impl TensorOut {
    /// A matrix in the byte layout of `T` (`F32` for `f32`, `F64` for `f64`), with the shape
    /// given (e.g. `[n]` for a bias stored as a 1×n row).
    pub fn matrix<T: Float>(
        name: impl Into<String>,
        m: &nalgebra::DMatrix<T>,
        shape: Vec<usize>,
    ) -> TensorOut {
        let single = std::mem::size_of::<T>() == 4;
        let mut data = Vec::with_capacity(m.len() * if single { 4 } else { 8 });
        for r in 0..m.nrows() {
            for c in 0..m.ncols() {
                let x = m[(r, c)].as_f64();
                if single {
                    data.extend_from_slice(&(x as f32).to_le_bytes());
                } else {
                    data.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
        TensorOut { name: name.into(), shape, dtype: if single { "F32" } else { "F64" }, data }
    }

    /// `f64` values as an `F64` tensor.
    pub fn f64s(name: impl Into<String>, values: &[f64]) -> TensorOut {
        TensorOut {
            name: name.into(),
            shape: vec![values.len()],
            dtype: "F64",
            data: values.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }
}

/// The bytes of a safetensors file holding `tensors` (in this order) and `metadata`. The header
/// is padded with spaces to a multiple of 8 bytes so the data starts aligned.
pub fn serialize(tensors: &[TensorOut], metadata: &[(String, String)]) -> Result<Vec<u8>> {
    let mut fields = Vec::new();
    if !metadata.is_empty() {
        fields.push((
            "__metadata__".to_string(),
            Json::Object(
                metadata.iter().map(|(k, v)| (k.clone(), Json::String(v.clone()))).collect(),
            ),
        ));
    }
    let mut at = 0u64;
    for t in tensors {
        let numel: usize = t.shape.iter().product();
        let size = dtype_size(t.dtype).unwrap_or(0);
        if numel * size != t.data.len() {
            return Err(crate::error::invalid(
                "safetensors::serialize",
                "tensors",
                format!(
                    "{} holds {} bytes for shape {}",
                    t.name,
                    t.data.len(),
                    shape_text(&t.shape)
                ),
            ));
        }
        if fields.iter().any(|(k, _)| *k == t.name) {
            return Err(crate::error::invalid(
                "safetensors::serialize",
                "tensors",
                format!("the name {} appears twice", t.name),
            ));
        }
        let end = at + t.data.len() as u64;
        fields.push((
            t.name.clone(),
            Json::Object(vec![
                ("dtype".into(), Json::String(t.dtype.into())),
                (
                    "shape".into(),
                    Json::Array(t.shape.iter().map(|&d| Json::int(d as u64)).collect()),
                ),
                ("data_offsets".into(), Json::Array(vec![Json::int(at), Json::int(end)])),
            ]),
        ));
        at = end;
    }
    let mut header = Json::Object(fields).to_text().into_bytes();
    while !header.len().is_multiple_of(8) {
        header.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + header.len() + at as usize);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    for t in tensors {
        out.extend_from_slice(&t.data);
    }
    Ok(out)
}

/// Writes `bytes` to `path` atomically: into a temporary file in the same folder, flushed to
/// disk, then renamed over `path`. A crash leaves either the old file or the new one, never half.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let io = |source| Error::Io { path: path.display().to_string(), source };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let file_name =
        path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_else(|| "out".into());
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io)
}
