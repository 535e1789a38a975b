//! The training loop end to end on the tiny Qwen2 fixture made a chat model (a byte-level
//! tokenizer and a ChatML template written here): steps run, metrics are written, a
//! checkpoint is atomic, and a resumed run ends with exactly the weights of a run that was
//! never interrupted. Config mistakes name the file and the key.

use agentfly_testdata::support as common;

use common::tiny_chat::{chat_model, flat, tiny_chat_model, weights, write_config};

use agentfly_core::reward;
use agentfly_model::Pretrained;
use agentfly_trainer::run::{Trainer, TrainerConfig};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

agentfly_core::link!(agentfly_tools);

/// A broken reward: finite, but so large that a critic's squared error overflows.
#[reward]
fn enormous() -> f32 {
    3.0e38
}

#[test]
fn the_end_of_turn_token_is_the_one_the_chat_template_closes_turns_with() {
    // Llama 3's layout: eos_token_id lists <|end_of_text|> before <|eot_id|>, and the
    // template closes every turn with <|eot_id|>.
    let dir = tempfile::tempdir().unwrap();
    let template = "{% for m in messages %}{% if loop.index0 == 0 %}{{ bos_token }}{% endif %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}";
    let specials = [
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
    ];
    let path = chat_model(
        &dir.path().join("llama3-style"),
        &specials,
        json!({"chat_template": template, "bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}),
        Some(json!([257, 260])),
    );
    let model = Pretrained::load(&path, &common::device()).unwrap();
    assert_eq!(
        model.eos_ids()[0],
        257,
        "config order: <|end_of_text|> first"
    );
    let (tokenizer, template, ends) = model.chat_parts().unwrap();
    assert_eq!(ends, [260, 257], "<|eot_id|> ends a turn");
    // A demonstration learns to close its turn with <|eot_id|>.
    let messages = [
        json!({"role": "user", "content": "Hi"}),
        json!({"role": "assistant", "content": "Hello"}),
    ];
    let (tokens, mask) =
        agentfly_core::rollout::demonstration(&template, &tokenizer, &messages, None, ends[0])
            .unwrap();
    let learned: Vec<u32> = tokens
        .iter()
        .zip(&mask)
        .filter(|(_, m)| **m == 1)
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(learned.last(), Some(&260), "{learned:?}");
    // A model whose template closes turns with nothing special and that names no end of
    // sequence cannot chat: an error that says so, not a panic.
    let bare = chat_model(
        &dir.path().join("no-eos"),
        &[],
        json!({"chat_template": "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"}),
        Some(Value::Null),
    );
    let err = Pretrained::load(&bare, &common::device())
        .unwrap()
        .chat_parts()
        .unwrap_err()
        .to_string();
    assert!(err.contains("no end-of-turn token"), "{err}");
}

/// Whether two paths are one file (hard links to one inode).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (a, b) = (std::fs::metadata(a).unwrap(), std::fs::metadata(b).unwrap());
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

/// [`write_config`] with each `(from, to)` replacement made in its text.
fn edited_config(
    dir: &Path,
    model: &Path,
    steps: usize,
    out: &str,
    edits: &[(&str, &str)],
) -> PathBuf {
    let path = write_config(dir, model, steps, out);
    let text = edits
        .iter()
        .fold(std::fs::read_to_string(&path).unwrap(), |t, (from, to)| {
            t.replace(from, to)
        });
    std::fs::write(&path, text).unwrap();
    path
}

/// Why training with `config` fails.
fn train_error(config: &Path) -> String {
    Trainer::from_config_file(config)
        .unwrap()
        .train()
        .unwrap_err()
        .to_string()
}

fn with_estimator(config: PathBuf, estimator: &str) -> PathBuf {
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{text}\n[algorithm]\nestimator = {estimator}\n"),
    )
    .unwrap();
    config
}

#[test]
fn a_resumed_run_ends_exactly_where_an_uninterrupted_one_does() {
    resume_equivalence("{ name = \"grpo\" }", false, false);
}

#[test]
fn ppo_with_a_critic_trains_and_resumes_exactly() {
    resume_equivalence(
        "{ name = \"gae\", gamma = 1.0, lambda = 0.95 }",
        false,
        false,
    );
}

#[test]
fn lora_trains_only_the_adapters_and_resumes_exactly() {
    resume_equivalence("{ name = \"grpo\" }", true, false);
}

/// `[model] bf16`: the dither is made once, from the base model; a resumed run takes the
/// checkpoint's master weights as they are and ends where the uninterrupted one does. Where
/// the CPU has no AMX the configuration is refused, clearly (`AGENTFLY_REQUIRE_AMX=1` makes
/// that a failure).
#[test]
fn bf16_products_train_and_resume_exactly() {
    if agentfly_model::model::amx::available() {
        resume_equivalence("{ name = \"grpo\" }", false, true);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_chat_model(dir.path());
    let path = edited_config(
        dir.path(),
        &model,
        1,
        "bf16",
        &[("[model]\n", "[model]\nbf16 = true\n")],
    );
    let err = Trainer::from_config_file(&path).unwrap_err().to_string();
    assert!(
        err.contains("model.bf16: bf16 products need Intel AMX"),
        "{err}"
    );
    assert!(
        std::env::var("AGENTFLY_REQUIRE_AMX").as_deref() != Ok("1"),
        "AGENTFLY_REQUIRE_AMX=1 but this CPU or OS has no AMX"
    );
    eprintln!("SKIPPED: this CPU or OS has no AMX, so bf16 training was refused (as it should)");
}

fn resume_equivalence(estimator: &str, lora: bool, bf16: bool) {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_chat_model(dir.path());
    let config = |steps, out| {
        let path = with_estimator(write_config(dir.path(), &model, steps, out), estimator);
        if lora {
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(&path, format!("{text}\n[lora]\nrank = 4\nalpha = 8.0\n")).unwrap();
        }
        if bf16 {
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(&path, text.replace("[model]\n", "[model]\nbf16 = true\n")).unwrap();
        }
        path
    };
    let gae = estimator.contains("gae");

    // Uninterrupted: 2 steps.
    let mut straight = Trainer::from_config_file(config(2, "straight")).unwrap();
    let summary = straight.train().unwrap();
    assert_eq!((summary.steps, summary.resumed_from), (2, 0));
    drop(straight);
    let out = dir.path().join("straight");
    let metrics: Vec<Value> = std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(metrics.len(), 2);
    for (i, m) in metrics.iter().enumerate() {
        assert_eq!(m["step"], i + 1);
        for key in [
            "reward_mean",
            "kl",
            "entropy",
            "clip_fraction",
            "grad_norm",
            "lr",
            "tokens",
            "tool_calls",
            "parse_errors",
            "dropped_groups",
            "rollout_seconds",
            "update_seconds",
        ] {
            assert!(!m[key].is_null(), "metrics have `{key}`: {m}");
        }
    }
    assert!(
        metrics.iter().any(|m| m["updates"].as_u64().unwrap() > 0),
        "{metrics:?}"
    );
    if gae {
        assert!(
            metrics
                .iter()
                .any(|m| m["value_loss"].as_f64().unwrap() > 0.0),
            "the critic is trained: {metrics:?}"
        );
    }
    // Checkpoints: the latest two steps, no leftovers of unfinished writes.
    let checkpoints = out.join("checkpoints");
    assert_eq!(
        std::fs::read_to_string(checkpoints.join("latest")).unwrap(),
        "step-000002"
    );
    let mut names: Vec<String> = std::fs::read_dir(&checkpoints)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["latest", "step-000001", "step-000002"]);
    for f in [
        "model/model.safetensors",
        "model/config.json",
        "model/tokenizer.json",
        "optimizer.bpk",
        "state.json",
        "config.toml",
    ] {
        assert!(checkpoints.join("step-000002").join(f).exists(), "{f}");
    }
    assert_eq!(checkpoints.join("step-000002/critic.json").exists(), gae);
    // The final model is the last checkpoint's: one copy of those weights on disk.
    assert!(same_file(
        &out.join("model/model.safetensors"),
        &checkpoints.join("step-000002/model/model.safetensors")
    ));
    assert!(!same_file(
        &checkpoints.join("step-000001/model/model.safetensors"),
        &checkpoints.join("step-000002/model/model.safetensors")
    ));
    for f in [
        "adapter/adapter_model.safetensors",
        "adapter/adapter_config.json",
    ] {
        assert_eq!(
            checkpoints.join("step-000002").join(f).exists(),
            lora,
            "{f}"
        );
        assert_eq!(out.join("model").join(f).exists(), lora, "{f}");
    }

    // Interrupted after step 1 (a crash mid-checkpoint leaves an incomplete directory),
    // then resumed to step 2.
    let mut first = Trainer::from_config_file(config(1, "resumed")).unwrap();
    first.train().unwrap();
    drop(first);
    let resumed_dir = dir.path().join("resumed");
    std::fs::create_dir_all(resumed_dir.join("checkpoints/.incomplete-crash/model")).unwrap();
    let mut second = Trainer::from_config_file(config(2, "resumed")).unwrap();
    assert_eq!(second.step(), 1);
    let summary = second.train().unwrap();
    assert_eq!((summary.steps, summary.resumed_from), (2, 1));
    drop(second);
    let lines = std::fs::read_to_string(resumed_dir.join("metrics.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 2);

    let a = same_final_weights(&out, &resumed_dir);
    let start = weights(&model);
    let moved = a
        .iter()
        .zip(&start)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    assert!(moved > 1e-5, "training changed the weights");
    if lora {
        // Only the adapted projections moved: embeddings and norms are the base model's.
        let load = |dir: &Path| Pretrained::load(dir, &common::device()).unwrap();
        let (trained, base) = (load(&out.join("model")), load(&model));
        let (t, b) = (
            trained.decoder.to_weights(&trained.config),
            base.decoder.to_weights(&base.config),
        );
        for name in ["model.embed_tokens.weight", "model.norm.weight"] {
            assert_eq!(
                t.get(name).unwrap().data,
                b.get(name).unwrap().data,
                "{name}"
            );
        }
        assert_ne!(
            t.get("model.layers.0.self_attn.q_proj.weight")
                .unwrap()
                .data,
            b.get("model.layers.0.self_attn.q_proj.weight")
                .unwrap()
                .data
        );
    }
}

#[test]
fn config_mistakes_name_the_file_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_chat_model(dir.path());
    let path = write_config(dir.path(), &model, 1, "bad");
    let text = std::fs::read_to_string(&path).unwrap();

    std::fs::write(&path, text.replace("ppo_epochs = 2", "ppo_epoch = 2")).unwrap();
    let err = TrainerConfig::load(&path).unwrap_err().to_string();
    assert!(
        err.starts_with(&path.display().to_string()) && err.contains("ppo_epoch"),
        "{err}"
    );

    std::fs::write(&path, text.replace("chains = 4", "chains = 1")).unwrap();
    let err = TrainerConfig::load(&path).unwrap_err().to_string();
    assert!(err.contains("rollout.chains"), "{err}");

    std::fs::write(
        &path,
        text.replace(
            "ppo_epochs = 2",
            "ppo_epochs = 2\nbehaviour_weight_cap = 0.5",
        ),
    )
    .unwrap();
    let err = TrainerConfig::load(&path).unwrap_err().to_string();
    assert!(
        err.starts_with(&path.display().to_string()) && err.contains("train.behaviour_weight_cap"),
        "{err}"
    );

    std::fs::write(&path, text.replace("lr = 1e-3", "lr = \"fast\"")).unwrap();
    let err = TrainerConfig::load(&path).unwrap_err().to_string();
    assert!(err.contains("lr"), "{err}");

    std::fs::write(&path, text.replace("\"calculator\", ", "\"calculatr\", ")).unwrap();
    let err = Trainer::from_config_file(&path).unwrap_err().to_string();
    assert!(err.contains("calculatr"), "{err}");

    // Training rollouts from a truncated distribution, or greedy ones, are refused.
    for (from, to) in [
        ("temperature = 1.0", "temperature = 1.0\ntop_p = 0.9"),
        ("temperature = 1.0", "temperature = 1.0\ntop_k = 20"),
        ("temperature = 1.0", "temperature = 0.0"),
    ] {
        std::fs::write(&path, text.replace(from, to)).unwrap();
        let err = TrainerConfig::load(&path).unwrap_err().to_string();
        assert!(err.contains("chain.t"), "{to}: {err}");
    }

    // A share of evaluation failures outside [0, 1] is refused.
    std::fs::write(&path, format!("{text}\n[eval]\nmax_failures = 1.5\n")).unwrap();
    let err = TrainerConfig::load(&path).unwrap_err().to_string();
    assert!(err.contains("eval.max_failures"), "{err}");

    // A device the build cannot use is found after the file is read, and still names it.
    std::fs::write(&path, text.replace("[model]", "[model]\ndevice = \"tpu\"")).unwrap();
    let err = Trainer::from_config_file(&path).unwrap_err().to_string();
    assert!(
        err.starts_with(&path.display().to_string()) && err.contains("model.device"),
        "{err}"
    );

    // An empty training set is an error naming the file, not a division by zero.
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    std::fs::write(
        &path,
        text.replace("train = \"train.jsonl\"", "train = \"empty.jsonl\""),
    )
    .unwrap();
    let err = Trainer::from_config_file(&path).unwrap_err().to_string();
    assert!(
        err.starts_with(&empty.display().to_string()) && err.contains("no samples"),
        "{err}"
    );
}

#[test]
fn failing_rewards_and_updates_that_never_apply_stop_the_run_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_chat_model(dir.path());
    // `exact_numeric` reads each sample's `answer`, which these samples lack: every reward
    // fails, which must stop the step rather than train on zeros.
    let failing = [("odd_length", "exact_numeric")];
    let config = edited_config(dir.path(), &model, 2, "failing", &failing);
    let err = train_error(&config);
    assert!(
        err.starts_with("step 1: ")
            && err.contains("trajectories got no reward")
            && err.contains("answer"),
        "{err}"
    );
    // Below the allowed share they are left out and counted.
    let allowed = [
        failing[0],
        ("seed = 7", "seed = 7\nmax_reward_failures = 1.0"),
    ];
    let config = edited_config(dir.path(), &model, 2, "allowed", &allowed);
    let m = Trainer::from_config_file(&config)
        .unwrap()
        .train_step()
        .unwrap();
    assert_eq!(m.reward_failures, m.trajectories, "{m:?}");
    assert_eq!(m.trained_trajectories, 0, "{m:?}");
    // A reward so large that PPO's value loss overflows makes every update non-finite:
    // the run fails rather than exit 0 with the weights untouched.
    let overflow = [
        ("odd_length", "enormous"),
        ("max_rounds = 2", "max_rounds = 2\ndynamic_sampling = false"),
    ];
    let config = with_estimator(
        edited_config(dir.path(), &model, 2, "overflow", &overflow),
        "{ name = \"gae\", gamma = 1.0, lambda = 0.95 }",
    );
    let err = train_error(&config);
    assert!(
        err.starts_with("no update was applied in 2 step(s)") && err.contains("non-finite"),
        "{err}"
    );
}

#[test]
fn the_trainer_scores_what_the_rollouts_sampled_at_their_temperature() {
    // Rollouts at temperature 0.7: the trainer's log-probs of the sampled tokens, taken
    // before the update, equal the engine's (up to float arithmetic), as every step reports.
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_chat_model(dir.path());
    let config = edited_config(
        dir.path(),
        &model,
        2,
        "temperature",
        &[
            ("temperature = 1.0", "temperature = 0.7"),
            ("max_rounds = 2", "max_rounds = 2\ndynamic_sampling = false"),
        ],
    );
    let mut trainer = Trainer::from_config_file(&config).unwrap();
    let m = trainer.train_step().unwrap();
    assert!(m.update.tokens > 0, "{m:?}");
    assert!(
        m.update.logprob_gap_max < 1e-3 && m.update.logprob_gap_mean < 1e-4,
        "trainer vs rollout log-probs: mean {} max {}",
        m.update.logprob_gap_mean,
        m.update.logprob_gap_max
    );
}

#[test]
fn sft_warm_start_learns_the_demonstrations_once() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_chat_model(dir.path());
    let config = write_config(dir.path(), &model, 1, "sft");
    let demos: String = (0..6)
        .map(|i| {
            let messages = json!([
                {"role": "user", "content": format!("{i}+{i}?")},
                {"role": "assistant", "content": "<tool_call>{\"name\": \"calculator\"}</tool_call>"},
                {"role": "tool", "name": "calculator", "content": format!("{}", 2 * i)},
                {"role": "assistant", "content": format!("ok {}", 2 * i)}
            ]);
            format!("{}\n", json!({"id": format!("d{i}"), "messages": messages}))
        })
        .collect();
    std::fs::write(dir.path().join("demos.jsonl"), demos).unwrap();
    // `track_kl` keeps a reference model: after SFT it must be the SFT policy.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("ppo_epochs = 2\n", "ppo_epochs = 2\ntrack_kl = true\n");
    std::fs::write(
        &config,
        format!("{text}\n[sft]\ndata = \"demos.jsonl\"\nepochs = 4\nbatch_size = 3\nlr = 3e-3\n"),
    )
    .unwrap();
    let mut trainer = Trainer::from_config_file(&config).unwrap();
    let model_config = Pretrained::load(&model, &common::device()).unwrap().config;
    let reference = |t: &Trainer| flat(&t.reference().unwrap().decoder, &model_config);
    assert_eq!(reference(&trainer), weights(&model));
    let report = trainer.sft().unwrap().expect("sft runs");
    let sft_model = dir
        .path()
        .join("sft")
        .join(agentfly_trainer::run::SFT_MODEL);
    let after_sft = weights(&sft_model);
    assert_ne!(after_sft, weights(&model), "SFT changed nothing");
    assert_eq!(
        reference(&trainer),
        after_sft,
        "the reference is not the SFT policy"
    );
    assert_eq!((report.demos, report.updates), (6, 8));
    assert!(
        report.last_epoch_loss < report.first_epoch_loss * 0.8,
        "SFT loss fell: {report:?}"
    );
    assert!(trainer.sft().unwrap().is_none(), "once per run");
    // The checkpoint after SFT holds the SFT model's weights: the same file, not a copy.
    assert!(same_file(
        &sft_model.join("model.safetensors"),
        &dir.path()
            .join("sft/checkpoints/step-000000/model/model.safetensors")
    ));
    drop(trainer);
    let lines = std::fs::read_to_string(dir.path().join("sft/sft_metrics.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 8);
    // The checkpoint records it: a new process does not redo it.
    let mut again = Trainer::from_config_file(&config).unwrap();
    assert!(again.sft().unwrap().is_none());
    assert_eq!(reference(&again), after_sft, "a resumed run's reference");

    // A demonstration without an assistant turn is named.
    std::fs::write(
        dir.path().join("demos.jsonl"),
        "{\"id\": \"lonely\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n",
    )
    .unwrap();
    std::fs::remove_dir_all(dir.path().join("sft")).unwrap();
    let err = Trainer::from_config_file(&config)
        .unwrap()
        .sft()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("demonstration `lonely`") && err.contains("no assistant"),
        "{err}"
    );
}

#[test]
fn overlapped_steps_learn_one_update_stale_and_resume_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_chat_model(dir.path());
    let config = |out: &str| {
        edited_config(
            dir.path(),
            &model,
            3,
            out,
            &[("max_rounds = 2", "max_rounds = 2\noverlap = true")],
        )
    };
    let metrics = |out: &Path| -> Vec<Value> {
        std::fs::read_to_string(out.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };

    // Uninterrupted: the first batch is the starting policy's own; each later one was
    // rolled out during the update before, by the weights that update started from.
    let mut straight = Trainer::from_config_file(config("straight")).unwrap();
    straight.train().unwrap();
    drop(straight);
    let out = dir.path().join("straight");
    let straight_metrics = metrics(&out);
    let staleness: Vec<u64> = straight_metrics
        .iter()
        .map(|m| m["staleness"].as_u64().unwrap())
        .collect();
    assert_eq!(staleness, [0, 1, 1], "{straight_metrics:?}");
    for m in &straight_metrics {
        let w = m["behaviour_weight_mean"].as_f64().unwrap();
        assert!(w > 0.0 && w <= 2.0, "{m}");
        assert!(m["step_seconds"].as_f64().unwrap() > 0.0, "{m}");
    }
    assert!(
        straight_metrics
            .iter()
            .any(|m| m["updates"].as_u64().unwrap() > 0)
    );
    // A checkpoint keeps the batch rolled out for the next step; the last has none.
    let checkpoints = out.join("checkpoints");
    assert!(checkpoints.join("step-000002/pending.json").exists());
    assert!(!checkpoints.join("step-000003/pending.json").exists());

    // Stopped after step 1's checkpoint, then resumed: step 2 learns from the batch the
    // checkpoint kept, and the run ends with the uninterrupted one's weights.
    let mut first = Trainer::from_config_file(config("resumed")).unwrap();
    let stopped = first.train_with(|_, m, _| {
        if m.step == 1 {
            Err("stopped".into())
        } else {
            Ok(())
        }
    });
    assert!(stopped.is_err());
    drop(first);
    let resumed_dir = dir.path().join("resumed");
    assert!(
        resumed_dir
            .join("checkpoints/step-000001/pending.json")
            .exists()
    );
    let mut second = Trainer::from_config_file(config("resumed")).unwrap();
    assert_eq!(second.step(), 1);
    second.train().unwrap();
    drop(second);
    let resumed_metrics = metrics(&resumed_dir);
    assert_eq!(resumed_metrics.len(), 3);
    for (a, b) in straight_metrics.iter().zip(&resumed_metrics) {
        for key in ["reward_mean", "staleness", "trajectories", "sampled_tokens"] {
            assert_eq!(a[key], b[key], "step {}: {key}", a["step"]);
        }
    }
    same_final_weights(&out, &resumed_dir);
}

/// The final weights of the run in `straight`, after checking that the run in `resumed`
/// ended with the same.
fn same_final_weights(straight: &Path, resumed: &Path) -> Vec<f32> {
    let a = weights(&straight.join("model"));
    let b = weights(&resumed.join("model"));
    let diff = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    assert!(
        diff < 1e-6,
        "max |Δw| between the straight and the resumed run = {diff}"
    );
    a
}
