//! JSON written the way Python's `json.dumps` writes it, as transformers' `tojson` filter
//! does: `", "` and `": "` separators (or newlines and `indent` spaces), non-ASCII kept
//! (`ensure_ascii=False`), keys in their order.

use serde::Serialize;
use serde_json::ser::{Formatter, Serializer};
use std::io;

/// Serializes `value` like `json.dumps(value, ensure_ascii=False, indent=indent)`.
pub fn to_python_json<T: Serialize + ?Sized>(value: &T, indent: Option<usize>) -> String {
    let mut out = Vec::new();
    let formatter = PythonFormatter {
        indent: indent.map(|n| " ".repeat(n)),
        depth: 0,
        has_value: false,
    };
    let mut serializer = Serializer::with_formatter(&mut out, formatter);
    // Writing to a Vec cannot fail, and the values come from JSON, so neither can this.
    value
        .serialize(&mut serializer)
        .expect("serializing a JSON value to memory");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

struct PythonFormatter {
    indent: Option<String>,
    depth: usize,
    has_value: bool,
}

impl PythonFormatter {
    fn newline<W: ?Sized + io::Write>(&self, writer: &mut W) -> io::Result<()> {
        if let Some(indent) = &self.indent {
            writer.write_all(b"\n")?;
            for _ in 0..self.depth {
                writer.write_all(indent.as_bytes())?;
            }
        }
        Ok(())
    }

    fn open<W: ?Sized + io::Write>(&mut self, writer: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        writer.write_all(bracket)
    }

    fn close<W: ?Sized + io::Write>(&mut self, writer: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            self.newline(writer)?;
        }
        self.has_value = true;
        writer.write_all(bracket)
    }

    fn item<W: ?Sized + io::Write>(&mut self, writer: &mut W, first: bool) -> io::Result<()> {
        if !first {
            let sep: &[u8] = if self.indent.is_some() { b"," } else { b", " };
            writer.write_all(sep)?;
        }
        self.newline(writer)
    }
}

impl Formatter for PythonFormatter {
    fn begin_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.open(writer, b"[")
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.close(writer, b"]")
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.item(writer, first)
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, _writer: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.open(writer, b"{")
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.close(writer, b"}")
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.item(writer, first)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        writer.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, _writer: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matches_python_json_dumps() {
        let v = json!({"a": [1, 2.5, "é\n\"x\""], "b": {}, "c": [], "d": null, "e": true});
        // json.dumps(v, ensure_ascii=False)
        assert_eq!(
            to_python_json(&v, None),
            r#"{"a": [1, 2.5, "é\n\"x\""], "b": {}, "c": [], "d": null, "e": true}"#
        );
        // json.dumps(v, ensure_ascii=False, indent=2)
        assert_eq!(
            to_python_json(&json!({"a": [1, {"b": 2}], "c": {}}), Some(2)),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ],\n  \"c\": {}\n}"
        );
    }
}
