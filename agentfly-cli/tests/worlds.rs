//! `agentfly rollout` with the real SmolLM2 acting in ScienceWorld through the remote
//! bridge: episodes run on pooled ScienceWorld servers, the model's `act` calls reach the
//! world and its answers come back, the reward reads each chain's episode, and the pool's
//! counters are in the summary.

use serde_json::{Value, json};
use std::process::Command;

#[test]
fn rollout_plays_scienceworld_through_the_pool() {
    let tmp = tempfile::tempdir().unwrap();
    // One shown turn, so that the small model writes calls of the right shape.
    let shot = json!([
        {"role": "system", "content": "You are in a science world. Take one action per turn with the act tool: <tool_call>\n{\"name\": \"act\", \"arguments\": {\"command\": \"<action>\"}}\n</tool_call>"},
        {"role": "user", "content": "Your task is to look around."},
        {"role": "assistant", "content": "<tool_call>\n{\"name\": \"act\", \"arguments\": {\"command\": \"look around\"}}\n</tool_call>"},
        {"role": "tool", "name": "act", "content": "This room is called the hallway. In it, you see: a picture, the agent. You also see: A door to the kitchen (that is open)"},
        {"role": "user", "content": "Your task is to go to the kitchen."},
        {"role": "assistant", "content": "<tool_call>\n{\"name\": \"act\", \"arguments\": {\"command\": \"go to kitchen\"}}\n</tool_call>"},
        {"role": "tool", "name": "act", "content": "You move to the kitchen."},
    ]);
    let data = tmp.path().join("science.jsonl");
    let mut lines = String::new();
    for variation in 0..2 {
        let mut messages = shot.as_array().unwrap().clone();
        messages.push(json!({"role": "user", "content": "Your task is to find a(n) living thing. First, focus on the thing. Then, move it to the purple box in the workshop."}));
        lines.push_str(
            &json!({"id": format!("v{variation}"), "messages": messages, "variation": variation, "fold": "dev"})
                .to_string(),
        );
        lines.push('\n');
    }
    std::fs::write(&data, lines).unwrap();
    let out = tmp.path().join("traj.jsonl");
    let python = agentfly_testdata::worlds_python();
    let run = Command::new(env!("CARGO_BIN_EXE_agentfly"))
        .args(["rollout", "--model"])
        .arg(agentfly_testdata::smollm2_gguf())
        .args(["--data"])
        .arg(&data)
        .args(["--tools", "act,look,inventory", "--reward", "world_success"])
        .args(["--world", "scienceworld", "--world-python"])
        .arg(&python)
        .args([
            "--world-config",
            r#"{"task": "find-living-thing", "simplifications": "easy"}"#,
        ])
        .args([
            "--chains",
            "2",
            "--max-turns",
            "3",
            "--max-tokens-per-turn",
            "32",
        ])
        .args([
            "--temperature",
            "0",
            "--env-capacity",
            "2",
            "--json",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let summary: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(summary["trajectories"], 4, "{summary}");
    // Two ScienceWorld servers served the four chains, none replaced.
    let pool = &summary["env_pools"]["agentfly_envs::remote::RemoteEnv"];
    assert_eq!(pool["leases"], 4, "{summary}");
    assert_eq!(pool["created"], 2, "{summary}");
    assert_eq!(pool["replaced"], 0, "{summary}");

    let rows: Vec<Value> = agentfly_testdata::json_lines(&out);
    let mut world_answers = 0;
    for row in &rows {
        // The reward read the chain's own episode.
        assert_eq!(row["reward"], 0.0, "{row}");
        let steps = row["reward_metrics"]["steps"].as_f64().unwrap();
        let acts = row["turns"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t["calls"].as_array().unwrap())
            .filter(|c| ["act", "look", "inventory"].contains(&c["name"].as_str().unwrap()))
            .filter(|c| c["is_error"] == false)
            .count();
        assert_eq!(steps as usize, acts, "{row}");
        world_answers += acts;
    }
    // The greedy model imitates the shown calls: its actions reached the world.
    let said: Vec<&str> = rows
        .iter()
        .flat_map(|r| r["turns"].as_array().unwrap())
        .map(|t| t["text"].as_str().unwrap())
        .collect();
    assert!(
        world_answers > 0,
        "no act call reached ScienceWorld: {said:?}"
    );
}
