//! `#[tool]`: the argument struct, the schema function, the invoke function and the
//! `inventory` registration of a `ToolSpec`.

use crate::options::Options;
use crate::paths;
use crate::pipeline::{combine, return_span};
use crate::signature::{Function, ParamKind};
use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

pub fn validate(options: &Options, function: &Function) -> syn::Result<()> {
    let mut errors: Vec<syn::Error> = Vec::new();
    let sig = &function.item.sig;
    if function.description.is_none() {
        errors.push(syn::Error::new_spanned(
            &sig.ident,
            format!(
                "#[tool] `{}` needs a doc comment: it becomes the tool's description, which \
                 the model reads to decide when to call it (write `/// What it does.` above \
                 the function)",
                sig.ident
            ),
        ));
    }
    for (index, param) in function.params.iter().enumerate() {
        if let ParamKind::EnvMut { ty } = &param.kind {
            if options.env.is_none() {
                errors.push(syn::Error::new_spanned(
                    ty,
                    format!(
                        "parameter `{}` is `&mut`: a stateful tool names its environment with \
                         `#[tool(env = Type)]` and takes `&mut Type` as its first parameter",
                        param.ident
                    ),
                ));
            } else if index != 0 {
                errors.push(syn::Error::new_spanned(
                    ty,
                    "only the first parameter of a #[tool] may be `&mut` (the environment)",
                ));
            }
        }
    }
    for param in &function.params {
        if let ParamKind::Context { ty } = &param.kind
            && !function.is_async
        {
            errors.push(syn::Error::new_spanned(
                ty,
                "only an `async fn` #[tool] can take the `&mut CallContext` (its calls of other \
                 tools are async)",
            ));
        }
    }
    if function
        .params
        .iter()
        .filter(|p| matches!(p.kind, ParamKind::Context { .. }))
        .count()
        > 1
    {
        errors.push(syn::Error::new_spanned(
            &sig.ident,
            "a #[tool] takes the `&mut CallContext` at most once",
        ));
    }
    if let Some(env) = &options.env {
        let first_is_env = matches!(
            function.params.first().map(|p| &p.kind),
            Some(ParamKind::EnvMut { .. })
        );
        if !first_is_env {
            let ty = quote!(#env).to_string();
            errors.push(syn::Error::new_spanned(
                env,
                format!(
                    "with `env = {ty}` the tool's first parameter must be `&mut {ty}`: the \
                     environment instance leased by the calling chain"
                ),
            ));
        }
    }
    combine(errors)
}

pub fn generate(options: &Options, function: &Function) -> TokenStream {
    let core = paths::core_crate(options.krate.as_ref());
    let (private, private_str) = paths::private(&core);
    let serde_crate = format!("{private_str}::serde");
    let schemars_crate = format!("{private_str}::schemars");
    let item = &function.item;
    let fn_ident = &item.sig.ident;
    let name = options
        .name
        .as_ref()
        .map(syn::LitStr::value)
        .unwrap_or_else(|| fn_ident.to_string());
    let description = function.description.clone().unwrap_or_default();

    let mut fields = Vec::new();
    let mut field_idents = Vec::new();
    let mut call_args = Vec::new();
    let mut assertions = Vec::new();
    for param in &function.params {
        let ident = &param.ident;
        match &param.kind {
            ParamKind::Value { ty, by_ref } => {
                let attrs = &param.field_attrs;
                fields.push(quote!(#(#attrs)* #ident: #ty));
                field_idents.push(ident.clone());
                assertions
                    .push(quote_spanned!(ty.span()=> #private::assert_tool_parameter::<#ty>();));
                call_args.push(if *by_ref {
                    quote!(&#ident)
                } else {
                    quote!(#ident)
                });
            }
            ParamKind::EnvMut { .. } => call_args.push(quote!(__af_env)),
            ParamKind::Context { .. } => call_args.push(quote!(__af_ctx)),
        }
    }
    let takes_context = function
        .params
        .iter()
        .any(|p| matches!(p.kind, ParamKind::Context { .. }));

    let call = quote!(#fn_ident(#(#call_args),*));
    let env_ty = options.env.as_ref();
    let body = match (function.is_async, env_ty) {
        (true, None) => quote!(let __af_out = #call.await;),
        // The environment is detached from the context while the tool also holds the
        // context; one not put back (a panic, a timeout) is marked broken.
        (true, Some(env)) if takes_context => quote! {
            let mut __af_detached =
                #private::DetachedEnv::new(__af_ctx.take_env::<#env>().await?);
            let __af_out = {
                let __af_env: &mut #env = __af_detached.get_mut();
                #call.await
            };
            __af_ctx.put_env::<#env>(__af_detached.restore());
        },
        (true, Some(env)) => quote! {
            let __af_env: &mut #env = __af_ctx.env::<#env>().await?;
            let __af_out = #call.await;
        },
        (false, None) => quote! {
            let __af_out = #private::run_blocking(move || #call).await?;
        },
        (false, Some(env)) => quote! {
            let mut __af_handle = __af_ctx.take_env::<#env>().await?;
            let (__af_handle, __af_out) = #private::run_blocking(move || {
                let __af_env: &mut #env = __af_handle.get_mut();
                let __af_out = #call;
                (__af_handle, __af_out)
            })
            .await?;
            __af_ctx.put_env::<#env>(__af_handle);
        },
    };
    // Spanned on the return type, so a type that cannot be an observation is pointed at.
    let span = return_span(&item.sig);
    let convert = if function.returns_result {
        quote_spanned!(span=> #private::result_into_observation(__af_out))
    } else {
        quote_spanned!(span=> ::core::result::Result::Ok(#private::into_observation(__af_out)))
    };

    let max_output_chars = opt_usize(options.max_output_chars.as_ref());
    let timeout_ms = match &options.timeout_ms {
        Some(lit) => quote!(::core::option::Option::Some(#lit)),
        None => quote!(::core::option::Option::None),
    };
    let terminal = options.terminal.is_some();
    let env_name = match env_ty {
        Some(env) => {
            let text = quote!(#env).to_string().replace(' ', "");
            quote!(::core::option::Option::Some(#text))
        }
        None => quote!(::core::option::Option::None),
    };
    let args_struct = format_ident!("__AgentflyArgs_{}", fn_ident);

    quote! {
        #item

        #[doc(hidden)]
        #[allow(non_camel_case_types, non_snake_case, missing_docs, dead_code, clippy::all)]
        const _: () = {
            #[derive(#private::serde::Deserialize, #private::schemars::JsonSchema)]
            #[serde(crate = #serde_crate, deny_unknown_fields)]
            #[schemars(crate = #schemars_crate)]
            struct #args_struct {
                #(#fields,)*
            }

            fn __af_assert_parameters() {
                #(#assertions)*
            }

            fn __af_parameters() -> #private::serde_json::Value {
                #private::parameters_schema::<#args_struct>()
            }

            fn __af_invoke<'a>(
                __af_ctx: &'a mut #private::CallContext,
                __af_args: #private::serde_json::Value,
            ) -> #private::ToolFuture<'a> {
                ::std::boxed::Box::pin(async move {
                    let #args_struct { #(#field_idents),* } =
                        #private::decode_arguments::<#args_struct>(__af_args)?;
                    #body
                    #convert
                })
            }

            #private::inventory::submit! {
                #private::ToolSpec {
                    name: #name,
                    description: #description,
                    parameters: __af_parameters,
                    invoke: __af_invoke,
                    options: #private::ToolOptions {
                        max_output_chars: #max_output_chars,
                        terminal: #terminal,
                        timeout_ms: #timeout_ms,
                        env: #env_name,
                    },
                    origin: #private::Origin {
                        module_path: ::core::module_path!(),
                        file: ::core::file!(),
                        line: ::core::line!(),
                    },
                    dynamic: ::core::option::Option::None,
                }
            }
        };
    }
}

fn opt_usize(lit: Option<&syn::LitInt>) -> TokenStream {
    match lit {
        Some(lit) => quote!(::core::option::Option::Some(#lit)),
        None => quote!(::core::option::Option::None),
    }
}
