//! A tool crate as a user writes one: plain functions with `#[tool]` and `#[reward]`.
//! Publish it like any crate; a training binary that links it sees its tools by name
//! (see `src/bin/custom_agent.rs`).

#![warn(missing_docs)]

use agentfly_core::schemars::JsonSchema;
use agentfly_core::{RewardOutput, reward, tool};
use serde::Deserialize;

/// A length unit.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
// Deriving through core's re-export keeps the schemars version in step with core.
#[schemars(crate = "agentfly_core::schemars")]
pub enum Unit {
    /// Metres.
    M,
    /// Kilometres.
    Km,
    /// Miles.
    Mi,
    /// Feet.
    Ft,
}

impl Unit {
    fn metres(self) -> f64 {
        match self {
            Unit::M => 1.0,
            Unit::Km => 1000.0,
            Unit::Mi => 1609.344,
            Unit::Ft => 0.3048,
        }
    }
}

/// Converts a length from one unit to another.
#[tool]
pub fn convert_length(
    /// The length to convert.
    value: f64,
    /// The unit it is given in.
    from: Unit,
    /// The unit wanted.
    to: Unit,
) -> String {
    format!("{:.4}", value * from.metres() / to.metres())
}

/// A scratch pad that lives as long as the chain: an environment in miniature.
#[derive(Debug, Default)]
pub struct Scratchpad {
    /// The notes taken so far.
    pub notes: Vec<String>,
}

/// A scratch pad is an [`Env`](agentfly_core::env::Env): chains lease one from a pool, and
/// it is wiped before it is reused.
impl agentfly_core::env::Env for Scratchpad {
    type Config = ();

    async fn create(_: &()) -> Result<Self, agentfly_core::env::EnvError> {
        Ok(Self::default())
    }

    async fn reset(
        &mut self,
        _: Option<&agentfly_core::Sample>,
    ) -> Result<(), agentfly_core::env::EnvError> {
        self.notes.clear();
        Ok(())
    }
}

/// Writes a note to the scratch pad and returns every note so far.
#[tool(env = Scratchpad)]
pub async fn take_note(
    pad: &mut Scratchpad,
    /// The note to keep.
    note: String,
) -> String {
    pad.notes.push(note);
    pad.notes.join("\n")
}

/// 1.0 when the response is within `tolerance` (a sample field, default 1e-3) of the
/// sample's `answer`, with the absolute error as a metric.
#[reward]
pub fn close_enough(response: &str, answer: f64, tolerance: Option<f64>) -> RewardOutput {
    let Ok(got) = response.trim().parse::<f64>() else {
        return RewardOutput::new(0.0).with_metric("parsed", 0.0);
    };
    let error = (got - answer).abs();
    let ok = error <= tolerance.unwrap_or(1e-3);
    RewardOutput::new(if ok { 1.0 } else { 0.0 })
        .with_metric("parsed", 1.0)
        .with_metric("abs_error", error)
}
