//! Building a [`Trainer`]: the configuration checked, tools and reward looked up, data read,
//! the model loaded once (the actor on the autodiff device, the engine serving a copy), the
//! reference and the critic made, and — resuming — the latest checkpoint's weights,
//! optimizer state and position restored.

use super::batch::Batch;
use super::checkpoint::{self, RunState};
use super::config::{ConfigError, TrainerConfig};
use super::error::{TrainError, io};
use super::generator::Generator;
use super::sampler::Sampler;
use super::save::ADAPTER_DIR;
use super::sft::SFT_MODEL;
use super::trainer::{Chains, Trainer};
use crate::train::{Actor, Critic, Reference, ValueHead};
use agentfly_core::data::read_jsonl;
use agentfly_core::env::{EnvPools, PoolConfig};
use agentfly_core::rollout::format::format_by_name;
use agentfly_core::{Rewards, Toolbox};
use agentfly_engine::engine::Engine;
use agentfly_engine::server::LlamaServerConfig;
use agentfly_mcp::McpServers;
use agentfly_model::Pretrained;
use agentfly_model::device::parse_device;
use agentfly_model::model::Rope;
use std::path::Path;

impl Trainer {
    /// Reads the TOML file and builds the run (resuming from its latest checkpoint).
    pub fn from_config_file(path: impl AsRef<Path>) -> Result<Self, TrainError> {
        let path = path.as_ref();
        Self::new(TrainerConfig::load(path)?).map_err(|e| e.in_file(path))
    }

    /// Builds the run; when `output.dir` holds a checkpoint, continues from it.
    pub fn new(config: TrainerConfig) -> Result<Self, TrainError> {
        Self::build(config, true)
    }

    /// The run's setup with the policy loaded from `model` (a checkpoint directory, its
    /// `model/`, or any model path), not resumed: for evaluating a checkpoint.
    pub fn with_model(mut config: TrainerConfig, model: &Path) -> Result<Self, TrainError> {
        config.model.path = if model.join("model").join("config.json").exists() {
            model.join("model")
        } else {
            model.to_path_buf()
        };
        Self::build(config, false)
    }

    fn build(config: TrainerConfig, resume: bool) -> Result<Self, TrainError> {
        let invalid = |message: String| ConfigError {
            path: "<config>".into(),
            message,
        };
        config.validate().map_err(invalid)?;
        agentfly_model::alloc::retain_freed_memory();
        let toolbox = Toolbox::from_names(&config.agent.tools)?;
        // With `[rollout.external]` the agent posts the reward: none is named.
        let reward_names: &[String] = match config.agent.reward.as_str() {
            "" => &[],
            _ => std::slice::from_ref(&config.agent.reward),
        };
        let rewards = Rewards::from_names(reward_names)?;
        let format = format_by_name(&config.agent.format).expect("validated");
        let train = read_jsonl(&config.data.train)?;
        if resume && train.is_empty() && config.train.steps > 0 {
            return Err(ConfigError {
                path: config.data.train.clone(),
                message: "data.train holds no samples: RL needs at least one".into(),
            }
            .into());
        }
        let eval = match &config.data.eval {
            Some(p) => read_jsonl(p)?,
            None => Vec::new(),
        };
        let device = parse_device(&config.model.device)
            .map_err(|message| invalid(format!("model.device: {message}")))?;
        let checkpoint = if resume {
            checkpoint::latest(&config.output.dir.join("checkpoints"))
        } else {
            None
        };
        let saved = match &checkpoint {
            Some(dir) => Some(read_state(&dir.join("state.json"))?),
            None => None,
        };
        // With adapters, a checkpoint's model/ holds them merged: a resumed run starts from
        // the base model again and reads the adapters from adapter/.
        let source = match &checkpoint {
            Some(dir) if config.lora.is_none() => dir.join("model"),
            _ => config.model.path.clone(),
        };
        // Loaded once, on the autodiff device; the engine serves a copy without autodiff,
        // as it does after every update.
        let train_device =
            agentfly_model::device::training(device.clone(), config.train.gradient_checkpointing);
        let mut trained = Pretrained::load(&source, &train_device)?;
        if let Some(lora) = &config.lora {
            trained.decoder = match &checkpoint {
                Some(dir) => {
                    let mut weights = agentfly_model::model::read_adapter(&dir.join(ADAPTER_DIR))?;
                    trained
                        .decoder
                        .with_lora_weights(&trained.config, lora, &mut weights)?
                }
                None => trained
                    .decoder
                    .with_lora(&trained.config, lora, config.train.seed),
            };
        }
        // Weights that come from the base model are dithered within their bf16 cells (seeded:
        // a resumed LoRA run, which starts from the base again, gets the same); a
        // checkpoint's master weights are taken as they are, so a resumed run continues.
        let from_base = source == config.model.path;
        bf16_products(&mut trained.decoder, config.model.bf16, from_base).map_err(invalid)?;
        let serving = Pretrained {
            config: trained.config.clone(),
            decoder: trained.decoder.merged(),
            rope: Rope::for_config(&trained.config, &device),
            tokenizer: trained.tokenizer.clone(),
            tokenizer_config: trained.tokenizer_config.clone(),
            source: source.clone(),
        };
        let reference = if config.train.measures_kl() || config.algorithm.estimator.needs_kl() {
            // The reference is the starting model, or the model after `[sft]`: a resumed
            // run reads it again.
            let sft_model = config.output.dir.join(SFT_MODEL);
            Some(Reference {
                decoder: match &saved {
                    Some(s) if s.sft_done && sft_model.join("config.json").exists() => {
                        let mut d = Pretrained::load(&sft_model, &device)?.decoder;
                        bf16_products(&mut d, config.model.bf16, false).map_err(invalid)?;
                        d
                    }
                    Some(_) => {
                        let mut d = Pretrained::load(&config.model.path, &device)?.decoder;
                        bf16_products(&mut d, config.model.bf16, true).map_err(invalid)?;
                        d
                    }
                    None => trained.decoder.merged(),
                },
            })
        } else {
            None
        };
        let (tokenizer, template, eos) = serving.chat_parts()?;
        let model_config = serving.config.clone();
        let tokenizer_config = serving.tokenizer_config.clone();
        let version = saved.as_ref().map_or(0, |s| s.step as u64);
        let generator = match (&config.rollout.llama_server, &config.rollout.servers) {
            (None, Some(servers)) => {
                Generator::external(servers, &serving, version, &config.output.dir)?
            }
            (Some(server), _) => {
                let server = LlamaServerConfig {
                    gguf: server.gguf.clone().or_else(|| {
                        let path = &config.model.path;
                        path.extension()
                            .is_some_and(|e| e == "gguf")
                            .then(|| path.clone())
                    }),
                    ..server.clone()
                };
                Generator::llama_server(&server, &serving, version, &config.output.dir)?
            }
            (None, None) => {
                let engine = Engine::start(serving, config.rollout.engine.clone());
                engine.set_policy_version(version);
                Generator::Engine(engine)
            }
        };
        let decoder = match &saved {
            // The optimizer's state is keyed by parameter ids: give them back.
            Some(saved) => checkpoint::with_param_ids(trained.decoder, &saved.param_ids),
            None => trained.decoder,
        };
        let mut actor = Actor::new(
            decoder,
            trained.rope,
            config.optim.clone(),
            config.train.steps,
        );
        // The policy is scored at the temperature its rollouts sample at.
        actor.temperature = config.chain.temperature;
        let mut critic = config.algorithm.estimator.needs_values().then(|| {
            Critic::new(
                ValueHead::new(trained.config.hidden_size, &train_device),
                &config.optim,
                None,
            )
        });
        let mut sampler = Sampler::new(train, config.train.seed);
        let (mut step, mut resumed_from, mut sft_done) = (0, 0, false);
        let mut pending = None;
        if let (Some(dir), Some(saved)) = (&checkpoint, saved) {
            pending = Batch::read(dir)?;
            let optim_path = dir.join("optimizer.bpk");
            let optim = config
                .optim
                .init()
                .load(&optim_path)
                .map_err(|e| io(&optim_path)(format!("{e:?}")))?;
            actor.set_optimizer(optim);
            if critic.is_some() {
                critic = Some(
                    checkpoint::load_critic(dir, &config.optim, &train_device)
                        .map_err(io(&dir.join("critic.json")))?,
                );
            }
            actor.step = saved.step;
            sampler.cursor = saved.cursor;
            (step, resumed_from, sft_done) = (saved.step, saved.step, saved.sft_done);
        }
        let pools = EnvPools::new(PoolConfig {
            capacity: config.rollout.env_capacity.max(1),
            ..PoolConfig::default()
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(io(Path::new("<tokio runtime>")))?;
        // MCP servers' tools join the registered ones; their sessions live on the runtime
        // the chains run on.
        let (toolbox, mcp) = if config.agent.mcp.is_empty() {
            (toolbox, None)
        } else {
            let servers = runtime
                .block_on(McpServers::start(&config.agent.mcp))
                .and_then(|servers| Ok((servers.extend(toolbox)?, servers)))
                .map_err(|e| invalid(format!("agent.mcp: {e}")))?;
            (servers.0, Some(servers.1))
        };
        let external = match &config.rollout.external {
            Some(external) => {
                let model = agentfly_serve::ChatModel::new(
                    "agentfly-policy",
                    tokenizer.clone(),
                    template.clone(),
                    eos.clone(),
                    model_config.max_position_embeddings,
                )
                .map_err(|e| invalid(format!("rollout.external: {e}")))?;
                Some(super::external::ExternalAgents::start(
                    external, model, &runtime,
                )?)
            }
            None => None,
        };
        Ok(Self {
            config,
            chains: Chains {
                toolbox,
                rewards,
                format,
                tokenizer,
                template,
                eos,
                generator,
                pools,
                _mcp: mcp,
                external,
                runtime,
            },
            model_config,
            tokenizer_config,
            actor,
            reference,
            critic,
            sampler,
            pending,
            eval,
            step,
            sft_done,
            resumed_from,
            device,
            written: Default::default(),
            writing: Default::default(),
            boards: Default::default(),
        })
    }
}

/// A checkpoint's `state.json`.
fn read_state(path: &Path) -> Result<RunState, TrainError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    serde_json::from_str(&text).map_err(io(path))
}

/// The seed of the bf16 dither: fixed, so that every start from the same weights agrees.
const BF16_DITHER_SEED: u64 = 0xbf16;

/// `[model] bf16`: the decoder's products of many rows in bf16 on AMX, its weights dithered
/// within their bf16 cells first when they come from the base model (`fresh`); an error
/// where the CPU has no AMX or the model is not on the CPU.
fn bf16_products(
    decoder: &mut agentfly_model::model::Decoder,
    on: bool,
    fresh: bool,
) -> Result<(), String> {
    if !on {
        return Ok(());
    }
    if !decoder.use_bf16_products(true) {
        return Err(
            "model.bf16: bf16 products need Intel AMX and the cpu device (this CPU or \
                    device has none)"
                .into(),
        );
    }
    if fresh {
        decoder.dither_for_bf16(BF16_DITHER_SEED);
    }
    Ok(())
}
