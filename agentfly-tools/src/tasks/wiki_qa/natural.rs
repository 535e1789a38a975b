//! Questions as people ask them, with other answers than a year or a title: who made a
//! work, what a country's capital is, which country a place is in. Each is drawn from an
//! article's short description or summary and kept only where the answer is written,
//! word for word, in the article's summary, so reading the article answers it. Each family
//! has a phrasing the training split uses and a second one only the test split asks in
//! ([`super::Family::REPHRASED`]), to see whether what RL taught carries over to words it
//! never saw.

use agentfly_envs::wiki::{Article, Corpus};
use std::collections::HashSet;

/// What the natural families need to know about the corpus as a whole: the names of its
/// countries (articles described as a country or sovereign state).
#[derive(Debug, Clone, Default)]
pub struct Known {
    countries: HashSet<String>,
}

impl Known {
    /// The corpus's countries.
    pub fn of(corpus: &Corpus) -> Self {
        let countries = corpus
            .articles()
            .iter()
            .filter(|a| {
                let d = a.description.trim();
                [
                    "Country ",
                    "Sovereign state",
                    "Island country",
                    "Landlocked country",
                ]
                .iter()
                .any(|p| d.starts_with(p))
            })
            .map(|a| a.title.clone())
            .collect();
        Self { countries }
    }
}

/// The kind of answer, with its two phrasings: `{}` is the article's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// Who made a work.
    Creator,
    /// A country's (or region's) capital.
    Capital,
    /// The country a place is in.
    Country,
}

/// How a work of each kind asks for its maker: (the words in the description, the trained
/// phrasing, the held-out one).
const CREATORS: &[(&[&str], &str, &str)] = &[
    (
        &["film", "documentary"],
        "Who directed {}?",
        "Which filmmaker made {}?",
    ),
    (
        &[
            "novel", "novella", "book", "poem", "play", "tragedy", "comedy", "treatise", "essay",
            "dialogue", "epic", "story",
        ],
        "Who wrote {}?",
        "{} was written by whom?",
    ),
    (
        &["painting", "fresco", "portrait", "mural"],
        "Who painted {}?",
        "Which artist painted {}?",
    ),
    (
        &[
            "opera",
            "symphony",
            "ballet",
            "composition",
            "concerto",
            "oratorio",
        ],
        "Who composed {}?",
        "Which composer wrote the music of {}?",
    ),
    (
        &["sculpture", "statue"],
        "Who sculpted {}?",
        "Which artist made the sculpture {}?",
    ),
];

/// The phrasings of capitals and countries: (trained, held out).
const CAPITAL: (&str, &str) = (
    "What is the capital of {}?",
    "{} has its capital in which city?",
);
const COUNTRY: (&str, &str) = (
    "In which country is {}?",
    "Name the country where {} is found.",
);

/// The name a question uses for an article: its title without a disambiguation
/// (`Apology (Plato)` → `Apology`); `None` for a title with a comma (`San Juan, Puerto
/// Rico`), which a question cannot name cleanly.
fn name(title: &str) -> Option<&str> {
    let name = title.split(" (").next().unwrap_or(title).trim();
    (!name.is_empty() && !name.contains(',')).then_some(name)
}

/// A run of capitalised words at the start of `text` (`Phnom Penh is…` → `Phnom Penh`),
/// joined by single spaces; hyphens and apostrophes stay inside words.
fn capitalised_words(text: &str) -> Option<String> {
    let mut words = Vec::new();
    for word in text.split(' ') {
        let core = word.trim_end_matches([',', '.', ';', ':', ')']);
        let starts_upper = core.chars().next().is_some_and(char::is_uppercase);
        let clean = core
            .chars()
            .all(|c| c.is_alphabetic() || c == '-' || c == '\'');
        if !(starts_upper && clean) {
            break;
        }
        words.push(core);
        if core.len() != word.len() {
            break;
        }
    }
    (!words.is_empty()).then(|| words.join(" "))
}

/// The question and answer of `ask` about `article` in the trained (`rephrased` false) or
/// the held-out phrasing, when the article allows one.
pub fn question(
    article: &Article,
    ask: Ask,
    rephrased: bool,
    known: &Known,
) -> Option<(String, String)> {
    let pick = |(trained, held_out): (&'static str, &'static str)| {
        if rephrased { held_out } else { trained }
    };
    let (template, subject, answer) = match ask {
        Ask::Creator => {
            let description = article.description.trim();
            let (work, maker) = description.split_once(" by ")?;
            let maker = maker.trim();
            let kind = work.split(' ').next_back()?.to_lowercase();
            let phrasing = CREATORS
                .iter()
                .find(|(kinds, _, _)| kinds.contains(&kind.as_str()))?;
            if maker.contains([',', ';', '(']) || capitalised_words(maker).as_deref() != Some(maker)
            {
                return None;
            }
            (
                pick((phrasing.1, phrasing.2)),
                name(&article.title)?,
                maker.to_string(),
            )
        }
        Ask::Capital => {
            let description = article.description.trim();
            let of_country = [
                "Capital of ",
                "Capital city of ",
                "Capital and largest city of ",
            ]
            .iter()
            .find_map(|p| description.strip_prefix(p));
            match of_country {
                // A capital's own article: the question names the country, the answer is
                // the city, and the summary must say it is the capital.
                Some(country) => {
                    let country = country.trim();
                    if capitalised_words(country).as_deref() != Some(country)
                        || !article.summary.contains("capital")
                    {
                        return None;
                    }
                    (pick(CAPITAL), country, name(&article.title)?.to_string())
                }
                // A country's article: "Its capital (and largest city) is …".
                None => {
                    let at = ["Its capital and largest city is ", "Its capital is "]
                        .iter()
                        .find_map(|p| article.summary.find(p).map(|i| i + p.len()))?;
                    let city = capitalised_words(&article.summary[at..])?;
                    (pick(CAPITAL), name(&article.title)?, city)
                }
            }
        }
        Ask::Country => {
            let description = article.description.trim();
            if known.countries.contains(&article.title) {
                return None;
            }
            let (_, place) = description.rsplit_once(" in ")?;
            let country = place.rsplit(", ").next()?.trim();
            if !known.countries.contains(country) {
                return None;
            }
            (pick(COUNTRY), name(&article.title)?, country.to_string())
        }
    };
    // Not even part of a word of the question ("India" in "Indian Institutes of …").
    if subject.to_lowercase().contains(&answer.to_lowercase()) {
        return None;
    }
    // Only what the article says: the answer, word for word, in its summary.
    if !article.summary.contains(answer.as_str()) && name(&article.title) != Some(&answer) {
        return None;
    }
    Some((template.replacen("{}", subject, 1), answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn article(title: &str, description: &str, summary: &str) -> Article {
        Article {
            title: title.into(),
            summary: summary.into(),
            description: description.into(),
            topic: String::new(),
        }
    }

    #[test]
    fn each_family_finds_its_answer_in_the_summary_and_asks_it_two_ways() {
        let known = Known {
            countries: ["France".to_string(), "Cambodia".to_string()].into(),
        };
        let film = article(
            "2001: A Space Odyssey",
            "1968 film by Stanley Kubrick",
            "2001: A Space Odyssey is a 1968 epic science fiction film produced and directed by \
             Stanley Kubrick.",
        );
        assert_eq!(
            question(&film, Ask::Creator, false, &known),
            Some((
                "Who directed 2001: A Space Odyssey?".into(),
                "Stanley Kubrick".into()
            ))
        );
        assert_eq!(
            question(&film, Ask::Creator, true, &known).unwrap().0,
            "Which filmmaker made 2001: A Space Odyssey?"
        );
        let dialogue = article(
            "Apology (Plato)",
            "Socratic dialogue by Plato",
            "The Apology of Socrates is a Socratic dialogue by Plato.",
        );
        assert_eq!(
            question(&dialogue, Ask::Creator, true, &known).unwrap().0,
            "Apology was written by whom?"
        );
        // The maker must be in the summary, and a kind of work it knows.
        let unsaid = article("Candide", "Novella by Voltaire", "Candide is a satire.");
        assert_eq!(question(&unsaid, Ask::Creator, false, &known), None);
        let single = article("Help", "Single by the Beatles", "A single by the Beatles.");
        assert_eq!(question(&single, Ask::Creator, false, &known), None);

        let country = article(
            "Cambodia",
            "Country in Southeast Asia",
            "Cambodia is a country in Southeast Asia. Its capital and largest city is Phnom \
             Penh, the political centre.",
        );
        assert_eq!(
            question(&country, Ask::Capital, false, &known),
            Some((
                "What is the capital of Cambodia?".into(),
                "Phnom Penh".into()
            ))
        );
        assert_eq!(question(&country, Ask::Country, false, &known), None);
        let city = article(
            "Amman",
            "Capital and largest city of Jordan",
            "Amman is the capital and largest city of Jordan.",
        );
        assert_eq!(
            question(&city, Ask::Capital, true, &known),
            Some((
                "Jordan has its capital in which city?".into(),
                "Amman".into()
            ))
        );

        let tower = article(
            "Eiffel Tower",
            "Tower in Paris, France",
            "The Eiffel Tower is a wrought-iron lattice tower in Paris, France.",
        );
        assert_eq!(
            question(&tower, Ask::Country, false, &known),
            Some(("In which country is Eiffel Tower?".into(), "France".into()))
        );
        assert_eq!(
            question(&tower, Ask::Country, true, &known).unwrap().0,
            "Name the country where Eiffel Tower is found."
        );
        let elsewhere = article("Tower", "Tower in Paris, Texas", "A tower in Texas.");
        assert_eq!(question(&elsewhere, Ask::Country, false, &known), None);
    }
}
