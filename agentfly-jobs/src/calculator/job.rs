//! A prepared calculator run: its directory opened with its settings, the model present, the
//! problems written and checked disjoint, the trainer's configuration written; and what the
//! run has produced so far, read back for the report and the ablations.

use super::options::RunArgs;
use super::settings::{Settings, TOOL_PROMPT};
use crate::JobError;
use crate::evaluation::ValPoint;
use crate::report::Eval;
use crate::run_dir::{RunDir, read_json, read_jsonl};
use agentfly_core::Sample;
use agentfly_core::data::read_jsonl as read_samples;
use agentfly_tools::tasks::arithmetic::{SplitSizes, Splits, check_disjoint, splits};
use agentfly_trainer::io::smollm2;
use agentfly_trainer::run::{EvalReport, SftReport, StepMetrics};
use std::path::{Path, PathBuf};

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
    /// Its settings.
    pub settings: Settings,
}

impl Job {
    /// The run directory for `args`: model fetched when it is the default and absent,
    /// settings compared with an earlier run's, data generated (or read) and checked
    /// disjoint, the system prompt and the trainer's configuration written.
    pub fn prepare(args: &RunArgs) -> Result<Self, JobError> {
        let dir = args
            .out
            .clone()
            .unwrap_or_else(|| Settings::default_dir(args));
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
        let settings = Settings::from_args(args, model);
        let run = RunDir::open(&dir, &settings, args.restart)?;
        let job = Self { run, settings };
        job.write_data()?;
        job.run.write("system.txt", TOOL_PROMPT)?;
        job.run.write(
            "run.toml",
            &job.settings
                .trainer_toml(&job.settings.model, Path::new(""), true),
        )?;
        Ok(job)
    }

    /// A path in the run directory.
    pub fn path(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.run.path(rel)
    }

    /// Writes the splits from the problem generator when they are not there yet, then
    /// reads them back and checks that no question is in two of them.
    fn write_data(&self) -> Result<(), JobError> {
        let dir = self.path("data");
        let file = |name: &str| dir.join(format!("{name}.jsonl"));
        if Splits::NAMES.iter().any(|s| !file(s).exists()) {
            let s = &self.settings;
            let sizes = SplitSizes {
                train: s.train,
                val: s.val,
                test: s.test,
                demos: s.demos,
            };
            splits(s.data_seed, sizes)
                .map_err(|e| JobError::State(e.to_string()))?
                .write(&dir)?;
        }
        let data: Vec<(&str, Vec<Sample>)> = Splits::NAMES
            .iter()
            .map(|s| Ok((*s, read_samples(file(s))?)))
            .collect::<Result<_, JobError>>()?;
        let named: Vec<(&str, &[Sample])> = data.iter().map(|(n, d)| (*n, d.as_slice())).collect();
        check_disjoint(&named).map_err(|o| JobError::Overlap {
            dir: dir.clone(),
            overlap: format!(
                "{} sample `{}` and {} sample `{}` ask the same question ({:?})",
                o.first, o.first_id, o.second, o.second_id, o.question
            ),
        })
    }

    /// A split's samples (`train`, `val`, `test` or `demos`).
    pub fn split(&self, name: &str) -> Result<Vec<Sample>, JobError> {
        Ok(read_samples(self.path(format!("data/{name}.jsonl")))?)
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
