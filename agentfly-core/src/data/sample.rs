//! One dataset sample: an id and named fields (a question, messages, the answer...).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A dataset sample. In JSONL it is one object with an `id` and any other fields; rewards
/// read the fields by parameter name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Unique within its dataset; errors name it.
    pub id: String,
    /// Every other field.
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

impl Sample {
    /// A sample with `id` and the fields of `fields` (a JSON object; anything else gives
    /// no fields).
    pub fn new(id: impl Into<String>, fields: Value) -> Self {
        let fields = match fields {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        Self {
            id: id.into(),
            fields,
        }
    }

    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&Value> {
        self.fields.get(name)
    }

    /// The names of the fields, in order.
    pub fn field_names(&self) -> Vec<String> {
        self.fields.keys().cloned().collect()
    }
}
