//! Chat: the tokenizer and the chat template, the two pieces that turn a conversation into
//! the token ids a model reads. Both are built from a model's own files (tokenizer.json,
//! tokenizer_config.json, or a GGUF file's metadata) by the trainer's loaders, and must
//! reproduce Hugging Face transformers byte for byte.

mod error;
mod pyjson;
mod template;
mod tokenizer;

pub use error::ChatError;
pub use pyjson::to_python_json;
pub use template::{ChatTemplate, Conversation};
pub use tokenizer::{BpeVocabulary, Tokenizer};
