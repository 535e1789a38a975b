//! What the chains sample from, and how each update's weights reach it: the built-in
//! engine (the new decoder handed over in memory), llama.cpp servers the trainer runs
//! (`[rollout.llama_server]`: the policy written as a GGUF file, then the servers restarted
//! on it), or vLLM / SGLang servers run elsewhere (`[rollout.servers]`: the policy written
//! in Hugging Face layout where they can read it, then loaded by each). Every generation
//! records the version of the weights that made it: the number of RL updates behind them.

use super::checkpoint;
use super::error::{TrainError, io};
use crate::sync::lock;
use crate::train::token_logprobs;
use agentfly_core::rollout::Policy;
use agentfly_engine::engine::Engine;
use agentfly_engine::server::probe::{PROBE_TEXT, Probe};
use agentfly_engine::server::{
    ExternalServersConfig, LlamaServerConfig, LlamaServers, ServerConfig, ServerPolicy, WeightSync,
};
use agentfly_model::Pretrained;
use agentfly_model::io::{GgufDtype, GgufFile, save_weights};
use agentfly_model::model::{Decoder, ModelConfig, Rope};
use burn::tensor::{Int, Tensor, TensorData};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// The policy's sampler during a run.
pub(super) enum Generator {
    /// The built-in engine, serving a copy of the actor.
    Engine(Engine),
    /// llama.cpp servers on the policy's latest GGUF.
    LlamaServer(Box<Served>),
    /// vLLM or SGLang servers run elsewhere, on the policy's latest directory.
    External(Box<External>),
}

/// vLLM or SGLang servers, the policy over them and where the policies are written.
pub(super) struct External {
    policy: ServerPolicy,
    sync: WeightSync,
    /// Where the policies are written.
    dir: PathBuf,
    /// The same directory as the servers see it.
    server_dir: PathBuf,
    /// The policy directory the servers were last given, removed when the next one is.
    current: Mutex<Option<PathBuf>>,
    /// Pushes made, and their summed seconds.
    pushes: Mutex<(u64, f64)>,
    /// The probe every server scores after a push (empty: no check).
    probe: Vec<u32>,
    /// The trainer's log-probabilities of the probe under the weights served now.
    served: Mutex<Option<Vec<f32>>>,
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
            Self::External(external) => &external.policy,
        }
    }

    /// The built-in engine's counters (none for servers).
    pub(super) fn engine_stats(&self) -> Option<agentfly_engine::engine::EngineStats> {
        match self {
            Self::Engine(engine) => Some(engine.stats()),
            _ => None,
        }
    }

    /// The servers of `config`, given `model`'s weights as `version` (so they serve exactly
    /// the trainer's policy from the first rollout on, a resumed run's too).
    pub(super) fn external(
        config: &ExternalServersConfig,
        model: &Pretrained,
        version: u64,
        output: &Path,
    ) -> Result<Self, TrainError> {
        let sync = WeightSync::new(config).map_err(|e| TrainError::Engine(e.to_string()))?;
        let dir = config.dir.clone().unwrap_or_else(|| output.join("served"));
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        // What an earlier process left (a killed run's policies, an unfinished write): each
        // is a whole copy of the model.
        for entry in std::fs::read_dir(&dir).map_err(io(&dir))?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if ["policy-", ".policy-", ".incomplete-policy-"]
                .iter()
                .any(|p| name.starts_with(p))
            {
                let path = entry.path();
                std::fs::remove_dir_all(&path).map_err(io(&path))?;
            }
        }
        let server_dir = match &config.server_dir {
            Some(d) => d.clone(),
            None => std::path::absolute(&dir).map_err(io(&dir))?,
        };
        let policy = ServerPolicy::new(ServerConfig {
            urls: config.urls.clone(),
            api: config.api,
            model: config.model.clone(),
            request_timeout: Duration::from_secs(config.request_timeout_secs),
            api_key: config
                .api_key()
                .map_err(|e| TrainError::Engine(e.to_string()))?,
            ..ServerConfig::default()
        })
        .map_err(|e| TrainError::Engine(e.0))?;
        let probe = match config.probe_tokens {
            0 => Vec::new(),
            n => {
                let (tokenizer, _, _) = model
                    .chat_parts()
                    .map_err(|e| TrainError::Engine(format!("the probe's tokenizer: {e}")))?;
                let mut ids = tokenizer
                    .encode(PROBE_TEXT, false)
                    .map_err(|e| TrainError::Engine(format!("tokenizing the probe: {e}")))?;
                // As many tokens as asked: the text again when it is short.
                let text = ids.clone();
                while ids.len() < n && !text.is_empty() {
                    ids.extend_from_slice(&text);
                }
                ids.truncate(n.max(2));
                ids
            }
        };
        let generator = Self::External(Box::new(External {
            policy,
            sync,
            dir,
            server_dir,
            current: Mutex::new(None),
            pushes: Mutex::new((0, 0.0)),
            probe,
            served: Mutex::new(None),
        }));
        generator.push(model.decoder.clone(), &model.config, &model.rope, version)?;
        Ok(generator)
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
        rope: &Rope,
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
                let mut servers = lock(&served.servers);
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
            Self::External(external) => external.push(&decoder, config, rope, version),
        }
    }

    /// Starts again any llama.cpp server that has exited or does not answer (crashed,
    /// killed, hung), on the policy being served. Call it before a rollout.
    pub(super) fn revive(&self) -> Result<(), TrainError> {
        if let Self::LlamaServer(served) = self {
            let mut servers = lock(&served.servers);
            // Counted in the summary line (`revived`).
            servers
                .revive()
                .map_err(|e| TrainError::Engine(e.to_string()))?;
        }
        Ok(())
    }

    /// Frees the in-process engine's weights and caches for the length of an update,
    /// which a [`Generator::push`] of the new weights ends; the servers' processes keep
    /// theirs. Whether it released anything. Call it when no rollout is running.
    pub(super) fn release(&self) -> Result<bool, TrainError> {
        match self {
            Self::Engine(engine) => engine
                .release_weights()
                .map(|()| true)
                .map_err(|e| TrainError::Engine(e.to_string())),
            Self::LlamaServer(_) | Self::External(_) => Ok(false),
        }
    }

    /// Names the weights served now (unchanged) the policy of `version`. Call it when no
    /// rollout is running.
    pub(super) fn relabel(&self, version: u64) {
        match self {
            Self::Engine(engine) => engine.set_policy_version(version),
            Self::LlamaServer(served) => served.policy.set_policy_version(version),
            Self::External(external) => external.policy.set_policy_version(version),
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
                    let servers = lock(&served.servers);
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
            Self::External(external) => {
                let stats = external.policy.stats();
                let (pushes, seconds) = *lock(&external.pushes);
                let last = stats
                    .last_failure
                    .map(|why| format!(" (the last failure: {why})"))
                    .unwrap_or_default();
                Some(format!(
                    "servers: {} requests, {} retries, {} failures, {} tokens, {pushes} weight \
                     pushes ({seconds:.1} s){last}",
                    stats.requests, stats.retries, stats.failures, stats.generated_tokens,
                ))
            }
        }
    }
}

impl External {
    /// Writes `decoder` as `policy-<version>/` (Hugging Face layout, atomically), has every
    /// server load it and checks each serves it (the probe), then removes the directory
    /// they were given before.
    fn push(
        &self,
        decoder: &Decoder,
        config: &ModelConfig,
        rope: &Rope,
        version: u64,
    ) -> Result<(), TrainError> {
        let start = std::time::Instant::now();
        let name = format!("policy-{version:06}");
        let path = self.dir.join(&name);
        checkpoint::replace_dir(&path, |tmp| {
            save_weights(tmp, decoder, config).map_err(std::io::Error::other)
        })
        .map_err(io(&path))?;
        self.sync
            .push(&self.server_dir.join(&name))
            .map_err(|e| TrainError::Engine(e.to_string()))?;
        if self.probe.len() >= 2 {
            let probe = Probe {
                logprobs: probe_logprobs(decoder, rope, &self.probe),
                ids: self.probe.clone(),
            };
            let mut served = lock(&self.served);
            self.sync
                .verify(&probe, served.as_deref())
                .map_err(|e| TrainError::Engine(format!("policy {version}: {e}")))?;
            *served = Some(probe.logprobs);
        }
        self.policy.set_policy_version(version);
        let old = lock(&self.current).replace(path.clone());
        if let Some(old) = old.filter(|old| *old != path)
            && let Err(e) = std::fs::remove_dir_all(&old)
        {
            // The servers have the new weights; a stale copy costs disk, not correctness.
            eprintln!("could not remove the served policy {}: {e}", old.display());
        }
        let mut pushes = lock(&self.pushes);
        pushes.0 += 1;
        pushes.1 += start.elapsed().as_secs_f64();
        Ok(())
    }
}

/// The log-probability under `decoder` of each of `ids` after the first, given those
/// before it (temperature 1).
fn probe_logprobs(decoder: &Decoder, rope: &Rope, ids: &[u32]) -> Vec<f32> {
    let device = decoder.embed.val().device();
    let ids = Tensor::<2, Int>::from_data(
        TensorData::new(ids.iter().map(|&t| i64::from(t)).collect(), [1, ids.len()]),
        &device,
    );
    let (logprobs, _) = token_logprobs(decoder, rope, ids, false);
    logprobs.into_data().try_to_vec::<f32>().unwrap_or_default()
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
