//! One file per subcommand.

pub mod call;
pub mod fetch_corpus;
pub mod fetch_model;
pub mod generate;
pub mod logits;
mod model_args;
pub mod render;
pub mod rewards;
pub mod rollout;
pub mod tasks;
pub mod tools;
pub mod train;
