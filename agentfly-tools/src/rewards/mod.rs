//! Rewards that check a response against the sample's `answer` field.

mod exact;
mod numeric;

pub use exact::exact_match;
pub use numeric::{exact_numeric, last_number};
