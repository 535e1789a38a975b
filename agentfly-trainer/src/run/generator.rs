//! What the chains sample from, and how each update's weights reach it: the built-in
//! engine (the new decoder handed over in memory) or llama.cpp servers the trainer runs
//! (`[rollout.llama_server]`: the policy written as a GGUF file, then the servers restarted
//! on it). Either way every generation records the version of the weights that made it:
//! the number of RL updates behind them.

use super::error::{TrainError, io};
use crate::Pretrained;
use crate::engine::Engine;
use crate::io::{GgufDtype, GgufFile};
use crate::model::{Decoder, ModelConfig};
use crate::server::{LlamaServerConfig, LlamaServers, ServerConfig, ServerPolicy};
use agentfly_core::rollout::Policy;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// The policy's sampler during a run.
pub(super) enum Generator {
    /// The built-in engine, serving a copy of the actor.
    Engine(Engine),
    /// llama.cpp servers on the policy's latest GGUF.
    LlamaServer(Box<Served>),
}

/// llama.cpp servers, the policy over them and where the policy's GGUF files are written.
pub(super) struct Served {
    policy: ServerPolicy,
    servers: Mutex<LlamaServers>,
    /// The GGUF each written policy takes its metadata and tensor names from.
    template: GgufFile,
    /// How the written policies store their matrices.
    dtype: GgufDtype,
    /// Where the policies are written (`<output>/served`).
    dir: PathBuf,
}

impl Generator {
    /// The policy the chains call.
    pub(super) fn policy(&self) -> &dyn Policy {
        match self {
            Self::Engine(engine) => engine,
            Self::LlamaServer(served) => &served.policy,
        }
    }

    /// llama.cpp servers started on `model`'s weights as `version`, written to
    /// `output/served/`.
    pub(super) fn llama_server(
        config: &LlamaServerConfig,
        model: &Pretrained,
        version: u64,
        output: &Path,
    ) -> Result<Self, TrainError> {
        let template_path = config.gguf.clone().ok_or_else(|| {
            TrainError::Engine(
                "rollout.llama_server needs a GGUF to take the model's metadata from: set \
                 rollout.llama_server.gguf (it defaults to model.path when that is a .gguf)"
                    .into(),
            )
        })?;
        let template = GgufFile::open(&template_path)?;
        let dir = output.join("served");
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let path = write_policy(
            &template,
            config.dtype,
            &dir,
            &model.decoder,
            &model.config,
            version,
        )?;
        let servers = LlamaServers::start(config, &path, &dir)
            .map_err(|e| TrainError::Engine(e.to_string()))?;
        let policy = ServerPolicy::new(ServerConfig {
            urls: servers.urls(),
            request_timeout: Duration::from_secs(config.request_timeout_secs),
            ..ServerConfig::default()
        })
        .map_err(|e| TrainError::Engine(e.0))?;
        policy.set_policy_version(version);
        Ok(Self::LlamaServer(Box::new(Served {
            policy,
            servers: Mutex::new(servers),
            template,
            dtype: config.dtype,
            dir,
        })))
    }

    /// Serves `decoder` as the weights of `version` from the next generation on. Call it
    /// when no rollout is running.
    pub(super) fn push(
        &self,
        decoder: Decoder,
        config: &ModelConfig,
        version: u64,
    ) -> Result<(), TrainError> {
        match self {
            Self::Engine(engine) => engine
                .load_weights(decoder, version)
                .map_err(|e| TrainError::Engine(e.to_string())),
            Self::LlamaServer(served) => {
                let path = write_policy(
                    &served.template,
                    served.dtype,
                    &served.dir,
                    &decoder,
                    config,
                    version,
                )?;
                let mut servers = served.servers.lock().unwrap_or_else(|p| p.into_inner());
                let old = servers.model().to_path_buf();
                servers
                    .restart(&path)
                    .map_err(|e| TrainError::Engine(e.to_string()))?;
                served.policy.set_policy_version(version);
                if old != path {
                    std::fs::remove_file(&old).map_err(io(&old))?;
                }
                Ok(())
            }
        }
    }

    /// Starts again any llama.cpp server that has exited or does not answer (crashed,
    /// killed, hung), on the policy being served. Call it before a rollout.
    pub(super) fn revive(&self) -> Result<(), TrainError> {
        if let Self::LlamaServer(served) = self {
            let mut servers = served.servers.lock().unwrap_or_else(|p| p.into_inner());
            // Counted in the summary line (`revived`).
            servers
                .revive()
                .map_err(|e| TrainError::Engine(e.to_string()))?;
        }
        Ok(())
    }

    /// Names the weights served now (unchanged) the policy of `version`. Call it when no
    /// rollout is running.
    pub(super) fn relabel(&self, version: u64) {
        match self {
            Self::Engine(engine) => engine.set_policy_version(version),
            Self::LlamaServer(served) => served.policy.set_policy_version(version),
        }
    }

    /// One line on what generated: the servers' requests, retries, failures, restarts and
    /// revivals.
    pub(super) fn summary(&self) -> Option<String> {
        match self {
            Self::Engine(_) => None,
            Self::LlamaServer(served) => {
                let stats = served.policy.stats();
                let (restarts, revived) = {
                    let servers = served.servers.lock().unwrap_or_else(|p| p.into_inner());
                    (servers.restarts(), servers.revived())
                };
                let last = stats
                    .last_failure
                    .map(|why| format!(" (the last failure: {why})"))
                    .unwrap_or_default();
                Some(format!(
                    "llama-server: {} requests, {} retries, {} failures, {} tokens, {} restarts, {} revived{last}",
                    stats.requests,
                    stats.retries,
                    stats.failures,
                    stats.generated_tokens,
                    restarts,
                    revived
                ))
            }
        }
    }
}

/// Writes the policy's weights of `version` to `dir/policy-<version>.gguf` (atomically).
fn write_policy(
    template: &GgufFile,
    dtype: GgufDtype,
    dir: &Path,
    decoder: &Decoder,
    model: &ModelConfig,
    version: u64,
) -> Result<PathBuf, TrainError> {
    let path = dir.join(format!("policy-{version:06}.gguf"));
    template.write_weights(&decoder.to_weights(model), model, dtype, &path)?;
    Ok(path)
}
