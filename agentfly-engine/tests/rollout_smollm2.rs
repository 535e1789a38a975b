//! Rollouts with the real SmolLM2-135M-Instruct through the generation engine, with the
//! calculator and submit_answer tools: the loss mask is 1 exactly on the ids the model
//! sampled, decoding a trajectory gives the chat template's rendering of its
//! conversation, the per-turn rows rebuild it, and a seed fixes the result.

use agentfly_testdata::support as common;

use agentfly_core::chat::{ChatTemplate, Conversation, Tokenizer};
use agentfly_core::rollout::{RolloutOutput, Trajectory, sample_messages};
use agentfly_core::{Sample, Toolbox};
use agentfly_engine::engine::{Engine, EngineConfig};
use agentfly_model::Pretrained;
use serde_json::{Value, json};

agentfly_core::link!(agentfly_tools);

const SYSTEM: &str = common::CALCULATOR_SYSTEM;

/// One worked example before each question, so the small model uses the tools.
fn samples() -> Vec<Sample> {
    common::calculator_samples(&[
        ("a", "What is 123 * 45?", 5535),
        ("b", "What is 987 + 654?", 1641),
        ("c", "What is 56 * 78?", 4368),
    ])
}

struct Parts {
    tokenizer: Tokenizer,
    template: ChatTemplate,
    eos: Vec<u32>,
    engine: Engine,
}

fn parts() -> Parts {
    let model = Pretrained::load(common::smollm2_gguf(), &common::device()).unwrap();
    let (tokenizer, template, eos) = model.chat_parts().unwrap();
    Parts {
        tokenizer,
        template,
        eos,
        engine: Engine::start(model, EngineConfig::default()),
    }
}

fn roll(p: &Parts, samples: &[Sample], seed: u64) -> RolloutOutput {
    common::CalculatorRollout {
        policy: &p.engine,
        tokenizer: &p.tokenizer,
        template: &p.template,
        eos: &p.eos,
        temperature: 0.7,
        chains: 3,
        concurrency: 16,
    }
    .run(samples, seed)
}

/// Decoding the trajectory gives the template's rendering of its conversation.
fn check_text(p: &Parts, sample: &Sample, t: &Trajectory) {
    let mut messages = sample_messages(sample, SYSTEM).unwrap();
    let render = |messages: &[Value]| {
        p.template
            .render(&Conversation {
                messages: messages.to_vec(),
                tools: Some(
                    Toolbox::from_names(&["calculator", "submit_answer"])
                        .unwrap()
                        .schemas(),
                ),
                add_generation_prompt: true,
                ..Conversation::default()
            })
            .unwrap()
    };
    let last = t.turns.last().unwrap();
    let before_last = {
        let mut m = messages.clone();
        for turn in &t.turns[..t.turns.len() - 1] {
            m.push(json!({"role": "assistant", "content": turn.text}));
            m.extend(
                turn.calls
                    .iter()
                    .map(|c| json!({"role": "tool", "name": c.name, "content": c.observation})),
            );
        }
        m
    };
    let expected = if last.end > last.model_end {
        // The environment answered the last turn too (the turn limit ended the chain).
        for turn in &t.turns {
            messages.push(json!({"role": "assistant", "content": turn.text}));
            messages.extend(
                turn.calls
                    .iter()
                    .map(|c| json!({"role": "tool", "name": c.name, "content": c.observation})),
            );
        }
        render(&messages)
    } else {
        let ended_by_eot = p.eos.contains(t.tokens.last().unwrap());
        format!(
            "{}{}{}",
            render(&before_last),
            last.text,
            if ended_by_eot { "<|im_end|>" } else { "" }
        )
    };
    assert_eq!(
        p.tokenizer.decode(&t.tokens, false).unwrap(),
        expected,
        "{} chain {}",
        t.sample_id,
        t.chain
    );
}

fn check_mask(t: &Trajectory) {
    let n = t.tokens.len();
    assert_eq!((t.loss_mask.len(), t.logprobs.len()), (n, n));
    let mut expected = vec![0u8; n];
    for turn in &t.turns {
        expected[turn.start..turn.model_end].fill(1);
        assert!(turn.start < turn.model_end && turn.model_end <= turn.end);
    }
    assert_eq!(t.loss_mask, expected, "mask 1 exactly on sampled ids");
    for (m, lp) in t.loss_mask.iter().zip(&t.logprobs) {
        if *m == 1 {
            assert!(lp.is_finite() && *lp <= 0.0, "sampled log-prob {lp}");
        } else {
            assert_eq!(*lp, 0.0);
        }
    }
    let mut rebuilt = t.tokens[..t.prompt_len].to_vec();
    for row in t.turn_rows() {
        assert_eq!(row.context, &rebuilt[..]);
        rebuilt.extend_from_slice(row.tokens);
    }
    assert_eq!(
        rebuilt, t.tokens,
        "the per-turn rows rebuild the trajectory"
    );
}

#[test]
fn smollm2_rollouts_are_token_exact_and_reproducible() {
    let p = parts();
    let samples = samples();
    let out = roll(&p, &samples, 3);
    assert_eq!(out.trajectories.len(), 9);
    for t in &out.trajectories {
        assert!(t.error.is_none(), "{:?}", t.error);
        let sample = samples.iter().find(|s| s.id == t.sample_id).unwrap();
        check_mask(t);
        check_text(&p, sample, t);
        assert!(t.reward.is_some(), "{:?}", t.reward_error);
    }
    // The model, shown one example, really uses the calculator.
    let calculated: Vec<_> = out
        .trajectories
        .iter()
        .flat_map(|t| t.calls())
        .filter(|c| c.name == "calculator" && !c.is_error)
        .collect();
    assert!(!calculated.is_empty(), "{}", out.summary);
    assert!(out.summary.calls() > 0 && out.summary.sampled_tokens > 0);

    // The same seed gives the same trajectories; the engine batched them differently.
    let again = roll(&p, &samples, 3);
    let tokens = |o: &RolloutOutput| {
        o.trajectories
            .iter()
            .map(|t| t.tokens.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(tokens(&out), tokens(&again));
    let stats = p.engine.stats();
    assert!(stats.mean_batch() > 1.0, "{stats:?}");
}
