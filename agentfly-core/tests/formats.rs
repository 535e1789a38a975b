//! Tool-call formats: what sloppy models write is read, what cannot be read is reported.

use agentfly_core::rollout::format::{
    CallParse, CodeAction, Hermes, ReAct, ToolCall, ToolCallFormat, format_by_name, parse_lenient,
};
use proptest::prelude::*;
use serde_json::{Value, json};

fn call(name: &str, arguments: Value) -> CallParse {
    CallParse::Call(ToolCall {
        name: name.to_string(),
        arguments,
    })
}

#[test]
fn hermes_reads_every_call_of_a_turn() {
    let text = "Let me compute.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12*7\"}}\n</tool_call>\n<tool_call>{'name': 'submit_answer', 'arguments': {'answer': '84',}}</tool_call>";
    let turn = Hermes.parse(text);
    assert_eq!(
        turn.calls,
        [
            call("calculator", json!({"expression": "12*7"})),
            call("submit_answer", json!({"answer": "84"}))
        ]
    );
    // Cut off before the closing tag (a stop id ended the turn).
    let turn = Hermes.parse(
        "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"1+1\"}}<|im_end|>",
    );
    assert_eq!(
        turn.calls,
        [call("calculator", json!({"expression": "1+1"}))]
    );
    // Arguments double-encoded as a string.
    let turn = Hermes.parse(
        r#"<tool_call>{"name": "calculator", "arguments": "{\"expression\": \"2\"}"}</tool_call>"#,
    );
    assert_eq!(turn.calls, [call("calculator", json!({"expression": "2"}))]);
    assert!(Hermes.parse("The answer is 4.").calls.is_empty());
}

#[test]
fn hermes_reports_what_it_cannot_read() {
    let turn = Hermes.parse("<tool_call>calculator(2+2)</tool_call>");
    let [CallParse::Malformed { text, error }] = &turn.calls[..] else {
        panic!("{turn:?}")
    };
    assert_eq!(text, "calculator(2+2)");
    assert!(
        error.starts_with("the tool call is not valid JSON"),
        "{error}"
    );
    let turn = Hermes.parse(r#"<tool_call>{"arguments": {}}</tool_call>"#);
    assert!(
        matches!(&turn.calls[0], CallParse::Malformed { error, .. } if error == "the tool call has no \"name\"")
    );
    let turn = Hermes.parse("<tool_call>[1, 2]</tool_call>");
    assert!(
        matches!(&turn.calls[0], CallParse::Malformed { error, .. } if error.contains("must be a JSON object"))
    );
}

#[test]
fn react_reads_actions_and_the_final_answer() {
    let text = "Thought: I need to multiply.\nAction: calculator\nAction Input: {\"expression\": \"12 * 7\"}\nObservation: 84 (made up by the model)";
    let turn = ReAct.parse(text);
    assert_eq!(
        turn.calls,
        [call("calculator", json!({"expression": "12 * 7"}))]
    );
    assert_eq!(turn.final_answer, None);
    assert_eq!(ReAct.stop_strings(), ["Observation:"]);
    let turn = ReAct.parse("Thought: done\nFinal Answer: 84");
    assert_eq!(
        (turn.calls.len(), turn.final_answer.as_deref()),
        (0, Some("84"))
    );
    // Multi-line input; a plain-text input is passed on as a string (the tool says if it
    // cannot take it).
    let turn = ReAct.parse("Action: calculator\nAction Input: {\n  \"expression\": \"1+1\"\n}");
    assert_eq!(
        turn.calls,
        [call("calculator", json!({"expression": "1+1"}))]
    );
    let turn = ReAct.parse("Action: search\nAction Input: weather in Paris");
    assert_eq!(turn.calls, [call("search", json!("weather in Paris"))]);
    let turn = ReAct.parse("Action: calculator\nThought: hmm");
    assert!(
        matches!(&turn.calls[0], CallParse::Malformed { error, .. } if error == "`Action: calculator` has no `Action Input:` line")
    );
}

#[test]
fn code_blocks_become_code_interpreter_calls() {
    let text = "I'll compute it.\n```python\nx = 12 * 7\nprint(x)\n```\nand check:\n```py\nx + 1\n```\n```text\nnot code\n```";
    let turn = CodeAction::default().parse(text);
    assert_eq!(
        turn.calls,
        [
            call("code_interpreter", json!({"code": "x = 12 * 7\nprint(x)"})),
            call("code_interpreter", json!({"code": "x + 1"}))
        ]
    );
    let turn = CodeAction::default().parse("```python\nprint(1)<|im_end|>");
    assert_eq!(
        turn.calls,
        [call("code_interpreter", json!({"code": "print(1)"}))]
    );
    assert_eq!(format_by_name("code").unwrap().name(), "code");
    assert!(format_by_name("xml").is_none());
    // A degenerate run of empty fences is one readable error, not many empty calls.
    let turn =
        CodeAction::default().parse("```python\n```python\n```python\n```\n```python\nx = 1\n```");
    assert_eq!(turn.calls.len(), 2, "{:?}", turn.calls);
    assert!(
        matches!(&turn.calls[0], CallParse::Malformed { error, .. } if error.contains("empty")),
        "{:?}",
        turn.calls
    );
}

/// JSON values without the characters the sloppy variants below would change.
fn plain_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(Value::from),
        (-1_000_000i64..1_000_000).prop_map(Value::from),
        "[a-zA-Z0-9 +*/().=-]{0,12}".prop_map(Value::from),
        Just(Value::Null),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// What a sloppy model makes of `value`: Python quoting and literals, trailing commas.
fn sloppy(value: &Value, single_quotes: bool, trailing_commas: bool) -> String {
    match value {
        Value::Null => "None".into(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if single_quotes => format!("'{s}'"),
        Value::String(s) => serde_json::to_string(s).unwrap(),
        Value::Array(items) => {
            let mut parts: Vec<String> = items
                .iter()
                .map(|v| sloppy(v, single_quotes, trailing_commas))
                .collect();
            if trailing_commas && !parts.is_empty() {
                parts.push(String::new());
            }
            format!("[{}]", parts.join(", "))
        }
        Value::Object(map) => {
            let mut parts: Vec<String> = map
                .iter()
                .map(|(k, v)| {
                    let key = if single_quotes {
                        format!("'{k}'")
                    } else {
                        format!("\"{k}\"")
                    };
                    format!("{key}: {}", sloppy(v, single_quotes, trailing_commas))
                })
                .collect();
            if trailing_commas && !parts.is_empty() {
                parts.push(String::new());
            }
            format!("{{{}}}", parts.join(", "))
        }
    }
}

proptest! {
    #[test]
    fn sloppy_json_reads_as_the_model_meant(
        value in plain_value(),
        single_quotes: bool,
        trailing_commas: bool,
    ) {
        let text = sloppy(&value, single_quotes, trailing_commas);
        prop_assert_eq!(parse_lenient(&text).unwrap(), value);
    }

    #[test]
    fn hermes_calls_survive_sloppiness_and_surrounding_text(
        calls in prop::collection::vec(("[a-z_]{1,12}", prop::collection::btree_map("[a-z_]{1,8}", plain_value(), 0..4)), 1..4),
        prose in "[a-zA-Z ,.!?\n]{0,40}",
        single_quotes: bool,
        trailing_commas: bool,
        cut_last: bool,
    ) {
        let mut text = prose.clone();
        let mut expected = Vec::new();
        for (i, (name, args)) in calls.iter().enumerate() {
            let args = Value::Object(args.clone().into_iter().collect());
            let object = json!({"name": name, "arguments": args});
            text.push_str("<tool_call>\n");
            text.push_str(&sloppy(&object, single_quotes, trailing_commas));
            if !(cut_last && i + 1 == calls.len()) {
                text.push_str("\n</tool_call>");
                text.push_str(&prose);
            }
            expected.push(call(name, args));
        }
        prop_assert_eq!(Hermes.parse(&text).calls, expected);
    }

    #[test]
    fn no_text_makes_a_parser_panic(text in "\\PC{0,200}") {
        let _ = Hermes.parse(&text);
        let _ = ReAct.parse(&text);
        let _ = CodeAction::default().parse(&text);
        let _ = parse_lenient(&text);
    }

    #[test]
    fn no_tagged_text_makes_hermes_panic(body in "[{}\\[\\]'\",: a-zA-Z0-9\\\\]{0,80}", close: bool) {
        let text = format!("<tool_call>{body}{}", if close { "</tool_call>" } else { "" });
        let turn = Hermes.parse(&text);
        prop_assert_eq!(turn.calls.len(), 1);
    }
}
