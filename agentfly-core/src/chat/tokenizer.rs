//! The tokenizer: Hugging Face's `tokenizers` (pure-Rust build), loaded from a
//! tokenizer.json or built from a GGUF file's BPE vocabulary.

use super::ChatError;
use std::path::Path;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior};

/// A BPE vocabulary as GGUF stores it (`tokenizer.ggml.*`).
#[derive(Debug, Clone, Default)]
pub struct BpeVocabulary {
    /// Tokens in id order, byte-level encoded (`Ġ` for a space).
    pub tokens: Vec<String>,
    /// Merges, each `"left right"`, by rank.
    pub merges: Vec<String>,
    /// llama.cpp token types: 1 normal, 3 control (special), 4 user-defined.
    pub token_types: Vec<i32>,
    /// The pre-tokenizer name (`tokenizer.ggml.pre`): `smollm`, `qwen2`, `llama-bpe`, `gpt2`.
    pub pre: String,
}

/// Splits text as the Qwen2 / Qwen3 tokenizers do.
const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Splits text as the Llama 3 tokenizer does.
const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A tokenizer with its special tokens.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

fn tok_err(context: impl Into<String>) -> impl FnOnce(tokenizers::Error) -> ChatError {
    let context = context.into();
    move |e| ChatError::Tokenizer {
        context,
        message: e.to_string(),
    }
}

impl Tokenizer {
    /// Loads a `tokenizer.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ChatError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| ChatError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let inner = tokenizers::Tokenizer::from_bytes(bytes)
            .map_err(tok_err(path.display().to_string()))?;
        Ok(Self { inner })
    }

    /// Parses the text of a `tokenizer.json`.
    pub fn from_json(json: &str) -> Result<Self, ChatError> {
        let inner = tokenizers::Tokenizer::from_bytes(json.as_bytes())
            .map_err(tok_err("tokenizer.json"))?;
        Ok(Self { inner })
    }

    /// Builds a byte-level BPE tokenizer from a GGUF vocabulary, with the pre-tokenizer
    /// its `pre` names and its control tokens as special tokens.
    pub fn from_bpe(vocab: &BpeVocabulary) -> Result<Self, ChatError> {
        let ids: Vocab = vocab
            .tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let merges = vocab
            .merges
            .iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| ChatError::Tokenizer {
                        context: "GGUF merges".into(),
                        message: format!("merge `{m}` is not two tokens separated by a space"),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let bpe = BPE::builder()
            .vocab_and_merges(ids, merges)
            .build()
            .map_err(tok_err("GGUF vocabulary"))?;
        let mut inner = tokenizers::Tokenizer::new(bpe);
        let split = |pattern: &str| -> Result<Split, ChatError> {
            Split::new(
                SplitPattern::Regex(pattern.into()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(tok_err("pre-tokenizer"))
        };
        match vocab.pre.as_str() {
            "smollm" => {
                inner.with_pre_tokenizer(Some(Sequence::new(vec![
                    Digits::new(true).into(),
                    ByteLevel::new(false, true, true).into(),
                ])));
            }
            "qwen2" => {
                inner
                    .with_normalizer(Some(NFC))
                    .map_err(tok_err("normalizer"))?;
                inner.with_pre_tokenizer(Some(Sequence::new(vec![
                    split(QWEN2_PATTERN)?.into(),
                    ByteLevel::new(false, false, false).into(),
                ])));
            }
            "llama-bpe" | "llama3" => {
                inner.with_pre_tokenizer(Some(Sequence::new(vec![
                    split(LLAMA3_PATTERN)?.into(),
                    ByteLevel::new(false, true, false).into(),
                ])));
            }
            "gpt2" | "default" | "" => {
                inner.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
            }
            other => {
                return Err(ChatError::Tokenizer {
                    context: "GGUF tokenizer.ggml.pre".into(),
                    message: format!(
                        "pre-tokenizer `{other}` is not supported (supported: smollm, qwen2, llama-bpe, gpt2); \
                         load the model's tokenizer.json instead"
                    ),
                });
            }
        }
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        let special: Vec<AddedToken> = vocab
            .token_types
            .iter()
            .enumerate()
            .filter(|(_, t)| **t == 3 || **t == 4)
            .map(|(i, t)| AddedToken::from(vocab.tokens[i].clone(), *t == 3))
            .collect();
        inner
            .add_special_tokens(special)
            .map_err(tok_err("special tokens"))?;
        Ok(Self { inner })
    }

    /// The ids of `text`; `add_special_tokens` applies the tokenizer's post-processor
    /// (e.g. a BOS token).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, ChatError> {
        let encoding = self
            .inner
            .encode_fast(text, add_special_tokens)
            .map_err(tok_err("encode"))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens included unless `skip_special_tokens`.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, ChatError> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(tok_err("decode"))
    }

    /// The id of a token, e.g. `<|im_end|>`.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The token of an id.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The number of ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Is `id` a special token (`<|im_end|>`, `<|endoftext|>`...)?
    pub fn is_special(&self, id: u32) -> bool {
        self.inner
            .get_added_tokens_decoder()
            .get(&id)
            .is_some_and(|t| t.special)
    }

    /// The tokenizer as `tokenizer.json` text, for saving a model in Hugging Face layout.
    pub fn to_json(&self) -> Result<String, ChatError> {
        self.inner.to_string(true).map_err(tok_err("serialize"))
    }
}
