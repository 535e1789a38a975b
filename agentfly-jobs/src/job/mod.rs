//! A job's run: its directory opened with its settings, the model present, the data written
//! and checked disjoint, the trainer's configuration written; and what the run has
//! produced so far, read back for the report and the ablations. Every run — a built-in
//! job's or `agentfly run`'s — is a [`TaskSpec`] run by the same stages ([`pipeline`]) into
//! the same report ([`report`]); a built-in job makes its spec from its settings
//! ([`settings`], [`builtin`]) and its [`task`], and `agentfly run` reads it from a file
//! ([`from_file`]).

pub mod builtin;
pub mod from_file;
pub mod pipeline;
pub mod report;
pub mod settings;
pub mod spec;
pub mod task;

pub use settings::Settings;
pub use spec::TaskSpec;
pub use task::{CallFormat, Task};

use crate::JobError;
use crate::calculator::options::RunArgs;
use crate::evaluation::ValPoint;
use crate::report::Eval;
use crate::run_dir::to_json;
use crate::run_dir::{RunDir, read_json, read_jsonl};
use agentfly_core::Sample;
use agentfly_core::data::read_jsonl as read_samples;
use agentfly_core::env::{EnvPool, PoolConfig};
use agentfly_envs::RemoteEnv;
use agentfly_model::io::smollm2;
use agentfly_tools::sandbox::{self, Purpose};
use agentfly_trainer::run::{
    EvalReport, SFT_MODEL, SftReport, StepMetrics, Trainer, TrainerConfig,
};
use std::path::{Path, PathBuf};

/// The run directory's record of what the sandbox enforced (runs that execute code).
pub const SANDBOX_FILE: &str = "sandbox.json";

/// The evaluations of the test split, in the report's order: stage key and row title.
pub const EVALS: [(&str, &str); 4] = [
    ("no_tools", "initial, no tools"),
    ("initial", "initial"),
    ("sft", "after SFT"),
    ("final", "after RL"),
];

/// A prepared run.
#[derive(Debug, Clone)]
pub struct Job {
    /// Its directory.
    pub run: RunDir,
    /// What it runs.
    pub spec: TaskSpec,
    /// A built-in job's settings (its ablations and variants are made from them); none for
    /// a task file's run.
    pub settings: Option<Settings>,
}

impl Job {
    /// The calculator's run directory for `args` (see [`prepare_task`](Self::prepare_task)).
    pub fn prepare(args: &RunArgs) -> Result<Self, JobError> {
        Self::prepare_task(Task::Calculator, args, args.out.clone())
    }

    /// The run directory of `task` for `args` (in `out`, else the preset's): model fetched
    /// when it is the default and absent, the task's tools made ready for this process (the
    /// stages and variants that take the `Job` rely on it), settings compared
    /// with an earlier run's, data generated (or read) and checked disjoint, the system
    /// prompt and the trainer's configuration written.
    pub fn prepare_task(
        task: Task,
        args: &RunArgs,
        out: Option<PathBuf>,
    ) -> Result<Self, JobError> {
        Self::prepare_task_with(task, args, out, |_| {})
    }

    /// [`prepare_task`](Self::prepare_task) with the preset's settings changed by `edit`
    /// (a job's own option, such as the wiki's questions) before anything is compared or
    /// written.
    pub fn prepare_task_with(
        task: Task,
        args: &RunArgs,
        out: Option<PathBuf>,
        edit: impl FnOnce(&mut Settings),
    ) -> Result<Self, JobError> {
        let dir = out.unwrap_or_else(|| Settings::default_dir_of(task, args));
        let model = match &args.model {
            Some(m) => m.clone(),
            None => {
                let m = PathBuf::from(smollm2::DEFAULT_MODEL);
                smollm2::fetch(&m)?;
                m
            }
        };
        if !model.exists() {
            return Err(JobError::State(format!(
                "--model {}: no such file or directory",
                model.display()
            )));
        }
        let model = model.canonicalize().map_err(JobError::io(&model))?;
        let mut settings = match task {
            Task::Calculator => Settings::from_args(args, model),
            Task::WikiQa(format) => Settings::wiki_qa(args, model, format),
            Task::TextWorld => Settings::textworld(args, model),
        };
        edit(&mut settings);
        // Before anything is written: a device this build cannot use would otherwise leave
        // settings.json behind, and the corrected command would be refused as a rerun with
        // other settings.
        agentfly_model::device::parse_device(&settings.device)
            .map_err(|e| JobError::State(format!("--device {}: {e}", settings.device)))?;
        task.prepare_process()?;
        let toolbox = agentfly_core::Toolbox::from_names(&task.tools())
            .map_err(|e| JobError::State(e.to_string()))?;
        let isolation = sandbox::check(&toolbox, Purpose::Train, args.allow_network)
            .map_err(JobError::State)?;
        let run = RunDir::open(&dir, &settings, args.restart)?;
        // What this process's sandbox enforced, for the report (a resumed run says its own).
        if let Some(isolation) = isolation {
            run.write(SANDBOX_FILE, &to_json(&isolation)?)?;
        }
        task.write_data(
            settings.data_seed,
            settings.sizes(),
            settings.questions,
            &run.path("data"),
        )?;
        let job = Self {
            spec: settings.task_spec(&run.path("data"))?,
            run,
            settings: Some(settings),
        };
        let settings = job.builtin()?;
        job.write_files(
            &settings.trainer_toml_header(),
            &settings.task_file_header(),
        )?;
        Ok(job)
    }

    /// Writes the run's `system.txt`, its trainer configuration `run.toml` (after
    /// `config_header`) and its task file `task.toml` (after `task_header`).
    pub fn write_files(&self, config_header: &str, task_header: &str) -> Result<(), JobError> {
        self.run.write("system.txt", &self.spec.system_prompt()?)?;
        let config = self.spec.trainer_config(Path::new(""));
        let config = toml::to_string(&config)
            .map_err(|e| JobError::State(format!("the trainer configuration: {e}")))?;
        self.run
            .write("run.toml", &format!("{config_header}{config}"))?;
        self.run
            .write("task.toml", &self.spec.to_toml(task_header)?)
    }

    /// A built-in job's settings.
    pub fn builtin(&self) -> Result<&Settings, JobError> {
        self.settings.as_ref().ok_or_else(|| {
            JobError::State(format!(
                "{}: a task file's run, not a built-in job's",
                self.run.dir().display()
            ))
        })
    }

    /// A trainer for `config`, from `model` when given (else the configuration's model or
    /// the run's checkpoint), with the pool of the task's world when it has one (for the
    /// text world, a game server per chain running at once).
    pub fn trainer(
        &self,
        config: TrainerConfig,
        model: Option<&Path>,
    ) -> Result<Trainer, JobError> {
        let capacity = config.rollout.env_capacity.max(1);
        let trainer = match model {
            Some(model) => Trainer::with_model(config, model)?,
            None => Trainer::new(config)?,
        };
        if let Some(world) = &self.spec.world {
            trainer.env_pools().insert(EnvPool::<RemoteEnv>::new(
                world.clone(),
                PoolConfig {
                    capacity,
                    ..PoolConfig::default()
                },
            ));
        }
        Ok(trainer)
    }

    /// A path in the run directory.
    pub fn path(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.run.path(rel)
    }

    /// A variant of this run (an ablation, another row shape): RL in `dir` from this run's
    /// model after SFT with `settings`, then greedy accuracy on the test split, written to
    /// `dir/final.json` (read back when it is there). Resumes like the main run; a finished
    /// variant keeps its model and drops its checkpoints (1.6 GB each).
    pub fn variant(&self, dir: &Path, settings: &Settings) -> Result<EvalReport, JobError> {
        self.builtin()?;
        let done = dir.join("final.json");
        if let Some(report) = read_json::<EvalReport>(&done)? {
            return Ok(report);
        }
        let sft_model = self.path("out").join(SFT_MODEL);
        if !sft_model.join("config.json").exists() {
            return Err(JobError::State(format!(
                "{}: the main run has no model after SFT",
                sft_model.display()
            )));
        }
        std::fs::create_dir_all(dir).map_err(JobError::io(dir))?;
        let config_path = dir.join("run.toml");
        let from_run = pathdiff(dir, self.run.dir());
        crate::run_dir::write(
            &config_path,
            &settings.trainer_toml(&sft_model, &from_run, false),
        )?;
        let mut trainer = self.trainer(TrainerConfig::load(&config_path)?, None)?;
        trainer.train()?;
        let report = trainer.evaluate(&self.split("test")?)?;
        crate::run_dir::write(&done, &to_json(&report)?)?;
        let checkpoints = dir.join("out/checkpoints");
        std::fs::remove_dir_all(&checkpoints).map_err(JobError::io(&checkpoints))?;
        Ok(report)
    }

    /// A split's samples (`train`, `val`, `test` or `demos`).
    pub fn split(&self, name: &str) -> Result<Vec<Sample>, JobError> {
        Ok(read_samples(self.path(format!("data/{name}.jsonl")))?)
    }

    /// A split's samples, none when the run has no such split (`val` and `demos` are
    /// optional in a task file).
    pub fn split_if_given(&self, name: &str) -> Result<Vec<Sample>, JobError> {
        if self.path(format!("data/{name}.jsonl")).exists() {
            self.split(name)
        } else {
            Ok(Vec::new())
        }
    }

    /// The evaluations of the test split done so far, in the report's order.
    pub fn evals(&self) -> Result<Vec<Eval>, JobError> {
        let mut out = Vec::new();
        for (key, title) in EVALS {
            if let Some(report) = read_json::<EvalReport>(&self.eval_path(key))? {
                out.push(Eval {
                    key: key.into(),
                    title: title.into(),
                    report,
                });
            }
        }
        Ok(out)
    }

    /// Where the evaluation stage `key` writes its result.
    pub fn eval_path(&self, key: &str) -> PathBuf {
        self.path(format!("evals/{key}.json"))
    }

    /// The RL steps' metrics so far.
    pub fn metrics(&self) -> Result<Vec<StepMetrics>, JobError> {
        read_jsonl(&self.path("out/metrics.jsonl"))
    }

    /// The validation points so far.
    pub fn validation(&self) -> Result<Vec<ValPoint>, JobError> {
        read_jsonl(&self.validation_path())
    }

    /// Where the validation points are.
    pub fn validation_path(&self) -> PathBuf {
        self.path("val.jsonl")
    }

    /// The SFT stage's summary, when SFT ran in this directory.
    pub fn sft(&self) -> Result<Option<SftReport>, JobError> {
        read_json(&self.path("sft.json"))
    }
}

/// The way from `dir` up to `ancestor` (`../..` for a directory two below it).
fn pathdiff(dir: &Path, ancestor: &Path) -> PathBuf {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let depth = dir
        .strip_prefix(ancestor)
        .map_or(0, |rel| rel.components().count());
    (0..depth).map(|_| "..").collect()
}
