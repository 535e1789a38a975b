//! The tokenizer and chat templates against Hugging Face's output (fixtures).

mod common;

use agentfly_core::chat::{ChatTemplate, Conversation, Tokenizer};
use serde_json::Value;

#[test]
fn qwen_tokenizer_reproduces_llama_cpp_test_vectors() {
    let dir = common::fixtures();
    let tokenizer = Tokenizer::from_file(dir.join("qwen3-template/tokenizer.json")).unwrap();
    let inputs =
        std::fs::read_to_string(dir.join("tokenizer-vectors/ggml-vocab-qwen2.gguf.inp")).unwrap();
    let outputs =
        std::fs::read_to_string(dir.join("tokenizer-vectors/ggml-vocab-qwen2.gguf.out")).unwrap();
    // Each text is followed by "\n__ggml_vocab_test__\n" (so the last piece is empty).
    let mut texts: Vec<&str> = inputs.split("\n__ggml_vocab_test__\n").collect();
    assert_eq!(texts.pop(), Some(""));
    let expected: Vec<&str> = outputs.lines().collect();
    assert_eq!(texts.len(), expected.len(), "one line of ids per text");
    for (text, ids) in texts.iter().zip(&expected) {
        let want: Vec<u32> = ids.split_whitespace().map(|t| t.parse().unwrap()).collect();
        let got = tokenizer.encode(text, false).unwrap();
        assert_eq!(got, want, "text {text:?}");
        assert_eq!(tokenizer.decode(&got, false).unwrap(), *text);
    }
}

#[test]
fn qwen3_template_renders_like_transformers() {
    let dir = common::fixtures();
    let template =
        ChatTemplate::from_file(dir.join("qwen3-template/tokenizer_config.json")).unwrap();
    let cases: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(dir.join("qwen3-template/renders.json")).unwrap(),
    )
    .unwrap();
    assert!(!cases.is_empty());
    for (i, case) in cases.iter().enumerate() {
        let conversation: Conversation = serde_json::from_value(serde_json::json!({
            "messages": case["messages"],
            "tools": case["tools"],
            "add_generation_prompt": case["add_generation_prompt"],
        }))
        .unwrap();
        let rendered = template.render(&conversation).unwrap();
        assert_eq!(rendered, case["rendered"].as_str().unwrap(), "case {i}");
    }
}

#[test]
fn template_errors_are_reported() {
    let bad = ChatTemplate::new("{% for m in messages %}").unwrap_err();
    assert!(
        bad.to_string()
            .starts_with("chat template does not compile"),
        "{bad}"
    );
    let raising =
        ChatTemplate::new("{{ raise_exception('only user and assistant roles') }}").unwrap();
    let err = raising
        .render(&Conversation::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("only user and assistant roles"), "{err}");
}

#[test]
fn tojson_and_python_string_methods_match_jinja2() {
    let template = ChatTemplate::new(
        "{{ tools | tojson }}|{{ tools[0] | tojson(indent=2) }}|{{ '  x<y>  '.strip() }}|{{ 'a,b'.split(',')[1] }}|{{ 'abc'[::-1] }}|{{ 'Hi'.startswith('H') }}",
    )
    .unwrap();
    let conversation = Conversation {
        tools: Some(vec![
            serde_json::json!({"name": "f<&>", "n": 1.5, "é": [true, null]}),
        ]),
        ..Conversation::default()
    };
    assert_eq!(
        template.render(&conversation).unwrap(),
        "[{\"name\": \"f<&>\", \"n\": 1.5, \"é\": [true, null]}]|{\n  \"name\": \"f<&>\",\n  \"n\": 1.5,\n  \"é\": [\n    true,\n    null\n  ]\n}|x<y>|b|cba|True"
    );
}
