//! `exact_match`: the response must be the sample's answer text.

use agentfly_core::reward;

/// 1.0 when the response equals the sample's `answer` once case, surrounding spaces and
/// runs of whitespace are ignored, else 0.0.
#[reward]
pub fn exact_match(response: &str, answer: String) -> f32 {
    if normalize(response) == normalize(&answer) {
        1.0
    } else {
        0.0
    }
}

fn normalize(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignores_case_and_spacing() {
        assert_eq!(exact_match("  Paris\n", "paris".into()), 1.0);
        assert_eq!(exact_match("New   York", "new york".into()), 1.0);
        assert_eq!(exact_match("London", "Paris".into()), 0.0);
    }
}
