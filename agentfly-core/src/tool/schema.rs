//! JSON Schemas of tool arguments, in the shape chat templates and clients handle.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::Value;

/// The JSON Schema of `T` as a tool's `parameters`: sub-schemas inlined (no `$ref`, which
/// many chat templates and clients mishandle), properties in declaration order, and no
/// `$schema` or `title` (the title would be the generated struct's name).
pub fn parameters_schema<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(map) = &mut value {
        map.remove("title");
        map.remove("$schema");
        map.entry("properties")
            .or_insert_with(|| Value::Object(Default::default()));
    }
    value
}
