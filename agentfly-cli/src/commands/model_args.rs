//! The options every model command shares: which model, on which device, in which
//! precision.

use agentfly_model::Pretrained;
use agentfly_model::device::parse_device;
use anyhow::Context;
use std::path::PathBuf;

/// `--model PATH --device cpu|wgpu|cuda[:N] [--bf16]`.
#[derive(clap::Args, Debug)]
pub struct ModelArgs {
    /// A Hugging Face model directory or a .gguf file.
    #[arg(long)]
    pub model: PathBuf,
    /// cpu (default), wgpu, cuda or cuda:N (GPU backends need the wgpu / cuda features; ndarray
    /// and tch, to compare CPU backends, their features).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Matrix products of many rows (prefill, scoring) in bf16 with f32 sums on Intel AMX
    /// (experimental); refused where the CPU or device cannot.
    #[arg(long)]
    pub bf16: bool,
}

impl ModelArgs {
    /// Loads the model on the chosen device.
    pub fn load(&self) -> anyhow::Result<Pretrained> {
        let device = parse_device(&self.device).map_err(anyhow::Error::msg)?;
        let mut model = Pretrained::load(&self.model, &device)
            .with_context(|| format!("loading {}", self.model.display()))?;
        if self.bf16 && !model.decoder.use_bf16_products(true) {
            anyhow::bail!(
                "--bf16: bf16 products need Intel AMX and the cpu device (this CPU or device \
                 has none)"
            );
        }
        Ok(model)
    }
}
