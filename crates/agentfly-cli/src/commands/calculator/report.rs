//! The job's report: `report/REPORT.md` with the held-out results, the training curves as
//! PNGs (plotters) and sample trajectories before and after RL.

use super::pipeline::{EVALS, ValPoint, read_sft, read_val};
use super::plots::{self, Panel, Proportion, Series};
use super::{Run, write};
use agentfly_core::data::{Sample, read_jsonl};
use agentfly_core::rollout::Trajectory;
use agentfly_trainer::run::{EvalReport, StepMetrics};
use anyhow::Context;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// One evaluation of the test split: its file stem, its row title and the result.
pub type Eval = (&'static str, &'static str, EvalReport);

/// The evaluations of the run present so far, in the report's order.
pub fn load_evals(run: &Run) -> anyhow::Result<Vec<Eval>> {
    let mut out = Vec::new();
    for (key, title) in EVALS {
        let path = run.path(&format!("evals/{key}.json"));
        if let Ok(text) = std::fs::read_to_string(&path) {
            let report: EvalReport = serde_json::from_str(&text)
                .with_context(|| format!("reading {}", path.display()))?;
            out.push((key, title, report));
        }
    }
    Ok(out)
}

/// The RL steps' metrics (`out/metrics.jsonl`).
pub fn load_metrics(run: &Run) -> anyhow::Result<Vec<StepMetrics>> {
    let path = run.path("out/metrics.jsonl");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(Vec::new());
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("reading {}", path.display())))
        .collect()
}

/// The held-out results as a Markdown table.
pub fn table(evals: &[Eval]) -> String {
    let mut s = String::from(
        "| policy | correct | accuracy | 95% interval | mean reward | answers with a tool call | parse errors per answer | mean turns |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for (_, title, r) in evals {
        let _ = writeln!(
            s,
            "| {title} | {}/{} | {:.3} | {:.3}–{:.3} | {:.3} | {:.0}% | {:.2} | {:.2} |",
            r.correct,
            r.samples,
            r.accuracy,
            r.interval.0,
            r.interval.1,
            r.reward_mean,
            r.tool_call_rate * 100.0,
            r.parse_error_rate,
            r.mean_turns
        );
    }
    s
}

/// Do the intervals of `after` and `before` not overlap, `after` above?
pub fn clearly_better(after: &EvalReport, before: &EvalReport) -> bool {
    after.interval.0 > before.interval.1
}

fn verdict(evals: &[Eval]) -> String {
    let get = |k: &str| evals.iter().find(|e| e.0 == k).map(|e| &e.2);
    let mut s = String::new();
    if let Some(n) = get("no_tools") {
        let _ = writeln!(
            s,
            "- Without tools the initial model solves {}/{} ({:.0}%): the problems need the calculator.",
            n.correct,
            n.samples,
            n.accuracy * 100.0
        );
    }
    for (after, before, what) in [
        ("final", "sft", "RL over SFT"),
        ("sft", "initial", "SFT over the initial policy"),
    ] {
        if let (Some(a), Some(b)) = (get(after), get(before)) {
            let _ = writeln!(
                s,
                "- {what}: {}/{} vs {}/{}; 95% intervals {:.3}–{:.3} vs {:.3}–{:.3}: {}.",
                a.correct,
                a.samples,
                b.correct,
                b.samples,
                a.interval.0,
                a.interval.1,
                b.interval.0,
                b.interval.1,
                if clearly_better(a, b) {
                    "they do not overlap, a clear gain"
                } else {
                    "they overlap, not a clear gain on this split"
                }
            );
        }
    }
    s
}

/// Writes the report and its charts; returns the Markdown file's path.
pub fn write_report(run: &Run) -> anyhow::Result<PathBuf> {
    let dir = run.path("report");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let evals = load_evals(run)?;
    let metrics = load_metrics(run)?;
    let val = read_val(&run.path("val.jsonl"))?;
    let s = &run.settings;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Calculator agent: SmolLM2-135M-Instruct learns to use a calculator\n"
    );
    let _ = writeln!(md, "Made by `{}`.\n", run.command);
    let _ = writeln!(
        md,
        "Model `{}` on `{}`; {} preset: {} training, {} validation and {} test problems (disjoint \
         by normalised question, checked at load); SFT on {} \"What is a + b?\" demonstrations \
         ({} epoch(s), lr {:e}); then {} RL steps of {} problems × {} chains with {} (lr {:e}, \
         loss {}, seed {}){}. Greedy evaluation, one chain per problem, at most 3 turns.\n",
        s.model.display(),
        s.device,
        s.preset,
        s.train,
        s.val,
        s.test,
        s.demos,
        s.sft_epochs,
        s.sft_lr,
        s.steps,
        s.samples_per_step,
        s.chains,
        s.algorithm.name(),
        s.lr,
        if s.mask {
            "on the model's own tokens"
        } else {
            "on every token after the prompt (mask off)"
        },
        s.seed,
        if s.format_bonus != 0.0 {
            format!(
                "; reward shaped with a format bonus of {} (accuracy counts exact answers only)",
                s.format_bonus
            )
        } else {
            "; reward 1 for the exact answer submitted, else 0".into()
        }
    );
    let _ = writeln!(md, "## Held-out test accuracy\n");
    md.push_str(&table(&evals));
    md.push('\n');
    md.push_str(&verdict(&evals));
    md.push('\n');
    if !evals.is_empty() {
        let items: Vec<Proportion> = evals
            .iter()
            .map(|(_, title, r)| Proportion {
                label: (*title).into(),
                value: r.accuracy,
                interval: r.interval,
            })
            .collect();
        plots::proportions(
            &dir.join("accuracy.png"),
            &format!("test accuracy ({} held-out problems)", s.test),
            &items,
        )?;
        let _ = writeln!(md, "![test accuracy with 95% intervals](accuracy.png)\n");
    }

    if !metrics.is_empty() {
        training_charts(run, &metrics, &val, &mut md)?;
    }
    if let Some(sft) = read_sft(run) {
        let _ = writeln!(
            md,
            "SFT: {} demonstrations, {} updates, mean loss {:.4} (first epoch) → {:.4} (last), {:.0} s.\n",
            sft.demos, sft.updates, sft.first_epoch_loss, sft.last_epoch_loss, sft.seconds
        );
    }
    samples_section(run, &evals, &mut md)?;
    times_section(run, &evals, &metrics, &val, &mut md);
    let _ = writeln!(
        md,
        "## Files\n\n- `out/model/`: the trained policy in Hugging Face layout (config.json, \
         model.safetensors, tokenizer) — transformers loads it.\n- `out/sft-model/`: the policy \
         after SFT.\n- `out/checkpoints/`: the latest checkpoints (rerun the command to resume).\n\
         - `out/metrics.jsonl`, `out/sft_metrics.jsonl`, `val.jsonl`: per-step metrics.\n- \
         `evals/*.json`: every test evaluation with its trajectories.\n- `run.toml`: the \
         trainer's configuration (`agentfly train --config`, `agentfly eval --config`)."
    );
    let path = dir.join("REPORT.md");
    write(&path, &md)?;
    Ok(path)
}

fn training_charts(
    run: &Run,
    metrics: &[StepMetrics],
    val: &[ValPoint],
    md: &mut String,
) -> anyhow::Result<()> {
    let dir = run.path("report");
    let line = |name: &str, f: &dyn Fn(&StepMetrics) -> f64| Series {
        name: name.into(),
        points: metrics.iter().map(|m| (m.step as f64, f(m))).collect(),
    };
    let per = |x: usize, m: &StepMetrics| x as f64 / m.trajectories.max(1) as f64;
    let shaped = run.settings.format_bonus != 0.0;
    let mut reward = vec![line("mean reward", &|m| m.reward_mean)];
    if shaped
        || metrics
            .iter()
            .any(|m| m.accuracy.is_some_and(|a| (a - m.reward_mean).abs() > 1e-9))
    {
        reward.push(line("task accuracy", &|m| m.accuracy.unwrap_or(0.0)));
    }
    let top = 1.0 + f64::from(run.settings.format_bonus.max(0.0));
    plots::figure(
        &dir.join("training.png"),
        &[
            Panel {
                title: "reward on training rollouts; validation accuracy".into(),
                x_label: "RL step".into(),
                y_label: "reward / accuracy".into(),
                y_range: Some((0.0, top)),
                series: reward,
                intervals: val
                    .iter()
                    .map(|p| {
                        (
                            p.step as f64,
                            Proportion {
                                label: "validation accuracy (95% CI)".into(),
                                value: p.accuracy,
                                interval: p.interval,
                            },
                        )
                    })
                    .collect(),
            },
            Panel {
                title: "KL to the SFT policy; entropy".into(),
                x_label: "RL step".into(),
                y_label: "nats per token".into(),
                y_range: None,
                series: vec![
                    line("KL (k3)", &|m| f64::from(m.update.kl)),
                    line("entropy", &|m| f64::from(m.update.entropy)),
                ],
                intervals: vec![],
            },
        ],
    )?;
    plots::figure(
        &dir.join("behaviour.png"),
        &[
            Panel {
                title: "tool use on training rollouts".into(),
                x_label: "RL step".into(),
                y_label: "per trajectory".into(),
                y_range: None,
                series: vec![
                    line("tool calls", &|m| per(m.tool_calls, m)),
                    line("parse errors", &|m| per(m.parse_errors, m)),
                    line("model turns", &|m| m.mean_turns),
                ],
                intervals: vec![],
            },
            Panel {
                title: "groups kept for the update".into(),
                x_label: "RL step".into(),
                y_label: "groups".into(),
                y_range: None,
                series: vec![
                    line("kept", &|m| {
                        (m.trained_trajectories / run.settings.chains.max(1)) as f64
                    }),
                    line("dropped (equal rewards)", &|m| m.dropped_groups as f64),
                ],
                intervals: vec![],
            },
        ],
    )?;
    let _ = writeln!(md, "## Training\n");
    let _ = writeln!(md, "![reward, validation accuracy, KL](training.png)\n");
    let _ = writeln!(md, "![tool calls, parse errors, turns](behaviour.png)\n");
    if !val.is_empty() {
        let _ = writeln!(
            md,
            "Validation accuracy ({} problems, greedy): {}.\n",
            run.settings.val,
            val.iter()
                .map(|p| format!(
                    "step {} {}/{} ({:.3}–{:.3})",
                    p.step, p.correct, p.samples, p.interval.0, p.interval.1
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let _ = writeln!(
        md,
        "| step | mean reward | accuracy | groups kept / dropped | KL | entropy | clipped | grad norm | calls per trajectory | parse errors | turns | rollout s | update s |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for m in metrics {
        let _ = writeln!(
            md,
            "| {} | {:.3} | {} | {} / {} | {:.4} | {:.3} | {:.3} | {:.3} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} |",
            m.step,
            m.reward_mean,
            m.accuracy.map_or("-".into(), |a| format!("{a:.3}")),
            m.trained_trajectories / run.settings.chains.max(1),
            m.dropped_groups,
            m.update.kl,
            m.update.entropy,
            m.update.clip_fraction,
            m.update.grad_norm,
            per(m.tool_calls, m),
            per(m.parse_errors, m),
            m.mean_turns,
            m.rollout_seconds,
            m.update_seconds
        );
    }
    md.push('\n');
    Ok(())
}

/// A few test problems, each as answered before RL (after SFT) and after: first those RL
/// fixed, then one it still gets wrong, so the reader sees both.
fn samples_section(run: &Run, evals: &[Eval], md: &mut String) -> anyhow::Result<()> {
    let get = |k: &str| evals.iter().find(|e| e.0 == k).map(|e| &e.2);
    let (Some(before), Some(after)) = (get("sft"), get("final")) else {
        return Ok(());
    };
    let test: BTreeMap<String, Sample> = read_jsonl(run.path("data/test.jsonl"))?
        .into_iter()
        .map(|s| (s.id.clone(), s))
        .collect();
    let by_id = |r: &EvalReport| -> BTreeMap<String, Trajectory> {
        r.trajectories
            .iter()
            .map(|t| (t.sample_id.clone(), t.clone()))
            .collect()
    };
    let (b, a) = (by_id(before), by_id(after));
    let right = |t: &Trajectory| t.reward_metrics.get("correct").is_some_and(|c| *c > 0.5);
    let mut chosen: Vec<&String> = a
        .iter()
        .filter(|(id, t)| right(t) && b.get(*id).is_some_and(|bt| !right(bt)))
        .map(|(id, _)| id)
        .take(3)
        .collect();
    chosen.extend(
        a.iter()
            .filter(|(_, t)| !right(t))
            .map(|(id, _)| id)
            .take(1),
    );
    if chosen.is_empty() {
        return Ok(());
    }
    let _ = writeln!(md, "## Sample trajectories (test problems)\n");
    let initial = get("initial").map(by_id);
    for id in chosen {
        let Some(sample) = test.get(id) else { continue };
        let field = |k: &str| {
            sample
                .field(k)
                .map(|v| v.as_str().map_or(v.to_string(), str::to_string))
                .unwrap_or_default()
        };
        let _ = writeln!(
            md,
            "### `{id}`: {}\n\nExpected answer: **{}**\n",
            field("question"),
            field("answer")
        );
        let mut show = |title: &str, t: Option<&Trajectory>| {
            if let Some(t) = t {
                let _ = writeln!(
                    md,
                    "{title} — {}:\n\n```text\n{}```\n",
                    if right(t) { "right" } else { "wrong" },
                    render(t)
                );
            }
        };
        if let Some(i) = &initial {
            show("Initial policy", i.get(id));
        }
        show("After SFT (before RL)", b.get(id));
        show("After RL", a.get(id));
    }
    Ok(())
}

/// A trajectory as the model wrote it, with what the tools answered.
pub fn render(t: &Trajectory) -> String {
    let mut s = String::new();
    for (i, turn) in t.turns.iter().enumerate() {
        let _ = writeln!(s, "[model, turn {}]\n{}", i + 1, turn.text.trim_end());
        for call in &turn.calls {
            let name = if call.name.is_empty() {
                "?"
            } else {
                &call.name
            };
            let _ = writeln!(
                s,
                "[{name} → {}]{}",
                call.observation.trim_end(),
                call.error
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            );
        }
    }
    let mut response: String = t.response.chars().take(60).collect();
    if response.len() < t.response.len() {
        response.push('…');
    }
    let _ = writeln!(
        s,
        "[ended: {:?}; answer read: {response:?}; reward {}]",
        t.finish_reason,
        t.reward.map_or("-".into(), |r| r.to_string())
    );
    s
}

fn times_section(
    run: &Run,
    evals: &[Eval],
    metrics: &[StepMetrics],
    val: &[ValPoint],
    md: &mut String,
) {
    let val_s: f64 = val.iter().map(|p| p.seconds).sum();
    let eval_s: f64 = evals.iter().map(|e| e.2.summary.wall_seconds).sum();
    let sft_s = read_sft(run).map_or(0.0, |s| s.seconds);
    let rl_s: f64 = metrics
        .iter()
        .map(|m| m.rollout_seconds + m.update_seconds + m.sync_seconds)
        .sum();
    let _ = writeln!(
        md,
        "## Time\n\nTest evaluations {:.0} s, SFT {:.0} s, RL {:.0} s ({} steps), validation \
         {:.0} s: {:.1} minutes in all (model loading not counted).\n",
        eval_s,
        sft_s,
        rl_s,
        metrics.len(),
        val_s,
        (eval_s + sft_s + rl_s + val_s) / 60.0
    );
}
