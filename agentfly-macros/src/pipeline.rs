//! The pipeline both macros share: parse the options and the function, validate, expand;
//! on error, the function is re-emitted untouched next to every error found.

use crate::options::{self, Kind, Options};
use crate::signature::{self, Function};
use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::spanned::Spanned;

/// Runs one macro: `validate` then `generate`, or the item plus the errors.
pub fn expand(
    kind: Kind,
    attr: TokenStream,
    item: TokenStream,
    validate: fn(&Options, &Function) -> syn::Result<()>,
    generate: fn(&Options, &Function) -> TokenStream,
) -> TokenStream {
    let options = options::parse(kind, attr);
    let function = signature::parse(kind, item.clone());
    match (options, function) {
        (Ok(options), Ok(function)) => match validate(&options, &function) {
            Ok(()) => generate(&options, &function),
            Err(e) => with_error(function.item.into_token_stream(), e),
        },
        (Err(mut e), Err(e2)) => {
            e.combine(e2);
            with_error(item, e)
        }
        (Err(e), Ok(function)) => with_error(function.item.into_token_stream(), e),
        (Ok(_), Err(e)) => with_error(item, e),
    }
}

/// The original item next to the errors, so the rest of the crate still sees the function.
fn with_error(item: TokenStream, error: syn::Error) -> TokenStream {
    let error = error.into_compile_error();
    quote!(#item #error)
}

/// All `errors` as one (reported together), or `Ok` when there are none.
pub fn combine(errors: Vec<syn::Error>) -> syn::Result<()> {
    let mut iter = errors.into_iter();
    match iter.next() {
        None => Ok(()),
        Some(mut first) => {
            for e in iter {
                first.combine(e);
            }
            Err(first)
        }
    }
}

/// The span of the return type (of the name, when there is none), so a return type that
/// cannot be converted is the place an error points at.
pub fn return_span(sig: &syn::Signature) -> proc_macro2::Span {
    match &sig.output {
        syn::ReturnType::Type(_, ty) => ty.span(),
        syn::ReturnType::Default => sig.ident.span(),
    }
}
