//! The crate's one JSON reader and writer: a safetensors header, a GPT-2 `config.json` and
//! `vocab.json`, a run's `train.json`.
//!
//! Strict means: the whole input is one value, objects may not repeat a key, numbers follow the
//! JSON grammar, strings are valid UTF-8 with valid escapes, nesting is at most [`MAX_DEPTH`]
//! deep (so hostile input cannot exhaust the stack). Every error is an [`Error::Parse`] naming
//! the input, the line and the byte offset, and says when the input simply ends (a truncated
//! file). Numbers keep their text, so a 64-bit offset is read exactly instead of through an
//! `f64`. The reader never indexes past its input: every look-ahead goes through `get`.
//!
//! ```
//! use llm_workbook::json::{self, Json};
//!
//! let v = json::parse(br#"{"n_embd": 768, "tie": true}"#, "config.json")?;
//! assert_eq!(v.get("n_embd").and_then(Json::as_u64), Some(768));
//! let e = json::parse(b"{\"n_embd\": 7", "config.json").unwrap_err().to_string();
//! assert!(e.starts_with("config.json:1: JSON at byte 12") && e.contains("truncated"), "{e}");
//! # Ok::<(), llm_workbook::Error>(())
//! ```
#![deny(clippy::unwrap_used, clippy::expect_used)]

use crate::error::{Error, Result};
use std::collections::HashSet;

/// Deepest nesting accepted (a header is two levels deep; this is generous and keeps a hostile
/// file from exhausting the stack).
pub const MAX_DEPTH: usize = 64;

/// A JSON value. Objects keep their keys in file order.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    /// `null`
    Null,
    /// `true` or `false`
    Bool(bool),
    /// A number, as written.
    Number(String),
    /// A string, unescaped.
    String(String),
    /// `[…]`
    Array(Vec<Json>),
    /// `{…}` as (key, value) pairs in order.
    Object(Vec<(String, Json)>),
}

impl Json {
    /// The value of `key` if this is an object holding it.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// A non-negative integer written without sign, fraction or exponent, if it fits in `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Json::Number(s) if s.bytes().all(|b| b.is_ascii_digit()) => s.parse().ok(),
            _ => None,
        }
    }

    /// Any number as `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Json::Number(s) => s.parse().ok(),
            _ => None,
        }
    }

    /// The text of a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// A number from an `f64`, written so that it parses back to the same bits
    /// (Rust's shortest round-trip form). Non-finite values have no JSON form and become `null`.
    pub fn number(x: f64) -> Json {
        if x.is_finite() { Json::Number(format!("{x:?}")) } else { Json::Null }
    }

    /// A number from an integer.
    pub fn int(x: u64) -> Json {
        Json::Number(x.to_string())
    }

    /// The value as compact JSON text.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Number(s) => out.push_str(s),
            Json::String(s) => write_string(s, out),
            Json::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write(out);
                }
                out.push(']');
            }
            Json::Object(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(k, out);
                    out.push(':');
                    v.write(out);
                }
                out.push('}');
            }
        }
    }

    /// The value as indented JSON text (for `config.json`, which people read).
    pub fn to_pretty(&self) -> String {
        let mut out = String::new();
        self.pretty(&mut out, 0);
        out.push('\n');
        out
    }

    fn pretty(&self, out: &mut String, indent: usize) {
        let pad = |n: usize| "  ".repeat(n);
        match self {
            Json::Array(items) if !items.is_empty() => {
                out.push_str("[\n");
                for (i, v) in items.iter().enumerate() {
                    out.push_str(&pad(indent + 1));
                    v.pretty(out, indent + 1);
                    out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
                }
                out.push_str(&pad(indent));
                out.push(']');
            }
            Json::Object(fields) if !fields.is_empty() => {
                out.push_str("{\n");
                for (i, (k, v)) in fields.iter().enumerate() {
                    out.push_str(&pad(indent + 1));
                    write_string(k, out);
                    out.push_str(": ");
                    v.pretty(out, indent + 1);
                    out.push_str(if i + 1 < fields.len() { ",\n" } else { "\n" });
                }
                out.push_str(&pad(indent));
                out.push('}');
            }
            other => other.write(out),
        }
    }
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Parses `bytes` as exactly one JSON value (surrounding whitespace allowed). `file` names the
/// input in errors.
pub fn parse(bytes: &[u8], file: &str) -> Result<Json> {
    let mut p = Parser { b: bytes, i: 0, file, key_at: 0 };
    p.ws();
    let v = p.value(0)?;
    p.end()?;
    Ok(v)
}

/// One entry of a top-level object read by [`parse_object_entries`].
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The key, unescaped.
    pub key: String,
    /// The value.
    pub value: Json,
    /// The 1-based line the key starts on, for errors about the entry.
    pub line: usize,
}

/// Parses `bytes` as one JSON object and returns its entries in file order, each with the line
/// its key starts on (so a caller checking the values can name the line, as `vocab.json`'s
/// loader does). The same grammar and limits as [`parse`]; anything but an object is an error.
pub fn parse_object_entries(bytes: &[u8], file: &str) -> Result<Vec<Entry>> {
    let mut p = Parser { b: bytes, i: 0, file, key_at: 0 };
    p.ws();
    if p.peek() != Some(b'{') {
        return Err(p.err("expected one JSON object, starting with '{'"));
    }
    let mut entries = Vec::new();
    // Lines are counted forward from the previous key, so a large file costs one pass.
    let (mut counted_to, mut line) = (0usize, 1usize);
    p.object_with(0, |p, key, value| {
        line +=
            p.b.get(counted_to..p.key_at).map_or(0, |s| s.iter().filter(|&&c| c == b'\n').count());
        counted_to = p.key_at;
        entries.push(Entry { key, value, line });
    })?;
    p.end()?;
    Ok(entries)
}

/// Objects with more keys than this check for repeats with a hash set instead of a scan.
const LINEAR_KEY_CHECK: usize = 16;

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    file: &'a str,
    /// Where the key of the object entry being read starts.
    key_at: usize,
}

impl Parser<'_> {
    /// The 1-based line of byte `at` (counted only when an error or an entry needs it).
    fn line_at(&self, at: usize) -> usize {
        1 + self.b.iter().take(at).filter(|&&c| c == b'\n').count()
    }

    fn err(&self, what: &str) -> Error {
        let end = if self.i >= self.b.len() { " (the input ends here: truncated?)" } else { "" };
        Error::Parse {
            file: self.file.to_string(),
            line: Some(self.line_at(self.i)),
            reason: format!("JSON at byte {}: {what}{end}", self.i),
        }
    }

    fn end(&mut self) -> Result<()> {
        self.ws();
        if self.i != self.b.len() {
            Err(self.err("unexpected text after the JSON value"))
        } else {
            Ok(())
        }
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn expect(&mut self, c: u8) -> Result<()> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.err(&format!("expected '{}'", c as char)))
        }
    }

    fn literal(&mut self, word: &str, v: Json) -> Result<Json> {
        if self.b.get(self.i..).is_some_and(|rest| rest.starts_with(word.as_bytes())) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err("expected a value"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json> {
        if depth > MAX_DEPTH {
            return Err(self.err(&format!("nested deeper than {MAX_DEPTH} levels")));
        }
        match self.peek() {
            None => Err(self.err("expected a value")),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => Ok(Json::String(self.string()?)),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'n') => self.literal("null", Json::Null),
            Some(c) if c == b'-' || c.is_ascii_digit() => self.number(),
            Some(_) => Err(self.err("expected a value")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Json> {
        let mut fields: Vec<(String, Json)> = Vec::new();
        self.object_with(depth, |_, k, v| fields.push((k, v)))?;
        Ok(Json::Object(fields))
    }

    /// Reads an object at nesting `depth`, handing each (key, value) to `entry` in file order.
    /// A key seen before is an error pointing at its second occurrence.
    fn object_with(
        &mut self,
        depth: usize,
        mut entry: impl FnMut(&Self, String, Json),
    ) -> Result<()> {
        self.expect(b'{')?;
        let mut keys: Vec<String> = Vec::new();
        let mut key_set: HashSet<String> = HashSet::new();
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(self.err("expected a key (a string)"));
            }
            let at = self.i;
            let key = self.string()?;
            let repeated = if key_set.is_empty() && keys.len() < LINEAR_KEY_CHECK {
                let seen = keys.contains(&key);
                keys.push(key.clone());
                seen
            } else {
                key_set.extend(keys.drain(..));
                !key_set.insert(key.clone())
            };
            if repeated {
                self.i = at;
                return Err(self.err(&format!("the key {key:?} appears twice")));
            }
            self.ws();
            self.expect(b':')?;
            self.ws();
            let v = self.value(depth + 1)?;
            self.key_at = at;
            entry(self, key, v);
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(Json::Array(items));
        }
        loop {
            self.ws();
            items.push(self.value(depth + 1)?);
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(self.err("expected ',' or ']'")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32> {
        let digits = self
            .b
            .get(self.i..self.i + 4)
            .ok_or_else(|| self.err("a \\u escape needs four hex digits"))?;
        let text = std::str::from_utf8(digits)
            .map_err(|_| self.err("a \\u escape needs four hex digits"))?;
        let v = u32::from_str_radix(text, 16)
            .map_err(|_| self.err("a \\u escape needs four hex digits"))?;
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String> {
        self.expect(b'"')?;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let c = self.peek().ok_or_else(|| self.err("unterminated string"))?;
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let e = self.peek().ok_or_else(|| self.err("unterminated escape"))?;
                    self.i += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&hi) {
                                if self.b.get(self.i..self.i + 2) != Some(b"\\u") {
                                    return Err(
                                        self.err("a high surrogate must be followed by a low one")
                                    );
                                }
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(
                                        self.err("a high surrogate must be followed by a low one")
                                    );
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            char::from_u32(code)
                                .ok_or_else(|| self.err("a lone surrogate is not a character"))?
                        }
                        _ => return Err(self.err("unknown escape")),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                c if c < 0x20 => {
                    return Err(self.err("a control character must be escaped inside a string"));
                }
                c => out.push(c),
            }
        }
        String::from_utf8(out).map_err(|_| self.err("a string is not valid UTF-8"))
    }

    fn number(&mut self) -> Result<Json> {
        let start = self.i;
        let digits = |p: &mut Self| {
            let s = p.i;
            while p.peek().is_some_and(|c| c.is_ascii_digit()) {
                p.i += 1;
            }
            p.i - s
        };
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(c) if c.is_ascii_digit() => {
                digits(self);
            }
            _ => return Err(self.err("a number needs digits")),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if digits(self) == 0 {
                return Err(self.err("a fraction needs digits"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if digits(self) == 0 {
                return Err(self.err("an exponent needs digits"));
            }
        }
        // The bytes are ASCII digits, signs, '.' and exponents by construction.
        let text = self.b.get(start..self.i).map(String::from_utf8_lossy).unwrap_or_default();
        Ok(Json::Number(text.into_owned()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_keeps_order() {
        let text = r#"{"b":[1,2.5,-3e2,true,null],"a":{"s":"x\"y\\z\n\u00e9\ud83d\ude00"}}"#;
        let v = parse(text.as_bytes(), "t").unwrap();
        assert_eq!(
            v.get("b").and_then(|b| if let Json::Array(a) = b { a[0].as_u64() } else { None }),
            Some(1)
        );
        assert_eq!(
            v.get("a").and_then(|a| a.get("s")).and_then(Json::as_str),
            Some("x\"y\\z\né😀")
        );
        let again = parse(v.to_text().as_bytes(), "t").unwrap();
        assert_eq!(again, v);
        assert!(v.to_text().starts_with("{\"b\""));
        assert_eq!(parse(v.to_pretty().as_bytes(), "t").unwrap(), v);
    }

    #[test]
    fn big_integers_are_exact() {
        let v = parse(b"18446744073709551615", "t").unwrap();
        assert_eq!(v.as_u64(), Some(u64::MAX));
        assert_eq!(parse(b"18446744073709551616", "t").unwrap().as_u64(), None);
        assert_eq!(parse(b"-1", "t").unwrap().as_u64(), None);
        assert_eq!(parse(b"1.0", "t").unwrap().as_u64(), None);
    }

    #[test]
    fn floats_round_trip_bitwise() {
        for x in [1e-5, 0.1, 1.0 / 3.0, 6.02e23, -2.5e-300] {
            assert_eq!(parse(Json::number(x).to_text().as_bytes(), "t").unwrap().as_f64(), Some(x));
        }
    }

    #[test]
    fn malformed_input_is_an_error_with_a_position() {
        for bad in [
            &b""[..],
            b"{",
            b"{\"a\":1,}",
            b"{\"a\":1 \"b\":2}",
            b"{\"a\":1,\"a\":2}",
            b"[1,2",
            b"01",
            b"1.",
            b"-",
            b"1e",
            b"\"abc",
            b"\"\\x\"",
            b"\"\\ud800\"",
            b"\"a\nb\"",
            b"\"\xff\"",
            b"tru",
            b"{} {}",
        ] {
            let e = parse(bad, "hdr").unwrap_err().to_string();
            assert!(e.starts_with("hdr:") && e.contains(": JSON at byte"), "{e}");
        }
        let e = parse(b"{\"a\":1,\n\"b\":", "t").unwrap_err().to_string();
        assert!(e.starts_with("t:2: JSON at byte 12") && e.contains("truncated"), "{e}");
        let deep = "[".repeat(MAX_DEPTH + 2);
        assert!(parse(deep.as_bytes(), "t").unwrap_err().to_string().contains("nested deeper"));
    }

    #[test]
    fn object_entries_carry_their_key_lines() {
        let entries = parse_object_entries(
            b"{\n \"a\": 1,\n\n \"b\": [2, {\"c\": 3}],\n \"d\": null}\n",
            "t",
        )
        .unwrap();
        let seen: Vec<(&str, usize)> = entries.iter().map(|e| (e.key.as_str(), e.line)).collect();
        assert_eq!(seen, [("a", 2), ("b", 4), ("d", 5)]);
        assert_eq!(entries[0].value.as_u64(), Some(1));
        assert!(parse_object_entries(b"{}", "t").unwrap().is_empty());
        let e = parse_object_entries(b"\n[1]", "t").unwrap_err().to_string();
        assert!(e.starts_with("t:2:") && e.contains("'{'"), "{e}");
    }

    #[test]
    fn repeated_keys_are_found_in_small_and_large_objects() {
        for n in [3, LINEAR_KEY_CHECK, LINEAR_KEY_CHECK + 1, 200] {
            let body: Vec<String> = (0..n).map(|k| format!("\"k{k}\":{k}")).collect();
            let ok = format!("{{{}}}", body.join(","));
            assert!(parse(ok.as_bytes(), "t").is_ok(), "{n} distinct keys");
            for repeat in [0, n - 1] {
                let bad = format!("{{{},\"k{repeat}\":0}}", body.join(","));
                let e = parse(bad.as_bytes(), "t").unwrap_err().to_string();
                assert!(e.contains(&format!("\"k{repeat}\" appears twice")), "{n} keys: {e}");
            }
        }
    }
}
