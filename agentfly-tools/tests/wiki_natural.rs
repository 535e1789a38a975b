//! The wiki-qa natural questions (`Questions::Natural`), generated from the real corpus:
//! who made a work, a country's capital, the country a place is in — every answer written
//! in its article's summary, the test split asking them also in words no other split uses,
//! the splits disjoint by question and by article, and the template families still there.

use agentfly_envs::wiki::{Corpus, WikiIndex};
use agentfly_tools::tasks::arithmetic::SplitSizes;
use agentfly_tools::tasks::wiki_qa::{Family, Questions, splits, splits_with};
use std::collections::{BTreeMap, HashSet};

/// The wiki-qa job's default sizes.
const SIZES: SplitSizes = SplitSizes {
    train: 600,
    val: 45,
    test: 300,
    demos: 48,
};

#[test]
fn natural_questions_are_answered_by_their_articles_and_rephrased_only_in_the_test_split() {
    let corpus = Corpus::load(&agentfly_testdata::wiki_corpus()).unwrap();
    let index = WikiIndex::in_memory(corpus).unwrap();
    let s = splits_with(&index, 0, SIZES, Questions::Natural).unwrap();
    assert_eq!(
        (s.train.len(), s.val.len(), s.test.len(), s.demos.len()),
        (600, 45, 300, 48)
    );
    assert_eq!(
        splits_with(&index, 0, SIZES, Questions::Natural).unwrap(),
        s,
        "same seed, same questions"
    );
    // The default is the template families alone.
    assert_eq!(
        splits_with(&index, 0, SIZES, Questions::Templates).unwrap(),
        splits(&index, 0, SIZES).unwrap()
    );

    let count = |split: &[agentfly_tools::tasks::wiki_qa::Question]| {
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for q in split {
            *by.entry(format!("{:?}", q.family)).or_default() += 1;
        }
        by
    };
    let (train, test) = (count(&s.train), count(&s.test));
    eprintln!("train {train:?}\ntest {test:?}");
    for family in Family::NATURAL {
        let name = format!("{family:?}");
        assert!(
            train.get(&name).copied().unwrap_or(0) >= 10,
            "{name}: {train:?}"
        );
        assert!(
            test.get(&name).copied().unwrap_or(0) >= 5,
            "{name}: {test:?}"
        );
    }
    for family in Family::REPHRASED {
        let name = format!("{family:?}");
        assert!(
            test.get(&name).copied().unwrap_or(0) >= 5,
            "{name}: {test:?}"
        );
        assert!(!train.contains_key(&name), "{name} in training");
    }
    for family in Family::WIDE {
        assert!(test.get(&format!("{family:?}")).copied().unwrap_or(0) >= 30);
    }

    // Each natural answer is in its article's summary (or is the article: a capital asked
    // from its own description), and never in its question.
    let natural: HashSet<Family> = Family::NATURAL
        .into_iter()
        .chain(Family::REPHRASED)
        .collect();
    for q in s.train.iter().chain(&s.val).chain(&s.test) {
        if !natural.contains(&q.family) {
            continue;
        }
        let article = index.corpus().get(&q.article).unwrap();
        assert!(
            article.summary.contains(&q.answer) || article.title == q.answer,
            "{q:?}"
        );
        assert!(!q.question.contains(&q.answer), "{q:?}");
        assert!(
            q.question.ends_with('?') || q.question.ends_with('.'),
            "{q:?}"
        );
    }

    // The rephrased questions' words are the test split's own: the first three words of
    // each rephrased question begin no question of the other splits.
    let opening = |q: &str| q.split(' ').take(3).collect::<Vec<_>>().join(" ");
    let rephrased: HashSet<String> = s
        .test
        .iter()
        .filter(|q| Family::REPHRASED.contains(&q.family))
        .map(|q| opening(&q.question))
        .filter(|o| !o.contains(' '))
        .collect();
    for q in s.train.iter().chain(&s.val).chain(&s.demos) {
        assert!(!rephrased.contains(&opening(&q.question)), "{q:?}");
    }
    for (template, other) in [
        ("Which filmmaker made", "Who directed"),
        ("has its capital in which city?", "What is the capital of"),
        ("Name the country where", "In which country is"),
    ] {
        assert!(
            s.train.iter().all(|q| !q.question.contains(template)),
            "{template} in training"
        );
        assert!(
            s.train.iter().any(|q| q.question.contains(other)),
            "no {other} in training"
        );
    }

    // Disjoint by question and by article, as the template splits are.
    let mut questions = HashSet::new();
    let mut articles: BTreeMap<&str, &str> = BTreeMap::new();
    for (name, split) in [("train", &s.train), ("val", &s.val), ("test", &s.test)] {
        for q in split {
            assert!(questions.insert(q.question.clone()), "{q:?}");
            if let Some(other) = articles.insert(&q.article, name) {
                assert_eq!(other, name, "{q:?}");
            }
        }
    }
}
