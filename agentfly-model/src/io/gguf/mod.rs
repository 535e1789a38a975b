//! GGUF files (llama.cpp): metadata, the tokenizer and chat template inside them, and
//! tensors dequantized to f32 — F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the
//! K-quants Q4_K, Q5_K, Q6_K that most published GGUFs use. Tensors are renamed to Hugging
//! Face names; for the llama architecture the q/k projections are un-permuted from
//! llama.cpp's interleaved rotary layout back to the rotate-half layout (as transformers
//! does), while other architectures (Qwen2) are stored as Hugging Face stores them.
//! The file is never read whole: the header is parsed as a stream, and each tensor is read
//! from its offset when it is dequantized.
//! Format: <https://github.com/ggml-org/ggml/blob/master/docs/gguf.md>.
//!
//! | module | what lives there |
//! |---|---|
//! | `file` | [`GgufFile`]: the header (metadata, tensor table) read and checked against the file's size |
//! | `meta` | the model configuration, the vocabulary and the tokenizer configuration from the metadata |
//! | `quant` | [`GgmlType`]: block sizes and dequantization (ggml's reference formulas) |
//! | `names` | llama.cpp's tensor names → Hugging Face's, and the q/k un-permutation |
//! | `tensors` | reading a tensor, and every weight under its Hugging Face name |
//! | `write` | a trained model's weights written under a template file's metadata, F32 or F16 |

mod file;
mod meta;
mod names;
mod quant;
mod tensors;
mod write;

pub use file::{GgufFile, MetaValue, TensorInfo};
pub use meta::tokenizer_config;
pub use quant::GgmlType;
pub use write::GgufDtype;
