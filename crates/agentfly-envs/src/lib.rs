//! Ready environments for agentfly. Nothing lives here yet; what will:
//!
//! - `PythonSandbox`: a persistent, resource-limited `python3` process per instance, the
//!   state behind the `code_interpreter` tool;
//! - a text household world and a web shop, for multi-step agent tasks;
//! - a remote bridge (HTTP / stdio) for environments hosted in Python, such as ScienceWorld.
//!
//! Each implements agentfly-core's environment contract and is leased from its pool.

#![warn(missing_docs)]
