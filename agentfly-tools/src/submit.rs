//! The `submit_answer` tool: the agent's final answer, which ends the chain.

use agentfly_core::schemars::{JsonSchema, Schema, SchemaGenerator};
use agentfly_core::tool;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use std::borrow::Cow;
use std::fmt;

/// Submits your final answer and ends the task. Call it once, when you are sure.
#[tool(terminal, max_output_chars = 1000)]
pub fn submit_answer(
    /// The final answer alone, e.g. "42".
    answer: AnswerText,
) -> String {
    format!("Answer submitted: {}", answer.0)
}

/// An answer as text. Models often send a bare number (`{"answer": 42}`) where the schema
/// says string; that is accepted and kept as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerText(pub String);

impl<'de> Deserialize<'de> for AnswerText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct AnswerVisitor;
        impl Visitor<'_> for AnswerVisitor {
            type Value = AnswerText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("the answer as a string or a number")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<AnswerText, E> {
                Ok(AnswerText(v.trim().to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<AnswerText, E> {
                Ok(AnswerText(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<AnswerText, E> {
                Ok(AnswerText(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<AnswerText, E> {
                Ok(AnswerText(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<AnswerText, E> {
                Ok(AnswerText(v.to_string()))
            }
        }
        deserializer.deserialize_any(AnswerVisitor)
    }
}

impl JsonSchema for AnswerText {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "AnswerText".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        <String as JsonSchema>::json_schema(generator)
    }
}
