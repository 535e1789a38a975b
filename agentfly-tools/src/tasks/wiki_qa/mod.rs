//! Questions with verifiable answers about the wiki corpus, generated from a seed, for the
//! search / retrieve agents:
//!
//! | family | the question | the answer | what solves it |
//! |---|---|---|---|
//! | [`Family::YearTitled`] | a sentence of the named article with its year blanked | the year | `retrieve(title)`, read |
//! | [`Family::YearUntitled`] | the same with the title's words masked too | the year | `search`, then read |
//! | [`Family::TitleFromDescription`] | Wikipedia's short description of an article | its title | `search`, choose |
//! | [`Family::YearDescribed`] (demonstrations only) | the untitled sentence, its article described | the year | `search`, `retrieve`, read |
//! | [`Family::Creator`] ([`Questions::Natural`]) | "Who directed 2001: A Space Odyssey?" | a person | `retrieve`, read |
//! | [`Family::Capital`] ([`Questions::Natural`]) | "What is the capital of Cambodia?" | a city | `retrieve` or `search`, read |
//! | [`Family::Country`] ([`Questions::Natural`]) | "In which country is Angkor Wat?" | a country | `retrieve`, read |
//! | [`Family::CreatorRephrased`], [`Family::CapitalRephrased`], [`Family::CountryRephrased`] (test only) | the same asked in words no other split uses | | |
//!
//! Articles are split first (test, validation, train: disjoint by source article), then
//! each split's questions are drawn from its own articles, one question per article,
//! families in turn (the test split's past [`TEST_DRAWN_FIRST`] last, from the held-out
//! articles no question has used); the warm-start demonstrations use two narrow forms,
//! neither of them asked in the held-out splits, on training articles: the named
//! article's year (retrieve, read) and the described article's year (search the
//! description, retrieve the first result, read). The answer never appears in its
//! question (checked as each one is made). A summary's year is used only where it occurs
//! once in the summary and the sentence holds no other year, so the blank has one answer.
//! The natural families ([`natural`]) are asked only with [`Questions::Natural`]; the
//! default [`splits`] are the template families alone, as they always were.

pub mod natural;
pub mod write;

use super::arithmetic::{Exhausted, SplitSizes, normalise};
use agentfly_envs::wiki::{Article, Corpus, WikiIndex, title_key};
use natural::{Ask, Known};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// The form of a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// The named article's sentence with its year blanked — the narrow form of the
    /// warm-start demonstrations.
    YearTitled,
    /// The same sentence, its article not named and the title's words masked.
    YearUntitled,
    /// The article's title from its short description.
    TitleFromDescription,
    /// The untitled sentence, its article given by its short description (title words
    /// masked) — the warm-start's second form, where the description, searched, finds
    /// the article first. Never in the held-out splits.
    YearDescribed,
    /// Who made the named work ("Who directed …?", "Who wrote …?"), from its description.
    Creator,
    /// The named country's capital, from the country's summary or the capital's description.
    Capital,
    /// The country the named place is in, from its description.
    Country,
    /// [`Family::Creator`] in words the training split never uses (test only).
    CreatorRephrased,
    /// [`Family::Capital`] in words the training split never uses (test only).
    CapitalRephrased,
    /// [`Family::Country`] in words the training split never uses (test only).
    CountryRephrased,
}

impl Family {
    /// The template families: the wide mix of the RL and test splits.
    pub const WIDE: [Family; 3] = [
        Family::YearTitled,
        Family::YearUntitled,
        Family::TitleFromDescription,
    ];
    /// The natural families in their trained phrasing.
    pub const NATURAL: [Family; 3] = [Family::Creator, Family::Capital, Family::Country];
    /// The natural families in the test split's own phrasing.
    pub const REPHRASED: [Family; 3] = [
        Family::CreatorRephrased,
        Family::CapitalRephrased,
        Family::CountryRephrased,
    ];

    /// A natural family's kind of answer, and whether it is the held-out phrasing.
    fn natural(self) -> Option<(Ask, bool)> {
        Some(match self {
            Self::Creator => (Ask::Creator, false),
            Self::Capital => (Ask::Capital, false),
            Self::Country => (Ask::Country, false),
            Self::CreatorRephrased => (Ask::Creator, true),
            Self::CapitalRephrased => (Ask::Capital, true),
            Self::CountryRephrased => (Ask::Country, true),
            _ => return None,
        })
    }
}

/// Which questions the splits ask.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Questions {
    /// The template families ([`Family::WIDE`]) in every split.
    #[default]
    Templates,
    /// The template families and the natural ones ([`Family::NATURAL`]) in every split,
    /// and the natural ones rephrased ([`Family::REPHRASED`]) in the test split too.
    Natural,
}

/// One question about one article.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    /// Unique within its split.
    pub id: String,
    /// The question the model reads.
    pub question: String,
    /// The answer.
    pub answer: String,
    /// Its form.
    pub family: Family,
    /// The title of the article it is about.
    pub article: String,
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

const YEAR_CUES: [&str; 12] = [
    "in", "since", "until", "by", "from", "of", "between", "and", "around", "after", "before", "to",
];

/// The sentences of a summary: split after `. `, `! ` or `? ` before a capital letter.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for i in 1..bytes.len().saturating_sub(1) {
        if matches!(bytes[i - 1], b'.' | b'!' | b'?')
            && bytes[i] == b' '
            && bytes[i + 1].is_ascii_uppercase()
        {
            out.push(text[start..i].trim());
            start = i + 1;
        }
    }
    out.push(text[start..].trim());
    out.retain(|s| !s.is_empty());
    out
}

/// The years (1000–2029) written in `text` as words of four digits, with where each is.
fn years(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i + 4 <= bytes.len() {
        let boundary_before = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        let digits = bytes[i..i + 4].iter().all(u8::is_ascii_digit);
        let boundary_after = i + 4 == bytes.len() || !bytes[i + 4].is_ascii_alphanumeric();
        if boundary_before && digits && boundary_after {
            let year = &text[i..i + 4];
            if ("1000".."2030").contains(&year) {
                out.push((i, year));
            }
            i += 4;
        } else {
            i += 1;
        }
    }
    out
}

/// Is the four-digit number at `at` written as a year ("in 1991", "(1977)", "12 December
/// 1991", "December 12, 1991")?
fn reads_as_year(sentence: &str, at: usize) -> bool {
    let before = &sentence[..at];
    if before.ends_with('(') {
        return true;
    }
    let words: Vec<String> = before
        .split_whitespace()
        .rev()
        .take(2)
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .collect();
    match words.as_slice() {
        [w, ..] if YEAR_CUES.contains(&w.as_str()) || MONTHS.contains(&w.as_str()) => true,
        [day, month, ..] => {
            day.len() <= 2
                && day.chars().all(|c| c.is_ascii_digit())
                && MONTHS.contains(&month.as_str())
        }
        _ => false,
    }
}

/// The sentence of `article` with a year to blank: the year occurs once in the summary
/// and is the sentence's only year. `None` when no sentence qualifies.
fn year_sentence(article: &Article, rng: &mut ChaCha8Rng) -> Option<(String, String)> {
    let mut found: Vec<(String, String)> = sentences(&article.summary)
        .into_iter()
        .filter(|s| (40..=260).contains(&s.len()))
        .filter_map(|s| {
            let [(at, year)] = years(s)[..] else {
                return None;
            };
            // Not even inside "1940s" or "19401" elsewhere.
            let once = article.summary.matches(year).count() == 1;
            (once && reads_as_year(s, at)).then(|| {
                (
                    format!("{}____{}", &s[..at], &s[at + 4..]),
                    year.to_string(),
                )
            })
        })
        .collect();
    found.shuffle(rng);
    found.into_iter().next()
}

/// `text` with each word of `title` (three letters or more) replaced by `…`.
fn mask_title(text: &str, title: &str) -> String {
    let title_words: HashSet<String> = title_key(title)
        .split(' ')
        .filter(|w| w.chars().count() >= 3 && !matches!(*w, "the" | "and" | "for" | "of"))
        .map(str::to_string)
        .collect();
    text.split(' ')
        .map(|word| {
            let core = word.trim_matches(|c: char| !c.is_alphanumeric());
            let key = title_key(core);
            let hit = !key.is_empty()
                && (title_words.contains(&key)
                    || title_words.contains(key.trim_end_matches('s'))
                    || key
                        .strip_suffix("'s")
                        .is_some_and(|k| title_words.contains(k)));
            if hit {
                word.replacen(core, "…", 1)
            } else {
                word.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Does the normalised answer appear, as whole words, in the normalised question?
fn gives_away(question: &str, answer: &str) -> bool {
    let q = format!(" {} ", title_key(question));
    let a = format!(" {} ", title_key(answer));
    a.trim().is_empty() || q.contains(&a)
}

/// The article's short description with the title's words masked, when it is long enough
/// to ask about.
fn masked_description(article: &Article) -> Option<String> {
    let description = article.description.trim();
    (description.len() >= 12).then(|| mask_title(description, &article.title))
}

/// The question of `family` about `article`, when the article allows one.
fn question(
    article: &Article,
    family: Family,
    known: &Known,
    rng: &mut ChaCha8Rng,
) -> Option<Question> {
    let (question, answer) = match family {
        Family::YearTitled => {
            let (sentence, year) = year_sentence(article, rng)?;
            (
                format!(
                    "The encyclopedia article \"{}\" says: \"{sentence}\" Which year is missing?",
                    article.title
                ),
                year,
            )
        }
        Family::YearUntitled => {
            let (sentence, year) = year_sentence(article, rng)?;
            let masked = mask_title(&sentence, &article.title);
            (
                format!("An encyclopedia article says: \"{masked}\" Which year is missing?"),
                year,
            )
        }
        Family::YearDescribed => {
            let described = masked_description(article)?;
            let (sentence, year) = year_sentence(article, rng)?;
            let masked = mask_title(&sentence, &article.title);
            (
                format!(
                    "The encyclopedia article described as \"{described}\" says: \"{masked}\" Which year is missing?"
                ),
                year,
            )
        }
        Family::TitleFromDescription => {
            let masked = masked_description(article)?;
            (
                format!(
                    "Which encyclopedia article has the short description \"{masked}\"? Answer with its exact title."
                ),
                article.title.clone(),
            )
        }
        natural_family => {
            let (ask, rephrased) = natural_family.natural()?;
            natural::question(article, ask, rephrased, known)?
        }
    };
    (!gives_away(&question, &answer)).then(|| Question {
        id: String::new(),
        question,
        answer,
        family,
        article: article.title.clone(),
    })
}

/// Train, validation and test questions on disjoint articles, and the warm-start
/// demonstrations ([`Family::YearTitled`] and [`Family::YearDescribed`] in turn, on
/// training articles not asked about in `train`).
pub type Splits = super::Splits<Question>;

/// Draws `n` questions of `families` in turn from `articles` (in their order, each used at
/// most once: the used ones are taken out), skipping questions already `taken` and those
/// `keep` refuses; ids `{prefix}-{i}`.
#[allow(clippy::too_many_arguments)]
fn draw(
    corpus: &Corpus,
    articles: &mut Vec<usize>,
    n: usize,
    families: &[Family],
    prefix: &str,
    known: &Known,
    rng: &mut ChaCha8Rng,
    taken: &mut HashSet<String>,
    keep: &dyn Fn(&Question) -> bool,
) -> Result<Vec<Question>, Exhausted> {
    // Which articles allow each family does not depend on the draw: one pass.
    let mut queues: Vec<std::collections::VecDeque<usize>> = families
        .iter()
        .map(|&family| {
            articles
                .iter()
                .copied()
                .filter(|&i| {
                    question(&corpus.articles()[i], family, known, &mut rng.clone()).is_some()
                })
                .collect()
        })
        .collect();
    let mut used = HashSet::new();
    let mut out = Vec::with_capacity(n);
    let mut turn = 0;
    while out.len() < n {
        if queues.iter().all(|q| q.is_empty()) {
            return Err(Exhausted {
                split: prefix.to_string(),
                wanted: n,
                reason: format!("its articles allow only {} questions", out.len()),
            });
        }
        let k = turn % families.len();
        turn += 1;
        // The family's next article not yet used by another family.
        let Some(article) =
            std::iter::from_fn(|| queues[k].pop_front()).find(|a| !used.contains(a))
        else {
            continue;
        };
        used.insert(article);
        let Some(mut q) = question(&corpus.articles()[article], families[k], known, rng) else {
            continue;
        };
        if !keep(&q) {
            // The family keeps its turn: the next of its articles is tried.
            turn -= 1;
            continue;
        }
        if taken.insert(normalise(&q.question)) {
            q.id = format!("{prefix}-{}", out.len());
            out.push(q);
        }
    }
    articles.retain(|i| !used.contains(i));
    Ok(out)
}

/// How many of the test split's questions are drawn before the other splits. The rest are
/// drawn after the training split, so a larger test split leaves the validation,
/// demonstration and training questions as they were (and so the trained models): the
/// test split of 300 begins with the 150 questions the smaller one had. They come from the
/// held-out articles no question has used yet, the test tenth's and then the validation
/// tenth's: a tenth of the corpus has only about 180 articles with a year to ask about,
/// too few for two families of 100.
pub const TEST_DRAWN_FIRST: usize = 150;

/// The splits of `seed` on `index`'s corpus: articles shuffled, a tenth each for test and
/// validation, the rest for training and the demonstrations. A described article's
/// demonstration is kept only where searching its description finds it first, so the
/// demonstration's "retrieve the first result" is right. The test split's questions past
/// [`TEST_DRAWN_FIRST`] are drawn last. An error when a split asks for more questions than
/// its articles allow.
pub fn splits(index: &WikiIndex, seed: u64, sizes: SplitSizes) -> Result<Splits, Exhausted> {
    splits_with(index, seed, sizes, Questions::Templates)
}

/// [`splits`] asking `questions`: with [`Questions::Natural`] the natural families join
/// the template ones in every split (the demonstrations keep their two narrow forms), and
/// the test split also asks them in its own words.
pub fn splits_with(
    index: &WikiIndex,
    seed: u64,
    sizes: SplitSizes,
    questions: Questions,
) -> Result<Splits, Exhausted> {
    let corpus = index.corpus();
    let known = Known::of(corpus);
    let (families, test_families): (Vec<Family>, Vec<Family>) = match questions {
        Questions::Templates => (Family::WIDE.to_vec(), Family::WIDE.to_vec()),
        Questions::Natural => {
            let families = [&Family::WIDE[..], &Family::NATURAL[..]].concat();
            let test = [&families[..], &Family::REPHRASED[..]].concat();
            (families, test)
        }
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0031_719a);
    let mut order: Vec<usize> = (0..corpus.len()).collect();
    order.shuffle(&mut rng);
    let tenth = corpus.len() / 10;
    let mut test_articles = order[..tenth].to_vec();
    let mut val_articles = order[tenth..2 * tenth].to_vec();
    let mut train_articles = order[2 * tenth..].to_vec();
    let mut taken = HashSet::new();
    let mut test = draw(
        corpus,
        &mut test_articles,
        sizes.test.min(TEST_DRAWN_FIRST),
        &test_families,
        "test",
        &known,
        &mut rng,
        &mut taken,
        &|_| true,
    )?;
    let val = draw(
        corpus,
        &mut val_articles,
        sizes.val,
        &families,
        "val",
        &known,
        &mut rng,
        &mut taken,
        &|_| true,
    )?;
    let found_first = |q: &Question| {
        q.family != Family::YearDescribed
            || corpus
                .get(&q.article)
                .and_then(masked_description)
                .and_then(|d| index.search(&d, 1).ok())
                .is_some_and(|hits| hits.first().is_some_and(|h| h.title == q.article))
    };
    let demos = draw(
        corpus,
        &mut train_articles,
        sizes.demos,
        &[Family::YearTitled, Family::YearDescribed],
        "demo",
        &known,
        &mut rng,
        &mut taken,
        &found_first,
    )?;
    let train = draw(
        corpus,
        &mut train_articles,
        sizes.train,
        &families,
        "train",
        &known,
        &mut rng,
        &mut taken,
        &|_| true,
    )?;
    if sizes.test > test.len() {
        let mut held_out = test_articles;
        held_out.extend(val_articles);
        let rest = draw(
            corpus,
            &mut held_out,
            sizes.test - test.len(),
            &test_families,
            "test",
            &known,
            &mut rng,
            &mut taken,
            &|_| true,
        )
        .map_err(|e| Exhausted {
            wanted: sizes.test,
            reason: format!("past its first {}, {}", test.len(), e.reason),
            ..e
        })?;
        for mut q in rest {
            q.id = format!("test-{}", test.len());
            test.push(q);
        }
    }
    Ok(Splits {
        train,
        val,
        test,
        demos,
    })
}
