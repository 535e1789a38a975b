//! Rollout: chains of generate → call tools → observe, and the trajectories they leave.
//! Today only the [`Trajectory`] type that rewards receive lives here.

mod trajectory;

pub use trajectory::Trajectory;
