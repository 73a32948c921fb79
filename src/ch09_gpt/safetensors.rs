//! The safetensors file format, read and written by hand.
//!
//! A file is: 8 bytes, the header's length N as a little-endian `u64`; N bytes of JSON (padded
//! with spaces), mapping each tensor's name to its `dtype`, `shape` and `data_offsets`
//! `[begin, end)` into the byte buffer that follows, plus an optional `__metadata__` object of
//! strings; then the byte buffer, every tensor row-major (C order) and little-endian.
//!
//! Why by hand rather than the `safetensors` crate: the format is one length, one JSON object
//! and raw bytes, which makes a good lesson in itself, and our loader must turn every defect into
//! this crate's [`Error`] naming the file and the tensor. The JSON itself is read and written by
//! `serde_json`, through visitors of ours that refuse a key given twice (serde_json alone keeps
//! the last one). Our reader is at least as strict as the reference implementation: the header
//! must fit in the file, every tensor's byte range must match its dtype and shape, and the ranges
//! must tile the buffer exactly (no holes, no overlaps, nothing after the last tensor), which is
//! what keeps a file from hiding data or pointing two tensors at the same bytes. A file written by
//! the reference implementation (Python `safetensors`) is read bit for bit by a test, and the
//! Rust `safetensors` crate is the tests' oracle (`mod official_safetensors` in
//! `tests/ch09_gpt.rs`): each reads the other's files bit for bit, and every damaged file ours
//! refuses it refuses too, except the cases listed there where ours is stricter.

#![deny(clippy::unwrap_used, clippy::expect_used)]

use crate::error::{Error, Result};
use crate::float::Float;
use std::path::Path;

use crate::error::{json_error, without_position};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

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
        let header_name = format!("{file} (header)");
        let Header { metadata, entries } =
            serde_json::from_slice(header).map_err(|e| json_error(&header_name, &e))?;
        let buffer_len = bytes.len() - 8 - n;
        let mut tensors = Vec::with_capacity(entries.len());
        for (name, entry) in entries {
            tensors.push(tensor_info(file, name, entry, buffer_len)?);
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

/// The header as serde reads it: the `__metadata__` strings and the tensors' entries, both in
/// file order. Read by [`HeaderVisitor`], which refuses a key given twice (serde_json alone would
/// keep the last one, letting a file say two things about one tensor).
struct Header {
    metadata: Vec<(String, String)>,
    entries: Vec<(String, RawEntry)>,
}

/// One tensor's entry as written, before its numbers are checked against the buffer.
struct RawEntry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: Vec<u64>,
}

/// Reads one tensor's entry: exactly the keys `dtype` (a string), `shape` and `data_offsets`
/// (arrays of non-negative integers), each once. Errors name the tensor.
struct EntrySeed<'a> {
    name: &'a str,
}

impl<'de> DeserializeSeed<'de> for EntrySeed<'_> {
    type Value = RawEntry;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<RawEntry, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EntrySeed<'_> {
    type Value = RawEntry;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "tensor {}'s entry to be an object of dtype, shape and data_offsets", self.name)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<RawEntry, A::Error> {
        let name = self.name;
        let bad = |what: &str| de::Error::custom(format!("tensor {name}: {what}"));
        let (mut dtype, mut shape, mut data_offsets) = (None, None, None);
        visit_unique_keys(map, |map, key| {
            match key.as_str() {
                "dtype" => {
                    dtype = Some(map.next_value::<String>().map_err(|_| bad("no dtype string"))?)
                }
                "shape" => {
                    let v = map.next_value::<Vec<u64>>();
                    shape = Some(v.map_err(|_| {
                        bad("a shape entry is not a non-negative integer (or shape is no array)")
                    })?)
                }
                "data_offsets" => {
                    let v = map.next_value::<Vec<u64>>();
                    data_offsets = Some(v.map_err(|_| {
                        bad("data_offsets must be two non-negative integers [begin, end]")
                    })?)
                }
                other => return Err(bad(&format!("unknown field {other:?}"))),
            }
            Ok(())
        })?;
        Ok(RawEntry {
            dtype: dtype.ok_or_else(|| bad("no dtype string"))?,
            shape: shape.ok_or_else(|| bad("no shape array"))?,
            data_offsets: data_offsets.ok_or_else(|| bad("no data_offsets array"))?,
        })
    }
}

/// Reads a JSON object whose keys must all differ, handing each value to `value` in file order.
/// A repeated key is an error naming it (serde_json attaches the line).
fn visit_unique_keys<'de, A: MapAccess<'de>>(
    mut map: A,
    mut value: impl FnMut(&mut A, String) -> std::result::Result<(), A::Error>,
) -> std::result::Result<(), A::Error> {
    let mut seen = HashSet::new();
    while let Some(key) = map.next_key::<String>()? {
        if !seen.insert(key.clone()) {
            return Err(de::Error::custom(format!("the key {key:?} appears twice")));
        }
        value(&mut map, key)?;
    }
    Ok(())
}

struct HeaderVisitor;

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = Header;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object of tensor entries")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<Header, A::Error> {
        let mut header = Header { metadata: Vec::new(), entries: Vec::new() };
        visit_unique_keys(map, |map, key| {
            if key == "__metadata__" {
                header.metadata = map.next_value_seed(MetadataSeed)?;
            } else {
                let entry = map.next_value_seed(EntrySeed { name: &key })?;
                header.entries.push((key, entry));
            }
            Ok(())
        })?;
        Ok(header)
    }
}

impl<'de> Deserialize<'de> for Header {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Header, D::Error> {
        d.deserialize_map(HeaderVisitor)
    }
}

/// `__metadata__`: an object of strings, no key twice.
struct MetadataSeed;

impl<'de> DeserializeSeed<'de> for MetadataSeed {
    type Value = Vec<(String, String)>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MetadataSeed {
    type Value = Vec<(String, String)>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("__metadata__ as an object of strings")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        visit_unique_keys(map, |map, key| {
            let v = map.next_value::<String>().map_err(|e| {
                de::Error::custom(format!(
                    "__metadata__ entry {key:?} is not a string: {}",
                    without_position(&e.to_string())
                ))
            })?;
            out.push((key, v));
            Ok(())
        })?;
        Ok(out)
    }
}

fn tensor_info(file: &str, name: String, v: RawEntry, buffer_len: usize) -> Result<TensorInfo> {
    let bad = |what: String| parse_error(file, format!("tensor {name}: {what}"));
    let RawEntry { dtype, shape: dims, data_offsets: offs } = v;
    let size = dtype_size(&dtype).ok_or_else(|| bad(format!("unknown dtype {dtype:?}")))?;
    let mut shape = Vec::with_capacity(dims.len());
    for d in dims {
        let d = usize::try_from(d)
            .map_err(|_| bad("a shape entry is larger than this machine can address".into()))?;
        shape.push(d);
    }
    if offs.len() != 2 {
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
    let mut names = HashSet::new();
    for t in tensors {
        let numel: usize = t.shape.iter().product();
        let size = dtype_size(t.dtype).unwrap_or(0);
        if t.name == "__metadata__" {
            return Err(crate::error::invalid(
                "safetensors::serialize",
                "tensors",
                "a tensor cannot be named __metadata__ (the header's key for the metadata)",
            ));
        }
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
        if !names.insert(t.name.as_str()) {
            return Err(crate::error::invalid(
                "safetensors::serialize",
                "tensors",
                format!("the name {} appears twice", t.name),
            ));
        }
    }
    let mut keys = HashSet::new();
    if let Some((k, _)) = metadata.iter().find(|(k, _)| !keys.insert(k.as_str())) {
        return Err(crate::error::invalid(
            "safetensors::serialize",
            "metadata",
            format!("the key {k} appears twice"),
        ));
    }
    let mut header = serde_json::to_vec(&HeaderOut { tensors, metadata })
        .map_err(|e| crate::error::invalid("safetensors::serialize", "tensors", e.to_string()))?;
    while !header.len().is_multiple_of(8) {
        header.push(b' ');
    }
    let data_len: usize = tensors.iter().map(|t| t.data.len()).sum();
    let mut out = Vec::with_capacity(8 + header.len() + data_len);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    for t in tensors {
        out.extend_from_slice(&t.data);
    }
    Ok(out)
}

/// The header as written: `__metadata__` first (when there is any), then each tensor in order
/// with the byte range it gets in the buffer.
struct HeaderOut<'a> {
    tensors: &'a [TensorOut],
    metadata: &'a [(String, String)],
}

#[derive(Serialize)]
struct EntryOut<'a> {
    dtype: &'a str,
    shape: &'a [usize],
    data_offsets: [u64; 2],
}

struct MetadataOut<'a>(&'a [(String, String)]);

impl Serialize for MetadataOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl Serialize for HeaderOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let extra = usize::from(!self.metadata.is_empty());
        let mut map = s.serialize_map(Some(self.tensors.len() + extra))?;
        if !self.metadata.is_empty() {
            map.serialize_entry("__metadata__", &MetadataOut(self.metadata))?;
        }
        let mut at = 0u64;
        for t in self.tensors {
            let end = at + t.data.len() as u64;
            let entry = EntryOut { dtype: t.dtype, shape: &t.shape, data_offsets: [at, end] };
            map.serialize_entry(&t.name, &entry)?;
            at = end;
        }
        map.end()
    }
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
