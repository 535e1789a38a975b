//! Rollouts through a real llama.cpp server (`llama-server`, built by
//! `scripts/build-llama-server` from the llama.cpp inside the `llama-cpp-python` sdist on
//! PyPI) serving SmolLM2-135M-Instruct written by our GGUF writer: greedy calculator
//! rollouts through `ServerPolicy` give the very token ids the built-in engine gives on
//! the same weights; seeded sampling is reproducible and its log-probabilities are those
//! of a distribution; a dead server in the list is skipped with a retry. A short RL run
//! rolls out on servers the trainer runs (`[rollout.llama_server]`), pushes each update's
//! weights to them, and evaluates through them on exactly the trained weights.
//!
//! Ignored in a plain `cargo test` (the server takes minutes to build); `scripts/test`
//! builds it and runs these one at a time (each runs servers), `AGENTFLY_LLAMA_SERVER`
//! naming another binary: `cargo test --workspace --test llama_server -- --ignored --test-threads=1`.

use agentfly_testdata::support as common;

use agentfly_core::Sample;
use agentfly_core::rollout::{Policy, RolloutOutput};
use agentfly_engine::engine::{Engine, EngineConfig};
use agentfly_engine::server::{LlamaServerConfig, LlamaServers, ServerConfig, ServerPolicy};
use agentfly_model::Pretrained;
use agentfly_model::io::GgufDtype;
use agentfly_trainer::run::Trainer;
use serde_json::Value;
use std::path::{Path, PathBuf};

agentfly_core::link!(agentfly_tools);

fn samples() -> Vec<Sample> {
    common::calculator_samples(&[
        ("a", "What is 123 * 45?", 5535),
        ("b", "What is 987 + 654?", 1641),
        ("c", "What is 56 * 78?", 4368),
        (
            "d",
            "A box holds 12 pens. How many pens are in 9 boxes?",
            108,
        ),
    ])
}

fn llama_server() -> PathBuf {
    let path = std::env::var_os("AGENTFLY_LLAMA_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../.llama/bin/llama-server")
        });
    assert!(
        path.is_file(),
        "{} is missing: run scripts/build-llama-server",
        path.display()
    );
    path
}

fn roll(
    model: &Pretrained,
    policy: &dyn Policy,
    temperature: f32,
    seed: u64,
    concurrency: usize,
) -> RolloutOutput {
    let (tokenizer, template, eos) = model.chat_parts().unwrap();
    common::CalculatorRollout {
        policy,
        tokenizer: &tokenizer,
        template: &template,
        eos: &eos,
        temperature,
        chains: 2,
        concurrency,
    }
    .run(&samples(), seed)
}

/// SmolLM2 loaded here, and one llama.cpp server on it (written as an f32 GGUF in `dir`).
fn smollm2_served(dir: &Path) -> (Pretrained, PathBuf, LlamaServers) {
    let template = common::smollm2_gguf();
    let model = Pretrained::load(&template, &common::device()).unwrap();
    let gguf = dir.join("policy.f32.gguf");
    model.save_gguf(&template, GgufDtype::F32, &gguf).unwrap();
    let server = LlamaServers::start(
        &LlamaServerConfig {
            binary: Some(llama_server()),
            parallel: 2,
            context: 2048,
            threads: 2,
            ..LlamaServerConfig::default()
        },
        &gguf,
        dir,
    )
    .unwrap();
    (model, template, server)
}

#[test]
#[ignore = "needs llama-server: scripts/build-llama-server, then --ignored (scripts/test does)"]
fn rollouts_through_llama_server_match_the_engine_token_for_token() {
    let dir = tempfile::tempdir().unwrap();
    let (model, template, server) = smollm2_served(dir.path());
    let policy = ServerPolicy::new(ServerConfig {
        // A dead server first: the request goes on to the live one.
        urls: vec!["http://127.0.0.1:9".into(), server.urls()[0].clone()],
        ..ServerConfig::default()
    })
    .unwrap();

    let engine = Engine::start(
        Pretrained::load(&template, &common::device()).unwrap(),
        EngineConfig::default(),
    );
    let (ours, theirs) = (
        roll(&model, &engine, 0.0, 0, 8),
        roll(&model, &policy, 0.0, 0, 8),
    );
    assert_eq!(ours.trajectories.len(), theirs.trajectories.len());
    let mut tool_calls = 0;
    for (a, b) in ours.trajectories.iter().zip(&theirs.trajectories) {
        assert_eq!(
            a.tokens, b.tokens,
            "sample {} chain {} (through the server: {:?}, {:?})",
            a.sample_id, a.chain, b.finish_reason, b.error
        );
        assert_eq!(a.loss_mask, b.loss_mask);
        assert_eq!((a.reward, a.finish_reason), (b.reward, b.finish_reason));
        tool_calls += b.turns.iter().map(|t| t.calls.len()).sum::<usize>();
    }
    assert!(
        tool_calls > 0,
        "the model called its tools through the server"
    );
    let stats = policy.stats();
    assert!(
        stats.requests > 0 && stats.retries > 0 && stats.failures == 0,
        "{stats:?}"
    );

    // Sampling: the same seeds give the same trajectories, and every sampled token's
    // log-probability is one of a distribution. One chain at a time: llama.cpp's numbers
    // depend on which sequences share a batch (its kernels differ with the batch's size),
    // so concurrent chains sampled twice can part where two tokens are nearly tied.
    let (first, again) = (
        roll(&model, &policy, 0.8, 7, 1),
        roll(&model, &policy, 0.8, 7, 1),
    );
    for (a, b) in first.trajectories.iter().zip(&again.trajectories) {
        assert_eq!(a.tokens, b.tokens);
        for &lp in &a.logprobs {
            assert!(lp.is_finite() && lp <= 1e-6, "log-probability {lp}");
        }
    }
    drop(server);
}

/// The log-probability of each sampled token of `t` (loss mask 1) under `model` at
/// temperature 1, and what the trajectory recorded for it.
fn scored(model: &Pretrained, t: &agentfly_core::rollout::Trajectory) -> Vec<(f32, f32)> {
    let ids: Vec<i64> = t.tokens.iter().map(|&id| i64::from(id)).collect();
    let n = ids.len();
    let logits = common::logits(model, ids, [1, n]);
    let vocab = logits.len() / n;
    (1..n)
        .filter(|&i| t.loss_mask[i] == 1)
        .map(|i| {
            let row = &logits[(i - 1) * vocab..i * vocab];
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let sum: f32 = row.iter().map(|&x| (x - max).exp()).sum();
            let ours = row[t.tokens[i] as usize] - max - sum.ln();
            (ours, t.logprobs[i])
        })
        .collect()
}

/// Kills (SIGKILL) the llama-server serving `model`, found by its command line.
fn kill_server_of(model: &Path) {
    let model = model.to_string_lossy().into_owned();
    let mut killed = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.first().is_some_and(|a| a.ends_with("llama-server")) && args.contains(&model) {
            let pid = entry.file_name().to_string_lossy().into_owned();
            let status = std::process::Command::new("sh")
                .args(["-c", &format!("kill -9 {pid}")])
                .status()
                .unwrap();
            assert!(status.success());
            killed += 1;
        }
    }
    assert_eq!(killed, 1, "one llama-server serves {model}");
}

#[test]
#[ignore = "needs llama-server: scripts/build-llama-server, then --ignored (scripts/test does)"]
fn rl_on_llama_servers_pushes_each_update_and_evaluates_the_trained_weights() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = common::smollm2_gguf();
    let lines: String = samples()
        .iter()
        .map(|s| serde_json::to_string(s).unwrap() + "\n")
        .collect();
    std::fs::write(dir.path().join("train.jsonl"), lines).unwrap();
    let config = format!(
        r#"
[model]
path = "{model}"

[data]
train = "train.jsonl"

[agent]
tools = ["calculator", "submit_answer"]
reward = "odd_length"
system_prompt = {system:?}

[chain]
max_turns = 2
max_tokens_per_turn = 24
max_total_tokens = 1024
temperature = 1.0

[rollout]
chains = 4
samples_per_step = 2
concurrency = 8
max_rounds = 2

[rollout.llama_server]
binary = "{binary}"
parallel = 4
context = 1024
threads = 2

[train]
steps = 2
seed = 3
micro_batch_tokens = 2048

[optim]
lr = 2e-5

[output]
dir = "out"
checkpoint_every = 1
"#,
        model = gguf.display(),
        system = common::CALCULATOR_SYSTEM,
        binary = llama_server().display(),
    );
    let path = dir.path().join("config.toml");
    std::fs::write(&path, config).unwrap();
    let mut trainer = Trainer::from_config_file(&path).unwrap();
    // After step 1 its server is killed, as a crash would: step 2's rollout starts it again.
    let served = dir.path().join("out/served");
    let summary = trainer
        .train_with(|_, m, _| {
            if m.step == 1 {
                kill_server_of(&served.join("policy-000001.gguf"));
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(summary.steps, 2);
    let out = dir.path().join("out");
    let metrics: Vec<Value> = std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for m in &metrics {
        // Every step learned from trajectories sampled by the weights it updated: had the
        // servers missed the update before, step 2's would be a version behind, and dropped.
        assert!(m["updates"].as_u64().unwrap() > 0, "{m}");
        assert_eq!(
            (m["staleness"].as_u64(), m["stale_dropped"].as_u64()),
            (Some(0), Some(0)),
            "{m}"
        );
    }
    let line = trainer.generator_summary().unwrap();
    eprintln!("{line}");
    // The one failure allowed: llama.cpp's server gives no probability for a token that
    // ends inside a UTF-8 character (sampling at temperature 1 now and then splits one),
    // and such a chain ends with that error rather than with made-up log-probabilities.
    assert!(line.contains(" 2 restarts, 1 revived"), "{line}");
    assert!(
        line.contains(" 0 failures") || line.contains("ends inside a UTF-8 character"),
        "{line}"
    );
    // Only the policy being served is kept on disk.
    let served: Vec<String> = std::fs::read_dir(out.join("served"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".gguf"))
        .collect();
    assert_eq!(served, ["policy-000002.gguf"]);

    // The servers now serve exactly the trained weights, as version 2: what they sample at
    // temperature 1 has the log-probabilities the trained model gives it, not those of
    // the model it started from.
    let device = common::device();
    let trained = Pretrained::load(out.join("model"), &device).unwrap();
    let start = Pretrained::load(&gguf, &device).unwrap();
    let chain = trainer.config().chain.clone();
    let (rolled, _) = trainer.rollout(&samples(), 1, &chain, 11, |_| {}).unwrap();
    // Mean and max |Δ log p| of the sampled tokens to the trained and to the start model.
    let (mut to_trained, mut to_start) = ((0f64, 0f64), (0f64, 0f64));
    let mut n = 0;
    for t in &rolled {
        assert!(
            t.turns.iter().all(|turn| turn.policy_version == 2),
            "{:?}",
            t.turns
        );
        for ((ours, served), (before, _)) in scored(&trained, t).into_iter().zip(scored(&start, t))
        {
            for (d, acc) in [
                (ours - served, &mut to_trained),
                (before - served, &mut to_start),
            ] {
                let d = f64::from(d.abs());
                acc.0 += d;
                acc.1 = acc.1.max(d);
            }
            n += 1;
        }
    }
    let (trained_mean, start_mean) = (to_trained.0 / n as f64, to_start.0 / n as f64);
    eprintln!(
        "{n} sampled tokens: |Δ log p| to the trained model mean {trained_mean:.1e} max {:.1e}, \
         to the start mean {start_mean:.1e} max {:.1e}",
        to_trained.1, to_start.1
    );
    assert!(n >= 8, "{n} sampled tokens");
    // llama.cpp's f32 arithmetic differs from ours in its last bits; a low-probability
    // token's log-probability shows it most (the rollout's `gap` in the step lines).
    assert!(
        trained_mean < 5e-3 && to_trained.1 < 0.1,
        "the served log-probs are not the trained model's: {to_trained:?} over {n}"
    );
    assert!(
        start_mean > 5.0 * trained_mean,
        "the served weights are still the start's: {start_mean} vs {trained_mean}"
    );

    // Evaluation goes through the servers too: greedy, it is the built-in engine's on the
    // trained weights, token for token, except where the two best tokens are a near-tie:
    // there llama.cpp's last bits may pick the other (seen once in CI: "\n" or the end of
    // the turn after the answer), and the two generations part.
    let through_servers = trainer.evaluate(&samples()).unwrap();
    let mut config = trainer.config().clone();
    config.rollout.llama_server = None;
    config.output.dir = dir.path().join("eval");
    let on_engine = Trainer::with_model(config, &out).unwrap();
    let engine = on_engine.evaluate(&samples()).unwrap();
    assert_eq!(through_servers.trajectories.len(), samples().len());
    let mut parted = 0;
    for (a, b) in engine
        .trajectories
        .iter()
        .zip(&through_servers.trajectories)
    {
        assert!(b.turns.iter().all(|turn| turn.policy_version == 2));
        if a.tokens == b.tokens {
            continue;
        }
        let (at, margin) = parting(&trained, &a.tokens, &b.tokens).expect("a token differs");
        // The tolerance of the served log-probabilities above.
        assert!(
            margin < 0.1,
            "sample {}: parts at token {at}, no near-tie: {margin}",
            a.sample_id
        );
        eprintln!(
            "sample {}: parts at token {at}, a near-tie ({margin:.1e})",
            a.sample_id
        );
        parted += 1;
    }
    assert!(parted <= 1, "{parted} samples parted");
    if parted == 0 {
        assert_eq!(engine.correct, through_servers.correct);
    }
}

/// Where two generations of one prompt first differ, and how far apart `model` puts the
/// two tokens there in log-probability (`None`: no token differs before one ends).
fn parting(model: &Pretrained, a: &[u32], b: &[u32]) -> Option<(usize, f32)> {
    let at = a.iter().zip(b).position(|(x, y)| x != y)?;
    let ids: Vec<i64> = a[..at].iter().map(|&id| i64::from(id)).collect();
    let logits = common::logits(model, ids, [1, at]);
    let vocab = logits.len() / at;
    let last = &logits[(at - 1) * vocab..];
    Some((at, (last[a[at] as usize] - last[b[at] as usize]).abs()))
}

#[test]
#[ignore = "needs llama-server (scripts/build-llama-server); scripts/test runs it"]
fn servers_a_killed_trainer_left_running_are_stopped_when_its_run_starts_again() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("policy.gguf");
    std::fs::copy(common::smollm2_gguf(), &gguf).unwrap();
    let config = LlamaServerConfig {
        binary: Some(llama_server()),
        parallel: 1,
        context: 512,
        threads: 1,
        // This llama.cpp crashes (SIGSEGV) repacking Q4_1 weights for its CPU kernels.
        extra_args: vec!["--no-repack".into()],
        ..LlamaServerConfig::default()
    };
    let first = LlamaServers::start(&config, &gguf, dir.path()).unwrap();
    let pid_file = dir.path().join("llama-servers.pid");
    let server_pid = |text: String| -> u32 {
        let mut lines = text.lines();
        let owner = format!("owner {}", std::process::id());
        assert_eq!(lines.next(), Some(owner.as_str()), "{text}");
        lines.next().unwrap().parse().unwrap()
    };
    let pid = server_pid(std::fs::read_to_string(&pid_file).unwrap());
    // A trainer killed with SIGKILL never stops its servers.
    std::mem::forget(first);
    let state = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start()[..1].to_string())
            })
    };
    assert!(
        matches!(state(pid).as_deref(), Some(s) if s != "Z"),
        "the first server runs"
    );
    // While the trainer that owns them runs (here: another live process), its servers
    // are left alone.
    let mut other = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let listed = std::fs::read_to_string(&pid_file).unwrap();
    let owned_elsewhere = listed.replacen(
        &format!("owner {}", std::process::id()),
        &format!("owner {}", other.id()),
        1,
    );
    std::fs::write(&pid_file, owned_elsewhere).unwrap();
    let beside = LlamaServers::start(&config, &gguf, dir.path()).unwrap();
    assert!(
        matches!(state(pid).as_deref(), Some(s) if s != "Z"),
        "a live run's server was left alone"
    );
    let _ = other.kill();
    let _ = other.wait();
    drop(beside);
    std::fs::write(&pid_file, listed).unwrap();
    let second = LlamaServers::start(&config, &gguf, dir.path()).unwrap();
    // Killed (a zombie until this process, its parent here, reaps it; a killed trainer's
    // orphans are reaped by init).
    assert!(
        matches!(state(pid).as_deref(), None | Some("Z")),
        "the orphaned server {pid} still runs: {:?}",
        state(pid)
    );
    let new_pid = server_pid(std::fs::read_to_string(&pid_file).unwrap());
    assert_ne!(new_pid, pid);
    drop(second);
    assert!(
        !pid_file.exists(),
        "stopping the servers removes their pid file"
    );
}

/// ReAct samples: one worked example in ReAct's form, then the question.
fn react_samples() -> Vec<Sample> {
    use serde_json::json;
    let shot = [
        json!({"role": "user", "content": "What is 17 * 3?"}),
        json!({"role": "assistant", "content": "Thought: I multiply.\nAction: calculator\nAction Input: {\"expression\": \"17 * 3\"}\nObservation:"}),
        json!({"role": "user", "content": "51"}),
        json!({"role": "assistant", "content": "Thought: I know it.\nAction: submit_answer\nAction Input: {\"answer\": \"51\"}\nObservation:"}),
        json!({"role": "user", "content": "Answer submitted: 51"}),
    ];
    [
        ("a", "What is 123 * 45?", 5535),
        ("b", "What is 987 + 654?", 1641),
    ]
    .iter()
    .map(|&(id, question, answer)| {
        let mut messages = shot.to_vec();
        messages.push(json!({"role": "user", "content": question}));
        Sample::new(id, json!({"messages": messages, "answer": answer}))
    })
    .collect()
}

#[test]
#[ignore = "needs llama-server: scripts/build-llama-server, then --ignored (scripts/test does)"]
fn react_turns_through_llama_server_end_at_their_stop_string() {
    use agentfly_core::rollout::{
        ChainConfig, ChainEnd, ChainSetup, GenerateRequest, GenerationEnd, Rollout, format::ReAct,
    };
    let dir = tempfile::tempdir().unwrap();
    let (model, _, server) = smollm2_served(dir.path());
    let policy = ServerPolicy::new(ServerConfig {
        urls: server.urls().to_vec(),
        ..ServerConfig::default()
    })
    .unwrap();
    let (tokenizer, chat, eos) = model.chat_parts().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let generate = |stop_strings: Vec<String>| {
        let context = tokenizer
            .encode("Count from one to thirty in words: one, two, three,", false)
            .unwrap();
        runtime
            .block_on(policy.generate(GenerateRequest {
                context,
                max_new_tokens: 40,
                stop_ids: eos.clone(),
                stop_strings,
                temperature: 0.0,
                top_p: 1.0,
                top_k: 0,
                seed: 0,
            }))
            .unwrap()
    };
    // Greedy without a stop string, then with one taken from the middle of that text: the
    // generation ends before the stop string's tokens, every kept token with its
    // probability, and is the greedy generation's beginning.
    let whole = generate(Vec::new());
    let text = tokenizer.decode(&whole.ids, false).unwrap();
    let half = tokenizer
        .decode(&whole.ids[..whole.ids.len() / 2], false)
        .unwrap();
    let stop: String = text[half.len()..].chars().take(6).collect();
    assert!(!half.contains(&stop) && stop.trim().len() >= 3, "{text:?}");
    let cut = generate(vec![stop.clone()]);
    assert_eq!(cut.end, GenerationEnd::Stop);
    assert_eq!(cut.ids.len(), cut.logprobs.len());
    assert!(
        !cut.ids.is_empty() && cut.ids.len() < whole.ids.len(),
        "{cut:?}"
    );
    assert_eq!(cut.ids, whole.ids[..cut.ids.len()], "{stop:?}");
    let kept = tokenizer.decode(&cut.ids, false).unwrap();
    assert!(!kept.contains(&stop) && text.starts_with(&kept), "{kept:?}");

    // ReAct chains through the server: their turns stop at `Observation:` and go on.
    let toolbox = agentfly_core::Toolbox::from_names(&["calculator", "submit_answer"]).unwrap();
    let rewards = agentfly_core::Rewards::from_names(&["exact_numeric"]).unwrap();
    let config = ChainConfig {
        max_turns: 3,
        max_tokens_per_turn: 48,
        system_prompt: "Solve arithmetic with tools, in the form Thought / Action / Action \
                        Input, then wait for the Observation."
            .into(),
        temperature: 0.0,
        ..ChainConfig::default()
    };
    let rollout = Rollout {
        setup: ChainSetup {
            policy: &policy,
            toolbox: &toolbox,
            format: &ReAct,
            template: &chat,
            tokenizer: &tokenizer,
            end_of_turn: &eos,
            rewards: Some((&rewards, "exact_numeric")),
            config: &config,
        },
        pools: agentfly_core::env::EnvPools::new(agentfly_core::env::PoolConfig::default()),
        chains: 1,
        concurrency: 2,
        seed: 0,
    };
    let out = runtime.block_on(rollout.run(&react_samples(), |_| {}));
    let mut calls = 0;
    for t in &out.trajectories {
        assert_ne!(
            t.finish_reason,
            ChainEnd::Error,
            "sample {}: {:?}",
            t.sample_id,
            t.error
        );
        calls += t.calls().count();
    }
    assert!(calls > 0, "{:#?}", out.summary);
    assert_eq!(policy.stats().failures, 0);
    drop(server);
}
