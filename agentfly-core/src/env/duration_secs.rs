//! serde for a [`Duration`] written as seconds (`2.5`), as config
//! files write them: `#[serde(with = "agentfly_core::env::duration_secs")]`.

use serde::{Deserialize, Deserializer, Serializer};
use std::time::Duration;

/// Writes seconds.
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Reads seconds; negative or non-finite values are errors.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    Duration::try_from_secs_f64(f64::deserialize(d)?).map_err(serde::de::Error::custom)
}
