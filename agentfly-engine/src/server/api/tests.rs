//! The request bodies and the answers of each API, malformed ones included.
use super::*;

/// Each answer of `cases` is an error of `api` that says what is given beside it.
fn assert_errors(api: ServerApi, cases: &[(Value, &str)]) {
    for (answer, want) in cases {
        let err = api.parse(answer, &[]).unwrap_err();
        assert!(err.contains(want), "{api}: {err} (wanted {want})");
    }
}

fn request() -> GenerateRequest {
    GenerateRequest {
        context: vec![1, 2, 3],
        max_new_tokens: 16,
        stop_ids: vec![2],
        stop_strings: vec!["Observation:".into()],
        temperature: 0.7,
        top_p: 1.0,
        top_k: 0,
        seed: u64::MAX,
    }
}

#[test]
fn llama_cpp_answers_become_ids_and_log_probabilities_cut_at_a_stop_id() {
    let answer = json!({
        "tokens": [5, 9, 2, 7],
        "completion_probabilities": [
            {"id": 5, "prob": 0.5}, {"id": 9, "prob": 1.0},
            {"id": 2, "prob": 0.25}, {"id": 7, "prob": 0.1}
        ],
        "stop_type": "limit"
    });
    let g = ServerApi::LlamaCpp.parse(&answer, &[2]).unwrap();
    assert_eq!(g.ids, [5, 9, 2]);
    assert_eq!(g.end, GenerationEnd::Stop);
    let want = [0.5f32.ln(), 0.0, 0.25f32.ln()];
    for (a, b) in g.logprobs.iter().zip(want) {
        assert!((a - b).abs() < 1e-6);
    }
    let whole = ServerApi::LlamaCpp.parse(&answer, &[]).unwrap();
    assert_eq!((whole.ids.len(), whole.end), (4, GenerationEnd::Length));
}

#[test]
fn malformed_llama_cpp_answers_are_errors_that_say_what_is_wrong() {
    let cases = [
        (json!({"content": "hi"}), "no `tokens`"),
        (
            json!({"tokens": [1], "completion_probabilities": [], "stop_type": "eos"}),
            "ends inside a UTF-8 character",
        ),
        (
            json!({"tokens": [], "completion_probabilities": [{"id": 3, "prob": 1.0}], "stop_type": "eos"}),
            "0 tokens but 1 probabilities",
        ),
        (
            json!({"tokens": [1], "completion_probabilities": [{"id": 3, "prob": 1.0}], "stop_type": "eos"}),
            "is for 3",
        ),
        (
            json!({"tokens": [1], "completion_probabilities": [{"id": 1}], "stop_type": "eos"}),
            "no probability",
        ),
        (
            json!({"tokens": [], "completion_probabilities": [], "stop_type": "none"}),
            "unexpected stop_type",
        ),
        (
            json!({"tokens": [1, 2], "completion_probabilities": [{"id": 1, "prob": 0.5}, {"id": 2, "prob": 0.5}], "stop_type": "limit", "truncated": true, "tokens_evaluated": 10}),
            "context ran out after 12 tokens",
        ),
    ];
    assert_errors(ServerApi::LlamaCpp, &cases);
}

#[test]
fn a_stop_strings_tokens_without_probabilities_are_not_kept() {
    // "Observation:" in two tokens (7, 8) ended the generation: llama.cpp returned
    // them without their probabilities.
    let answer = json!({
        "tokens": [1, 2, 7, 8],
        "completion_probabilities": [{"id": 1, "prob": 0.5}, {"id": 2, "prob": 0.25}],
        "stop_type": "word",
        "stopping_word": "Observation:",
    });
    let (ids, logprobs, end) = llama_cpp(&answer).unwrap();
    assert_eq!((ids, end), (vec![1, 2], GenerationEnd::Stop));
    assert_eq!(logprobs, [0.5f64.ln() as f32, 0.25f64.ln() as f32]);
    // Without a stop string, a missing probability is still an error.
    let answer = json!({
        "tokens": [1, 2, 7],
        "completion_probabilities": [{"id": 1, "prob": 0.5}, {"id": 2, "prob": 0.25}],
        "stop_type": "eos",
    });
    assert!(llama_cpp(&answer).is_err());
}

#[test]
fn every_api_is_asked_for_exactly_the_chains_sampling() {
    let r = request();
    let llama = ServerApi::LlamaCpp.body(&r, Some("ignored"));
    assert_eq!(llama["prompt"], json!([1, 2, 3]));
    assert_eq!(llama["samplers"], json!(["top_k", "top_p", "temperature"]));
    assert!(llama.get("model").is_none());

    let vllm = ServerApi::Vllm.body(&r, Some("smollm2"));
    assert_eq!(vllm["prompt"], json!([1, 2, 3]));
    assert_eq!(vllm["model"], "smollm2");
    assert_eq!(vllm["max_tokens"], 16);
    assert_eq!(vllm["top_k"], 0);
    assert_eq!(vllm["stop_token_ids"], json!([2]));
    assert_eq!(vllm["seed"], i64::MAX);
    for (key, value) in [
        ("min_p", json!(0.0)),
        ("repetition_penalty", json!(1.0)),
        ("logprobs", json!(0)),
        ("return_token_ids", json!(true)),
        ("return_tokens_as_token_ids", json!(true)),
    ] {
        assert_eq!(vllm[key], value, "{key}");
    }
    assert!(ServerApi::Vllm.body(&r, None).get("model").is_none());

    let sglang = ServerApi::Sglang.body(&r, None);
    assert_eq!(sglang["input_ids"], json!([1, 2, 3]));
    let params = &sglang["sampling_params"];
    assert_eq!(params["top_k"], -1, "SGLang's off");
    assert_eq!(params["max_new_tokens"], 16);
    assert_eq!(params["stop"], json!(["Observation:"]));
    assert_eq!(params["stop_token_ids"], json!([2]));
    assert_eq!(sglang["return_logprob"], true);
    assert!(params.get("sampling_seed").is_none());
    let k = ServerApi::Sglang.body(&GenerateRequest { top_k: 5, ..r }, None);
    assert_eq!(k["sampling_params"]["top_k"], 5);
}

#[test]
fn vllm_answers_give_ids_from_token_ids_or_from_their_tokens() {
    // vLLM ≥ 0.10.2 with return_token_ids: the ids, the end-of-turn id included.
    let answer = json!({"choices": [{
        "index": 0, "text": "hi", "finish_reason": "stop", "stop_reason": null,
        "token_ids": [17, 4, 2],
        "logprobs": {"tokens": ["token_id:17", "token_id:4", "token_id:2"],
                     "token_logprobs": [-0.5, -0.25, -0.125],
                     "top_logprobs": null, "text_offset": [0, 1, 2]}
    }]});
    let g = ServerApi::Vllm.parse(&answer, &[]).unwrap();
    assert_eq!(g.ids, [17, 4, 2]);
    assert_eq!(g.logprobs, [-0.5, -0.25, -0.125]);
    assert_eq!(g.end, GenerationEnd::Stop);
    // Before 0.10.2: only "token_id:N" strings; a stop id cuts what follows.
    let mut older = answer.clone();
    older["choices"][0]
        .as_object_mut()
        .unwrap()
        .remove("token_ids");
    older["choices"][0]["finish_reason"] = json!("length");
    let g = ServerApi::Vllm.parse(&older, &[4]).unwrap();
    assert_eq!((g.ids, g.end), (vec![17, 4], GenerationEnd::Stop));
    let g = ServerApi::Vllm.parse(&older, &[]).unwrap();
    assert_eq!(g.end, GenerationEnd::Length);

    let cases = [
        (json!({"object": "error"}), "no `choices`"),
        (
            json!({"choices": [{"finish_reason": "stop", "token_ids": [1]}]}),
            "no `logprobs.token_logprobs`",
        ),
        (
            json!({"choices": [{"finish_reason": "stop", "logprobs": {"tokens": ["hi"], "token_logprobs": [-1.0]}}]}),
            "is not \"token_id:N\"",
        ),
        (
            json!({"choices": [{"finish_reason": "stop", "token_ids": [1, 2], "logprobs": {"token_logprobs": [-1.0]}}]}),
            "2 tokens but 1 log-probabilities",
        ),
        (
            json!({"choices": [{"finish_reason": "stop", "token_ids": [1], "logprobs": {"token_logprobs": [null]}}]}),
            "no log-probability for token 1",
        ),
        (
            json!({"choices": [{"finish_reason": "abort", "token_ids": [], "logprobs": {"token_logprobs": []}}]}),
            "unexpected finish_reason",
        ),
    ];
    assert_errors(ServerApi::Vllm, &cases);
}

#[test]
fn sglang_answers_give_ids_from_their_logprob_entries() {
    let answer = json!({
        "text": "hi", "output_ids": [17, 4, 2],
        "meta_info": {
            "finish_reason": {"type": "stop", "matched": 2},
            "completion_tokens": 3,
            "output_token_logprobs": [[-0.5, 17, null], [-0.25, 4, null], [-0.125, 2, null]]
        }
    });
    let g = ServerApi::Sglang.parse(&answer, &[]).unwrap();
    assert_eq!(g.ids, [17, 4, 2]);
    assert_eq!(g.logprobs, [-0.5, -0.25, -0.125]);
    assert_eq!(g.end, GenerationEnd::Stop);
    // SGLang before 0.5.1 has no `output_ids`.
    let mut older = answer.clone();
    older.as_object_mut().unwrap().remove("output_ids");
    older["meta_info"]["finish_reason"] = json!({"type": "length", "length": 3});
    let g = ServerApi::Sglang.parse(&older, &[]).unwrap();
    assert_eq!((g.ids.len(), g.end), (3, GenerationEnd::Length));

    let cases = [
        (
            json!({"text": "hi"}),
            "no `meta_info.output_token_logprobs`",
        ),
        (
            json!({"output_ids": [1], "meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": [[-1.0, 2, null]]}}),
            "are not the tokens",
        ),
        (
            json!({"meta_info": {"finish_reason": {"type": "abort", "message": "out of memory"}, "output_token_logprobs": []}}),
            "aborted the request",
        ),
        (
            json!({"meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": [[null, 2, null]]}}),
            "no log-probability for token 2",
        ),
    ];
    assert_errors(ServerApi::Sglang, &cases);
}

#[test]
fn api_names_parse_and_errors_read_the_way_each_server_writes_them() {
    for api in [ServerApi::LlamaCpp, ServerApi::Vllm, ServerApi::Sglang] {
        assert_eq!(api.to_string().parse::<ServerApi>().unwrap(), api);
        let toml = serde_json::to_value(api).unwrap();
        assert_eq!(toml, json!(api.to_string()));
    }
    assert!("tgi".parse::<ServerApi>().unwrap_err().contains("vllm"));
    let vllm = json!({"object": "error", "message": "max_tokens is too large", "code": 400});
    assert!(ServerApi::Vllm.error_message(&vllm).contains("too large"));
    let sglang = json!({"error": {"message": "top_k must be -1 or at least 1"}});
    assert!(ServerApi::Sglang.error_message(&sglang).contains("top_k"));
    let llama = json!({"error": {"code": 503, "message": "Loading model"}});
    assert!(
        ServerApi::LlamaCpp
            .error_message(&llama)
            .contains("Loading")
    );
}
