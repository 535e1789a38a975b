//! The contracts and the agent runtime of agentfly. No tensor library lives here.
//!
//! | module | what lives there |
//! |---|---|
//! | [`tool`](mod@tool) | [`ToolSpec`] (what `#[tool]` registers), [`Toolbox`], [`Observation`], [`CallContext`] |
//! | [`reward`](mod@reward) | [`RewardSpec`] (what `#[reward]` registers), [`Rewards`], [`RewardOutput`] |
//! | [`registry`] | how registered items are found, duplicate names, [`link!`] |
//! | [`origin`] | [`Origin`]: where a registered item is defined |
//! | [`env`](mod@env) | the [`Env`](env::Env) contract, bounded leasing pools |
//! | [`chat`] | tokenizer and chat templates |
//! | [`data`] | dataset samples, JSONL |
//! | [`rollout`] | tool-call formats, the `Policy` contract, chains, trajectories, rollouts |
//! | [`rl`] | advantage estimators (GRPO, RLOO, REINFORCE++, GAE), dynamic sampling |
//!
//! # Tools
//!
//! ```
//! use agentfly_core::{tool, Toolbox};
//!
//! /// Adds two numbers.
//! #[tool]
//! fn add(
//!     /// The first addend.
//!     a: f64,
//!     /// The second addend.
//!     b: f64,
//! ) -> String {
//!     format!("{}", a + b)
//! }
//!
//! let toolbox = Toolbox::from_names(&["add"]).unwrap();
//! let observation = toolbox.call_json_blocking("add", r#"{"a": 2, "b": 3.5}"#);
//! assert_eq!(observation.text, "5.5");
//! assert!(!observation.is_error);
//!
//! // Bad arguments never panic: they become an error observation the model can read.
//! let bad = toolbox.call_json_blocking("add", r#"{"a": 2}"#);
//! assert!(bad.is_error);
//! assert!(bad.text.contains("missing field `b`"), "{}", bad.text);
//! ```
//!
//! `#[tool]` goes on a free `fn` or `async fn`:
//! - **name**: the function's, or `#[tool(name = "...")]`;
//! - **description**: the doc comment (required: the model reads it);
//! - **parameters**: each becomes a property of the JSON Schema, in declaration order, with
//!   its doc comment as description. Any `T: Deserialize + JsonSchema` works; `Option<T>` is
//!   optional; `&str` and `&T` are accepted and deserialized as `String` / `T`.
//!   `#[serde(...)]` and `#[schemars(...)]` attributes on a parameter are applied to it
//!   (e.g. `#[serde(default)]`, `#[schemars(range(min = 1))]`);
//! - **return**: `String`, anything `Into<Observation>`, or `Result<T, E: Display>` (an
//!   `Err` becomes an observation flagged as an error);
//! - **options**: `max_output_chars = N` (truncates with a visible marker), `terminal`
//!   (a successful call ends the chain), `timeout_ms = N` (else the toolbox's default),
//!   `env = Type` (a stateful tool: the first parameter is `&mut Type`, the instance the
//!   calling chain holds), `crate = "path"` (where agentfly-core is, if renamed).
//!
//! Synchronous tools run on tokio's blocking pool, so a slow one cannot stall the chains
//! around it; a sync tool past its timeout is abandoned (its thread finishes on its own,
//! and a stateful tool's environment is dropped rather than reused half-changed). Async
//! tools are cancelled at their timeout. A panic in either becomes an error observation.
//!
//! # Rewards
//!
//! ```
//! use agentfly_core::{reward, Rewards, Sample, Trajectory, CallContext, RewardInput};
//!
//! /// 1 when the response equals the sample's `answer` field.
//! #[reward]
//! fn exact(response: &str, answer: String) -> f32 {
//!     if response.trim() == answer { 1.0 } else { 0.0 }
//! }
//!
//! let rewards = Rewards::from_names(&["exact"]).unwrap();
//! let sample = Sample::new("s1", serde_json::json!({"answer": "42"}));
//! let trajectory = Trajectory::default();
//! let mut ctx = CallContext::new();
//! let out = rewards.score_blocking("exact", RewardInput {
//!     response: "42", trajectory: &trajectory, sample: &sample, ctx: &mut ctx,
//! });
//! assert_eq!(out.unwrap().reward, 1.0);
//! ```
//!
//! Parameters are filled by name: `response` (`&str` or `String`, the final answer text),
//! `trajectory: &Trajectory`, the environment (`env: &mut T` with `#[reward(env = T)]`),
//! and any other name is deserialized from the sample's field of that name (`Option<T>` when
//! the field may be absent). A reward returns `f32`, [`RewardOutput`] (reward plus metrics),
//! or a `Result` of either.
//!
//! # Linking
//!
//! Registration uses `inventory`: a binary sees the tools and rewards of every crate it
//! links, and **a crate that nothing names is not linked**. Name each tool crate once in the
//! binary: `agentfly_core::link!(agentfly_tools, my_tools);` (or `use my_tools as _;`).

#![warn(missing_docs)]

// Lets the macros' `::agentfly_core` paths resolve inside this crate too.
#[allow(unused_extern_crates)]
extern crate self as agentfly_core;

pub mod chat;
pub mod data;
pub mod env;
pub mod origin;
pub mod registry;
pub mod reward;
pub mod rl;
pub mod rollout;
pub mod tool;

#[doc(hidden)]
pub mod __private;

pub use agentfly_macros::{reward, tool};
/// The attribute on a [`rollout::Policy`] implementation, so that its `generate` is an
/// `async fn` (re-exported: a policy crate needs no dependency of its own).
pub use async_trait::async_trait;
pub use data::Sample;
pub use origin::Origin;
pub use registry::RegistryError;
pub use reward::{RewardError, RewardInput, RewardOutput, RewardSpec, Rewards};
pub use rollout::Trajectory;
pub use tool::{CallContext, Observation, ToolErrorKind, ToolSpec, Toolbox};

/// schemars, re-exported so tool crates derive `JsonSchema` with the version core uses.
pub use schemars;
/// serde_json, re-exported for `Value` and `json!`.
pub use serde_json;
