//! Every crate path the macros emit is decided here.

use proc_macro2::TokenStream;
use quote::quote;

/// The path of the agentfly-core crate in the user's crate (`crate = "..."` overrides it,
/// for crates that reach core through a re-export).
pub fn core_crate(override_path: Option<&syn::Path>) -> TokenStream {
    match override_path {
        Some(path) => quote!(#path),
        None => quote!(::agentfly_core),
    }
}

/// `<core>::__private`, as tokens and as the string that serde's and schemars' own
/// `crate = "..."` attributes want.
pub fn private(core: &TokenStream) -> (TokenStream, String) {
    let tokens = quote!(#core::__private);
    let text = tokens.to_string().replace(' ', "");
    (tokens, text)
}
