//! The function a macro is placed on: validated and modelled as name, parameters and
//! return shape, with the parameter attributes that belong to the schema taken off.

use crate::docs;
use crate::options::Kind;
use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::{Attribute, FnArg, Ident, ItemFn, Pat, ReturnType, Type, TypeReference};

/// A validated function.
pub struct Function {
    /// The function as it is emitted: parameter attributes meant for the schema removed.
    pub item: ItemFn,
    pub description: Option<String>,
    pub params: Vec<Param>,
    pub is_async: bool,
    /// The return type is spelled `...Result<T, E>`.
    pub returns_result: bool,
}

/// One parameter of the function.
pub struct Param {
    pub ident: Ident,
    pub kind: ParamKind,
    /// `doc`, `serde` and `schemars` attributes, moved onto the generated argument field.
    pub field_attrs: Vec<Attribute>,
}

/// How a parameter is filled.
pub enum ParamKind {
    /// Deserialized as `ty` and passed by value, or by reference when `by_ref`.
    Value { ty: Type, by_ref: bool },
    /// `&mut T`: the environment instance of the call.
    EnvMut { ty: Type },
    /// `&mut CallContext`: the calling chain's context (a tool that calls other tools).
    Context { ty: Type },
}

impl Param {
    /// Is the deserialized type spelled `Option<...>`?
    pub fn is_option(&self) -> bool {
        match &self.kind {
            ParamKind::Value { ty, .. } => last_segment_is(ty, "Option"),
            ParamKind::EnvMut { .. } | ParamKind::Context { .. } => false,
        }
    }
}

/// Parses and validates `item`, collecting every problem into one error.
pub fn parse(kind: Kind, item: TokenStream) -> syn::Result<Function> {
    let attribute = match kind {
        Kind::Tool => "#[tool]",
        Kind::Reward => "#[reward]",
    };
    let mut item: ItemFn = syn::parse2(item).map_err(|e| {
        syn::Error::new(
            e.span(),
            format!("{attribute} goes on a free `fn` or `async fn`"),
        )
    })?;
    let mut errors: Option<syn::Error> = None;
    let mut push = |e: syn::Error| match &mut errors {
        Some(all) => all.combine(e),
        None => errors = Some(e),
    };

    let sig = &item.sig;
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        push(syn::Error::new_spanned(
            &sig.generics,
            format!(
                "{attribute} functions cannot be generic: the JSON schema is made from concrete \
                 parameter types; write a non-generic wrapper that calls the generic function"
            ),
        ));
    }
    if let Some(unsafety) = &sig.unsafety {
        push(syn::Error::new_spanned(
            unsafety,
            format!("{attribute} functions cannot be `unsafe`"),
        ));
    }
    if let Some(abi) = &sig.abi {
        push(syn::Error::new_spanned(
            abi,
            format!("{attribute} functions cannot be `extern`"),
        ));
    }
    if let Some(variadic) = &sig.variadic {
        push(syn::Error::new_spanned(
            variadic,
            format!("{attribute} functions cannot be variadic"),
        ));
    }

    let mut params = Vec::new();
    for input in item.sig.inputs.iter_mut() {
        match input {
            FnArg::Receiver(receiver) => push(syn::Error::new_spanned(
                &*receiver,
                format!(
                    "{attribute} goes on a free function, not a method: `self` cannot be filled \
                     from JSON arguments; keep state in an environment (`env = Type`, first \
                     parameter `&mut Type`)"
                ),
            )),
            FnArg::Typed(pat_type) => {
                let Pat::Ident(pat_ident) = &*pat_type.pat else {
                    push(syn::Error::new_spanned(
                        &pat_type.pat,
                        format!(
                            "{attribute} parameters must be plain names: the name becomes the \
                             argument's JSON key"
                        ),
                    ));
                    continue;
                };
                let ident = pat_ident.ident.clone();
                let (field_attrs, kept): (Vec<_>, Vec<_>) =
                    pat_type.attrs.drain(..).partition(|a| {
                        docs::is_doc(a)
                            || a.path().is_ident("serde")
                            || a.path().is_ident("schemars")
                    });
                pat_type.attrs = kept;
                let kind = match &*pat_type.ty {
                    Type::Reference(TypeReference {
                        mutability: Some(_),
                        elem,
                        ..
                    }) if last_segment_is(elem, "CallContext") => ParamKind::Context {
                        ty: (**elem).clone(),
                    },
                    Type::Reference(TypeReference {
                        mutability: Some(_),
                        elem,
                        ..
                    }) => ParamKind::EnvMut {
                        ty: (**elem).clone(),
                    },
                    Type::Reference(TypeReference { elem, .. }) => {
                        let ty = if elem.to_token_stream().to_string() == "str" {
                            syn::parse_quote!(::std::string::String)
                        } else {
                            (**elem).clone()
                        };
                        ParamKind::Value { ty, by_ref: true }
                    }
                    Type::ImplTrait(it) => {
                        push(syn::Error::new_spanned(
                            it,
                            format!(
                                "{attribute} functions cannot be generic: `impl Trait` \
                                 parameters have no JSON schema; name a concrete type"
                            ),
                        ));
                        continue;
                    }
                    ty => ParamKind::Value {
                        ty: ty.clone(),
                        by_ref: false,
                    },
                };
                params.push(Param {
                    ident,
                    kind,
                    field_attrs,
                });
            }
        }
    }

    let returns_result = match &item.sig.output {
        ReturnType::Type(_, ty) => last_segment_is(ty, "Result"),
        ReturnType::Default => false,
    };
    if let Some(errors) = errors {
        return Err(errors);
    }
    Ok(Function {
        description: docs::description(&item.attrs),
        is_async: item.sig.asyncness.is_some(),
        item,
        params,
        returns_result,
    })
}

/// Is `ty` a path whose last segment is `name` (`Result`, `io::Result`, `Option`)?
fn last_segment_is(ty: &Type, name: &str) -> bool {
    match ty {
        Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == name),
        Type::Group(g) => last_segment_is(&g.elem, name),
        Type::Paren(p) => last_segment_is(&p.elem, name),
        _ => false,
    }
}
