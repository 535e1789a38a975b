//! Rollout: chains of generate → call tools → observe, and the trajectories they leave.
//! Today: how tool calls are written and read ([`format`]) and the [`Trajectory`] type that
//! rewards receive.

pub mod format;
mod trajectory;

pub use trajectory::Trajectory;
