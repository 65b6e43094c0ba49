//! Times as people read them: RFC 3339 in UTC (`2026-12-03T18:59:25Z`), with how long ago it
//! was where that helps (`3 min ago`). The one place the human output formats a time; `--json`
//! keeps the numbers (microseconds or milliseconds since the Unix epoch) as they are stored.

use time::OffsetDateTime;
use time::format_description::BorrowedFormatItem;
use time::macros::format_description;

/// How finely a time is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Precision {
    /// Whole seconds: one time on its own (a receipt, a session's start).
    Seconds,
    /// Milliseconds: rows of a table, where events a few ms apart must read in order.
    Millis,
}

const SECONDS: &[BorrowedFormatItem<'_>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
const MILLIS: &[BorrowedFormatItem<'_>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");

/// `micros` (since the Unix epoch) as RFC 3339 in UTC, truncated to `precision`; with `now`
/// (the current time, in microseconds too), followed by how far before or after it that is:
/// `2026-12-03T18:59:25Z (3 min ago)`, or `(in 2 s)` for a time ahead of this host's clock
/// (another machine's clock runs ahead of this one's). A time outside the years 0 to 9999,
/// which RFC 3339 cannot write (a client's clock gone wrong), is printed as its number.
pub(crate) fn timestamp(micros: i64, precision: Precision, now: Option<i64>) -> String {
    let format = match precision {
        Precision::Seconds => SECONDS,
        Precision::Millis => MILLIS,
    };
    let text = OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1_000)
        .ok()
        .filter(|t| (0..=9999).contains(&t.year()))
        .and_then(|t| t.format(format).ok());
    let Some(text) = text else {
        return format!("{micros} µs since 1970 (not a date RFC 3339 can write)");
    };
    match now {
        Some(now) => format!("{text} ({})", age(micros, now)),
        None => text,
    }
}

/// How long before `now` the time `at` was, roughly, in the largest unit that fits: `just
/// now`, `45 s ago`, `3 min ago`, `5 h ago`, `3 days ago`, `2 years ago`; `in 2 s` for a time
/// after `now`.
fn age(at: i64, now: i64) -> String {
    let delta = i128::from(now) - i128::from(at);
    let seconds = delta.unsigned_abs() / 1_000_000;
    if seconds == 0 {
        return "just now".into();
    }
    const MINUTE: u128 = 60;
    const HOUR: u128 = 60 * MINUTE;
    const DAY: u128 = 24 * HOUR;
    // The Gregorian calendar's mean year: 365.2425 days.
    const YEAR: u128 = 31_556_952;
    let plural =
        |n: u128, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let span = match seconds {
        s if s < MINUTE => format!("{s} s"),
        s if s < HOUR => format!("{} min", s / MINUTE),
        s if s < 2 * DAY => format!("{} h", s / HOUR),
        s if s < 2 * YEAR => plural(s / DAY, "day", "days"),
        s => plural(s / YEAR, "year", "years"),
    };
    if delta < 0 {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

/// The current time in microseconds since the Unix epoch: the `now` of [`timestamp`].
pub(crate) fn now() -> i64 {
    sessionlog_schemas::now_micros()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-03T18:59:25.970326Z.
    const AT: i64 = 1_796_324_365_970_326;
    const SECOND: i64 = 1_000_000;

    #[test]
    fn times_print_as_rfc_3339_in_utc() {
        assert_eq!(
            timestamp(AT, Precision::Seconds, None),
            "2026-12-03T18:59:25Z"
        );
        assert_eq!(
            timestamp(AT, Precision::Millis, None),
            "2026-12-03T18:59:25.970Z"
        );
        assert_eq!(
            timestamp(0, Precision::Seconds, None),
            "1970-01-01T00:00:00Z"
        );
        // Milliseconds keep their width, so a table's column stays straight.
        assert_eq!(
            timestamp(5 * SECOND, Precision::Millis, None),
            "1970-01-01T00:00:05.000Z"
        );
        // Before the epoch: truncated towards the past, as a clock reads.
        assert_eq!(
            timestamp(-1, Precision::Millis, None),
            "1969-12-31T23:59:59.999Z"
        );
        let parsed = OffsetDateTime::parse(
            &timestamp(AT, Precision::Millis, None),
            &time::format_description::well_known::Rfc3339,
        )
        .expect("RFC 3339");
        assert_eq!(
            parsed.unix_timestamp_nanos() / 1_000_000,
            i128::from(AT / 1_000)
        );
    }

    #[test]
    fn times_say_how_long_ago_they_were() {
        let at = |ago: i64| timestamp(AT - ago, Precision::Seconds, Some(AT));
        assert_eq!(at(0), "2026-12-03T18:59:25Z (just now)");
        assert!(at(SECOND / 2).ends_with("(just now)"), "{}", at(SECOND / 2));
        assert!(
            at(45 * SECOND).ends_with("(45 s ago)"),
            "{}",
            at(45 * SECOND)
        );
        assert!(at(3 * 60 * SECOND + 59 * SECOND).ends_with("(3 min ago)"));
        assert!(at(5 * 3_600 * SECOND).ends_with("(5 h ago)"));
        assert!(at(47 * 3_600 * SECOND).ends_with("(47 h ago)"));
        assert!(at(2 * 86_400 * SECOND).ends_with("(2 days ago)"));
        assert!(at(400 * 86_400 * SECOND).ends_with("(400 days ago)"));
        // Years of 365.2425 days: three of 365 days are not quite three.
        assert!(at(3 * 365 * 86_400 * SECOND).ends_with("(2 years ago)"));
        assert!(at(3 * 366 * 86_400 * SECOND).ends_with("(3 years ago)"));
    }

    #[test]
    fn a_time_ahead_of_this_clock_says_so() {
        // Another machine's clock a little ahead: the time is in the future here.
        let ahead = timestamp(AT + 2 * SECOND, Precision::Seconds, Some(AT));
        assert_eq!(ahead, "2026-12-03T18:59:27Z (in 2 s)");
        assert!(timestamp(AT + 90 * SECOND, Precision::Seconds, Some(AT)).ends_with("(in 1 min)"));
        assert!(
            timestamp(AT + 86_400 * SECOND, Precision::Seconds, Some(AT)).ends_with("(in 24 h)")
        );
        assert_eq!(age(AT + SECOND / 3, AT), "just now");
    }

    #[test]
    fn times_far_away_still_print() {
        // The last second RFC 3339 can write, seen from now and from the epoch.
        let last = 253_402_300_799 * SECOND;
        assert_eq!(
            timestamp(last, Precision::Seconds, None),
            "9999-12-31T23:59:59Z"
        );
        assert!(
            timestamp(last, Precision::Seconds, Some(AT)).ends_with("(in 7973 years)"),
            "{}",
            timestamp(last, Precision::Seconds, Some(AT))
        );
        assert!(timestamp(0, Precision::Seconds, Some(AT)).ends_with("(56 years ago)"));
        // Beyond it, and at the ends of the range: the number, never a panic or an overflow.
        for micros in [last + SECOND, i64::MAX, i64::MIN, -62_167_219_201 * SECOND] {
            let text = timestamp(micros, Precision::Millis, Some(AT));
            assert!(
                text.starts_with(&format!("{micros} µs since 1970")),
                "{text}"
            );
        }
        assert!(age(i64::MIN, i64::MAX).ends_with("years ago"));
        assert!(age(i64::MAX, i64::MIN).starts_with("in "));
    }
}
