//! `agentfly export-gguf`: a model (a trained policy's Hugging Face directory, or a GGUF)
//! written as a GGUF file for llama.cpp, with the metadata of the GGUF it started from.

use super::model_args::ModelArgs;
use agentfly_model::io::GgufDtype;
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `agentfly export-gguf`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// The GGUF the model was trained from: its metadata (tokenizer, chat template,
    /// hyperparameters) and tensor names are kept, e.g. models/SmolLM2-135M-Instruct.Q4_1.gguf.
    #[arg(long)]
    template: PathBuf,
    /// f32 (the trained weights exactly) or f16 (half the size).
    #[arg(long, default_value = "f16", value_parser = ["f32", "f16"])]
    dtype: String,
    /// The GGUF file to write (replaced atomically).
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let model = args.model.load()?;
    let dtype = match args.dtype.as_str() {
        "f32" => GgufDtype::F32,
        _ => GgufDtype::F16,
    };
    model
        .save_gguf(&args.template, dtype, &args.out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    println!("written {} ({})", args.out.display(), args.dtype);
    Ok(ExitCode::SUCCESS)
}
