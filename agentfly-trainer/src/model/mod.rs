//! The decoder language model: configuration, rotary tables, KV cache and the network.

mod cache;
mod config;
mod decoder;
mod rope;

pub use cache::KvCache;
pub use config::{Family, ModelConfig};
pub use decoder::{Attention, Block, Decoder, ForwardInput, Mlp, Projection, RmsNorm};
pub use rope::Rope;
