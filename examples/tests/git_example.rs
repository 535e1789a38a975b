//! The git example (`runs/git/`): its configuration loads with the server started in the
//! repository `make_data.py` makes, and its data keep the held-out commits out of training.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

fn rows(name: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("runs/git")
        .join(name);
    std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn commits(rows: &[Value]) -> BTreeSet<String> {
    rows.iter()
        .map(|r| r["commit"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_git_example_config_runs_mcp_server_git_in_the_repository() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("runs/git");
    let config = agentfly_trainer::run::TrainerConfig::load(dir.join("git.toml")).unwrap();
    let [git] = &config.agent.mcp[..] else {
        panic!("one MCP server")
    };
    // Paths relative to the file: the server from scripts/setup's venv, run in the repository.
    let root = dir.join("../../..");
    assert_eq!(
        Path::new(git.command.as_deref().unwrap()),
        root.join(".venv-mcp/bin/mcp-server-git")
    );
    assert_eq!(
        git.cwd.as_deref(),
        Some(&*root.join("target/runs/git-repo"))
    );
    assert_eq!(git.args, ["--repository", "."]);
    assert_eq!(git.tools.as_deref(), Some(&["git_show".to_string()][..]));
    assert!(config.data.eval.as_ref().unwrap().ends_with("val.jsonl"));
}

#[test]
fn no_held_out_commit_is_asked_about_or_shown_in_training() {
    let (train, demos) = (rows("train.jsonl"), rows("demos.jsonl"));
    let (val, test) = (rows("val.jsonl"), rows("test.jsonl"));
    assert_eq!(
        (train.len(), demos.len(), val.len(), test.len()),
        (200, 48, 40, 100)
    );
    let seen: BTreeSet<_> = commits(&train).union(&commits(&demos)).cloned().collect();
    assert!(commits(&test).is_disjoint(&seen));
    assert!(commits(&val).is_disjoint(&seen));
    assert!(commits(&val).is_disjoint(&commits(&test)));
    // Each demonstration looks its commit up in the repository the server runs in, then
    // submits the answer.
    for d in &demos {
        let m = d["messages"].as_array().unwrap();
        let call = m[1]["content"].as_str().unwrap();
        let commit = d["commit"].as_str().unwrap();
        assert!(
            call.contains(&format!(
                r#""arguments":{{"repo_path":".","revision":"{commit}"}}"#
            )),
            "{call}"
        );
        assert!(m[2]["content"].as_str().unwrap().starts_with("commit "));
        assert!(
            m[3]["content"]
                .as_str()
                .unwrap()
                .contains(d["answer"].as_str().unwrap())
        );
    }
}
