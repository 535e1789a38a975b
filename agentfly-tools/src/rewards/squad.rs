//! Answer matching as SQuAD scores it: exact match and token F1 after normalisation
//! (lower case, no punctuation, no articles, single spaces), best over the sample's
//! `answer` and its `aliases`.

use agentfly_core::{RewardOutput, reward};
use std::collections::HashMap;

/// SQuAD's normalisation: lower case, punctuation removed, the articles "a", "an", "the"
/// removed, whitespace collapsed.
pub fn normalize_answer(text: &str) -> String {
    let lowered: String = text
        .to_lowercase()
        .chars()
        .filter(|c| !c.is_ascii_punctuation() && !matches!(c, '‘' | '’' | '“' | '”' | '–' | '—'))
        .collect();
    lowered
        .split_whitespace()
        .filter(|w| !matches!(*w, "a" | "an" | "the"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// 1.0 when `prediction` and `truth` normalise to the same text.
pub fn exact(prediction: &str, truth: &str) -> f64 {
    f64::from(u8::from(
        normalize_answer(prediction) == normalize_answer(truth),
    ))
}

/// SQuAD's token F1 of `prediction` against `truth` (both normalised; two empty answers
/// match).
pub fn token_f1(prediction: &str, truth: &str) -> f64 {
    let p = normalize_answer(prediction);
    let t = normalize_answer(truth);
    let p: Vec<&str> = p.split_whitespace().collect();
    let t: Vec<&str> = t.split_whitespace().collect();
    if p.is_empty() || t.is_empty() {
        return f64::from(u8::from(p == t));
    }
    let mut counts: HashMap<&str, i64> = HashMap::new();
    for w in &t {
        *counts.entry(w).or_default() += 1;
    }
    let mut common = 0;
    for w in &p {
        if let Some(c) = counts.get_mut(w)
            && *c > 0
        {
            *c -= 1;
            common += 1;
        }
    }
    if common == 0 {
        return 0.0;
    }
    let precision = common as f64 / p.len() as f64;
    let recall = common as f64 / t.len() as f64;
    2.0 * precision * recall / (precision + recall)
}

fn best(response: &str, answer: &str, aliases: &[String], score: fn(&str, &str) -> f64) -> f64 {
    std::iter::once(answer)
        .chain(aliases.iter().map(String::as_str))
        .map(|truth| score(response, truth))
        .fold(0.0, f64::max)
}

/// Exact match and F1 of `response`, each the best over `answer` and `aliases`, with the
/// reward being the one `reward_is_f1` names.
fn scored(
    response: &str,
    answer: &str,
    aliases: Option<Vec<String>>,
    reward_is_f1: bool,
) -> RewardOutput {
    let aliases = aliases.unwrap_or_default();
    let em = best(response, answer, &aliases, exact);
    let f1 = best(response, answer, &aliases, token_f1);
    RewardOutput::new(if reward_is_f1 { f1 } else { em } as f32)
        .with_metric("correct", em)
        .with_metric("exact_match", em)
        .with_metric("f1", f1)
}

/// SQuAD exact match against the sample's `answer` (or any of its `aliases`): 1.0 or 0.0.
/// Reports `exact_match` (also as `correct`, what accuracy counts) and `f1` as metrics,
/// so the report shows both.
#[reward]
pub fn squad_exact_match(
    response: &str,
    answer: String,
    aliases: Option<Vec<String>>,
) -> RewardOutput {
    scored(response, &answer, aliases, false)
}

/// SQuAD token F1 against the sample's `answer` (or the best of its `aliases`), in
/// [0, 1]. Reports `exact_match` (also as `correct`) and `f1` as metrics.
#[reward]
pub fn squad_f1(response: &str, answer: String, aliases: Option<Vec<String>>) -> RewardOutput {
    scored(response, &answer, aliases, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_as_squad_does() {
        assert_eq!(normalize_answer("The  Eiffel Tower!"), "eiffel tower");
        assert_eq!(normalize_answer("an Apple, a day"), "apple day");
        assert_eq!(exact("Marie Curie.", "marie curie"), 1.0);
        assert_eq!(exact("Curie", "Marie Curie"), 0.0);
    }

    #[test]
    fn token_f1_counts_shared_words() {
        assert_eq!(token_f1("Marie Curie", "Marie Curie"), 1.0);
        // 1 shared of 1 predicted and 2 true: P 1, R 0.5, F1 2/3.
        assert!((token_f1("Curie", "Marie Curie") - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(token_f1("Paris", "London"), 0.0);
        assert_eq!(token_f1("the", "a"), 1.0); // both empty after normalisation
        assert_eq!(token_f1("", "Paris"), 0.0);
        // Repeated words count once per occurrence in the truth.
        assert!((token_f1("new new new", "new york") - 0.4).abs() < 1e-12);
    }

    #[test]
    fn the_best_alias_counts() {
        let out = squad_exact_match("USA", "United States".into(), Some(vec!["USA".into()]));
        assert_eq!(out.reward, 1.0);
        let out = squad_f1("United Kingdom", "United States".into(), None);
        assert_eq!(out.reward, 0.5);
        assert_eq!(out.metrics["exact_match"], 0.0);
    }
}
