//! Rewards that check a response against the sample's `answer` field.

mod exact;
mod numeric;
pub mod squad;

pub use exact::exact_match;
pub use numeric::{exact_numeric, last_number};
pub use squad::{squad_exact_match, squad_f1};
