//! The main job's stages. Each writes its result into the run directory when it finishes
//! and is skipped when that result is already there; RL resumes from its last checkpoint.
//! So an interrupted run (Ctrl-C, a crash) continues where it stopped.

use super::Job;
use super::report;
use crate::JobError;
use crate::evaluation::{evaluate, summary_line, validate};
use crate::run_dir::{read_json, to_json};
use agentfly_core::Sample;
use agentfly_trainer::run::{
    EvalReport, EvalSection, MetricsLog, RolloutSection, SFT_MODEL, SftSection, Trainer,
    TrainerConfig, print_line,
};

/// Runs every stage not done yet, then writes the report and prints its table.
pub fn run(job: &Job) -> Result<(), JobError> {
    run_beside(job, None)
}

/// [`run`], taking the closed-book evaluation from `other` (another run of the same
/// questions, e.g. the other call format's) when `other` has it and it is the same
/// computation: the same model, test split and no-tool configuration, so the same prompts
/// token for token (the closed book has no tools, and so no call format of its own).
pub fn run_beside(job: &Job, other: Option<&Job>) -> Result<(), JobError> {
    let s = &job.spec;
    let config = TrainerConfig::load(job.path("run.toml"))?;
    let test = job.split("test")?;
    let val = job.split_if_given("val")?;
    let model = &s.model.path;
    eprintln!(
        "{} job in {} ({} preset, {}, {} RL steps); rerun the same command to resume",
        s.task.name,
        job.run.dir().display(),
        s.task.preset,
        s.algorithm_name(),
        s.train.steps
    );

    if let Some(prompt) = &s.task.closed_book_prompt {
        eval_stage(job, "no_tools", "1/5 initial policy without tools", || {
            let no_tools = no_tool_config(&config, prompt);
            if let Some(other) = other
                && let Some(report) = closed_book_of(other, job, &no_tools, &test)?
            {
                eprintln!(
                    "    the same evaluation as {}'s: taken from there",
                    other.run.dir().display()
                );
                return Ok(report);
            }
            let trainer = job.trainer(no_tools, Some(model))?;
            evaluate(&trainer, &test, "no tools")
        })?;
    }
    eval_stage(job, "initial", "2/5 initial policy with its tools", || {
        let trainer = job.trainer(config.clone(), Some(model))?;
        evaluate(&trainer, &test, "initial")
    })?;

    let mut trainer = job.trainer(config.clone(), None)?;
    if let Some(sft) = &config.sft {
        self::sft(job, &mut trainer, &config, sft, &test)?;
    }

    // RL's result is the final evaluation: once that is written, the checkpoints may be
    // gone (pruned to save disk) without RL starting over.
    if !job.eval_path("final").exists() {
        rl(job, &mut trainer, &val)?;
    }

    eval_stage(job, "final", "5/5 policy after RL", || {
        evaluate(&trainer, &test, "after RL")
    })?;
    drop(trainer);
    let path = report::write(job)?;
    eprintln!("report: {}", path.display());
    println!("{}", crate::report::table(&job.evals()?));
    Ok(())
}

/// The supervised warm start when its model is not there yet, and the evaluation after it.
fn sft(
    job: &Job,
    trainer: &mut Trainer,
    config: &TrainerConfig,
    sft: &SftSection,
    test: &[Sample],
) -> Result<(), JobError> {
    let sft_model = config.output.dir.join(SFT_MODEL);
    if !sft_model.join("config.json").exists() {
        if trainer.step() > 0 {
            return Err(JobError::State(format!(
                "{} is missing although RL has started; pass --restart to start over",
                sft_model.display()
            )));
        }
        eprintln!(
            "3/5 SFT warm start on {} demonstrations ({} epoch(s))",
            job.split("demos")?.len(),
            sft.epochs
        );
        if let Some(report) = trainer.sft()? {
            eprintln!(
                "    loss {:.4} -> {:.4} (first and last batch; epoch means {:.4} -> {:.4}), {} \
                 updates, {:.0}s",
                report.first_batch_loss,
                report.last_batch_loss,
                report.first_epoch_loss,
                report.last_epoch_loss,
                report.updates,
                report.seconds
            );
            job.run.write("sft.json", &to_json(&report)?)?;
        } else {
            // SFT finished but its model was not written (an older checkpoint).
            trainer.save_model(&sft_model)?;
        }
    }
    eval_stage(job, "sft", "3/5 policy after SFT", || {
        if trainer.step() == 0 {
            evaluate(trainer, test, "after SFT")
        } else {
            let sft = job.trainer(config.clone(), Some(&sft_model))?;
            evaluate(&sft, test, "after SFT")
        }
    })?;
    Ok(())
}

/// RL from where the trainer stands, with a validation point every `eval_every` steps and
/// after the last (each written once, also across interruptions), when there is a
/// validation split.
fn rl(job: &Job, trainer: &mut Trainer, val: &[Sample]) -> Result<(), JobError> {
    let s = &job.spec;
    let steps = s.train.steps;
    eprintln!(
        "4/5 RL: {} steps of {} {} x {} chains ({})",
        steps,
        s.rollout.samples_per_step,
        s.task.items,
        s.rollout.chains,
        s.algorithm_name()
    );
    if trainer.step() > 0 {
        eprintln!("    resuming RL from step {}", trainer.step());
    }
    // Points past the step RL resumes from are redone, like the trainer's own metrics.
    let log = MetricsLog::new(job.validation_path());
    let last = job
        .validation()?
        .into_iter()
        .filter(|p| p.step <= trainer.step())
        .last();
    log.keep_until(trainer.step())?;
    let every = s.task.eval_every.max(1);
    let due =
        |step: usize| !val.is_empty() && step > 0 && (step.is_multiple_of(every) || step == steps);
    if due(trainer.step()) && last.is_none_or(|p| p.step < trainer.step()) {
        let point = validate(trainer, val, trainer.step(), None)?;
        point.log_to(trainer)?;
        log.append(&point)?;
    }
    trainer.train_with(|t, m, bar| {
        if due(m.step) {
            let point = validate(t, val, m.step, Some(bar))?;
            print_line(bar, &point.line());
            point.log_to(t)?;
            log.append(&point)?;
        }
        Ok(())
    })?;
    if let Some(line) = trainer.generator_summary() {
        println!("    {line}");
    }
    Ok(())
}

/// The configuration of the no-tool baseline with its system `prompt`: the same model,
/// budgets and reward, no tools, one turn, room to write a worked answer.
pub fn no_tool_config(config: &TrainerConfig, prompt: &str) -> TrainerConfig {
    let mut c = config.clone();
    c.agent.tools.clear();
    c.agent.mcp.clear();
    c.agent.format = "hermes".into();
    c.agent.system_prompt = prompt.into();
    c.agent.system_prompt_file = None;
    c.agent.format_bonus = 0.0;
    c.chain.max_turns = 1;
    c.chain.max_tokens_per_turn = 128;
    // No tools, so no sandbox or game server held per chain: the defaults' scheduling.
    let defaults = RolloutSection::default();
    c.rollout.concurrency = defaults.concurrency;
    c.rollout.env_capacity = defaults.env_capacity;
    c.sft = None;
    c
}

/// `other`'s closed-book evaluation, when it has one and it is what `job` would compute
/// with `no_tools` on `test`.
fn closed_book_of(
    other: &Job,
    job: &Job,
    no_tools: &TrainerConfig,
    test: &[Sample],
) -> Result<Option<EvalReport>, JobError> {
    let Some(report) = read_json::<EvalReport>(&other.eval_path("no_tools"))? else {
        return Ok(None);
    };
    let Some(prompt) = &other.spec.task.closed_book_prompt else {
        return Ok(None);
    };
    let theirs = TrainerConfig::load(other.path("run.toml"))?;
    let same = other.spec.model.path == job.spec.model.path
        && same_closed_book(&no_tool_config(&theirs, prompt), no_tools)
        && other.split("test")? == test;
    Ok(same.then_some(report))
}

/// Do two no-tool configurations evaluate alike? Everything but where each run keeps its
/// files (its data, read from the run's own copy of the split, and its output) must agree.
fn same_closed_book(a: &TrainerConfig, b: &TrainerConfig) -> bool {
    let mut a = a.clone();
    a.data = b.data.clone();
    a.output = b.output.clone();
    a == *b
}

/// An evaluation of the test split as a stage, and its line.
fn eval_stage(
    job: &Job,
    key: &str,
    title: &str,
    compute: impl FnOnce() -> Result<EvalReport, JobError>,
) -> Result<EvalReport, JobError> {
    // An evaluation cached before failures were counted apart, with more of them than an
    // evaluation may have now, is not a result: it is done again.
    let path = job.eval_path(key);
    if let Some(cached) = read_json::<EvalReport>(&path)?
        && cached.failures() as f64 > EvalSection::default().max_failures * cached.samples as f64
    {
        eprintln!(
            "{}: {} of {} chains failed in this cached evaluation; evaluating again",
            path.display(),
            cached.failures(),
            cached.samples
        );
        std::fs::remove_file(&path).map_err(JobError::io(&path))?;
    }
    let report = job.run.stage(path, title, compute)?;
    eprintln!("{}", summary_line(key, &report));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::settings::tests::settings_args;
    use crate::job::{CallFormat, Settings, Task};
    use std::path::Path;

    /// The no-tool configuration of `task`'s default run in `dir`.
    fn closed_book(task: Task, dir: &str) -> TrainerConfig {
        let args = settings_args(&[]);
        let model = Path::new("/m.gguf");
        let settings = match task {
            Task::WikiQa(format) => Settings::wiki_qa(&args, model.into(), format),
            _ => Settings::from_args(&args, model.into()),
        };
        no_tool_config(
            &settings.trainer_config(model, Path::new(dir), true),
            task.no_tool_prompt(),
        )
    }

    #[test]
    fn the_two_call_formats_share_one_closed_book_and_other_tasks_do_not() {
        let hermes = closed_book(Task::WikiQa(CallFormat::Hermes), "run/hermes");
        let code = closed_book(Task::WikiQa(CallFormat::Code), "run/code");
        assert_ne!(hermes.data, code.data);
        assert!(same_closed_book(&hermes, &code));
        assert!(same_closed_book(&code, &hermes));

        let calculator = closed_book(Task::Calculator, "run/code");
        assert!(!same_closed_book(&calculator, &code));
        let mut warmer = code.clone();
        warmer.chain.temperature = 0.7;
        assert!(!same_closed_book(&hermes, &warmer));
        let mut other_model = code;
        other_model.model.path = "/other.gguf".into();
        assert!(!same_closed_book(&hermes, &other_model));
    }
}
