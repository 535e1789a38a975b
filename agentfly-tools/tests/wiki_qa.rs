//! The wiki-qa questions, generated from the real corpus: deterministic, disjoint splits by
//! question and by article, answers never in their questions, the three families mixed,
//! and demonstrations whose tool output is what the real tool returns.

use agentfly_core::Toolbox;
use agentfly_core::data::read_jsonl;
use agentfly_envs::wiki::{Corpus, WikiIndex};
use agentfly_tools::tasks::arithmetic::{SplitSizes, check_disjoint};
use agentfly_tools::tasks::wiki_qa::{DemoFormat, Family, Splits, check_articles_disjoint, splits};
use std::sync::OnceLock;

const SIZES: SplitSizes = SplitSizes {
    train: 600,
    val: 60,
    test: 150,
    demos: 32,
};

fn corpus() -> &'static Corpus {
    static CORPUS: OnceLock<Corpus> = OnceLock::new();
    CORPUS.get_or_init(|| Corpus::load(&agentfly_testdata::wiki_corpus()).unwrap())
}

fn made() -> &'static Splits {
    static SPLITS: OnceLock<Splits> = OnceLock::new();
    SPLITS.get_or_init(|| splits(corpus(), 0, SIZES).unwrap())
}

#[test]
fn splits_are_deterministic_disjoint_and_mixed() {
    let s = made();
    assert_eq!(
        (s.train.len(), s.val.len(), s.test.len(), s.demos.len()),
        (600, 60, 150, 32)
    );
    assert_eq!(
        &splits(corpus(), 0, SIZES).unwrap(),
        s,
        "same seed, same questions"
    );
    assert_ne!(splits(corpus(), 1, SIZES).unwrap().test, s.test);

    let dir = tempfile::tempdir().unwrap();
    s.write(dir.path(), corpus(), DemoFormat::Hermes).unwrap();
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
            Family::YearTitled | Family::YearUntitled => {
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
        }
    }
    for family in Family::WIDE {
        let n = s.test.iter().filter(|q| q.family == family).count();
        assert_eq!(n, 50, "{family:?}");
    }
    assert!(s.demos.iter().all(|q| q.family == Family::YearTitled));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demonstrations_show_what_the_tools_really_return() {
    let index =
        WikiIndex::in_memory(Corpus::load(&agentfly_testdata::wiki_corpus()).unwrap()).unwrap();
    agentfly_tools::wiki::install(std::sync::Arc::new(index));
    let toolbox = Toolbox::from_names(&["retrieve", "submit_answer"]).unwrap();
    for q in &made().demos[..4] {
        let article = corpus().get(&q.article).unwrap();
        let demo = q.demonstration(article, DemoFormat::Hermes);
        let messages = demo.field("messages").unwrap().as_array().unwrap();
        let call = messages[1]["content"].as_str().unwrap();
        let json = call
            .trim_start_matches("<tool_call>\n")
            .trim_end_matches("\n</tool_call>");
        let call: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(call["name"], "retrieve");
        let real = toolbox
            .call_json("retrieve", &call["arguments"].to_string())
            .await;
        assert_eq!(messages[2]["content"].as_str().unwrap(), real.text);
        assert!(real.text.contains(&q.answer), "{q:?}");
        assert!(messages[3]["content"].as_str().unwrap().contains(&q.answer));

        let code = q.demonstration(article, DemoFormat::Code);
        let messages = code.field("messages").unwrap().as_array().unwrap();
        assert_eq!(
            messages[1]["content"].as_str().unwrap(),
            format!("```python\nprint(retrieve({:?}))\n```", q.article)
        );
        assert_eq!(messages[2]["content"].as_str().unwrap(), real.text);
    }
    for q in made().test.iter().step_by(10) {
        eprintln!("{:?} | {} | {}", q.family, q.question, q.answer);
    }
}
