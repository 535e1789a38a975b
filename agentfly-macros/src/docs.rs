//! Doc comments: reading them into descriptions.

use syn::{Attribute, Expr, Lit, Meta};

/// Is this attribute a doc comment (`/// ...` or `#[doc = "..."]`)?
pub fn is_doc(attr: &Attribute) -> bool {
    attr.path().is_ident("doc")
}

/// The text of the doc comments among `attrs`, as one description: lines of a paragraph
/// joined by spaces, paragraphs separated by a blank line. `None` when there is no text.
pub fn description(attrs: &[Attribute]) -> Option<String> {
    let mut paragraphs: Vec<String> = Vec::new();
    let mut current = String::new();
    for attr in attrs.iter().filter(|a| is_doc(a)) {
        let Meta::NameValue(nv) = &attr.meta else {
            continue;
        };
        let Expr::Lit(lit) = &nv.value else { continue };
        let Lit::Str(s) = &lit.lit else { continue };
        let value = s.value();
        // `///` alone gives an empty string, which has no lines but is a paragraph break.
        let lines: Vec<&str> = if value.trim().is_empty() {
            vec![""]
        } else {
            value.lines().collect()
        };
        for line in lines {
            let line = line.trim();
            if line.is_empty() {
                if !current.is_empty() {
                    paragraphs.push(std::mem::take(&mut current));
                }
            } else {
                if !current.is_empty() {
                    current.push(' ');
                }
                current.push_str(line);
            }
        }
    }
    if !current.is_empty() {
        paragraphs.push(current);
    }
    (!paragraphs.is_empty()).then(|| paragraphs.join("\n\n"))
}
