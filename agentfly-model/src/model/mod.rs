//! The decoder language model: configuration, rotary tables, KV cache and the network.

pub mod amx;
mod attention;
mod attention_blocks;
pub mod bf16;
mod cache;
mod config;
pub mod decode_attention;
mod decoder;
mod fused_attention;
mod fused_qkv;
pub mod hardware;
mod lora;
pub mod matmul;
mod packed;
mod projection;
mod rope;
mod shared_prefix;
mod swiglu;
pub mod vector;
mod window_attention;

pub use cache::KvCache;
pub use config::{Family, ModelConfig};
pub use decoder::{Attention, Block, Decoder, ForwardInput, Mlp, RmsNorm};
pub use lora::{
    ADAPTER_FILE, LORA_MODULES, LoraConfig, adapter_config, read_adapter, save_adapter,
};
pub use packed::{PACKED_ROWS, PackedWeight};
pub use projection::{LoraPart, Projection};
pub use rope::Rope;
pub use window_attention::Window;
