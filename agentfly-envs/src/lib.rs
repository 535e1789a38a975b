//! Ready environments for agentfly, each an [`Env`](agentfly_core::env::Env) leased per
//! chain from its pool.
//!
//! - [`PythonSandbox`]: a persistent, resource-limited `python3` process per instance, the
//!   state behind the `code_interpreter` tool (see [`python`] for what is enforced where).
//! - [`wiki`]: a local encyclopedia (Wikipedia's vital articles' summaries) and its BM25
//!   index, shared read-only by the `search` and `retrieve` tools.
//!
//! Planned: a text household world and a web shop for multi-step agent tasks, and a remote
//! bridge (HTTP / stdio) for environments hosted in Python, such as ScienceWorld.

#![warn(missing_docs)]

pub mod python;
pub mod wiki;

pub use python::{CellOutput, PythonSandbox, SandboxConfig};
