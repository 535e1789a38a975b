//! The policy behind an OpenAI-compatible endpoint, for agents written anywhere: a client
//! whose base URL is `http://HOST:PORT/sessions/{ID}/v1` is recorded under `ID`, token for
//! token, as the trajectories agentfly's trainer learns from; `POST /sessions/{ID}/reward`
//! ends the episode.
//!
//! | module | what lives there |
//! |---|---|
//! | [`Server`] | the HTTP server (axum): routes, bounds, sessions |
//! | [`ChatModel`] | the tokenizer and template; OpenAI messages in, `tool_calls` out |
//! | [`SessionOptions`], [`SessionRecord`] | what a session is opened with and what it leaves |
//! | [`ChannelPolicy`] | a policy the server owns while the real one is borrowed (the trainer's) |
//!
//! The endpoint serves any core [`Policy`](agentfly_core::rollout::Policy): the engine
//! (`agentfly serve`), or the trainer's current weights during a rollout of external agents
//! (`[rollout.external]`).

#![warn(missing_docs)]

mod channel;
mod chat;
mod error;
mod model;
pub mod request;
mod server;
mod session;
mod state;

pub use channel::{ChannelPolicy, PolicyRequests, policy_channel};
pub use error::ApiError;
pub use model::ChatModel;
pub use server::Server;
pub use session::{Sampling, SessionOptions, SessionRecord};
pub use state::ServeConfig;
