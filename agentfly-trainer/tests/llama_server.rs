//! Rollouts through a real llama.cpp server (`llama-server`, built by
//! `scripts/build-llama-server` from the llama.cpp inside the `llama-cpp-python` sdist on
//! PyPI) serving SmolLM2-135M-Instruct written by our GGUF writer: greedy calculator
//! rollouts through `ServerPolicy` give the very token ids the built-in engine gives on
//! the same weights; seeded sampling is reproducible and its log-probabilities are those
//! of a distribution; a dead server in the list is skipped with a retry.
//!
//! Ignored in a plain `cargo test` (the server takes minutes to build); the test command
//! (`scripts/test`, CI) builds the server and runs it:
//! `scripts/build-llama-server && cargo test -p agentfly-trainer --test llama_server -- --ignored`
//! (`AGENTFLY_LLAMA_SERVER` names another binary).

mod common;

use agentfly_core::Sample;
use agentfly_core::rollout::{Policy, RolloutOutput};
use agentfly_trainer::Pretrained;
use agentfly_trainer::engine::{Engine, EngineConfig};
use agentfly_trainer::io::GgufDtype;
use agentfly_trainer::server::{ServerConfig, ServerPolicy};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// A llama-server on a free port; killed on drop.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(model: &Path, log: &Path) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(log).unwrap();
        let child = Command::new(llama_server())
            .arg("-m")
            .arg(model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["-c", "4096", "-np", "2", "-t", "2"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start llama-server");
        let url = format!("http://127.0.0.1:{port}");
        let server = Server { child, url };
        let start = Instant::now();
        loop {
            let health = ureq::get(&format!("{}/health", server.url)).call();
            if health.is_ok_and(|r| r.status() == 200) {
                return server;
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "llama-server did not become healthy"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn roll(model: &Pretrained, policy: &dyn Policy, temperature: f32, seed: u64) -> RolloutOutput {
    let (tokenizer, template, eos) = model.chat_parts().unwrap();
    common::CalculatorRollout {
        policy,
        tokenizer: &tokenizer,
        template: &template,
        eos: &eos,
        temperature,
        chains: 2,
        concurrency: 8,
    }
    .run(&samples(), seed)
}

#[test]
#[ignore = "needs llama-server: scripts/build-llama-server, then --ignored (scripts/test does)"]
fn rollouts_through_llama_server_match_the_engine_token_for_token() {
    let device = common::device();
    let template = common::smollm2_gguf();
    let model = Pretrained::load(&template, &device).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("policy.f32.gguf");
    model.save_gguf(&template, GgufDtype::F32, &gguf).unwrap();
    let server = Server::start(&gguf, &dir.path().join("server.log"));
    let policy = ServerPolicy::new(ServerConfig {
        // A dead server first: the request goes on to the live one.
        urls: vec!["http://127.0.0.1:9".into(), server.url.clone()],
        ..ServerConfig::default()
    })
    .unwrap();

    let engine = Engine::start(
        Pretrained::load(&template, &device).unwrap(),
        EngineConfig::default(),
    );
    let (ours, theirs) = (roll(&model, &engine, 0.0, 0), roll(&model, &policy, 0.0, 0));
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
    // log-probability is one of a distribution.
    let (first, again) = (roll(&model, &policy, 0.8, 7), roll(&model, &policy, 0.8, 7));
    for (a, b) in first.trajectories.iter().zip(&again.trajectories) {
        assert_eq!(a.tokens, b.tokens);
        for &lp in &a.logprobs {
            assert!(lp.is_finite() && lp <= 1e-6, "log-probability {lp}");
        }
    }
    drop(server);
}
