//! Finding a search's text in events: case-insensitively, in time linear in the text (a text of
//! 1 MB was compared at every character position against the whole query), and without a copy
//! of the event.

use memchr::memmem::Finder;

/// Characters of context on each side of a match in a snippet.
const SNIPPET_SIDE: usize = 80;

/// A query, ready to be found in texts. Case-insensitive as `char::to_lowercase` makes it, one
/// character at a time, on both the query and the text (so `Σ`, `İ` or the Kelvin sign `K`
/// match what they read as); then a substring search of the lowered bytes (`memmem`, linear in
/// the text). A match found in the lowered text is a match of whole characters, since UTF-8
/// never starts a character inside another.
pub struct Matcher {
    finder: Finder<'static>,
    /// The lowered text of the last call, kept to be reused.
    lowered: String,
}

impl Matcher {
    /// A matcher for `query` (its characters lowered one at a time).
    pub fn new(query: &str) -> Self {
        let needle: String = query.chars().flat_map(char::to_lowercase).collect();
        Self {
            finder: Finder::new(needle.as_bytes()).into_owned(),
            lowered: String::new(),
        }
    }

    /// The first match in `text` with up to [`SNIPPET_SIDE`] characters of the text on each
    /// side (`…` where it was cut), or `None`. An empty query matches nothing.
    pub fn snippet(&mut self, text: &str) -> Option<String> {
        let needle_len = self.finder.needle().len();
        if needle_len == 0 {
            return None;
        }
        self.lowered.clear();
        let ascii = text.is_ascii();
        if ascii {
            self.lowered.push_str(text);
            self.lowered.make_ascii_lowercase();
        } else {
            self.lowered
                .extend(text.chars().flat_map(char::to_lowercase));
        }
        let at = self.finder.find(self.lowered.as_bytes())?;
        let (start, end) = if ascii {
            (at, at + needle_len)
        } else {
            original_bounds(text, at, at + needle_len)
        };
        let before = text[..start]
            .char_indices()
            .rev()
            .nth(SNIPPET_SIDE - 1)
            .map_or(0, |(i, _)| i);
        let after = text[end..]
            .char_indices()
            .nth(SNIPPET_SIDE)
            .map_or(text.len(), |(i, _)| end + i);
        let mut out = String::with_capacity(after - before + 6);
        if before > 0 {
            out.push('…');
        }
        out.push_str(&text[before..after]);
        if after < text.len() {
            out.push('…');
        }
        Some(out)
    }
}

/// The byte range of `text` whose lowered characters hold the lowered bytes `from..to`: from
/// the start of the character lowered into byte `from` to the end of the one lowered into
/// byte `to - 1`.
fn original_bounds(text: &str, from: usize, to: usize) -> (usize, usize) {
    let mut lowered_at = 0;
    let mut start = None;
    for (i, c) in text.char_indices() {
        let next = lowered_at + c.to_lowercase().map(char::len_utf8).sum::<usize>();
        if start.is_none() && next > from {
            start = Some(i);
        }
        if next >= to {
            return (start.unwrap_or(i), i + c.len_utf8());
        }
        lowered_at = next;
    }
    (start.unwrap_or(text.len()), text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snippet(text: &str, query: &str) -> Option<String> {
        Matcher::new(query).snippet(text)
    }

    /// The matcher before it was linear: the lowered characters compared at every position.
    fn quadratic(text: &str, query: &str) -> bool {
        let lowered: Vec<char> = text.chars().flat_map(char::to_lowercase).collect();
        let wanted: Vec<char> = query.chars().flat_map(char::to_lowercase).collect();
        !wanted.is_empty()
            && wanted.len() <= lowered.len()
            && lowered.windows(wanted.len()).any(|w| w == wanted)
    }

    #[test]
    fn a_snippet_finds_any_case_and_keeps_characters_whole() {
        assert_eq!(
            snippet("Rain in Oslo", "oslo").as_deref(),
            Some("Rain in Oslo")
        );
        assert_eq!(
            snippet("Rain in Oslo", "OSLO").as_deref(),
            Some("Rain in Oslo")
        );
        assert_eq!(snippet("Rain in Oslo", "bergen"), None);
        let long = format!("{}needle{}", "é".repeat(200), "ß".repeat(200));
        let found = snippet(&long, "NEEDLE").unwrap_or_default();
        assert!(found.starts_with('…') && found.ends_with('…'), "{found}");
        assert_eq!(found.chars().count(), 2 + 80 + 6 + 80);
        assert_eq!(
            found,
            format!("…{}needle{}…", "é".repeat(80), "ß".repeat(80))
        );
        let ascii = format!("{}needle{}", "a".repeat(200), "b".repeat(200));
        assert_eq!(
            snippet(&ascii, "Needle").as_deref(),
            Some(format!("…{}needle{}…", "a".repeat(80), "b".repeat(80)).as_str())
        );
        assert_eq!(snippet("", "x"), None);
        assert_eq!(snippet("anything", ""), None);
    }

    #[test]
    fn non_ascii_text_matches_as_it_reads() {
        // Upper and lower case outside ASCII, both ways.
        assert!(snippet("ÉTÉ À PARIS", "été à").is_some());
        assert!(snippet("straße", "STRASSE").is_none(), "ß lowers to itself");
        assert!(snippet("ΟΔΟΣ", "οδοσ").is_some());
        // A query is lowered as the text is, character by character, so a word-final sigma
        // in it finds the same word in capitals.
        assert!(snippet("ΟΔΟΣ ΑΘΗΝΑ", "ΟΔΟΣ").is_some());
        // The Kelvin sign lowers to an ASCII `k`: a non-ASCII text can match an ASCII query.
        assert_eq!(
            snippet("20 \u{212A}elvin", "kelvin").as_deref(),
            Some("20 \u{212A}elvin")
        );
        // `İ` lowers to two characters (`i` and a combining dot): the snippet is cut around the
        // characters of the text that matched, whole.
        let dotted = format!("{}İstanbul{}", "x".repeat(100), "y".repeat(100));
        let found = snippet(&dotted, "i\u{307}stanbul").unwrap_or_default();
        assert_eq!(
            found,
            format!("…{}İstanbul{}…", "x".repeat(80), "y".repeat(80))
        );
        assert!(snippet("İİİİ x", "x").is_some());
        // A match inside the lowered form of one character keeps that character whole.
        assert_eq!(snippet("İ", "\u{307}").as_deref(), Some("İ"));
    }

    #[test]
    fn it_finds_what_the_quadratic_matcher_found() {
        let texts = [
            "Rain in Oslo",
            "ΟΔΟΣ ΑΘΗΝΑ οδος",
            "İİİİ x İstanbul",
            "20 \u{212A}elvin, 20 kelvin",
            "straße STRASSE",
            "émigré ÉMIGRÉ",
            "",
        ];
        let queries = [
            "oslo",
            "IN O",
            "οδοσ",
            "ΟΔΟΣ",
            "x",
            "i\u{307}",
            "KELVIN",
            "ss",
            "ß",
            "MIGR",
            "é",
            "Émigré émigré",
            "zzz",
        ];
        for text in texts {
            for query in queries {
                assert_eq!(
                    snippet(text, query).is_some(),
                    quadratic(text, query),
                    "{text:?} / {query:?}"
                );
            }
        }
    }

    #[test]
    fn a_long_text_is_searched_in_one_pass() {
        // The worst case of the old matcher: a long run of almost-matches.
        let text = format!("{}b", "a".repeat(1_000_000));
        let query = format!("{}b", "a".repeat(199));
        let found = snippet(&text, &query).unwrap_or_default();
        assert!(
            found.starts_with('…') && found.ends_with('b'),
            "{}",
            found.len()
        );
        assert_eq!(snippet(&text, &"a".repeat(200).replace('a', "c")), None);
    }
}
