//! The decoder language model: configuration, rotary tables, KV cache and the network.

mod cache;
mod config;
mod decoder;
mod lora;
mod rope;

pub use cache::KvCache;
pub use config::{Family, ModelConfig};
pub use decoder::{Attention, Block, Decoder, ForwardInput, Mlp, Projection, RmsNorm};
pub use lora::{
    ADAPTER_FILE, LORA_MODULES, LoraConfig, LoraPart, adapter_config, read_adapter, save_adapter,
};
pub use rope::Rope;
