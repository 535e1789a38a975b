//! Property tests of the calculator against an independent integer evaluator, plus the
//! tool's behaviour through the registry.

use agentfly_tools::calculator::{CalcError, Number, evaluate};
use agentfly_tools::core::Toolbox;
use proptest::prelude::*;

/// An expression tree over small integers, with its text and its value computed in i128.
#[derive(Debug, Clone)]
enum E {
    Lit(i64),
    Neg(Box<E>),
    Add(Box<E>, Box<E>),
    Sub(Box<E>, Box<E>),
    Mul(Box<E>, Box<E>),
    Pow(Box<E>, u32),
}

impl E {
    fn text(&self) -> String {
        match self {
            E::Lit(n) if *n < 0 => format!("({n})"),
            E::Lit(n) => n.to_string(),
            E::Neg(e) => format!("-({})", e.text()),
            E::Add(a, b) => format!("({} + {})", a.text(), b.text()),
            E::Sub(a, b) => format!("({} - {})", a.text(), b.text()),
            E::Mul(a, b) => format!("({} * {})", a.text(), b.text()),
            E::Pow(a, k) => format!("({})^{k}", a.text()),
        }
    }

    fn value(&self) -> Option<i128> {
        match self {
            E::Lit(n) => Some(i128::from(*n)),
            E::Neg(e) => e.value()?.checked_neg(),
            E::Add(a, b) => a.value()?.checked_add(b.value()?),
            E::Sub(a, b) => a.value()?.checked_sub(b.value()?),
            E::Mul(a, b) => a.value()?.checked_mul(b.value()?),
            E::Pow(a, k) => a.value()?.checked_pow(*k),
        }
    }
}

fn expr() -> impl Strategy<Value = E> {
    let leaf = (-100_000i64..100_000).prop_map(E::Lit);
    leaf.prop_recursive(5, 32, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| E::Neg(Box::new(e))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Add(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Sub(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Mul(Box::new(a), Box::new(b))),
            (inner, 0u32..4).prop_map(|(a, k)| E::Pow(Box::new(a), k)),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn integer_expressions_match_an_independent_evaluator(e in expr()) {
        let text = e.text();
        match e.value() {
            Some(expected) => prop_assert_eq!(evaluate(&text).unwrap().to_string(), expected.to_string(), "{}", text),
            // Past i128 the calculator is still exact: check it against itself in another form.
            None => prop_assert!(evaluate(&text).is_ok(), "{}", text),
        }
    }

    #[test]
    fn whitespace_does_not_change_the_result(e in expr(), spaces in prop::collection::vec(0usize..3, 64)) {
        let text = e.text();
        // Spaces anywhere between tokens (not inside a number, where they would split it).
        let chars: Vec<char> = text.chars().collect();
        let mut spaced = String::new();
        for (i, c) in chars.iter().enumerate() {
            spaced.push(*c);
            let inside_number = c.is_ascii_digit() && chars.get(i + 1).is_some_and(char::is_ascii_digit);
            if !inside_number {
                spaced.push_str(&" ".repeat(spaces[i % spaces.len()]));
            }
        }
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        prop_assert_eq!(evaluate(&spaced), evaluate(&compact));
    }

    #[test]
    fn division_is_exact(a in -1_000_000i64..1_000_000, b in -1_000i64..1_000) {
        prop_assume!(b != 0);
        let back = evaluate(&format!("({a}) / ({b}) * ({b})")).unwrap();
        prop_assert_eq!(back, Number::int(a));
    }

    #[test]
    fn division_by_zero_is_reported_never_computed(a in -1_000i64..1_000, zero in "0|0\\.0|\\(1-1\\)|\\(2\\*0\\)") {
        let err = evaluate(&format!("{a} / {zero}")).unwrap_err();
        prop_assert!(matches!(err, CalcError::DivisionByZero { .. }), "{}", err);
    }

    #[test]
    fn big_integers_are_exact(k in 1usize..60) {
        // (10^k + 1)(10^k - 1) = 10^2k - 1: a string of 2k nines.
        let text = format!("(10^{k} + 1) * (10^{k} - 1)");
        prop_assert_eq!(evaluate(&text).unwrap().to_string(), "9".repeat(2 * k));
    }

    #[test]
    fn decimals_are_exact(a in 0u32..100_000, b in 0u32..100_000) {
        // a/100 + b/100 printed with two decimals at most, never binary-float noise.
        let got = evaluate(&format!("{}.{:02} + {}.{:02}", a / 100, a % 100, b / 100, b % 100)).unwrap();
        let cents = u64::from(a) + u64::from(b);
        let expected = Number::Exact(agentfly_tools::calculator::parse_decimal(&format!("{}.{:02}", cents / 100, cents % 100)).unwrap());
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn any_input_gives_a_result_or_an_error_never_a_panic(text in "[0-9+*/^()., e\\-a-z]{0,40}") {
        let _ = evaluate(&text);
    }

    #[test]
    fn syntax_errors_point_inside_the_input(text in "[0-9+*/^() ]{1,30}") {
        if let Err(CalcError::Syntax { position, .. }) = evaluate(&text) {
            prop_assert!(position >= 1 && position <= text.chars().count() + 1, "{} at {}", text, position);
        }
    }
}

#[test]
fn the_calculator_tool_reports_errors_to_the_model() {
    let toolbox = Toolbox::from_names(&["calculator"]).unwrap();
    let ok = toolbox.call_json_blocking("calculator", r#"{"expression": "123 * 456"}"#);
    assert_eq!((ok.text.as_str(), ok.is_error), ("56088", false));
    let zero = toolbox.call_json_blocking("calculator", r#"{"expression": "1/0"}"#);
    assert!(zero.is_error);
    assert_eq!(
        zero.text,
        "Error from tool `calculator`: division by zero: `0` (at position 3) is 0"
    );
    let syntax = toolbox.call_json_blocking("calculator", r#"{"expression": "2 +* 3"}"#);
    assert_eq!(
        syntax.text,
        "Error from tool `calculator`: syntax error at position 4: expected a number or `(`, found `*`"
    );
    let missing = toolbox.call_json_blocking("calculator", r#"{"expr": "1+1"}"#);
    assert_eq!(
        missing.text,
        "Error calling tool `calculator` (invalid arguments): unknown field `expr`, expected `expression`"
    );
}

#[test]
fn submit_answer_is_terminal_and_accepts_numbers() {
    let toolbox = Toolbox::from_names(&["submit_answer"]).unwrap();
    for args in [
        r#"{"answer": "42"}"#,
        r#"{"answer": 42}"#,
        r#"{"answer": " 42 "}"#,
    ] {
        let obs = toolbox.call_json_blocking("submit_answer", args);
        assert!(obs.terminal && !obs.is_error, "{args}: {obs:?}");
        assert_eq!(obs.text, "Answer submitted: 42");
    }
    let bad = toolbox.call_json_blocking("submit_answer", r#"{"answer": [4, 2]}"#);
    assert!(bad.is_error && !bad.terminal);
    assert_eq!(
        bad.text,
        "Error calling tool `submit_answer` (invalid arguments): argument `answer`: invalid type: sequence, expected the answer as a string or a number"
    );
}
