//! `[rollout.external]`: the calculator played by a Python agent on the official `openai`
//! client (examples/runs/external/agent.py) against the trainer's own endpoint, on the real
//! SmolLM2 model. Greedy, its episodes are the trajectories agentfly's own chains give, token
//! for token, wherever the model's calls could be read (an unreadable call is an error
//! observation in a chain, and plain content to an OpenAI client); and a few RL steps learn
//! from the recorded trajectories as from chains, the two runs' rewards printed side by side.

use agentfly_testdata::{agents_python, json_lines, repo, smollm2_gguf};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// The calculator's splits (`agentfly tasks arithmetic`) and three configurations: a short
/// SFT warm start from SmolLM2 (as the calculator job makes one: the untrained model never
/// uses the tools), then the same RL run on agentfly's chains and on the Python agent.
fn write_configs(dir: &Path) -> [std::path::PathBuf; 3] {
    agentfly(
        &[
            "tasks",
            "arithmetic",
            "--out",
            "data",
            "--train",
            "16",
            "--val",
            "8",
            "--test",
            "8",
            "--demos",
            "32",
        ],
        dir,
    );
    let example = repo().join("examples/runs/external");
    let common = |model: &str, agent: &str, out: &str, steps: usize| {
        format!(
            r#"[model]
path = "{model}"

[data]
train = "data/train.jsonl"
eval = "data/test.jsonl"

{agent}
system_prompt_file = "{example}/system.txt"

[chain]
max_turns = 3
max_tokens_per_turn = 64
max_total_tokens = 1024

[rollout]
chains = 4
samples_per_step = 2
dynamic_sampling = false

[train]
steps = {steps}
seed = 3

[output]
dir = "{out}"
"#,
            example = example.display(),
        )
    };
    let tools = "[agent]\ntools = [\"calculator\", \"submit_answer\"]\nreward = \"exact_numeric\"";
    let sft = dir.join("sft.toml");
    let base = smollm2_gguf().display().to_string();
    std::fs::write(
        &sft,
        common(&base, tools, "sft-run", 0)
            + "\n[sft]\ndata = \"data/demos.jsonl\"\nepochs = 2\nbatch_size = 8\nlr = 1e-4\n",
    )
    .unwrap();
    let warm = "sft-run/sft-model";
    let chains = dir.join("chains.toml");
    std::fs::write(&chains, common(warm, tools, "chains-run", 2)).unwrap();
    let external = dir.join("external.toml");
    let text = common(warm, "[agent]", "external-run", 2)
        + &format!(
            "\n[rollout.external]\ncommand = [\"{}\", \"{}/agent.py\"]\ndescribe_tools = false\ntimeout_secs = 120\n",
            agents_python().display(),
            example.display()
        );
    std::fs::write(&external, &text).unwrap();
    // The same agent on the OpenAI Agents SDK.
    let sdk = text
        .replace("/agent.py", "/agents_sdk.py")
        .replace("external-run", "sdk-run");
    std::fs::write(dir.join("sdk.toml"), sdk).unwrap();
    [sft, chains, external]
}

fn agentfly(args: &[&str], dir: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_agentfly"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "agentfly {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn unreadable_call(t: &Value) -> bool {
    t["turns"].as_array().unwrap().iter().any(|turn| {
        turn["calls"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["error"] == "parse error")
    })
}

#[test]
fn a_python_agent_on_the_openai_client_plays_and_trains_like_a_chain() {
    let dir = tempfile::tempdir().unwrap();
    let [sft, chains, external] = write_configs(dir.path());
    let (sft, chains, external) = (
        sft.to_str().unwrap(),
        chains.to_str().unwrap(),
        external.to_str().unwrap(),
    );
    agentfly(&["train", "--config", sft], dir.path());
    assert!(dir.path().join("sft-run/sft-model").is_dir());
    agentfly(
        &[
            "eval",
            "--config",
            chains,
            "--out",
            "chains.jsonl",
            "--json",
        ],
        dir.path(),
    );
    agentfly(
        &[
            "eval",
            "--config",
            external,
            "--out",
            "external.jsonl",
            "--json",
        ],
        dir.path(),
    );
    let ours = json_lines(&dir.path().join("chains.jsonl"));
    let theirs = json_lines(&dir.path().join("external.jsonl"));
    assert_eq!(ours.len(), 8);
    assert_eq!(theirs.len(), 8, "one trajectory per episode");
    let mut compared = 0;
    for (a, b) in ours.iter().zip(&theirs) {
        assert_eq!(a["sample_id"], b["sample_id"]);
        assert!(b["reward"].is_number(), "the agent posted a reward: {b}");
        if unreadable_call(a) {
            continue;
        }
        compared += 1;
        assert_eq!(
            a["tokens"], b["tokens"],
            "sample {}: the same tokens",
            a["sample_id"]
        );
        assert_eq!(a["loss_mask"], b["loss_mask"], "sample {}", a["sample_id"]);
        assert_eq!(
            a["reward"], b["reward"],
            "sample {}: the agent's reward is the chain's",
            a["sample_id"]
        );
        let (la, lb) = (
            a["logprobs"].as_array().unwrap(),
            b["logprobs"].as_array().unwrap(),
        );
        let worst = la
            .iter()
            .zip(lb)
            .map(|(x, y)| (x.as_f64().unwrap() - y.as_f64().unwrap()).abs())
            .fold(0.0, f64::max);
        assert!(
            worst < 1e-3,
            "sample {}: log-probs apart by {worst}",
            a["sample_id"]
        );
    }
    eprintln!(
        "{compared} of {} greedy episodes compared token for token",
        ours.len()
    );
    assert!(
        compared >= 4,
        "too few episodes without an unreadable call to compare ({compared})"
    );
    let calculated = theirs
        .iter()
        .filter(|t| {
            t["turns"][0]["calls"]
                .as_array()
                .is_some_and(|c| !c.is_empty())
        })
        .count();
    assert!(
        calculated > 0,
        "the warm-started agent calls its tools through the endpoint"
    );

    // The Agents SDK's agent plays the same problems through the same endpoint: every episode
    // posts its reward (its requests differ from agent.py's: the SDK's own tool schemas).
    let report: Value = serde_json::from_str(&agentfly(
        &[
            "eval",
            "--config",
            "sdk.toml",
            "--out",
            "sdk.jsonl",
            "--json",
        ],
        dir.path(),
    ))
    .unwrap();
    assert_eq!(report["samples"], 8, "{report}");
    assert_eq!(
        report["failed"], 0,
        "every SDK episode posted its reward: {report}"
    );
    let sdk = json_lines(&dir.path().join("sdk.jsonl"));
    let same = ours
        .iter()
        .zip(&sdk)
        .filter(|(a, b)| a["tokens"] == b["tokens"])
        .count();
    eprintln!(
        "the Agents SDK's agent: {}/8 correct ({}/8 for the chains), {same}/8 episodes token for token the chains'",
        report["correct"],
        ours.iter().filter(|t| t["reward"] == 1.0).count()
    );

    // A few RL steps from the agent's episodes, and the same on agentfly's own chains.
    let learned = |config: &str, run: &str| -> Vec<Value> {
        agentfly(&["train", "--config", config, "--json"], dir.path());
        json_lines(&dir.path().join(run).join("metrics.jsonl"))
            .into_iter()
            .filter(|m| m.get("step").is_some() && m.get("reward_mean").is_some())
            .collect()
    };
    let theirs = learned(external, "external-run");
    let ours = learned(chains, "chains-run");
    assert_eq!(theirs.len(), 2, "two steps: {theirs:?}");
    for (a, b) in ours.iter().zip(&theirs) {
        eprintln!(
            "step {}: reward {} (chains) / {} (external agent); trained {} / {}; loss {} / {}",
            a["step"],
            a["reward_mean"],
            b["reward_mean"],
            a["trained_trajectories"],
            b["trained_trajectories"],
            a["loss"],
            b["loss"]
        );
        assert_eq!(
            b["trajectories"], 8,
            "2 samples x 4 episodes, each one trajectory: {b}"
        );
        assert_eq!(b["reward_failures"], 0, "{b}");
        assert!(b["tool_calls"].as_u64().unwrap() > 0, "{b}");
        assert!(b["sampled_tokens"].as_u64().unwrap_or(1) > 0);
    }
}
