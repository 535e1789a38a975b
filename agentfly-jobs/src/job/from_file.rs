//! `agentfly run TASK.toml`: the jobs' pipeline for a task written in a file — closed-book
//! and initial evaluations, SFT when there are demonstrations, RL with validation points,
//! the held-out table with intervals and verdicts, charts, sample trajectories — resumed
//! stage by stage when the command is run again, refused when the settings or the data
//! changed.

use super::spec::TaskSpec;
use super::{Job, SANDBOX_FILE, pipeline};
use crate::JobError;
use crate::run_dir::{RunDir, to_json};
use agentfly_core::Sample;
use agentfly_core::data::read_jsonl as read_samples;
use agentfly_model::io::smollm2;
use agentfly_tools::sandbox::{self, Purpose};
use agentfly_tools::tasks::arithmetic::check_disjoint;
use std::path::{Path, PathBuf};

/// Options of `agentfly run`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The task file (docs/tasks.md).
    pub task: PathBuf,
    /// Apply the file's `[presets.NAME]` over its values (e.g. `smoke`).
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    /// Override a key of the file, as if written in it (repeatable), e.g.
    /// `--set train.steps=20` or `--set agent.format=code`; after the preset.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// The run directory (default: `target/runs/NAME`, with `-PRESET` for a preset).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Start over: empty the run directory first (only a run of the same task is emptied).
    #[arg(long)]
    pub restart: bool,
    /// Train with code tools even where the sandbox cannot isolate the network (without
    /// it, such a run is refused).
    #[arg(long)]
    pub allow_network: bool,
}

/// Runs the task's pipeline.
pub fn run(args: &Args) -> Result<(), JobError> {
    let spec = TaskSpec::load(&args.task, args.preset.as_deref(), &args.sets)?;
    pipeline::run(&Job::prepare_spec(spec, args)?)
}

impl Job {
    /// The run directory of a task file's run: the default model fetched when the file names
    /// it and it is absent, the tools checked, settings compared with an earlier run's, the
    /// splits copied in (a changed split is refused) and checked disjoint, the system prompt,
    /// the trainer's configuration and the effective task file written.
    pub fn prepare_spec(spec: TaskSpec, args: &Args) -> Result<Self, JobError> {
        let file = args.task.display().to_string();
        let key =
            |key: &str, e: &dyn std::fmt::Display| JobError::State(format!("{file}: {key}: {e}"));
        let model = &spec.model.path;
        if !model.exists() {
            if model.file_name() == Path::new(smollm2::DEFAULT_MODEL).file_name() {
                smollm2::fetch(model)?;
            } else {
                return Err(key(
                    "model.path",
                    &format!("{}: no such file or directory", model.display()),
                ));
            }
        }
        agentfly_model::device::parse_device(&spec.model.device)
            .map_err(|e| key("model.device", &e))?;
        for (name, path) in spec.data.named() {
            if !path.is_file() {
                return Err(key(
                    &format!("data.{name}"),
                    &format!("{}: no such file", path.display()),
                ));
            }
        }
        let toolbox = agentfly_core::Toolbox::from_names(&spec.agent.tools)
            .map_err(|e| key("agent.tools", &e))?;
        let isolation = sandbox::check(&toolbox, Purpose::Train, args.allow_network)
            .map_err(JobError::State)?;
        let dir = args.out.clone().unwrap_or_else(|| {
            let preset = match spec.task.preset.as_str() {
                "default" => String::new(),
                other => format!("-{}", dir_name(other)),
            };
            PathBuf::from(format!("target/runs/{}{preset}", dir_name(&spec.task.name)))
        });
        // Every split read and checked before anything is written: a mistake in the data,
        // mended, is then not refused as data that changed since the run began.
        let splits = read_splits(&spec)?;
        let run = RunDir::open(&dir, &spec, args.restart)?;
        if let Some(isolation) = isolation {
            run.write(SANDBOX_FILE, &to_json(&isolation)?)?;
        }
        copy_splits(&splits, &run)?;
        let job = Self {
            run,
            spec,
            settings: None,
        };
        job.write_files(
            &format!(
                "# The {} task's trainer configuration, written by `agentfly run {file}`.\n\
                 # `agentfly train --config` and `agentfly eval --config` read it as it is.\n\n",
                job.spec.task.name
            ),
            &format!(
                "# The task file this run runs with (`{file}`, its preset and overrides \
                 applied).\n\n"
            ),
        )?;
        Ok(job)
    }
}

/// A task's name as a directory's: letters, digits, `-`, `_` and `.`; anything else `-`.
fn dir_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// A split read from the task's file: its name, source, text and samples.
struct Split<'a> {
    name: &'static str,
    source: &'a Path,
    text: String,
    samples: Vec<Sample>,
}

/// Reads the task's splits (as samples, so a malformed line is reported with its file and
/// line), and checks the held-out ones (`val`, `test`) disjoint by question from every other
/// (train and demos may share questions).
fn read_splits(spec: &TaskSpec) -> Result<Vec<Split<'_>>, JobError> {
    let mut splits = Vec::new();
    for (name, source) in spec.data.named() {
        let samples = read_samples(source)?;
        if samples.is_empty() && name != "val" {
            return Err(JobError::State(format!(
                "data.{name}: {} holds no samples",
                source.display()
            )));
        }
        let text = std::fs::read_to_string(source).map_err(JobError::io(source))?;
        splits.push(Split {
            name,
            source,
            text,
            samples,
        });
    }
    let held_out = |name: &str| name == "val" || name == "test";
    for (i, a) in splits.iter().enumerate() {
        for b in &splits[i + 1..] {
            if !held_out(a.name) && !held_out(b.name) {
                continue;
            }
            check_disjoint(&[(a.name, &a.samples), (b.name, &b.samples)]).map_err(|o| {
                JobError::Overlap {
                    dir: a.source.parent().unwrap_or(Path::new("")).to_path_buf(),
                    overlap: format!(
                        "{} sample `{}` and {} sample `{}` ask the same question ({:?})",
                        o.first, o.first_id, o.second, o.second_id, o.question
                    ),
                }
            })?;
        }
    }
    Ok(splits)
}

/// Copies the splits into the run's `data/`, refusing one that differs from the copy an
/// earlier run of this directory made.
fn copy_splits(splits: &[Split<'_>], run: &RunDir) -> Result<(), JobError> {
    for split in splits {
        let copy = run.path(format!("data/{}.jsonl", split.name));
        if copy.exists() {
            let same_file = copy.canonicalize().ok() == split.source.canonicalize().ok();
            let earlier = std::fs::read_to_string(&copy).map_err(JobError::io(&copy))?;
            if !same_file && earlier != split.text {
                return Err(JobError::State(format!(
                    "data.{}: {} differs from the copy this run began with ({}); pass \
                     --restart to start over with it, or --out DIR for a new run",
                    split.name,
                    split.source.display(),
                    copy.display()
                )));
            }
        } else {
            std::fs::create_dir_all(run.path("data")).map_err(JobError::io(run.dir()))?;
            crate::run_dir::write(&copy, &split.text)?;
        }
    }
    Ok(())
}

/// The `main` of a training binary of one's own (`agentfly new` makes one): `agentfly
/// run`'s options — `BINARY TASK.toml [--preset NAME] [--set KEY=VALUE]… [--out DIR]` —
/// with the tools and rewards the binary links. An error is printed and exits with 2.
pub fn main() -> std::process::ExitCode {
    /// Train an agent with agentfly's pipeline as a task file says (agentfly's
    /// docs/tasks.md): evaluations, SFT, RL, the report.
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }
    agentfly_model::alloc::retain_freed_memory();
    let cli = <Cli as clap::Parser>::parse();
    let result = agentfly_core::registry::check()
        .map_err(|e| JobError::State(e.to_string()))
        .and_then(|()| run(&cli.args));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
