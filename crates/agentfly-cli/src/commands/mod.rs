//! One file per subcommand.

pub mod call;
pub mod rewards;
pub mod tools;
