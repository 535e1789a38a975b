//! The record of one chain. The rollout fills in tokens, masks, turns and timings; for
//! now it carries what a reward can already use.

use serde::{Deserialize, Serialize};

/// One chain's trajectory, as a reward sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// The sample the chain started from.
    pub sample_id: String,
    /// Which of the sample's chains (0..n).
    pub chain: usize,
    /// The final answer text.
    pub response: String,
    /// How many model turns the chain took.
    pub turns: usize,
}
