//! The decoder against transformers on a random tiny Qwen2 (fixtures): logits, greedy
//! ids, batched generation with padding, and the save → load round trip.

use agentfly_testdata::support as common;

use agentfly_engine::generate::{FinishReason, GenerateError, SamplingParams, generate};
use agentfly_model::Pretrained;
use serde_json::Value;

fn load() -> Pretrained {
    Pretrained::load(common::fixtures().join("tiny-qwen2"), &common::device()).unwrap()
}

#[test]
fn logits_match_transformers_within_1e_4() {
    let model = load();
    let (id_shape, ids, logit_shape, expected) =
        common::reference(common::fixtures().join("tiny-qwen2/reference.safetensors"));
    assert_eq!(logit_shape, [2, 16, 512]);
    let got = common::logits(&model, ids, [id_shape[0], id_shape[1]]);
    let diff = common::max_abs_diff(&got, &expected);
    assert!(diff < 1e-4, "max |Δlogit| = {diff}");
}

fn greedy_fixture() -> (Vec<u32>, Vec<u32>) {
    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixtures().join("tiny-qwen2/greedy.json")).unwrap(),
    )
    .unwrap();
    let ids = |k: &str| {
        json[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect()
    };
    (ids("prompt_ids"), ids("new_ids"))
}

#[test]
fn greedy_ids_match_transformers() {
    let model = load();
    let (prompt, expected) = greedy_fixture();
    let params = SamplingParams {
        ignore_eos: true,
        ..SamplingParams::greedy(expected.len())
    };
    let out = generate(&model, &[prompt], &params, None).unwrap();
    assert_eq!(out[0].new_ids, expected);
    assert_eq!(out[0].finish_reason, FinishReason::Length);
    assert!(
        out[0]
            .logprobs
            .iter()
            .all(|lp| lp.is_finite() && *lp <= 0.0)
    );
}

#[test]
fn batched_generation_with_padding_equals_one_at_a_time() {
    let model = load();
    let (prompt, expected) = greedy_fixture();
    let short: Vec<u32> = prompt[3..].to_vec();
    let other: Vec<u32> = vec![5, 77, 300, 2, 9, 11, 400, 123, 45, 6, 7];
    let params = SamplingParams {
        ignore_eos: true,
        ..SamplingParams::greedy(12)
    };
    let batched = generate(
        &model,
        &[short.clone(), prompt.clone(), other.clone()],
        &params,
        None,
    )
    .unwrap();
    for (i, p) in [short, prompt, other].into_iter().enumerate() {
        let alone = generate(&model, &[p], &params, None).unwrap();
        assert_eq!(batched[i].new_ids, alone[0].new_ids, "sequence {i}");
        for (a, b) in batched[i].logprobs.iter().zip(&alone[0].logprobs) {
            assert!((a - b).abs() < 1e-4, "sequence {i}: {a} vs {b}");
        }
    }
    assert_eq!(batched[1].new_ids, expected[..12]);
}

#[test]
fn stop_ids_end_a_sequence_and_max_new_tokens_bounds_it() {
    let model = load();
    let (prompt, expected) = greedy_fixture();
    // Stop at the 4th greedy token: the output ends with it.
    let params = SamplingParams {
        stop_ids: vec![expected[3]],
        ignore_eos: true,
        ..SamplingParams::greedy(20)
    };
    let out = generate(&model, std::slice::from_ref(&prompt), &params, None).unwrap();
    let first_stop = expected.iter().position(|&t| t == expected[3]).unwrap();
    assert_eq!(out[0].new_ids, expected[..=first_stop]);
    assert_eq!(out[0].finish_reason, FinishReason::Stop);
    let out = generate(&model, &[prompt], &SamplingParams::greedy(3), None).unwrap();
    assert_eq!(out[0].new_ids.len(), 3);
    assert_eq!(out[0].finish_reason, FinishReason::Length);
}

#[test]
fn seeded_sampling_is_reproducible() {
    let model = load();
    let (prompt, _) = greedy_fixture();
    let params = SamplingParams {
        temperature: 1.0,
        top_p: 0.9,
        top_k: 50,
        seed: 3,
        ignore_eos: true,
        ..SamplingParams::greedy(16)
    };
    let a = generate(&model, &[prompt.clone(), prompt.clone()], &params, None).unwrap();
    let b = generate(&model, &[prompt.clone(), prompt.clone()], &params, None).unwrap();
    assert_eq!(a, b);
    assert_ne!(
        a[0].new_ids, a[1].new_ids,
        "two sequences draw from different streams"
    );
    // Six rows are sampled on every core, in whatever order the threads take them: still
    // each row's own stream, the same every time, and the first two rows draw what they
    // drew in a batch of two (the prompt is the same, so are the logits).
    let six = vec![prompt; 6];
    let c = generate(&model, &six, &params, None).unwrap();
    assert_eq!(c, generate(&model, &six, &params, None).unwrap());
    assert_eq!(c[..2], a[..]);
}

#[test]
fn identical_prompts_share_one_prefill_and_match_separate_ones() {
    let model = load();
    let (prompt, _) = greedy_fixture();
    let other: Vec<u32> = vec![5, 77, 300, 2, 9];
    let params = SamplingParams {
        temperature: 1.0,
        seed: 11,
        ignore_eos: true,
        ..SamplingParams::greedy(10)
    };
    // Rows 0 and 2 share a prompt and are prefilled once; each still samples its own stream.
    let shared = generate(
        &model,
        &[prompt.clone(), other.clone(), prompt.clone()],
        &params,
        None,
    )
    .unwrap();
    let greedy = SamplingParams {
        ignore_eos: true,
        ..SamplingParams::greedy(10)
    };
    let a = generate(&model, &[prompt.clone(), prompt.clone()], &greedy, None).unwrap();
    let b = generate(&model, std::slice::from_ref(&prompt), &greedy, None).unwrap();
    assert_eq!(a[0], b[0]);
    assert_eq!(a[1], b[0]);
    assert_ne!(
        shared[0].new_ids, shared[2].new_ids,
        "different seeds per row"
    );
    assert_eq!(shared[0].new_ids.len(), 10);
}

#[test]
fn context_length_bounds_generation_and_longer_prompts_are_errors() {
    let model = load();
    let context = model.config.max_position_embeddings;
    let params = SamplingParams {
        ignore_eos: true,
        ..SamplingParams::greedy(50)
    };
    let near_full: Vec<u32> = (0..context as u32 - 4).map(|i| (i * 7) % 500).collect();
    let out = generate(&model, &[near_full, vec![3, 4, 5]], &params, None).unwrap();
    assert_eq!(out[0].new_ids.len(), 4, "only 4 positions left");
    assert_eq!(out[0].finish_reason, FinishReason::Length);
    assert_eq!(out[1].new_ids.len(), 50);

    let full: Vec<u32> = vec![9; context];
    let out = generate(&model, &[full], &params, None).unwrap();
    assert!(out[0].new_ids.is_empty());
    assert_eq!(out[0].finish_reason, FinishReason::Length);

    let too_long: Vec<u32> = vec![9; context + 1];
    let err = generate(&model, &[vec![1], too_long], &params, None).unwrap_err();
    assert_eq!(
        err,
        GenerateError::PromptTooLong {
            index: 1,
            len: context + 1,
            max: context
        }
    );
    assert_eq!(
        err.to_string(),
        format!(
            "prompt 1 has {} tokens, more than the model's context of {context}",
            context + 1
        )
    );
    let err = generate(&model, &[vec![]], &params, None).unwrap_err();
    assert_eq!(err, GenerateError::EmptyPrompt { index: 0 });
}

#[test]
fn save_then_load_round_trips_exactly() {
    let model = load();
    let dir = std::env::temp_dir().join(format!("agentfly-tiny-roundtrip-{}", std::process::id()));
    model.save(&dir).unwrap();
    let again = Pretrained::load(&dir, &common::device()).unwrap();
    assert_eq!(again.config.hidden_size, 64);
    let ids: Vec<i64> = (0..12).map(|i| (i * 37) % 512).collect();
    assert_eq!(
        common::logits(&model, ids.clone(), [1, 12]),
        common::logits(&again, ids, [1, 12])
    );
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["model_type"], "qwen2");
    assert_eq!(config["rope_parameters"]["rope_theta"], 10000.0);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn errors_name_the_file_and_the_tensor() {
    let dir = std::env::temp_dir().join(format!("agentfly-tiny-broken-{}", std::process::id()));
    let model = load();
    model.save(&dir).unwrap();
    // Drop one tensor.
    let mut weights = agentfly_model::io::Weights::new(&dir);
    agentfly_model::io::read_safetensors_file(&dir.join("model.safetensors"), &mut weights)
        .unwrap();
    let mut kept = agentfly_model::io::Weights::new(&dir);
    for (name, t) in weights.iter() {
        if name != "model.layers.1.mlp.up_proj.weight" {
            kept.insert(name, t.clone());
        }
    }
    agentfly_model::io::write_safetensors(&kept, &dir.join("model.safetensors")).unwrap();
    let err = Pretrained::load(&dir, &common::device())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "{}: tensor `model.layers.1.mlp.up_proj.weight` is missing",
            dir.display()
        )
    );
    // Truncate the file.
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    std::fs::write(dir.join("model.safetensors"), &bytes[..bytes.len() / 2]).unwrap();
    let err = Pretrained::load(&dir, &common::device())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("model.safetensors: not a valid safetensors file"),
        "{err}"
    );
    // An unknown architecture.
    std::fs::write(dir.join("config.json"), r#"{"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"], "vocab_size": 8, "hidden_size": 4, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1}"#).unwrap();
    let err = Pretrained::load(&dir, &common::device())
        .unwrap_err()
        .to_string();
    assert!(err.ends_with("config.json: unsupported architecture `GPTNeoXForCausalLM` (model_type `gpt_neox`): agentfly runs the Llama and Qwen2 families"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_model_without_a_tokenizer_is_not_a_chat_model() {
    let err = load().chat_parts().unwrap_err().to_string();
    assert!(
        err.contains("tiny-qwen2") && err.ends_with("the model has no tokenizer"),
        "{err}"
    );
}

#[test]
fn logits_that_are_not_finite_are_an_error_not_a_token() {
    use burn::module::Param;
    let mut model = load();
    // Broken weights: the final norm's scale is NaN, so every logit is.
    let nan = model.decoder.norm.weight.val() * f32::NAN;
    model.decoder.norm.weight = Param::from_tensor(nan);
    for temperature in [0.0, 0.7] {
        let params = SamplingParams {
            temperature,
            ..SamplingParams::greedy(4)
        };
        let err = generate(&model, &[vec![5, 6, 7]], &params, None).unwrap_err();
        assert!(err.to_string().contains("not finite"), "{err}");
    }
}
