//! `code_interpreter` as chains use it: leased from a pool on first use, one sandbox per
//! chain for all its calls, returned clean.

use agentfly_core::env::{EnvPool, EnvPools, PoolConfig};
use agentfly_core::{CallContext, Toolbox};
use agentfly_envs::{PythonSandbox, SandboxConfig};
use agentfly_tools as _;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_chain_has_its_own_persistent_interpreter() {
    let pools = EnvPools::new(PoolConfig::default());
    pools.insert(EnvPool::<PythonSandbox>::new(
        SandboxConfig::default(),
        PoolConfig {
            capacity: 2,
            lease_timeout: Duration::from_secs(10),
            ..PoolConfig::default()
        },
    ));
    let toolbox = Toolbox::from_names(&["code_interpreter"]).unwrap();
    let mut a = CallContext::with_pools(pools.clone());
    let mut b = CallContext::with_pools(pools.clone());
    let run = |code: &str| serde_json::json!({ "code": code }).to_string();

    let out = toolbox
        .call_json_in(&mut a, "code_interpreter", &run("n = 10"))
        .await;
    assert_eq!((out.text.as_str(), out.is_error), ("(no output)", false));
    let out = toolbox
        .call_json_in(&mut b, "code_interpreter", &run("n = 20"))
        .await;
    assert!(!out.is_error);
    let out = toolbox
        .call_json_in(&mut a, "code_interpreter", &run("n * 2"))
        .await;
    assert_eq!(out.text, "20", "chain a sees its own n");
    let out = toolbox
        .call_json_in(&mut b, "code_interpreter", &run("n * 2"))
        .await;
    assert_eq!(out.text, "40", "chain b sees its own n");

    let out = toolbox
        .call_json_in(&mut a, "code_interpreter", &run("undefined_name"))
        .await;
    assert!(out.is_error);
    assert!(out.text.contains("NameError"), "{}", out.text);
    let out = toolbox
        .call_json_in(&mut a, "code_interpreter", &run("n"))
        .await;
    assert_eq!(out.text, "10", "an exception keeps the state");

    // Chain a ends: its interpreter goes back, reset; the next chain gets a clean one.
    drop(a);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut c = CallContext::with_pools(pools.clone());
    let out = toolbox
        .call_json_in(&mut c, "code_interpreter", &run("'n' in globals()"))
        .await;
    assert_eq!(out.text, "False");
    let metrics = &pools.metrics()[0].1;
    assert_eq!((metrics.created, metrics.leases), (2, 3), "{metrics:?}");
    drop((b, c));
    pools.close().await;
}
