//! JSON as sloppy models write it: single-quoted strings, trailing commas, Python's
//! `True` / `False` / `None`, a code fence around it, text around it, closing brackets
//! missing at the end. Strict JSON is tried first; repairs are applied only when it fails.

use serde_json::Value;

/// Parses `text` as JSON, repairing the usual model slips. The error is serde's message on
/// the repaired text.
pub fn parse_lenient(text: &str) -> Result<Value, String> {
    let trimmed = strip_fence(text.trim());
    if let Ok(value) = serde_json::from_str(trimmed) {
        return Ok(value);
    }
    // Text before the first `{` or `[` (e.g. "Here it is: {...}") is skipped.
    let start = trimmed.find(['{', '[']).unwrap_or(0);
    let repaired = repair(&trimmed[start..]);
    let mut stream = serde_json::Deserializer::from_str(&repaired).into_iter::<Value>();
    match stream.next() {
        Some(Ok(value)) => Ok(value),
        Some(Err(e)) => Err(e.to_string()),
        None => Err("no JSON value".to_string()),
    }
}

fn strip_fence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let rest = rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric());
    rest.strip_suffix("```").unwrap_or(rest).trim()
}

/// Rewrites single-quoted strings as JSON strings, drops trailing commas, maps Python
/// literals, and closes what is left open.
fn repair(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut closers: Vec<char> = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' => {
                let (string, next) = read_string(&chars, i);
                out.push_str(&serde_json::to_string(&string).expect("a string serializes"));
                i = next;
                continue;
            }
            '{' => closers.push('}'),
            '[' => closers.push(']'),
            '}' | ']' => {
                drop_trailing_comma(&mut out);
                closers.pop();
            }
            c if c.is_ascii_alphabetic() => {
                let end = (i..chars.len())
                    .find(|&j| !chars[j].is_ascii_alphanumeric() && chars[j] != '_')
                    .unwrap_or(chars.len());
                let word: String = chars[i..end].iter().collect();
                out.push_str(match word.as_str() {
                    "True" => "true",
                    "False" => "false",
                    "None" => "null",
                    other => other,
                });
                i = end;
                continue;
            }
            _ => {}
        }
        out.push(c);
        i += 1;
        if closers.is_empty() && matches!(c, '}' | ']') {
            break; // one value; text after it is ignored
        }
    }
    // Closes an unterminated value (generation stopped mid-call).
    drop_trailing_comma(&mut out);
    while let Some(closer) = closers.pop() {
        out.push(closer);
    }
    out
}

fn drop_trailing_comma(out: &mut String) {
    let trimmed = out.trim_end().len();
    if out[..trimmed].ends_with(',') {
        out.truncate(trimmed - 1);
    }
}

/// Reads a string that starts at `chars[start]` (its quote), with JSON/Python escapes;
/// returns its value and the index after it. An unterminated string runs to the end.
fn read_string(chars: &[char], start: usize) -> (String, usize) {
    let quote = chars[start];
    let mut value = String::new();
    let mut i = start + 1;
    while i < chars.len() {
        let c = chars[i];
        if c == quote {
            return (value, i + 1);
        }
        if c == '\\' && i + 1 < chars.len() {
            let e = chars[i + 1];
            i += 2;
            match e {
                'n' => value.push('\n'),
                't' => value.push('\t'),
                'r' => value.push('\r'),
                'b' => value.push('\u{8}'),
                'f' => value.push('\u{c}'),
                'u' => {
                    let hex: String = chars[i..(i + 4).min(chars.len())].iter().collect();
                    match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                        Some(ch) if hex.len() == 4 => {
                            value.push(ch);
                            i += 4;
                        }
                        // A surrogate pair or a bad escape: keep it as written.
                        _ => value.push_str("\\u"),
                    }
                }
                other => value.push(other),
            }
            continue;
        }
        value.push(c);
        i += 1;
    }
    (value, chars.len())
}

#[cfg(test)]
mod tests {
    use super::parse_lenient;
    use serde_json::json;

    #[test]
    fn repairs_the_usual_slips() {
        let cases = [
            (r#"{"a": 1}"#, json!({"a": 1})),
            (
                r#"{'name': 'calculator', 'arguments': {'expression': '2+2'}}"#,
                json!({"name": "calculator", "arguments": {"expression": "2+2"}}),
            ),
            (
                r#"{"a": [1, 2, ], "b": {"c": 3,},}"#,
                json!({"a": [1, 2], "b": {"c": 3}}),
            ),
            (
                r#"{"ok": True, "no": False, "x": None}"#,
                json!({"ok": true, "no": false, "x": null}),
            ),
            ("```json\n{\"a\": 1}\n```", json!({"a": 1})),
            (
                r#"Sure! {"a": "it's"} hope this helps"#,
                json!({"a": "it's"}),
            ),
            (
                r#"{"name": "calc", "arguments": {"expression": "1+1""#,
                json!({"name": "calc", "arguments": {"expression": "1+1"}}),
            ),
            (
                r#"{'say': 'he said "hi"'}"#,
                json!({"say": "he said \"hi\""}),
            ),
            (
                r#"{"a": "line\nbreak", 'b': 'it\'s'}"#,
                json!({"a": "line\nbreak", "b": "it's"}),
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_lenient(text).unwrap(), expected, "{text}");
        }
        assert!(parse_lenient("no json here").is_err());
        assert!(parse_lenient(r#"{"a": }"#).is_err());
    }
}
