//! Durations as people write them on the command line: `30s`, `2h`, `500ms`, `1h 30m`
//! (parsed by `humantime`). A bare number means seconds, as the flags took before units.

use std::time::Duration;

/// Parses a duration flag's value: a bare number of seconds, or a number with units
/// (`ms`, `s`, `m`, `h`, `d`, ... as `humantime` reads them). clap calls it as a value parser.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    humantime::parse_duration(text).map_err(|e| {
        format!("{text:?} is not a duration ({e}): write e.g. 30s, 500ms, 2h, 1h 30m, or seconds")
    })
}

/// A duration the way people read it (`1m 30s`), for messages.
pub fn show(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_number_is_seconds() {
        assert_eq!(parse("60"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse(" 3600 "), Ok(Duration::from_secs(3600)));
    }

    #[test]
    fn units_are_read() {
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1d"), Ok(Duration::from_secs(86_400)));
    }

    #[test]
    fn nonsense_is_refused_with_examples() {
        for text in ["", "thirty", "30 parsecs", "-5s", "1.5.h"] {
            let error = parse(text).expect_err(text);
            assert!(error.contains("30s"), "{text}: {error}");
        }
    }

    #[test]
    fn durations_are_shown_with_units() {
        assert_eq!(show(Duration::from_secs(90)), "1m 30s");
        assert_eq!(show(Duration::from_millis(500)), "500ms");
    }
}
