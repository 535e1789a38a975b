//! The options every model command shares: which model, on which device.

use agentfly_trainer::Pretrained;
use agentfly_trainer::device::parse_device;
use anyhow::Context;
use std::path::PathBuf;

/// `--model PATH --device cpu|wgpu|cuda[:N]`.
#[derive(clap::Args, Debug)]
pub struct ModelArgs {
    /// A Hugging Face model directory or a .gguf file.
    #[arg(long)]
    pub model: PathBuf,
    /// cpu (default), wgpu, or cuda[:N] (GPU backends need the wgpu / cuda features; ndarray
    /// and tch, to compare CPU backends, their features).
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

impl ModelArgs {
    /// Loads the model on the chosen device.
    pub fn load(&self) -> anyhow::Result<Pretrained> {
        let device = parse_device(&self.device).map_err(anyhow::Error::msg)?;
        Pretrained::load(&self.model, &device)
            .with_context(|| format!("loading {}", self.model.display()))
    }
}
