//! Durations as people write them on the command line: `30s`, `2h`, `500ms`, `1h 30m`
//! (parsed by `humantime`; a bare number means seconds, as the flags took before units), and
//! as they read them in messages and tables.

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

/// A duration in microseconds as people read it in a table: `850 µs`, `12.5 ms`, `3.20 s`,
/// `4m05s`.
pub fn show_micros(micros: i128) -> String {
    let abs = micros.unsigned_abs();
    let sign = if micros < 0 { "-" } else { "" };
    match abs {
        0..1_000 => format!("{sign}{abs} µs"),
        1_000..1_000_000 => format!("{sign}{:.1} ms", abs as f64 / 1e3),
        1_000_000..60_000_000 => format!("{sign}{:.2} s", abs as f64 / 1e6),
        _ => {
            let secs = abs / 1_000_000;
            format!("{sign}{}m{:02}s", secs / 60, secs % 60)
        }
    }
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

    #[test]
    fn microseconds_are_shown_in_the_largest_unit_that_fits() {
        assert_eq!(show_micros(850), "850 µs");
        assert_eq!(show_micros(-1_500), "-1.5 ms");
        assert_eq!(show_micros(3_200_000), "3.20 s");
        assert_eq!(show_micros(245_000_000), "4m05s");
    }
}
