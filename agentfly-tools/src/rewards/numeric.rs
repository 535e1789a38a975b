//! `exact_numeric`: the response must be the sample's numeric answer, exactly.

use crate::calculator::parse_decimal;
use agentfly_core::{RewardOutput, reward};
use num_rational::BigRational;
use serde_json::Value;

/// 1.0 when the response's number equals the sample's `answer` exactly (as rationals, so
/// `0.50` equals `0.5` and `1,234` equals `1234`), else 0.0. The response is read as a
/// number when it is one, else its last number is taken ("The answer is 42." gives 42).
#[reward]
pub fn exact_numeric(response: &str, answer: Value) -> RewardOutput {
    let expected = match &answer {
        Value::Number(n) => parse_decimal(&n.to_string()),
        Value::String(s) => parse_decimal(s),
        _ => None,
    };
    let got = last_number(response);
    let correct = matches!((&expected, &got), (Some(a), Some(b)) if a == b);
    RewardOutput::new(if correct { 1.0 } else { 0.0 })
        .with_metric("correct", f64::from(u8::from(correct)))
        .with_metric("has_number", f64::from(u8::from(got.is_some())))
}

/// The number a response states: the whole text when it is one, else the last number in
/// it. Thousands separators, a leading `$` and a trailing `.` are tolerated.
pub fn last_number(text: &str) -> Option<BigRational> {
    let trimmed = text.trim().trim_start_matches('$').trim_end_matches('.');
    if let Some(value) = parse_decimal(trimmed) {
        return Some(value);
    }
    let chars: Vec<char> = text.chars().collect();
    let is_part = |c: char| c.is_ascii_digit() || c == '.' || c == ',';
    let mut end = chars.len();
    while end > 0 {
        if chars[end - 1].is_ascii_digit() {
            let mut start = end;
            while start > 0 && is_part(chars[start - 1]) {
                start -= 1;
            }
            if start > 0 && matches!(chars[start - 1], '-' | '−') {
                start -= 1;
            }
            let candidate: String = chars[start..end].iter().collect();
            let candidate = candidate.trim_start_matches([',', '.']);
            if let Some(value) = parse_decimal(candidate) {
                return Some(value);
            }
        }
        end -= 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(text: &str) -> BigRational {
        parse_decimal(text).unwrap()
    }

    #[test]
    fn reads_the_stated_number() {
        assert_eq!(last_number("42"), Some(num("42")));
        assert_eq!(last_number(" 1,234. "), Some(num("1234")));
        assert_eq!(last_number("$19.50"), Some(num("19.5")));
        assert_eq!(last_number("The answer is -7."), Some(num("-7")));
        assert_eq!(
            last_number("12 apples and 30 pears: 42 in all"),
            Some(num("42"))
        );
        assert_eq!(last_number("no digits here"), None);
    }

    #[test]
    fn scores_exactly() {
        let score = |r: &str, a: Value| exact_numeric(r, a).reward;
        assert_eq!(score("579", Value::from(579)), 1.0);
        assert_eq!(score("579.0", Value::from("579")), 1.0);
        assert_eq!(score("0.5", Value::from(0.50)), 1.0);
        assert_eq!(score("578", Value::from(579)), 0.0);
        assert_eq!(score("", Value::from(579)), 0.0);
        assert_eq!(score("1", Value::Null), 0.0);
    }
}
