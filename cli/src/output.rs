//! What a command prints, in one convention: every command returns an [`Output`] and the
//! dispatch prints it ([`Output::print`]): its JSON form with `--json`, its text otherwise.
//! A command that prints as it goes (`events`, page by page) writes through a [`Stream`].
//!
//! Also the small text helpers more than one command's human output uses.

use anyhow::Result;
use serde::Serialize;
use std::io::Write;

/// A command's result: a JSON document for `--json`, text for people, and the failure the
/// command reports once that is printed (a check that found problems).
#[derive(Debug, Default)]
#[must_use = "an Output is printed by the dispatch"]
pub struct Output {
    /// What `--json` prints, rendered; `None` when the command has no JSON form and prints its
    /// text either way (a token, a script, a document that is JSON already).
    json: Option<String>,
    /// What is printed without `--json`, in order.
    text: Vec<Piece>,
    /// Reported after the output is printed: the command's exit status.
    failure: Option<anyhow::Error>,
}

/// Text written as it is.
#[derive(Debug)]
enum Piece {
    /// On stdout: the result.
    Out(String),
    /// On stderr: words for the person beside a result meant for a pipe (`token`).
    Note(String),
}

impl Output {
    /// A result with a JSON form (printed pretty) and a human one, printed as a line. A
    /// `serde_json::Value` prints its keys sorted, a struct in the order of its fields.
    pub fn new(json: &impl Serialize, human: impl Into<String>) -> Result<Self> {
        Ok(Self::json(json)?.line(human))
    }

    /// A result with a JSON form; [`line`](Self::line) adds its human form.
    pub fn json(json: &impl Serialize) -> Result<Self> {
        let mut rendered = serde_json::to_string_pretty(json)?;
        rendered.push('\n');
        Ok(Self {
            json: Some(rendered),
            ..Self::default()
        })
    }

    /// Nothing to print: a service that ran until interrupted, or a command that printed as it
    /// went.
    pub fn none() -> Self {
        Self::default()
    }

    /// Adds a line of text on stdout.
    pub fn line(mut self, line: impl Into<String>) -> Self {
        let mut line = line.into();
        line.push('\n');
        self.text.push(Piece::Out(line));
        self
    }

    /// Adds text on stdout exactly as given (a generated script ends as its generator says).
    pub fn raw(mut self, text: String) -> Self {
        self.text.push(Piece::Out(text));
        self
    }

    /// Adds a line on stderr, for the person, beside a result meant for a pipe.
    pub fn note(mut self, line: impl Into<String>) -> Self {
        let mut line = line.into();
        line.push('\n');
        self.text.push(Piece::Note(line));
        self
    }

    /// Fails the command with `error` once the output is printed.
    pub fn fail(mut self, error: anyhow::Error) -> Self {
        self.failure = Some(error);
        self
    }

    /// Prints the output (its JSON form with `json`, when it has one), then returns the
    /// command's failure, if any.
    pub fn print(self, json: bool) -> Result<()> {
        match self.json.filter(|_| json) {
            Some(document) => print!("{document}"),
            // Stdout is flushed at each line end, so the pieces appear in their order.
            None => self.text.iter().for_each(|piece| match piece {
                Piece::Out(text) => print!("{text}"),
                Piece::Note(text) => eprint!("{text}"),
            }),
        }
        self.failure.map_or(Ok(()), Err)
    }
}

/// Stdout for a command that prints as it goes, so a long listing starts at once. A reader
/// that closed it (`| head`) had what it wanted: writing then ends quietly.
pub struct Stream {
    out: std::io::StdoutLock<'static>,
}

impl Stream {
    /// Locks stdout for the command.
    pub fn stdout() -> Self {
        Self {
            out: std::io::stdout().lock(),
        }
    }

    /// Writes `text`; `false` when the reader has closed stdout.
    pub fn write(&mut self, text: &str) -> std::io::Result<bool> {
        Self::open(self.out.write_all(text.as_bytes()))
    }

    /// Flushes what is written; `false` when the reader has closed stdout.
    pub fn flush(&mut self) -> std::io::Result<bool> {
        Self::open(self.out.flush())
    }

    fn open(written: std::io::Result<()>) -> std::io::Result<bool> {
        match written {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// `text` on one line (line breaks as spaces), cut to `max` characters with an ellipsis.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &flat[..end]),
        None => flat,
    }
}

/// Millionths of a US dollar as dollars.
pub fn dollars(micros: i64) -> String {
    format!("{:.6}", micros as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_flattens_and_cuts_by_characters() {
        assert_eq!(one_line("  a\nb\tc  ", 10), "a b c");
        assert_eq!(one_line("ééééé", 3), "ééé…");
        assert_eq!(one_line("abc", 3), "abc");
    }

    #[test]
    fn json_is_chosen_only_when_asked_and_there() -> Result<()> {
        let output = Output::new(&serde_json::json!({"b": 1, "a": 2}), "text")?;
        assert_eq!(
            output.json.as_deref(),
            Some("{\n  \"a\": 2,\n  \"b\": 1\n}\n")
        );
        assert!(matches!(&output.text[..], [Piece::Out(t)] if t == "text\n"));
        let text_only = Output::none().note("for people").line("value");
        assert!(text_only.json.is_none());
        assert!(matches!(
            &text_only.text[..],
            [Piece::Note(n), Piece::Out(v)] if n == "for people\n" && v == "value\n"
        ));
        Ok(())
    }
}
