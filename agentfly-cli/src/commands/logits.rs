//! `agentfly logits`: one forward pass, logits written as safetensors.

use super::model_args::ModelArgs;
use agentfly_model::io::{HostTensor, Weights, write_safetensors};
use anyhow::{Context, bail};
use burn::tensor::{Int, Tensor, TensorData};
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `agentfly logits`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Token ids of one sequence, comma-separated; repeat for a batch (same lengths).
    #[arg(long = "ids", required = true)]
    ids: Vec<String>,
    /// Output file: tensor `logits` [batch, seq, vocab] f32.
    #[arg(long)]
    out: PathBuf,
}

fn parse_rows(raw: &[String]) -> anyhow::Result<Vec<Vec<i64>>> {
    raw.iter()
        .map(|row| {
            row.split(',')
                .map(|t| {
                    t.trim()
                        .parse::<i64>()
                        .with_context(|| format!("`{t}` in --ids {row} is not a token id"))
                })
                .collect()
        })
        .collect()
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let rows = parse_rows(&args.ids)?;
    let len = rows[0].len();
    if len == 0 {
        bail!("--ids needs at least one id");
    }
    if let Some(row) = rows.iter().find(|r| r.len() != len) {
        bail!(
            "every --ids must have the same length: {} and {}",
            len,
            row.len()
        );
    }
    let model = args.model.load()?;
    let vocab = model.config.vocab_size as i64;
    if let Some(bad) = rows.iter().flatten().find(|&&id| id < 0 || id >= vocab) {
        bail!("token id {bad} is outside the vocabulary (0..{vocab})");
    }
    let batch = rows.len();
    let device = model.decoder.embed.val().device();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(rows.concat(), [batch, len]), &device);
    let logits = model.decoder.forward(ids, &model.rope);
    let [b, s, v] = logits.dims();
    let data = logits
        .into_data()
        .try_to_vec::<f32>()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let mut out = Weights::new(&args.out);
    out.insert("logits", HostTensor::new(vec![b, s, v], data));
    write_safetensors(&out, &args.out)?;
    eprintln!("wrote logits [{b}, {s}, {v}] to {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}
