//! The options inside `#[tool(...)]` and `#[reward(...)]`.

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::{LitInt, LitStr, Path, Type};

/// Which macro the options belong to: each takes a different set.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tool,
    Reward,
}

impl Kind {
    fn attribute(self) -> &'static str {
        match self {
            Kind::Tool => "#[tool]",
            Kind::Reward => "#[reward]",
        }
    }

    fn accepted(self) -> &'static str {
        match self {
            Kind::Tool => "name, max_output_chars, terminal, timeout_ms, env, crate",
            Kind::Reward => "name, timeout_ms, env, crate",
        }
    }
}

/// The parsed options. Every field is optional; defaults are applied at expansion.
#[derive(Default)]
pub struct Options {
    pub name: Option<LitStr>,
    pub max_output_chars: Option<LitInt>,
    pub terminal: Option<Span>,
    pub timeout_ms: Option<LitInt>,
    pub env: Option<Type>,
    pub krate: Option<Path>,
}

/// Parses the tokens between the attribute's parentheses.
pub fn parse(kind: Kind, tokens: TokenStream) -> syn::Result<Options> {
    let mut options = Options::default();
    let parser = syn::meta::parser(|meta| options.parse_one(kind, meta));
    syn::parse::Parser::parse2(parser, tokens)?;
    Ok(options)
}

impl Options {
    fn parse_one(&mut self, kind: Kind, meta: ParseNestedMeta<'_>) -> syn::Result<()> {
        let key = meta
            .path
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_default();
        let tool_only = matches!(key.as_str(), "max_output_chars" | "terminal");
        if tool_only && kind == Kind::Reward {
            return Err(meta.error(format!(
                "`{key}` is a #[tool] option; #[reward] takes: {}",
                kind.accepted()
            )));
        }
        let duplicate = || {
            meta.error(format!(
                "`{key}` is given twice in {} options",
                kind.attribute()
            ))
        };
        match key.as_str() {
            "name" => {
                let lit: LitStr = meta.value()?.parse()?;
                check_name(kind, &lit)?;
                set(&mut self.name, lit, duplicate)
            }
            "max_output_chars" => {
                let lit = positive_int(&meta, &key)?;
                set(&mut self.max_output_chars, lit, duplicate)
            }
            "timeout_ms" => {
                let lit = positive_int(&meta, &key)?;
                set(&mut self.timeout_ms, lit, duplicate)
            }
            "terminal" => {
                if meta.input.peek(syn::Token![=]) {
                    return Err(meta.error(
                        "`terminal` is a flag: write `#[tool(terminal)]`, without a value",
                    ));
                }
                set(
                    &mut self.terminal,
                    meta.path.segments[0].ident.span(),
                    duplicate,
                )
            }
            "env" => {
                let ty: Type = meta.value()?.parse()?;
                set(&mut self.env, ty, duplicate)
            }
            "crate" => {
                let lit: LitStr = meta.value()?.parse()?;
                let path: Path = lit.parse()?;
                set(&mut self.krate, path, duplicate)
            }
            _ => Err(meta.error(format!(
                "unknown {} option `{}`; expected one of: {}",
                kind.attribute(),
                meta.path
                    .segments
                    .iter()
                    .map(|s| s.ident.to_string())
                    .collect::<Vec<_>>()
                    .join("::"),
                kind.accepted()
            ))),
        }
    }
}

fn set<T>(slot: &mut Option<T>, value: T, duplicate: impl Fn() -> syn::Error) -> syn::Result<()> {
    if slot.is_some() {
        return Err(duplicate());
    }
    *slot = Some(value);
    Ok(())
}

fn positive_int(meta: &ParseNestedMeta<'_>, key: &str) -> syn::Result<LitInt> {
    let value = meta.value()?;
    let lit: LitInt = value.parse().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!("`{key}` takes a positive integer, e.g. `{key} = 2000`"),
        )
    })?;
    match lit.base10_parse::<u64>() {
        Ok(n) if n > 0 => Ok(lit),
        _ => Err(syn::Error::new(
            lit.span(),
            format!("`{key}` must be a positive integer"),
        )),
    }
}

/// Names follow the OpenAI function-calling rule: 1-64 of `a-z A-Z 0-9 _ -`.
fn check_name(kind: Kind, lit: &LitStr) -> syn::Result<()> {
    let name = lit.value();
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(syn::Error::new(
            lit.span(),
            format!(
                "{} name `{name}` must be 1-64 characters of a-z, A-Z, 0-9, `_` or `-`",
                kind.attribute()
            ),
        ))
    }
}
