//! What commands share of their arguments: the global ones resolved ([`Globals`]), and the
//! parsers of values more than one command takes (a session id, where to start reading the
//! log, OTLP headers).

use anyhow::{Context, Result};
use sessionlog_log::{Settings, StartAt};
use sessionlog_schemas::SessionId;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

/// What every command that needs the deployment gets besides its own arguments.
pub struct Globals {
    /// The settings: `--config` (or ./sessionlog.toml) under `SESSIONLOG_*` variables.
    pub settings: Settings,
    /// The settings file `--config` named, for `doctor`, which says where each setting came
    /// from.
    pub config: Option<PathBuf>,
    /// `--json`, for a command that prints as it goes (`events`); the others return an
    /// `Output` with both forms.
    pub json: bool,
}

impl Globals {
    /// Loads the settings.
    pub fn load(config: Option<PathBuf>, json: bool) -> Result<Self> {
        let settings = Settings::load(config.as_deref()).context("loading settings")?;
        Ok(Self {
            settings,
            config,
            json,
        })
    }
}

/// Parses a session id with a message that says what one looks like.
pub fn parse_session(text: &str) -> Result<SessionId> {
    text.parse().map_err(|_| {
        anyhow::anyhow!(
            "{text:?} is not a session id: expected a UUID such as 0190c6e2-5b7a-7c3e-9f00-1a2b3c4d5e6f \
             (`sessionlog example` prints one)"
        )
    })
}

/// Where `--from-offsets` or `--from-time` says to start; `None` when neither is given.
pub fn start_at(offsets: Option<&str>, time: Option<&str>) -> Result<Option<StartAt>> {
    Ok(match (offsets, time) {
        (Some(offsets), _) => Some(StartAt::Offsets(parse_offsets(offsets)?)),
        (None, Some(time)) => Some(StartAt::Timestamp(parse_time(time)?)),
        (None, None) => None,
    })
}

fn parse_offsets(text: &str) -> Result<BTreeMap<i32, i64>> {
    text.split(',')
        .map(|pair| {
            let (p, o) = pair
                .split_once(':')
                .with_context(|| format!("{pair:?}: expected partition:offset"))?;
            Ok((p.trim().parse()?, o.trim().parse()?))
        })
        .collect()
}

/// Milliseconds since the epoch, an RFC 3339 time like `2025-01-31T12:00:00Z`, or a duration
/// with units meaning that long ago (`2h`, `30m`, `1d`).
fn parse_time(text: &str) -> Result<i64> {
    parse_time_at(text, time::OffsetDateTime::now_utc())
}

/// [`parse_time`] with "now" given, so that a relative time can be tested.
fn parse_time_at(text: &str, now: time::OffsetDateTime) -> Result<i64> {
    let time = if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    } else if let Ok(ago) = humantime::parse_duration(text.trim()) {
        now.checked_sub(time::Duration::try_from(ago).context("a duration out of range")?)
            .with_context(|| format!("{text:?} ago is out of range"))?
    } else {
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
            .with_context(|| {
                format!(
                    "{text:?}: expected milliseconds since the epoch, RFC 3339 like \
                     2025-01-31T12:00:00Z, or how long ago like 2h"
                )
            })?
    };
    i64::try_from(time.unix_timestamp_nanos() / 1_000_000)
        .with_context(|| format!("{text:?} is out of range"))
}

/// `name=value` headers for an OTLP receiver, checked as the exporter would send them (it drops
/// a header it cannot send without a word, and a receiver then refuses every request).
pub fn parse_headers(headers: &[String]) -> Result<HashMap<String, String>> {
    headers
        .iter()
        .map(|header| {
            let (name, value) = header
                .split_once('=')
                .with_context(|| format!("--header {:?}: expected name=value", redact(header)))?;
            let name = name.trim();
            reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .with_context(|| format!("--header {name:?}: not a valid header name"))?;
            reqwest::header::HeaderValue::from_str(value).with_context(|| {
                format!("--header {name}: the value is not a valid header value")
            })?;
            Ok((name.to_string(), value.to_string()))
        })
        .collect()
}

/// A header for an error message: its name only, the value may be a secret.
fn redact(header: &str) -> &str {
    header.split_once('=').map_or("(no name)", |(name, _)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_as_utc_milliseconds() {
        assert_eq!(parse_time("0").ok(), Some(0));
        assert_eq!(parse_time("1970-01-01T00:00:00Z").ok(), Some(0));
        assert_eq!(
            parse_time("2024-03-01T00:00:01.5Z").ok(),
            Some(1_709_251_201_500)
        );
        assert!(parse_time("yesterday").is_err());
    }

    #[test]
    fn a_duration_is_that_long_ago() {
        let now = time::macros::datetime!(2026-12-02 12:00 UTC);
        let at = |text: &str| parse_time_at(text, now).ok();
        assert_eq!(at("2h"), Some(1_796_205_600_000));
        assert_eq!(at("90m"), at("1h 30m"));
        assert_eq!(at("500ms"), Some(1_796_212_800_000 - 500));
        // A bare number stays milliseconds since the epoch, as before.
        assert_eq!(at("1000"), Some(1000));
    }

    #[test]
    fn offsets_parse_by_partition() {
        let parsed = parse_offsets("0:10, 3:7").ok();
        assert_eq!(parsed, Some(BTreeMap::from([(0, 10), (3, 7)])));
        assert!(parse_offsets("0=10").is_err());
    }
}
