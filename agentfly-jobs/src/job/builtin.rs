//! The built-in jobs as task files: a job's settings and its task make the
//! [`TaskSpec`] that the shared pipeline runs, and that each job writes as `task.toml`
//! (`agentfly run` on it runs the same job on the same data).

use super::spec::{OutputSettings, ReportSection, SftSettings, SplitFiles, TaskSection, TaskSpec};
use super::{CallFormat, Settings, Task};
use crate::JobError;
use agentfly_envs::RemoteConfig;
use std::path::Path;

impl Task {
    /// Its name in a task file, and so of `agentfly run`'s default run directory.
    pub fn spec_name(self) -> String {
        match self {
            Self::Calculator | Self::TextWorld => self.command().into(),
            Self::WikiQa(format) => format!("{}-{}", self.command(), format.name()),
        }
    }

    /// The report's words for it: title, how the splits are disjoint, and what the
    /// closed-book result shows.
    fn report_words(self) -> (String, &'static str, &'static str) {
        match self {
            Self::Calculator => (
                "Calculator agent: SmolLM2-135M-Instruct learns to use a calculator".into(),
                "by normalised question",
                "the problems need the calculator",
            ),
            Self::WikiQa(format) => (
                format!(
                    "Wiki agent ({}): SmolLM2-135M-Instruct learns to look answers up",
                    match format {
                        CallFormat::Hermes => "JSON tool calls",
                        CallFormat::Code => "code as action",
                    }
                ),
                "by question and by source article",
                "the answers must be looked up",
            ),
            Self::TextWorld => (
                "Text-world agent: SmolLM2-135M-Instruct learns to play TextWorld-Commonsense"
                    .into(),
                "by game (each split from its own fold's seeds) and by first observation",
                "a game is played only by acting in it",
            ),
        }
    }
}

impl Settings {
    /// The task file of this run, its splits in `data_dir` (the run's `data/`): the same
    /// trainer configuration as [`Settings::trainer_config`] (a test holds them equal), the
    /// task's prompts, world and report words.
    pub fn task_spec(&self, data_dir: &Path) -> Result<TaskSpec, JobError> {
        self.task_spec_with(data_dir, crate::textworld::games::world)
    }

    /// [`task_spec`](Self::task_spec) with the text world's server from `world`.
    pub(crate) fn task_spec_with(
        &self,
        data_dir: &Path,
        world: impl FnOnce() -> Result<RemoteConfig, JobError>,
    ) -> Result<TaskSpec, JobError> {
        let task = self.task;
        let config = self.trainer_config(&self.model, Path::new(""), true);
        let sft = config.sft.clone().expect("a job's configuration has [sft]");
        let (title, disjoint, closed_book) = task.report_words();
        let split = |name: &str| data_dir.join(format!("{name}.jsonl"));
        Ok(TaskSpec {
            task: TaskSection {
                name: task.spec_name(),
                items: task.items().into(),
                closed_book_prompt: task.has_closed_book().then(|| task.no_tool_prompt().into()),
                eval_every: self.eval_every,
                preset: self.preset.clone(),
            },
            data: SplitFiles {
                train: split("train"),
                val: Some(split("val")),
                test: split("test"),
                demos: Some(split("demos")),
            },
            model: config.model,
            agent: agentfly_trainer::run::AgentSection {
                system_prompt: task.tool_prompt(),
                system_prompt_file: None,
                ..config.agent
            },
            chain: config.chain,
            rollout: config.rollout,
            algorithm: config.algorithm,
            train: config.train,
            optim: config.optim,
            sft: SftSettings {
                epochs: sft.epochs,
                batch_size: sft.batch_size,
                lr: sft.lr,
                micro_batch_tokens: sft.micro_batch_tokens,
            },
            lora: config.lora,
            output: OutputSettings {
                checkpoint_every: config.output.checkpoint_every,
                keep_checkpoints: config.output.keep_checkpoints,
                tensorboard: config.output.tensorboard,
            },
            eval: config.eval,
            world: match task {
                Task::TextWorld => Some(world()?),
                _ => None,
            },
            report: ReportSection {
                title: Some(title),
                disjoint: Some(disjoint.into()),
                demos: Some(task.demos_description().into()),
                closed_book: Some(closed_book.into()),
                reward: Some(self.reward_words()),
                score: (task == Task::TextWorld).then(|| {
                    "The game's own score (the share of the task done, 0 to 1)".to_string()
                }),
            },
            presets: Default::default(),
        })
    }

    /// The reward in the report's words.
    fn reward_words(&self) -> String {
        if let Some(reward) = &self.reward {
            let bonus = if self.format_bonus != 0.0 {
                format!(", shaped with a format bonus of {}", self.format_bonus)
            } else {
                String::new()
            };
            format!("reward `{reward}`{bonus} (accuracy counts its `correct` metric)")
        } else if self.format_bonus != 0.0 {
            format!(
                "reward shaped with a format bonus of {} (accuracy counts exact answers only)",
                self.format_bonus
            )
        } else if self.task == Task::TextWorld {
            "reward 1 when the game says the task is complete, else 0 (the game's own score \
             reported apart)"
                .into()
        } else {
            "reward 1 for the exact answer submitted, else 0".into()
        }
    }

    /// The header of the `task.toml` a job writes.
    pub fn task_file_header(&self) -> String {
        format!(
            "# The {} job as a task file, written by `agentfly {}`: `agentfly run` on it runs\n\
             # the same pipeline on this run's data (docs/tasks.md).\n\n",
            self.task.name(),
            self.task.command()
        )
    }
}
