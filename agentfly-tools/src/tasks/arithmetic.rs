//! Arithmetic problems for the calculator agent, generated from a seed: bare expressions and
//! word problems with multi-digit operands, in disjoint train / validation / test splits, and
//! supervised demonstrations of the tool-use format on one narrow form.

use crate::calculator::evaluate;
use agentfly_core::Sample;
use agentfly_core::data::DataError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The form of a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// "What is a + b?" — the narrow form of the warm-start demonstrations.
    Add,
    /// "What is a - b?"
    Sub,
    /// "What is a * b?"
    Mul,
    /// "What is (a + b) * c?" and "What is (a - b) * c?"
    Paren,
    /// "Each box holds c pens. How many pens are in a boxes?"
    Boxes,
    /// "A shop sold a apples on Monday and b on Tuesday. How many apples did it sell?"
    Shop,
    /// "Tom had a marbles and gave away b. How many marbles does he have left?"
    Left,
    /// "A hall has a rows of b chairs and c more chairs by the door. How many chairs…?"
    Rows,
}

impl Family {
    /// Every family: the wide mix of the RL and test splits.
    pub const WIDE: [Family; 8] = [
        Family::Add,
        Family::Sub,
        Family::Mul,
        Family::Paren,
        Family::Boxes,
        Family::Shop,
        Family::Left,
        Family::Rows,
    ];
}

/// One problem: its text, the expression that solves it and the exact answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// Unique within its split.
    pub id: String,
    /// The question the model reads.
    pub question: String,
    /// An expression whose value is the answer (what a calculator call should contain).
    pub expression: String,
    /// The answer.
    pub answer: i64,
    /// Its form.
    pub family: Family,
}

fn number(rng: &mut ChaCha8Rng, digits: std::ops::RangeInclusive<u32>) -> i64 {
    let d = rng.random_range(digits);
    let low = 10i64.pow(d - 1);
    rng.random_range(low..low * 10)
}

/// One problem of `family`.
pub fn problem(rng: &mut ChaCha8Rng, family: Family) -> Problem {
    let (question, expression) = match family {
        Family::Add => {
            let (a, b) = (number(rng, 2..=4), number(rng, 2..=4));
            (format!("What is {a} + {b}?"), format!("{a} + {b}"))
        }
        Family::Sub => {
            let (x, y) = (number(rng, 3..=4), number(rng, 2..=3));
            let (a, b) = (x.max(y), x.min(y));
            (format!("What is {a} - {b}?"), format!("{a} - {b}"))
        }
        Family::Mul => {
            let (a, b) = (number(rng, 2..=3), number(rng, 2..=3));
            (format!("What is {a} * {b}?"), format!("{a} * {b}"))
        }
        Family::Paren => {
            let (a, b, c) = (
                number(rng, 2..=3),
                number(rng, 2..=2),
                number(rng, 1..=2).max(2),
            );
            if rng.random_bool(0.5) {
                (
                    format!("What is ({a} + {b}) * {c}?"),
                    format!("({a} + {b}) * {c}"),
                )
            } else {
                let (a, b) = (a.max(b), a.min(b));
                (
                    format!("What is ({a} - {b}) * {c}?"),
                    format!("({a} - {b}) * {c}"),
                )
            }
        }
        Family::Boxes => {
            let (a, c) = (number(rng, 2..=3), number(rng, 2..=2));
            (
                format!("Each box holds {c} pens. How many pens are in {a} boxes?"),
                format!("{a} * {c}"),
            )
        }
        Family::Shop => {
            let (a, b) = (number(rng, 3..=4), number(rng, 3..=4));
            (
                format!(
                    "A shop sold {a} apples on Monday and {b} apples on Tuesday. How many apples did it sell in total?"
                ),
                format!("{a} + {b}"),
            )
        }
        Family::Left => {
            let (x, y) = (number(rng, 3..=4), number(rng, 2..=3));
            let (a, b) = (x.max(y), x.min(y));
            (
                format!(
                    "Tom had {a} marbles and gave away {b}. How many marbles does he have left?"
                ),
                format!("{a} - {b}"),
            )
        }
        Family::Rows => {
            let (a, b, c) = (number(rng, 2..=2), number(rng, 2..=2), number(rng, 2..=3));
            (
                format!(
                    "A hall has {a} rows of {b} chairs and {c} more chairs by the door. How many chairs are there?"
                ),
                format!("{a} * {b} + {c}"),
            )
        }
    };
    let answer = evaluate(&expression)
        .expect("generated expressions evaluate")
        .to_string()
        .parse()
        .expect("integer answers");
    Problem {
        id: String::new(),
        question,
        expression,
        answer,
        family,
    }
}

/// A question as compared across splits: lower case, single spaces, no final punctuation.
pub fn normalise(question: &str) -> String {
    question
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
        .trim_end_matches(['?', '.', '!'])
        .trim_end()
        .to_string()
}

/// `n` distinct problems (by normalised question) of `families` in turn, none of whose
/// questions is in `taken`; ids `{prefix}-{i}`.
pub fn generate(
    seed: u64,
    n: usize,
    families: &[Family],
    prefix: &str,
    taken: &mut HashSet<String>,
) -> Result<Vec<Problem>, Exhausted> {
    let exhausted = |reason: String| Exhausted {
        split: prefix.to_string(),
        wanted: n,
        reason,
    };
    if n > MAX_PER_SPLIT {
        return Err(exhausted(format!("more than {MAX_PER_SPLIT} per split")));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(n);
    // Give up once new problems have become rare: the families' space is used up.
    let mut misses = 0;
    while out.len() < n {
        let family = families[out.len() % families.len()];
        let mut p = problem(&mut rng, family);
        if taken.insert(normalise(&p.question)) {
            p.id = format!("{prefix}-{}", out.len());
            out.push(p);
            misses = 0;
        } else {
            misses += 1;
            if misses == 10_000 {
                return Err(exhausted(format!(
                    "only {} distinct ones could be made",
                    out.len()
                )));
            }
        }
    }
    Ok(out)
}

/// The most problems one split may ask for.
pub const MAX_PER_SPLIT: usize = 1_000_000;

/// A split asked for more distinct problems than can be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{wanted} `{split}` problems were asked for, {reason}: ask for fewer")]
pub struct Exhausted {
    /// The split (`train`, `val`, `test` or `demo`).
    pub split: String,
    /// Problems asked for.
    pub wanted: usize,
    /// Why they cannot be made.
    pub reason: String,
}

/// Train, validation and test splits of the wide mix, disjoint by construction; and the
/// warm-start demonstrations (`Family::Add` only), disjoint from all three.
pub type Splits = super::Splits<Problem>;

/// Sizes of [`Splits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitSizes {
    /// RL training problems.
    pub train: usize,
    /// Validation problems.
    pub val: usize,
    /// Test problems.
    pub test: usize,
    /// Warm-start demonstrations.
    pub demos: usize,
}

/// The splits of `seed`; an error when a split asks for more problems than exist.
pub fn splits(seed: u64, sizes: SplitSizes) -> Result<Splits, Exhausted> {
    let mut taken = HashSet::new();
    // The test split is drawn first, so its problems do not depend on the other sizes.
    let test = generate(seed ^ 0x7e57, sizes.test, &Family::WIDE, "test", &mut taken)?;
    let val = generate(seed ^ 0x0a11, sizes.val, &Family::WIDE, "val", &mut taken)?;
    let train = generate(
        seed ^ 0x7a19,
        sizes.train,
        &Family::WIDE,
        "train",
        &mut taken,
    )?;
    let demos = generate(
        seed ^ 0xde70,
        sizes.demos,
        &[Family::Add],
        "demo",
        &mut taken,
    )?;
    Ok(Splits {
        train,
        val,
        test,
        demos,
    })
}

impl Splits {
    /// Writes each split into `dir` as JSON Lines (the problems as samples, the
    /// demonstrations as conversations); returns each file's sample count and path.
    pub fn write(&self, dir: &Path) -> Result<Vec<(usize, PathBuf)>, DataError> {
        let samples = |problems: &[Problem]| problems.iter().map(Problem::sample).collect();
        super::write_splits(
            dir,
            &[
                ("train", samples(&self.train)),
                ("val", samples(&self.val)),
                ("test", samples(&self.test)),
                (
                    "demos",
                    self.demos.iter().map(Problem::demonstration).collect(),
                ),
            ],
        )
    }
}

impl Problem {
    /// As a dataset sample: `question`, `answer` (what `exact_numeric` reads),
    /// `expression` and `family`.
    pub fn sample(&self) -> Sample {
        Sample::new(
            self.id.clone(),
            json!({
                "question": self.question,
                "answer": self.answer,
                "expression": self.expression,
                "family": self.family,
            }),
        )
    }

    /// As a demonstration (Hermes format): a calculator call with the expression, its
    /// result, and the submitted answer.
    pub fn demonstration(&self) -> Sample {
        let call = |name: &str, arguments: serde_json::Value| {
            format!(
                "<tool_call>\n{}\n</tool_call>",
                json!({"name": name, "arguments": arguments})
            )
        };
        let result = self.answer.to_string();
        Sample::new(
            self.id.clone(),
            json!({
                "messages": [
                    {"role": "user", "content": self.question},
                    {"role": "assistant", "content": call("calculator", json!({"expression": self.expression}))},
                    {"role": "tool", "name": "calculator", "content": result},
                    {"role": "assistant", "content": call("submit_answer", json!({"answer": result}))},
                ],
                "answer": self.answer,
            }),
        )
    }
}

/// Two splits share a question.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "splits `{first}` and `{second}` share the question \"{question}\" (samples `{first_id}` and `{second_id}`): train, validation and test must be disjoint"
)]
pub struct Overlap {
    /// The first split's name.
    pub first: String,
    /// Its sample.
    pub first_id: String,
    /// The second split's name.
    pub second: String,
    /// Its sample.
    pub second_id: String,
    /// The shared question (normalised).
    pub question: String,
}

/// A sample's question: its `question` field, or the first user message of its
/// `messages` (a demonstration).
fn question_of(sample: &Sample) -> Option<&str> {
    sample
        .field("question")
        .and_then(|q| q.as_str())
        .or_else(|| {
            sample
                .field("messages")?
                .as_array()?
                .iter()
                .find(|m| m["role"] == "user")?["content"]
                .as_str()
        })
}

/// Checks that no normalised question — a sample's `question`, or a demonstration's first
/// user message — appears in two of the named splits.
pub fn check_disjoint(splits: &[(&str, &[Sample])]) -> Result<(), Overlap> {
    match super::first_shared(splits, |s| question_of(s).map(normalise)) {
        None => Ok(()),
        Some(shared) => Err(Overlap {
            first: shared.first,
            first_id: shared.first_id,
            second: shared.second,
            second_id: shared.second_id,
            question: shared.key,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZES: SplitSizes = SplitSizes {
        train: 200,
        val: 24,
        test: 48,
        demos: 32,
    };

    #[test]
    fn questions_compare_without_case_spacing_or_final_punctuation() {
        let n = normalise("What is 12 + 30?");
        assert_eq!(n, "what is 12 + 30");
        assert_eq!(normalise("  what IS 12   + 30 ?"), n);
        assert_eq!(normalise("What is 12 + 30."), n);
        assert_ne!(normalise("What is 12 + 31?"), n);
    }

    #[test]
    fn splits_are_reproducible_disjoint_and_correct() {
        let a = splits(5, SIZES).unwrap();
        assert_eq!(a, splits(5, SIZES).unwrap());
        assert_ne!(a.test, splits(6, SIZES).unwrap().test);
        let sets: Vec<(&str, Vec<Sample>)> = [
            ("train", &a.train),
            ("val", &a.val),
            ("test", &a.test),
            ("demos", &a.demos),
        ]
        .into_iter()
        .map(|(n, ps)| (n, ps.iter().map(Problem::sample).collect()))
        .collect();
        let named: Vec<(&str, &[Sample])> = sets.iter().map(|(n, s)| (*n, s.as_slice())).collect();
        check_disjoint(&named).unwrap();
        for p in a.train.iter().chain(&a.test).chain(&a.val).chain(&a.demos) {
            assert_eq!(
                evaluate(&p.expression).unwrap().to_string(),
                p.answer.to_string()
            );
            assert!(p.answer >= 0, "{p:?}");
            // Multi-digit operands.
            assert!(
                p.question.chars().filter(char::is_ascii_digit).count() >= 4,
                "{p:?}"
            );
        }
        assert!(a.demos.iter().all(|p| p.family == Family::Add));
        // The test split covers every family equally.
        for f in Family::WIDE {
            assert_eq!(a.test.iter().filter(|p| p.family == f).count(), 6);
        }
        // The test split does not depend on the other sizes.
        let bigger = splits(
            5,
            SplitSizes {
                train: 500,
                ..SIZES
            },
        )
        .unwrap();
        assert_eq!(bigger.test, a.test);
    }

    #[test]
    fn overlapping_splits_are_named() {
        let a = splits(1, SIZES).unwrap();
        let train: Vec<Sample> = a.train.iter().map(Problem::sample).collect();
        let mut test: Vec<Sample> = a.test.iter().map(Problem::sample).collect();
        let mut copy = train[3].clone();
        copy.id = "leak".into();
        copy.fields["question"] = json!(format!(
            "  {}  ",
            train[3]
                .field("question")
                .unwrap()
                .as_str()
                .unwrap()
                .to_uppercase()
        ));
        test.push(copy);
        let err = check_disjoint(&[("train", &train), ("test", &test)]).unwrap_err();
        assert_eq!(
            (
                err.first.as_str(),
                err.second.as_str(),
                err.second_id.as_str()
            ),
            ("train", "test", "leak")
        );
        assert!(err.to_string().contains("must be disjoint"), "{err}");
    }

    #[test]
    fn demonstrations_call_the_calculator_then_submit() {
        let p = &splits(2, SIZES).unwrap().demos[0];
        let demo = p.demonstration();
        let messages = demo.field("messages").unwrap().as_array().unwrap();
        assert_eq!(messages.len(), 4);
        let call = messages[1]["content"].as_str().unwrap();
        assert!(
            call.contains(&format!("\"expression\":\"{}\"", p.expression)),
            "{call}"
        );
        assert_eq!(messages[2]["content"], p.answer.to_string());
        assert!(
            messages[3]["content"]
                .as_str()
                .unwrap()
                .contains("submit_answer")
        );
    }

    #[test]
    fn written_splits_read_back_as_they_were_made() {
        let dir = tempfile::tempdir().unwrap();
        let s = splits(3, SIZES).unwrap();
        let written = s.write(&dir.path().join("data")).unwrap();
        let counts: Vec<usize> = written.iter().map(|w| w.0).collect();
        assert_eq!(counts, [200, 24, 48, 32]);
        let read = |name: &str| {
            agentfly_core::data::read_jsonl(dir.path().join(format!("data/{name}.jsonl"))).unwrap()
        };
        assert_eq!(
            read("test"),
            s.test.iter().map(Problem::sample).collect::<Vec<_>>()
        );
        assert_eq!(
            read("demos"),
            s.demos
                .iter()
                .map(Problem::demonstration)
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_demonstration_that_asks_a_test_question_is_an_overlap() {
        let s = splits(4, SIZES).unwrap();
        let test: Vec<Sample> = s.test.iter().map(Problem::sample).collect();
        let mut demos: Vec<Sample> = s.demos.iter().map(Problem::demonstration).collect();
        assert!(check_disjoint(&[("test", &test), ("demos", &demos)]).is_ok());
        // A demonstration of a test problem: its question is in its messages only.
        demos.push(
            Problem {
                id: "demo-leak".into(),
                ..s.test[3].clone()
            }
            .demonstration(),
        );
        let err = check_disjoint(&[("test", &test), ("demos", &demos)]).unwrap_err();
        assert_eq!((err.first.as_str(), err.second.as_str()), ("test", "demos"));
        assert_eq!(err.second_id, "demo-leak");
    }

    #[test]
    fn asking_for_more_problems_than_exist_is_an_error() {
        let too_many = SplitSizes {
            demos: MAX_PER_SPLIT + 1,
            ..SIZES
        };
        let err = splits(1, too_many).unwrap_err();
        assert_eq!(
            (err.split.as_str(), err.wanted),
            ("demo", MAX_PER_SPLIT + 1)
        );
        assert_eq!(
            err.to_string(),
            "1000001 `demo` problems were asked for, more than 1000000 per split: ask for fewer"
        );
    }
}
