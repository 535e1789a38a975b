//! A custom training binary: the standard tools plus this crate's own. Today it lists and
//! calls them; the same `link!` line is what makes a custom training run see them.
//!
//! Run: `cargo run -p agentfly-examples --bin custom_agent`

use agentfly_core::env::{EnvPools, PoolConfig};
use agentfly_core::{CallContext, RewardInput, Rewards, Sample, Toolbox, Trajectory};

// Name every tool crate once, or the linker drops it and its tools are missing.
agentfly_core::link!(agentfly_tools, agentfly_examples);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let toolbox =
        Toolbox::from_names(&["calculator", "convert_length", "take_note", "submit_answer"])?;
    println!("tools: {}", toolbox.names().join(", "));
    println!("{}", serde_json::to_string_pretty(&toolbox.schemas()[1])?);

    // One chain's context: on first use it leases a Scratchpad from the run's pools, and
    // all its tools share that instance until the chain ends.
    let pools = EnvPools::new(PoolConfig::default());
    let mut ctx = CallContext::with_pools(pools.clone());
    for (tool, args) in [
        (
            "convert_length",
            r#"{"value": 5, "from": "km", "to": "mi"}"#,
        ),
        ("take_note", r#"{"note": "5 km is about 3.1 mi"}"#),
        ("take_note", r#"{"note": "check the marathon distance"}"#),
        ("calculator", r#"{"expression": "42.195 / 1.609344"}"#),
        ("convert_length", r#"{"value": 5, "from": "parsec"}"#),
    ] {
        let observation = toolbox.call_json_in(&mut ctx, tool, args).await;
        let tag = if observation.is_error { "error" } else { "ok" };
        println!("{tool} {args}\n  -> [{tag}] {}", observation.text);
    }

    let rewards = Rewards::from_names(&["close_enough"])?;
    let sample = Sample::new("marathon", serde_json::json!({"answer": 26.2188}));
    let output = rewards
        .score(
            "close_enough",
            RewardInput {
                response: "26.2188",
                trajectory: &Trajectory::default(),
                sample: &sample,
                ctx: &mut ctx,
            },
        )
        .await?;
    println!("reward: {} {:?}", output.reward, output.metrics);
    drop(ctx); // the chain ends: its Scratchpad goes back to the pool
    pools.close().await;
    Ok(())
}
