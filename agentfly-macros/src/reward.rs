//! `#[reward]`: a scoring function whose parameters are filled by name, registered as a
//! `RewardSpec`.

use crate::options::Options;
use crate::paths;
use crate::pipeline::{combine, return_span};
use crate::signature::{Function, ParamKind};
use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

pub fn validate(options: &Options, function: &Function) -> syn::Result<()> {
    let mut errors = Vec::new();
    let env_params: Vec<_> = function
        .params
        .iter()
        .filter(|p| matches!(p.kind, ParamKind::EnvMut { .. }))
        .collect();
    match (&options.env, env_params.as_slice()) {
        (None, [param, ..]) => errors.push(syn::Error::new(
            param.ident.span(),
            format!(
                "parameter `{}` is `&mut`: a reward that reads an environment names it with \
                 `#[reward(env = Type)]` and takes `env: &mut Type`",
                param.ident
            ),
        )),
        (Some(env), []) => {
            let ty = quote!(#env).to_string();
            errors.push(syn::Error::new_spanned(
                env,
                format!("with `env = {ty}` the reward needs a parameter `env: &mut {ty}`"),
            ))
        }
        (Some(_), [_, second, ..]) => errors.push(syn::Error::new(
            second.ident.span(),
            "a #[reward] takes at most one `&mut` parameter (the environment)",
        )),
        _ => {}
    }
    for param in &function.params {
        if let ParamKind::Context { ty } = &param.kind {
            errors.push(syn::Error::new_spanned(
                ty,
                "a #[reward] cannot take the `CallContext`: it reads the sample, the response, \
                 the trajectory and at most one environment (`env: &mut Type`)",
            ));
        }
        let special = matches!(param.ident.to_string().as_str(), "response" | "trajectory");
        if special && !param.field_attrs.is_empty() {
            errors.push(syn::Error::new(
                param.ident.span(),
                "`response` and `trajectory` are filled by the rollout, not from the sample: \
                 they take no attributes",
            ));
        }
    }
    combine(errors)
}

pub fn generate(options: &Options, function: &Function) -> TokenStream {
    let core = paths::core_crate(options.krate.as_ref());
    let (private, _) = paths::private(&core);
    let item = &function.item;
    let fn_ident = &item.sig.ident;
    let name = options
        .name
        .as_ref()
        .map(syn::LitStr::value)
        .unwrap_or_else(|| fn_ident.to_string());
    let description = function.description.clone().unwrap_or_default();

    let mut lets = Vec::new();
    let mut call_args = Vec::new();
    let mut fields = Vec::new();
    for param in &function.params {
        let ident = &param.ident;
        let text = ident.to_string();
        match (&param.kind, text.as_str()) {
            (ParamKind::EnvMut { ty }, _) => {
                lets.push(quote!(let #ident: &mut #ty = __af_input.ctx.env::<#ty>().await?;));
                call_args.push(quote!(#ident));
            }
            (ParamKind::Context { .. }, _) => {} // refused by `validate`
            (ParamKind::Value { .. }, "response") => {
                call_args.push(quote!(::core::convert::From::from(__af_input.response)));
            }
            (ParamKind::Value { .. }, "trajectory") => {
                call_args.push(quote!(__af_input.trajectory));
            }
            (ParamKind::Value { ty, by_ref }, field) => {
                let getter = if param.is_option() {
                    quote!(sample_field_opt)
                } else {
                    quote!(sample_field)
                };
                lets.push(quote_spanned! {ty.span()=>
                    let #ident: #ty = #private::#getter(__af_input.sample, #name, #field)?;
                });
                fields.push(text.clone());
                call_args.push(if *by_ref {
                    quote!(&#ident)
                } else {
                    quote!(#ident)
                });
            }
        }
    }
    let call = quote!(#fn_ident(#(#call_args),*));
    let call = if function.is_async {
        quote!(#call.await)
    } else {
        call
    };
    let span = return_span(&item.sig);
    let convert = if function.returns_result {
        quote_spanned!(span=> #private::result_into_reward_output(#name, __af_out))
    } else {
        quote_spanned!(span=> ::core::result::Result::Ok(#private::into_reward_output(__af_out)))
    };
    let timeout_ms = match &options.timeout_ms {
        Some(lit) => quote!(::core::option::Option::Some(#lit)),
        None => quote!(::core::option::Option::None),
    };
    let env_name = match &options.env {
        Some(env) => {
            let text = quote!(#env).to_string().replace(' ', "");
            quote!(::core::option::Option::Some(#text))
        }
        None => quote!(::core::option::Option::None),
    };

    quote! {
        #item

        #[doc(hidden)]
        #[allow(non_snake_case, missing_docs, dead_code, unused_mut, clippy::all)]
        const _: () = {
            fn __af_score<'a>(
                mut __af_input: #private::RewardInput<'a>,
            ) -> #private::RewardFuture<'a> {
                ::std::boxed::Box::pin(async move {
                    #(#lets)*
                    let __af_out = #call;
                    #convert
                })
            }

            #private::inventory::submit! {
                #private::RewardSpec {
                    name: #name,
                    description: #description,
                    fields: &[#(#fields),*],
                    score: __af_score,
                    timeout_ms: #timeout_ms,
                    env: #env_name,
                    origin: #private::Origin {
                        module_path: ::core::module_path!(),
                        file: ::core::file!(),
                        line: ::core::line!(),
                    },
                }
            }
        };
    }
}
