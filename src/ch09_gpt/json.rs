//! Just enough JSON for a safetensors header and a GPT-2 `config.json`: a strict parser and a
//! compact writer.
//!
//! Strict means: the whole input is one value, objects may not repeat a key, numbers follow the
//! JSON grammar, strings are valid UTF-8 with valid escapes, nesting is at most [`MAX_DEPTH`]
//! deep. Every error names the byte offset. Numbers keep their text, so a 64-bit offset is read
//! exactly instead of through an `f64`.

use crate::error::{Error, Result};

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
    let mut p = Parser { b: bytes, i: 0, file };
    p.ws();
    let v = p.value(0)?;
    p.ws();
    if p.i != bytes.len() {
        return Err(p.err("unexpected text after the JSON value"));
    }
    Ok(v)
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    file: &'a str,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> Error {
        Error::Parse { file: self.file.to_string(), line: None, reason: format!("JSON at byte {}: {what}", self.i) }
    }

    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
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
        if self.b[self.i..].starts_with(word.as_bytes()) {
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
            None => Err(self.err("unexpected end of input")),
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
        self.expect(b'{')?;
        let mut fields: Vec<(String, Json)> = Vec::new();
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(Json::Object(fields));
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(self.err("expected a key (a string)"));
            }
            let at = self.i;
            let key = self.string()?;
            if fields.iter().any(|(k, _)| *k == key) {
                self.i = at;
                return Err(self.err(&format!("the key {key:?} appears twice")));
            }
            self.ws();
            self.expect(b':')?;
            self.ws();
            let v = self.value(depth + 1)?;
            fields.push((key, v));
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(Json::Object(fields));
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
        let digits = self.b.get(self.i..self.i + 4).ok_or_else(|| self.err("a \\u escape needs four hex digits"))?;
        let text = std::str::from_utf8(digits).map_err(|_| self.err("a \\u escape needs four hex digits"))?;
        let v = u32::from_str_radix(text, 16).map_err(|_| self.err("a \\u escape needs four hex digits"))?;
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
                                    return Err(self.err("a high surrogate must be followed by a low one"));
                                }
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.err("a high surrogate must be followed by a low one"));
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            char::from_u32(code).ok_or_else(|| self.err("a lone surrogate is not a character"))?
                        }
                        _ => return Err(self.err("unknown escape")),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                c if c < 0x20 => return Err(self.err("a control character must be escaped inside a string")),
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
        // The bytes are ASCII by construction.
        Ok(Json::Number(String::from_utf8_lossy(&self.b[start..self.i]).into_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_keeps_order() {
        let text = r#"{"b":[1,2.5,-3e2,true,null],"a":{"s":"x\"y\\z\n\u00e9\ud83d\ude00"}}"#;
        let v = parse(text.as_bytes(), "t").unwrap();
        assert_eq!(v.get("b").and_then(|b| if let Json::Array(a) = b { a[0].as_u64() } else { None }), Some(1));
        assert_eq!(v.get("a").and_then(|a| a.get("s")).and_then(Json::as_str), Some("x\"y\\z\né😀"));
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
            assert!(e.starts_with("hdr: JSON at byte"), "{e}");
        }
        let deep = "[".repeat(MAX_DEPTH + 2);
        assert!(parse(deep.as_bytes(), "t").unwrap_err().to_string().contains("nested deeper"));
    }
}
