//! Everything that decides a run's results (`settings.json`), the presets of the
//! calculator and wiki-qa jobs, and the trainer configuration it implies, built as a
//! `TrainerConfig` value and serialised.

use super::task::{CallFormat, Task};
use crate::calculator::options::{Algorithm, RunArgs};
use agentfly_core::rl::Estimator;
use agentfly_engine::server::LlamaServerConfig;
use agentfly_model::model::LoraConfig;
use agentfly_tools::tasks::arithmetic::SplitSizes;
use agentfly_tools::tasks::wiki_qa::Questions;
use agentfly_trainer::run::{
    AgentSection, AlgorithmSection, DataSection, EvalSection, McpServerConfig, ModelSection,
    OutputSection, RolloutSection, RowShape, SftSection, TrainSection, TrainerConfig,
};
use agentfly_trainer::train::{LossAggregation, OptimConfig, PolicyLossConfig};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Everything that decides a run's results. Written to `settings.json`; a rerun with other
/// settings is refused instead of mixing two runs in one directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// What the job trains for (absent in a calculator run's file).
    #[serde(default, skip_serializing_if = "Task::is_calculator")]
    pub task: Task,
    /// `default`, `full` or `smoke`.
    pub preset: String,
    /// The model file or directory.
    pub model: PathBuf,
    /// The device.
    pub device: String,
    /// Seed of the problem generator.
    pub data_seed: u64,
    /// RL training problems.
    pub train: usize,
    /// Validation problems (evaluated during RL).
    pub val: usize,
    /// Held-out test problems.
    pub test: usize,
    /// SFT demonstrations (of the task's narrow form).
    pub demos: usize,
    /// SFT epochs.
    pub sft_epochs: usize,
    /// SFT batch size.
    pub sft_batch: usize,
    /// SFT learning rate.
    pub sft_lr: f64,
    /// The RL algorithm.
    pub algorithm: Algorithm,
    /// RL steps.
    pub steps: usize,
    /// Problems per RL step.
    pub samples_per_step: usize,
    /// Chains per problem.
    pub chains: usize,
    /// Rollout rounds per step to replace groups with equal rewards.
    pub max_rounds: usize,
    /// RL learning rate.
    pub lr: f64,
    /// Weight of the KL penalty to the reference policy (`--kl-coef`; 0: reported only).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kl_coef: f32,
    /// Seed of rollouts and data order.
    pub seed: u64,
    /// Reward shaping bonus (0: off).
    pub format_bonus: f32,
    /// The reward, when not the task's own (`--reward`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<String>,
    /// Loss only on sampled tokens.
    pub mask: bool,
    /// Evaluate on the validation split every this many steps (and at the last).
    pub eval_every: usize,
    /// Train low-rank adapters instead of every weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraConfig>,
    /// Roll out the next step's batch during each update (`rollout.overlap`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overlap: bool,
    /// Roll out on llama.cpp servers the trainer runs (`rollout.llama_server`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub llama_server: bool,
    /// Products in bf16 on AMX (`model.bf16`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bf16: bool,
    /// The training rows' shape; one row per turn learns with a per-sequence mean
    /// (`seq-mean-token-mean`), as L0's step-level samples do — under the default
    /// token-mean the two shapes give the same loss.
    #[serde(default, skip_serializing_if = "RowShape::is_trajectory")]
    pub rows: RowShape,
    /// MCP servers whose tools join the task's (`--mcp`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<McpServerConfig>,
    /// The wiki's questions: the template families, or with the natural ones too
    /// (`agentfly wiki-qa --questions natural`).
    #[serde(default, skip_serializing_if = "is_templates")]
    pub questions: Questions,
}

/// The default questions (left out of `settings.json`, so files from before still match).
fn is_templates(questions: &Questions) -> bool {
    *questions == Questions::Templates
}

/// Is a weight 0 (left out of `settings.json`, so files from before it still match)?
fn is_zero(weight: &f32) -> bool {
    *weight == 0.0
}

impl Settings {
    /// The preset the options name, with their overrides.
    pub fn from_args(args: &RunArgs, model: PathBuf) -> Self {
        let mut s = Self {
            task: Task::Calculator,
            preset: "default".into(),
            model,
            device: args.device.clone(),
            data_seed: 0,
            train: 600,
            val: 48,
            test: 48,
            demos: 32,
            sft_epochs: 2,
            sft_batch: 8,
            sft_lr: 1e-4,
            algorithm: args.algorithm,
            steps: 10,
            samples_per_step: 6,
            chains: 4,
            max_rounds: 2,
            lr: 2e-5,
            kl_coef: args.kl_coef,
            seed: args.seed,
            format_bonus: args.format_bonus,
            reward: args.reward.clone(),
            mask: !args.no_mask,
            eval_every: 5,
            lora: None,
            overlap: args.overlap,
            llama_server: args.llama_server,
            bf16: args.bf16,
            rows: RowShape::Trajectory,
            mcp: args.mcp.clone(),
            questions: Questions::Templates,
        };
        if args.full {
            s = Self {
                preset: "full".into(),
                train: 2000,
                val: 100,
                test: 200,
                steps: 40,
                samples_per_step: 8,
                max_rounds: 3,
                eval_every: 10,
                ..s
            };
        }
        if args.smoke {
            s = Self {
                preset: "smoke".into(),
                train: 24,
                val: 4,
                test: 6,
                demos: 8,
                sft_epochs: 1,
                sft_batch: 4,
                steps: 2,
                samples_per_step: 2,
                chains: 4,
                max_rounds: 2,
                eval_every: 1,
                ..s
            };
        }
        if let Some(steps) = args.steps {
            s.steps = steps;
        }
        if args.lora {
            // LoRA's best learning rate is about ten times full fine-tuning's.
            s.lora = Some(LoraConfig::default());
            s.sft_lr *= 10.0;
            s.lr *= 10.0;
        }
        if let Some(lr) = args.lr {
            s.lr = lr;
        }
        s
    }

    /// The wiki-qa job's preset for `format`, with the options' overrides.
    pub fn wiki_qa(args: &RunArgs, model: PathBuf, format: CallFormat) -> Self {
        let base = Self::from_args(args, model);
        // Eight chains per question: with four, nearly every group of the hard families
        // failed together (and of the narrow one succeeded together), so GRPO had little
        // to learn from (RESULTS.md, the first wiki-qa run). SFT makes one pass over 48
        // demonstrations: as accurate as two over 32 (66 vs 68/150), in 94 s against 118.
        // 300 test questions: on 150, the code format's RL gain of 13 points (66 -> 86)
        // left the 95% intervals touching; the second 150 are drawn after the training
        // split, so the models are those of the 150-question runs. Validation only after
        // the last step (each point takes 20-40 s and selects nothing).
        let mut s = Self {
            task: Task::WikiQa(format),
            train: 600,
            val: 45,
            test: 300,
            demos: 48,
            sft_epochs: 1,
            samples_per_step: 5,
            chains: 8,
            eval_every: 10,
            ..base.clone()
        };
        if args.full {
            s = Self {
                train: 1500,
                val: 90,
                test: 300,
                ..s
            };
        }
        if args.smoke {
            s = Self {
                train: 24,
                val: 3,
                test: 6,
                demos: 8,
                samples_per_step: base.samples_per_step,
                chains: base.chains,
                eval_every: base.eval_every,
                ..s
            };
        }
        s
    }

    /// The text-world job's preset, with the options' overrides: 100 held-out games (the
    /// test fold's), 5 steps of one round of 4 training games × 8 chains. SFT makes one pass
    /// over 48 demonstrations: two passes over 32 left a nearly deterministic policy
    /// (0.03–0.05 nats per sampled token), whose groups of chains mostly played alike and
    /// taught GRPO nothing (RESULTS.md, run 2). The default fits about 30 minutes on 2
    /// cores: a step of two rounds took ~5 minutes, the second round for the three or four
    /// groups the first dropped, so 8 such steps alone would take 40 (RESULTS.md, run 5).
    pub fn textworld(args: &RunArgs, model: PathBuf) -> Self {
        let base = Self::from_args(args, model);
        let mut s = Self {
            task: Task::TextWorld,
            train: 400,
            val: 20,
            test: 100,
            demos: 48,
            sft_epochs: 1,
            steps: if args.full || args.smoke || args.steps.is_some() {
                base.steps
            } else {
                5
            },
            max_rounds: if args.full || args.smoke {
                base.max_rounds
            } else {
                1
            },
            samples_per_step: 4,
            chains: 8,
            ..base.clone()
        };
        if args.full {
            s = Self {
                train: 1000,
                val: 50,
                test: 300,
                ..s
            };
        }
        if args.smoke {
            s = Self {
                train: 8,
                val: 2,
                test: 3,
                demos: 4,
                samples_per_step: 2,
                chains: 4,
                ..s
            };
        }
        s
    }

    /// The run directory's name under `target/runs/` for a preset.
    pub fn default_dir(args: &RunArgs) -> PathBuf {
        Self::default_dir_of(Task::Calculator, args)
    }

    /// The run directory's name under `target/runs/` for `task` and a preset.
    pub fn default_dir_of(task: Task, args: &RunArgs) -> PathBuf {
        let preset = if args.full {
            "-full"
        } else if args.smoke {
            "-smoke"
        } else {
            ""
        };
        let lora = if args.lora { "-lora" } else { "" };
        let overlap = if args.overlap { "-overlap" } else { "" };
        let bf16 = if args.bf16 { "-bf16" } else { "" };
        let server = if args.llama_server {
            "-llama-server"
        } else {
            ""
        };
        let reward = args
            .reward
            .as_ref()
            .map(|r| format!("-{r}"))
            .unwrap_or_default();
        let run = format!(
            "target/runs/{}{preset}{lora}{overlap}{bf16}{server}{reward}",
            task.command()
        );
        PathBuf::from(match task {
            Task::Calculator | Task::TextWorld => run,
            Task::WikiQa(format) => format!("{run}/{}", format.name()),
        })
    }

    /// The sizes of the run's splits.
    pub fn sizes(&self) -> SplitSizes {
        SplitSizes {
            train: self.train,
            val: self.val,
            test: self.test,
            demos: self.demos,
        }
    }

    /// The advantage estimator of the run's algorithm.
    pub fn estimator(&self) -> Estimator {
        match self.algorithm {
            Algorithm::Grpo => Estimator::Grpo {
                normalize_std: true,
            },
            Algorithm::Rloo => Estimator::Rloo {},
            Algorithm::ReinforcePlusPlus => Estimator::ReinforcePlusPlus {
                gamma: 1.0,
                kl_coef: 0.0,
            },
            Algorithm::Ppo => Estimator::Gae {
                gamma: 1.0,
                lambda: 0.95,
            },
        }
    }

    /// The trainer's configuration for this run starting from `model`, with `[sft]` when
    /// `sft`. `run_dir` is the way from the configuration's directory to the run directory
    /// (empty for the main run), where `data/` and `system.txt` are; paths stay relative,
    /// as `TrainerConfig::load` resolves them against the file's directory.
    pub fn trainer_config(&self, model: &Path, run_dir: &Path, sft: bool) -> TrainerConfig {
        let data = run_dir.join("data");
        TrainerConfig {
            model: ModelSection {
                path: model.to_path_buf(),
                device: self.device.clone(),
                bf16: self.bf16,
            },
            data: DataSection {
                train: data.join("train.jsonl"),
                eval: Some(data.join("test.jsonl")),
            },
            agent: AgentSection {
                tools: self.task.tools(),
                reward: self
                    .reward
                    .clone()
                    .unwrap_or_else(|| self.task.reward().into()),
                format: self.task.format().into(),
                system_prompt: String::new(),
                system_prompt_file: Some(run_dir.join("system.txt")),
                format_bonus: self.format_bonus,
                resources: self.task.resources(),
                mcp: self.mcp.clone(),
            },
            chain: self.task.chain(),
            rollout: RolloutSection {
                chains: self.chains,
                samples_per_step: self.samples_per_step,
                max_rounds: self.max_rounds,
                overlap: self.overlap,
                // The servers take their metadata from the GGUF the run started from (the
                // RL run itself starts from the SFT model's directory).
                llama_server: self.llama_server.then(|| LlamaServerConfig {
                    gguf: Some(self.model.clone()),
                    ..LlamaServerConfig::default()
                }),
                ..self.task.rollout()
            },
            algorithm: AlgorithmSection {
                estimator: self.estimator(),
                mask: self.mask,
                rows: self.rows,
            },
            train: TrainSection {
                steps: self.steps,
                seed: self.seed,
                micro_batch_tokens: 4096,
                // The reference model's pass (a sixth of an update) only for a KL penalty.
                track_kl: self.kl_coef != 0.0,
                // PPO as its users run it: several optimizer steps per batch, so the ratio
                // leaves 1 and the clip acts. The group estimators take one step.
                ppo_epochs: if self.algorithm == Algorithm::Ppo {
                    2
                } else {
                    1
                },
                mini_batches: if self.algorithm == Algorithm::Ppo {
                    2
                } else {
                    1
                },
                loss: PolicyLossConfig {
                    kl_coef: self.kl_coef,
                    aggregation: match self.rows {
                        RowShape::Trajectory => LossAggregation::TokenMean,
                        RowShape::Turns => LossAggregation::SeqMeanTokenMean,
                    },
                    ..PolicyLossConfig::default()
                },
                ..TrainSection::default()
            },
            optim: OptimConfig {
                lr: self.lr,
                ..OptimConfig::default()
            },
            sft: sft.then(|| SftSection {
                data: data.join("demos.jsonl"),
                epochs: self.sft_epochs,
                batch_size: self.sft_batch,
                lr: self.sft_lr,
                micro_batch_tokens: 4096,
            }),
            lora: self.lora.clone(),
            output: OutputSection {
                dir: "out".into(),
                checkpoint_every: 1,
                // A smoke run checks the machinery and needs only the latest to resume:
                // a full model's checkpoint is ~1.6 GB (weights and AdamW's moments).
                keep_checkpoints: if self.preset == "smoke" { 1 } else { 2 },
                tensorboard: true,
            },
            eval: EvalSection::default(),
        }
    }

    /// [`Settings::trainer_config`] as the TOML file `agentfly train --config` reads.
    pub fn trainer_toml(&self, model: &Path, run_dir: &Path, sft: bool) -> String {
        let config = self.trainer_config(model, run_dir, sft);
        format!(
            "{}{}",
            self.trainer_toml_header(),
            toml::to_string(&config).expect("a trainer configuration serializes")
        )
    }

    /// The header of the job's trainer configurations.
    pub fn trainer_toml_header(&self) -> String {
        format!(
            "# The {} job's trainer configuration, written by `agentfly {}`.\n\
             # `agentfly train --config` and `agentfly eval --config` read it as it is.\n\n",
            self.task.name(),
            self.task.command(),
        )
    }
}

#[cfg(test)]
pub(crate) mod tests;
