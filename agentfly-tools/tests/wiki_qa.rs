//! The wiki-qa questions, generated from the real corpus: deterministic, disjoint splits by
//! question and by article, answers never in their questions, the three families mixed,
//! and demonstrations whose tool output is what the real tool returns.

use agentfly_core::Toolbox;
use agentfly_core::data::read_jsonl;
use agentfly_envs::wiki::{Corpus, WikiIndex};
use agentfly_tools::tasks::arithmetic::{SplitSizes, check_disjoint};
use agentfly_tools::tasks::wiki_qa::write::{DemoFormat, check_articles_disjoint};
use agentfly_tools::tasks::wiki_qa::{Family, Splits, splits};
use std::sync::{Arc, OnceLock};

const SIZES: SplitSizes = SplitSizes {
    train: 600,
    val: 60,
    test: 150,
    demos: 32,
};

fn index() -> &'static Arc<WikiIndex> {
    static INDEX: OnceLock<Arc<WikiIndex>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let corpus = Corpus::load(&agentfly_testdata::wiki_corpus()).unwrap();
        Arc::new(WikiIndex::in_memory(corpus).unwrap())
    })
}

fn corpus() -> &'static Corpus {
    index().corpus()
}

fn made() -> &'static Splits {
    static SPLITS: OnceLock<Splits> = OnceLock::new();
    SPLITS.get_or_init(|| splits(index(), 0, SIZES).unwrap())
}

#[test]
fn splits_are_deterministic_disjoint_and_mixed() {
    let s = made();
    assert_eq!(
        (s.train.len(), s.val.len(), s.test.len(), s.demos.len()),
        (600, 60, 150, 32)
    );
    assert_eq!(
        &splits(index(), 0, SIZES).unwrap(),
        s,
        "same seed, same questions"
    );
    assert_ne!(splits(index(), 1, SIZES).unwrap().test, s.test);

    let dir = tempfile::tempdir().unwrap();
    s.write(dir.path(), index(), DemoFormat::Hermes).unwrap();
    let load = |name: &str| read_jsonl(dir.path().join(format!("{name}.jsonl"))).unwrap();
    let (train, val, test, demos) = (load("train"), load("val"), load("test"), load("demos"));
    let named = [
        ("train", &train[..]),
        ("val", &val[..]),
        ("test", &test[..]),
        ("demos", &demos[..]),
    ];
    check_disjoint(&named).unwrap();
    check_articles_disjoint(&named[..3]).unwrap();
    // Demonstrations are on training articles, never on held-out ones.
    check_articles_disjoint(&[
        ("val", &val[..]),
        ("test", &test[..]),
        ("demos", &demos[..]),
    ])
    .unwrap();
    // The check catches an overlap.
    let leaked = [("train", &train[..2]), ("test", &train[1..3])];
    let err = check_articles_disjoint(&leaked).unwrap_err();
    assert!(
        err.to_string().contains("both ask about the article"),
        "{err}"
    );

    for q in s.train.iter().chain(&s.val).chain(&s.test).chain(&s.demos) {
        let question = agentfly_envs::wiki::title_key(&q.question);
        let answer = agentfly_envs::wiki::title_key(&q.answer);
        assert!(
            !format!(" {question} ").contains(&format!(" {answer} ")),
            "the answer is in the question: {q:?}"
        );
        match q.family {
            Family::YearTitled | Family::YearUntitled | Family::YearDescribed => {
                assert!(
                    q.answer.len() == 4 && q.answer.parse::<u32>().is_ok(),
                    "{q:?}"
                );
                assert!(q.question.contains("____"), "{q:?}");
                let summary = &corpus().get(&q.article).unwrap().summary;
                assert_eq!(summary.matches(q.answer.as_str()).count(), 1, "{q:?}");
            }
            Family::TitleFromDescription => {
                assert_eq!(q.answer, q.article);
            }
            natural => panic!("{natural:?} asked without Questions::Natural: {q:?}"),
        }
    }
    for family in Family::WIDE {
        let n = s.test.iter().filter(|q| q.family == family).count();
        assert_eq!(n, 50, "{family:?}");
    }
    // The demonstrations: the two narrow forms in turn, neither of them held out.
    for (i, q) in s.demos.iter().enumerate() {
        let expected = [Family::YearTitled, Family::YearDescribed][i % 2];
        assert_eq!(q.family, expected, "{q:?}");
    }
    assert!(
        s.test
            .iter()
            .chain(&s.val)
            .all(|q| Family::WIDE.contains(&q.family))
    );
}

#[test]
fn a_larger_test_split_leaves_the_others_and_begins_with_the_smaller_one() {
    let small = made();
    let large = splits(index(), 0, SplitSizes { test: 300, ..SIZES }).unwrap();
    assert_eq!(large.test.len(), 300);
    assert_eq!(
        (&large.train, &large.val, &large.demos),
        (&small.train, &small.val, &small.demos),
        "the training, validation and demonstration questions do not depend on the test size"
    );
    assert_eq!(&large.test[..150], &small.test[..]);
    let ids: std::collections::HashSet<&str> = large.test.iter().map(|q| q.id.as_str()).collect();
    assert_eq!(ids.len(), 300, "ids are unique");
    assert_eq!(large.test[299].id, "test-299");
    // The families in turn, from the held-out articles left: about 100 each (a family
    // whose article turns out not to allow its question passes its turn).
    for family in Family::WIDE {
        let n = large.test.iter().filter(|q| q.family == family).count();
        assert!((97..=103).contains(&n), "{family:?}: {n}");
    }
    let val: std::collections::HashSet<&str> =
        small.val.iter().map(|q| q.article.as_str()).collect();
    assert!(large.test.iter().all(|q| !val.contains(q.article.as_str())));
    let named = |split: &'static str, qs: &[agentfly_tools::tasks::wiki_qa::Question]| {
        (split, qs.iter().map(|q| q.sample()).collect::<Vec<_>>())
    };
    let (test, train) = (named("test", &large.test), named("train", &large.train));
    check_articles_disjoint(&[(test.0, &test.1[..]), (train.0, &train.1[..])]).unwrap();
    check_disjoint(&[(test.0, &test.1[..]), (train.0, &train.1[..])]).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demonstrations_show_what_the_tools_really_return() {
    agentfly_tools::wiki::install(index().clone());
    let toolbox = Toolbox::from_names(&["search", "retrieve", "submit_answer"]).unwrap();
    for q in &made().demos[..6] {
        let demo = q.demonstration(index(), DemoFormat::Hermes).unwrap();
        let messages = demo.field("messages").unwrap().as_array().unwrap();
        let calls: Vec<&str> = match q.family {
            Family::YearTitled => vec!["retrieve"],
            _ => vec!["search", "retrieve"],
        };
        assert_eq!(messages.len(), 2 + 2 * calls.len(), "{messages:?}");
        let mut outputs = Vec::new();
        for (i, name) in calls.iter().enumerate() {
            let call = messages[1 + 2 * i]["content"].as_str().unwrap();
            let json = call
                .trim_start_matches("<tool_call>\n")
                .trim_end_matches("\n</tool_call>");
            let call: serde_json::Value = serde_json::from_str(json).unwrap();
            assert_eq!(call["name"], *name);
            let real = toolbox
                .call_json(name, &call["arguments"].to_string())
                .await;
            assert!(!real.is_error, "{real:?}");
            assert_eq!(messages[2 + 2 * i]["content"].as_str().unwrap(), real.text);
            outputs.push(real.text);
        }
        // A described article is the first result its description finds; its text holds
        // the answer, which is what is submitted.
        if q.family == Family::YearDescribed {
            assert!(
                outputs[0].starts_with(&format!("1. {}: ", q.article)),
                "{}",
                outputs[0]
            );
        }
        assert!(outputs.last().unwrap().contains(&q.answer), "{q:?}");
        assert!(
            messages.last().unwrap()["content"]
                .as_str()
                .unwrap()
                .contains(&q.answer)
        );

        let code = q.demonstration(index(), DemoFormat::Code).unwrap();
        let cells = code.field("messages").unwrap().as_array().unwrap();
        assert_eq!(cells.len(), messages.len());
        let retrieve = format!("```python\nprint(retrieve({:?}))\n```", q.article);
        assert_eq!(
            cells[cells.len() - 3]["content"].as_str().unwrap(),
            retrieve
        );
        for (i, output) in outputs.iter().enumerate() {
            assert_eq!(cells[2 + 2 * i]["content"].as_str().unwrap(), output);
            assert_eq!(cells[2 + 2 * i]["name"], "code_interpreter");
        }
    }
    for q in made().test.iter().step_by(10) {
        eprintln!("{:?} | {} | {}", q.family, q.question, q.answer);
    }
}
