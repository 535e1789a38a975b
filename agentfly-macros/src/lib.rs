//! The `#[tool]` and `#[reward]` attribute macros of agentfly.
//!
//! Use them through `agentfly_core` (`use agentfly_core::{tool, reward};`): the code they
//! emit names `agentfly_core::__private`, so a crate that uses them depends on
//! `agentfly-core`. Each macro is a small pipeline — parse the options (module `options`)
//! and the function (`signature`), validate, expand ([`tool`], [`reward`]), driven by
//! `pipeline` — and on error re-emits the function untouched next to the errors, so one
//! mistake gives one message.

mod docs;
mod options;
mod paths;
mod pipeline;
mod reward;
mod signature;
mod tool;

use proc_macro::TokenStream;

/// Turns a free `fn` or `async fn` into a tool that every binary linking its crate finds
/// in `agentfly_core::Toolbox`. See `agentfly_core::tool` for the full documentation.
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    let kind = options::Kind::Tool;
    pipeline::expand(
        kind,
        attr.into(),
        item.into(),
        tool::validate,
        tool::generate,
    )
    .into()
}

/// Turns a free `fn` or `async fn` into a reward found in `agentfly_core::Rewards`.
/// See `agentfly_core::reward` for the full documentation.
#[proc_macro_attribute]
pub fn reward(attr: TokenStream, item: TokenStream) -> TokenStream {
    let kind = options::Kind::Reward;
    pipeline::expand(
        kind,
        attr.into(),
        item.into(),
        reward::validate,
        reward::generate,
    )
    .into()
}
