//! agentfly-new-project's tools and reward: plain functions with `#[tool]` and `#[reward]`. The binary
//! (`src/main.rs`) links this crate, so its tools are found by name like agentfly's own.

#![warn(missing_docs)]

use agentfly_core::{RewardOutput, reward, tool};

/// Counts how many times `letter` appears in `word` (ignoring case).
#[tool]
pub fn count_letter(
    /// The word to look in.
    word: String,
    /// The letter to count (one character).
    letter: String,
) -> Result<String, String> {
    let mut chars = letter.trim().chars();
    let (Some(wanted), None) = (chars.next(), chars.next()) else {
        return Err(format!("`{letter}` is not one letter"));
    };
    let wanted = wanted.to_lowercase().to_string();
    let count = word
        .chars()
        .filter(|c| c.to_lowercase().to_string() == wanted)
        .count();
    Ok(count.to_string())
}

/// 1 when the submitted answer is the sample's `answer` (a whole number), else 0.
#[reward]
pub fn exact_count(response: &str, answer: i64) -> RewardOutput {
    let correct = response.trim().parse::<i64>() == Ok(answer);
    RewardOutput::new(if correct { 1.0 } else { 0.0 })
        .with_metric("correct", if correct { 1.0 } else { 0.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_letters_ignoring_case() {
        assert_eq!(
            count_letter("Strawberry".into(), "r".into()),
            Ok("3".into())
        );
        assert_eq!(count_letter("banana".into(), "A".into()), Ok("3".into()));
        assert!(count_letter("banana".into(), "an".into()).is_err());
    }

    #[test]
    fn only_the_exact_count_is_rewarded() {
        assert_eq!(exact_count(" 3 ", 3).reward, 1.0);
        assert_eq!(exact_count("three", 3).reward, 0.0);
    }
}
