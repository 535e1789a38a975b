//! Tools: what `#[tool]` registers ([`ToolSpec`]), how a call is made safe ([`Toolbox`]),
//! what the model reads back ([`Observation`]) and the per-chain state a call sees
//! ([`CallContext`]).

mod bridge;
mod context;
mod invoke;
mod observation;
mod schema;
mod spec;
mod toolbox;

pub use bridge::{BridgeLimits, NestedCall, ToolBridge};
pub use context::{CallContext, EnvHandle, EnvUnavailable, MissingEnvironment};
pub use invoke::panic_message;
pub(crate) use invoke::panicked;
pub use observation::{Observation, ToolErrorKind, ToolFailure};
pub use schema::parameters_schema;
pub use spec::{DynamicTool, ToolFuture, ToolOptions, ToolSpec};
pub use toolbox::Toolbox;
