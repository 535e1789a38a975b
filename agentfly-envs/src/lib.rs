//! Ready environments for agentfly, each an [`Env`](agentfly_core::env::Env) leased per
//! chain from its pool.
//!
//! - [`PythonSandbox`]: a persistent, resource-limited `python3` process per instance, the
//!   state behind the `code_interpreter` tool (see [`python`] for what is enforced where).
//! - [`wiki`]: a local encyclopedia (Wikipedia's vital articles' summaries) and its BM25
//!   index, shared read-only by the `search` and `retrieve` tools.
//!
//! - [`RemoteEnv`]: an environment hosted by another program (a Python or Java text world
//!   such as TextWorldExpress or ScienceWorld) over a small JSON protocol, on a child
//!   process's stdin/stdout or over HTTP (see [`remote`]).

#![warn(missing_docs)]

mod lines;
pub mod python;
pub mod remote;
pub mod wiki;

pub use python::{CellOutput, PythonSandbox, SandboxConfig};
pub use remote::{Episode, RemoteConfig, RemoteEnv, RemoteError, StepResult};
