//! `sessionlog dlq list|show|replay`: the records the projector could not project, why, where
//! they came from, and putting chosen ones back into the events topic once their cause is
//! fixed.
//!
//! Reading and appending are the `log` crate's (`sessionlog_log::dead_letters`); this module
//! decodes through the registry where asked and prints. It never prints an event's contents:
//! a decoded dead letter shows its envelope (session, seq, kind, epoch, ids, time), an
//! undecodable one its size and first bytes.

use crate::args::Globals;
use crate::output::{Output, one_line};
use crate::when::{Precision, timestamp};
use anyhow::{Result, anyhow};
use clap::Subcommand;
use serde::Serialize;
use sessionlog_log::dead_letters::{Appended, Origin};
use sessionlog_log::{DeadLetter, DeadLetterId, DeadLetters, Lookup, Replayer, Settings};
use sessionlog_schemas::{EventDecoder, EventEnvelope, unframe};

/// What `sessionlog dlq` does.
#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List dead letters, oldest first, partition by partition: where each is (PARTITION:OFFSET
    /// of the dead-letter topic, the address `show` and `replay` take), when it was
    /// dead-lettered, its origin in the events topic, its session and why.
    List(ListArgs),
    /// Show one dead letter: its headers, reason, origin and key, and its value's envelope
    /// decoded through the registry (schema id, kind, seq; never its contents), or, if it
    /// does not decode, why, its size and first bytes.
    Show {
        /// The dead letter, as `dlq list` shows it: PARTITION:OFFSET of the dead-letter topic.
        #[arg(value_name = "PARTITION:OFFSET")]
        dead_letter: DeadLetterId,
    },
    /// Append chosen dead letters' records (key and value unchanged) to the events topic again,
    /// once their cause is fixed, so the projector folds them. Each must decode now; one that
    /// does not is left where it is. Replaying twice is harmless: the fold ignores an event it
    /// already accepted.
    Replay(ReplayArgs),
}

/// `dlq list`'s bounds.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// At most this many dead letters.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    limit: u32,
    /// Only this partition of the dead-letter topic; repeat for several.
    #[arg(long = "partition", value_parser = clap::value_parser!(i32).range(0..))]
    partitions: Vec<i32>,
}

/// Which dead letters `dlq replay` appends.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The dead letters, as `dlq list` shows them: PARTITION:OFFSET of the dead-letter topic.
    #[arg(
        value_name = "PARTITION:OFFSET",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    dead_letters: Vec<DeadLetterId>,
    /// Every dead letter in the topic (with --partition, in those partitions).
    #[arg(long)]
    all: bool,
    /// With --all: only this partition of the dead-letter topic; repeat for several.
    #[arg(
        long = "partition",
        conflicts_with = "dead_letters",
        value_parser = clap::value_parser!(i32).range(0..)
    )]
    partitions: Vec<i32>,
    /// Decode and report what would be appended; append nothing.
    #[arg(long)]
    dry_run: bool,
}

/// The arguments of `sessionlog dlq`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    command: DlqCommand,
}

/// Runs `sessionlog dlq ...`.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let settings = &globals.settings;
    let dead_letters = DeadLetters::new(&settings.kafka)?;
    match args.command {
        DlqCommand::List(args) => list(&dead_letters, &settings.kafka.topic, &args).await,
        DlqCommand::Show { dead_letter } => show(settings, &dead_letters, dead_letter).await,
        DlqCommand::Replay(args) => replay(settings, &dead_letters, &args).await,
    }
}

/// One dead letter on a line of `list` (and what `show` says first).
#[derive(Debug, Serialize)]
struct Line {
    partition: i32,
    offset: i64,
    /// When it was dead-lettered (the dead letter's own timestamp), ms since the epoch.
    timestamp_ms: Option<i64>,
    reason: Option<String>,
    origin: Option<Origin>,
    /// The record key: the session id.
    key: Option<String>,
    value_bytes: usize,
}

impl Line {
    fn of(letter: &DeadLetter) -> Self {
        Self {
            partition: letter.id.partition,
            offset: letter.id.offset,
            timestamp_ms: letter.record.timestamp_ms,
            reason: letter.reason.clone(),
            origin: letter.origin.clone(),
            key: key_text(letter),
            value_bytes: value_bytes(letter),
        }
    }
}

/// What `list` prints.
#[derive(Debug, Serialize)]
struct ListReport {
    topic: String,
    /// The events topic (`kafka.topic`): where the projector's dead letters come from.
    events_topic: String,
    /// The partitions asked about (all by default).
    partitions: Vec<i32>,
    /// Dead letters those partitions hold now.
    total: i64,
    /// How many are listed (at most --limit).
    listed: usize,
    dead_letters: Vec<Line>,
}

async fn list(dead_letters: &DeadLetters, events_topic: &str, args: &ListArgs) -> Result<Output> {
    let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
    let listing = dead_letters.list(&args.partitions, limit).await?;
    let report = ListReport {
        topic: listing.span.topic.clone(),
        events_topic: events_topic.to_string(),
        partitions: listing
            .span
            .partitions
            .iter()
            .map(|p| p.partition)
            .collect(),
        total: listing.span.records(),
        listed: listing.letters.len(),
        dead_letters: listing.letters.iter().map(Line::of).collect(),
    };
    Output::new(&report, list_text(&report))
}

fn list_text(report: &ListReport) -> String {
    let mut text = format!(
        "dead-letter topic {}: {} dead letter(s) in {} partition(s); origins in {} unless named",
        report.topic,
        report.total,
        report.partitions.len(),
        report.events_topic
    );
    let listed = i64::try_from(report.listed).unwrap_or(i64::MAX);
    if listed < report.total {
        text.push_str(&format!(
            "; the first {listed} listed (--limit, --partition show others)"
        ));
    }
    if report.dead_letters.is_empty() {
        return text;
    }
    text.push_str(&format!(
        "\n{:<11}  {:<24}  {:<11}  {:<36}  REASON",
        "DEAD LETTER", "TIME", "ORIGIN", "SESSION (KEY)"
    ));
    for line in &report.dead_letters {
        let origin = match &line.origin {
            Some(o) if o.topic == report.events_topic => format!("{}:{}", o.partition, o.offset),
            other => origin_text(other.as_ref()),
        };
        text.push_str(&format!(
            "\n{:<11}  {:<24}  {:<11}  {:<36}  {}",
            format!("{}:{}", line.partition, line.offset),
            time_text(line.timestamp_ms, None),
            origin,
            line.key.as_deref().unwrap_or("-"),
            reason_text(line.reason.as_deref())
        ));
    }
    text
}

/// What `show` prints.
#[derive(Debug, Serialize)]
struct Shown {
    topic: String,
    #[serde(flatten)]
    letter: Line,
    /// Every header in order, its value as text.
    headers: Vec<HeaderText>,
    /// The schema id its framing names, if it is framed.
    schema_id: Option<u32>,
    /// The envelope, if the value decodes now.
    decoded: Option<Envelope>,
    /// Why it does not decode now.
    undecodable: Option<String>,
    /// Its first bytes in hex, when it does not decode.
    value_prefix_hex: Option<String>,
}

/// A header of a dead letter.
#[derive(Debug, Serialize)]
struct HeaderText {
    key: String,
    value: String,
}

/// A decoded event's envelope: what identifies it, none of what it says.
#[derive(Debug, Serialize)]
struct Envelope {
    session_id: String,
    seq: u64,
    kind: &'static str,
    writer_epoch: u64,
    event_id: String,
    occurred_at: i64,
    schema_version: u32,
}

impl Envelope {
    fn of(event: &EventEnvelope) -> Self {
        Self {
            session_id: event.session_id.to_string(),
            seq: event.seq,
            kind: event.event.kind(),
            writer_epoch: event.writer_epoch,
            event_id: event.event_id.to_string(),
            occurred_at: event.occurred_at,
            schema_version: event.schema_version,
        }
    }
}

/// How many bytes of an undecodable value `show` prints: the framing (magic byte, schema id)
/// and a little after it, enough to tell what wrote it.
const PREFIX_BYTES: usize = 16;

async fn show(settings: &Settings, dead_letters: &DeadLetters, id: DeadLetterId) -> Result<Output> {
    let letter = match dead_letters.read(&[id]).await?.pop() {
        Some((_, Lookup::Found(letter))) => letter,
        Some((_, Lookup::Missing(why))) => {
            return Err(anyhow!("{why} (`sessionlog dlq list` lists them)"));
        }
        None => {
            return Err(anyhow!(
                "no dead letter at {id} (`sessionlog dlq list` lists them)"
            ));
        }
    };
    let decoder = EventDecoder::new(settings.registry.client()?);
    // A registry outage is reported after what could be shown without it.
    let (decoded, outage) = match letter.record.try_decode(&decoder).await {
        Ok(decoded) => (Some(decoded), None),
        Err(e) => (None, Some(e)),
    };
    let payload = letter.record.payload.as_deref().unwrap_or_default();
    let undecodable = match &decoded {
        Some(Err(reason)) => Some(reason.clone()),
        _ => None,
    };
    let shown = Shown {
        topic: dead_letters.dead_letter_topic().to_string(),
        letter: Line::of(&letter),
        headers: letter
            .record
            .headers
            .iter()
            .map(|(key, value)| HeaderText {
                key: key.clone(),
                value: String::from_utf8_lossy(value).into_owned(),
            })
            .collect(),
        schema_id: unframe(payload).ok().map(|(id, _)| id),
        decoded: match &decoded {
            Some(Ok(event)) => Some(Envelope::of(event)),
            _ => None,
        },
        value_prefix_hex: undecodable
            .is_some()
            .then(|| hex_prefix(payload, PREFIX_BYTES)),
        undecodable,
    };
    let output = Output::new(&shown, show_text(&shown))?;
    Ok(match outage {
        Some(e) => output.fail(
            anyhow::Error::new(e).context("the value was not decoded: the registry did not answer"),
        ),
        None => output,
    })
}

fn show_text(shown: &Shown) -> String {
    let now = crate::when::now();
    let mut text = format!(
        "dead letter {}:{} of {}\n  dead-lettered  {}\n  reason         {}\n  origin         {}\n  \
         key            {}\n  value          {} bytes{}",
        shown.letter.partition,
        shown.letter.offset,
        shown.topic,
        time_text(shown.letter.timestamp_ms, Some(now)),
        reason_text(shown.letter.reason.as_deref()),
        origin_text(shown.letter.origin.as_ref()),
        shown.letter.key.as_deref().unwrap_or("-"),
        shown.letter.value_bytes,
        shown
            .schema_id
            .map(|id| format!(", schema id {id}"))
            .unwrap_or_default()
    );
    if let Some(e) = &shown.decoded {
        text.push_str(&format!(
            "\n  decodes now    yes: {} seq {} of session {}, epoch {}, event id {}, schema v{}, \
             occurred {}",
            e.kind,
            e.seq,
            e.session_id,
            e.writer_epoch,
            e.event_id,
            e.schema_version,
            timestamp(e.occurred_at, Precision::Millis, Some(now))
        ));
    }
    if let Some(reason) = &shown.undecodable {
        text.push_str(&format!(
            "\n  decodes now    no: {}\n  first bytes    {}",
            one_line(reason, 200),
            shown.value_prefix_hex.as_deref().unwrap_or_default()
        ));
    }
    text.push_str("\n  headers");
    for header in &shown.headers {
        text.push_str(&format!(
            "\n    {:<28} {}",
            one_line(&header.key, 60),
            one_line(&header.value, 200)
        ));
    }
    text
}

/// What became of one chosen dead letter.
#[derive(Debug, Serialize)]
struct Replayed {
    /// Its address, `PARTITION:OFFSET`.
    dead_letter: String,
    /// `appended`, `would_append` (a dry run), `not_found`, `refused` (it does not come from
    /// this deployment's projector, or has no key or value), `undecodable` (still), `failed`
    /// (the append failed) or `not_attempted` (an earlier append failed).
    outcome: &'static str,
    /// Why, for anything but `appended` and `would_append`.
    detail: Option<String>,
    /// The event, when it decodes.
    event: Option<Envelope>,
    /// Where it was appended.
    appended: Option<Appended>,
}

impl Replayed {
    fn failed(&self) -> bool {
        !matches!(self.outcome, "appended" | "would_append")
    }
}

/// What `replay` prints.
#[derive(Debug, Serialize)]
struct ReplayReport {
    /// The events topic appended to.
    topic: String,
    dry_run: bool,
    records: Vec<Replayed>,
    appended: usize,
    failed: usize,
}

/// A chosen dead letter, checked before anything is appended.
enum Planned {
    Ready(Box<DeadLetter>, Envelope),
    Done(Replayed),
}

async fn replay(
    settings: &Settings,
    dead_letters: &DeadLetters,
    args: &ReplayArgs,
) -> Result<Output> {
    let lookups = if args.all {
        let listing = dead_letters.list(&args.partitions, usize::MAX).await?;
        listing
            .letters
            .into_iter()
            .map(|letter| (letter.id, Lookup::Found(Box::new(letter))))
            .collect()
    } else {
        dead_letters.read(&args.dead_letters).await?
    };
    // Every chosen dead letter is checked before the first append: a registry outage stops
    // the command with nothing appended.
    let decoder = EventDecoder::new(settings.registry.client()?);
    let mut planned = Vec::with_capacity(lookups.len());
    for (id, lookup) in lookups {
        planned.push(plan(id, lookup, &settings.kafka.topic, &decoder).await?);
    }
    let replayer = (!args.dry_run)
        .then(|| Replayer::new(&settings.kafka))
        .transpose()?;
    let mut records = Vec::with_capacity(planned.len());
    let mut append_error = None;
    // One at a time, in dead-letter order: a session's dead letters are in one partition of
    // the dead-letter topic in the order it wrote them, and are appended in that order.
    for step in planned {
        let (letter, event) = match step {
            Planned::Done(done) => {
                records.push(done);
                continue;
            }
            Planned::Ready(letter, event) => (letter, event),
        };
        let mut record = Replayed {
            dead_letter: letter.id.to_string(),
            outcome: "would_append",
            detail: None,
            event: Some(event),
            appended: None,
        };
        if let Some(replayer) = &replayer {
            if append_error.is_some() {
                record.outcome = "not_attempted";
                record.detail = Some("an earlier append failed".into());
            } else {
                match replayer.append(&letter).await {
                    Ok(at) => {
                        record.outcome = "appended";
                        record.appended = Some(at);
                    }
                    Err(e) => {
                        record.outcome = "failed";
                        record.detail = Some(format!("{e:#}"));
                        append_error = Some(e);
                    }
                }
            }
        }
        records.push(record);
    }
    let failed = records.iter().filter(|r| r.failed()).count();
    let report = ReplayReport {
        topic: settings.kafka.topic.clone(),
        dry_run: args.dry_run,
        appended: records.iter().filter(|r| r.outcome == "appended").count(),
        failed,
        records,
    };
    let output = Output::new(&report, replay_text(&report))?;
    if let Some(e) = append_error {
        return Ok(output.fail(anyhow::Error::new(e).context("appending to the events topic")));
    }
    if failed > 0 {
        return Ok(output.fail(anyhow!(
            "{failed} of {} dead letter(s) not replayed; each is listed above with why",
            report.records.len()
        )));
    }
    Ok(output)
}

/// Checks one chosen dead letter: found, from this deployment's projector, decoding now.
/// Fails only on a registry outage.
async fn plan(
    id: DeadLetterId,
    lookup: Lookup,
    events_topic: &str,
    decoder: &EventDecoder,
) -> Result<Planned> {
    let done = |outcome, detail: String, event| {
        Planned::Done(Replayed {
            dead_letter: id.to_string(),
            outcome,
            detail: Some(detail),
            event,
            appended: None,
        })
    };
    let letter = match lookup {
        Lookup::Missing(why) => return Ok(done("not_found", why, None)),
        Lookup::Found(letter) => letter,
    };
    if let Some(why) = letter.replay_refusal(events_topic) {
        return Ok(done("refused", why, None));
    }
    Ok(match letter.record.try_decode(decoder).await? {
        Ok(event) => Planned::Ready(letter, Envelope::of(&event)),
        Err(reason) => done(
            "undecodable",
            format!("it still does not decode ({reason}); fix that first, then replay it"),
            None,
        ),
    })
}

fn replay_text(report: &ReplayReport) -> String {
    let mut text = if report.dry_run {
        format!("dry run: nothing appended to {}", report.topic)
    } else {
        format!("replay into {}", report.topic)
    };
    for r in &report.records {
        let what = r
            .event
            .as_ref()
            .map(|e| format!("{} seq {} of {}", e.kind, e.seq, e.session_id))
            .unwrap_or_default();
        let detail = r.detail.as_deref().unwrap_or_default();
        let outcome = match (r.outcome, &r.appended) {
            (_, Some(at)) => format!("appended at {}:{}", at.partition, at.offset),
            ("would_append", None) => "would append".to_string(),
            // Its detail says what was not found.
            ("not_found", None) => detail.to_string(),
            ("undecodable", None) => format!("not replayed: {detail}"),
            (other, None) => format!("{}: {detail}", other.replace('_', " ")),
        };
        text.push_str(&format!(
            "\n  {:<12} {outcome}{}",
            r.dead_letter,
            if what.is_empty() {
                String::new()
            } else {
                format!("  ({what})")
            }
        ));
    }
    text.push_str(&if report.dry_run {
        format!(
            "\n{} would be appended, {} not",
            report.records.len() - report.failed,
            report.failed
        )
    } else {
        format!(
            "\n{} appended, {} not replayed",
            report.appended, report.failed
        )
    });
    text
}

/// The record key as text on one line (a session id, for a record of sessionlog's producer).
fn key_text(letter: &DeadLetter) -> Option<String> {
    let key = letter.record.key.as_deref()?;
    Some(one_line(&String::from_utf8_lossy(key), 64))
}

fn value_bytes(letter: &DeadLetter) -> usize {
    letter.record.payload.as_ref().map_or(0, Vec::len)
}

/// A reason header on one line (it is a header: anything may be in it).
fn reason_text(reason: Option<&str>) -> String {
    reason.map_or_else(|| "- (no reason header)".into(), |r| one_line(r, 300))
}

fn origin_text(origin: Option<&Origin>) -> String {
    origin.map_or_else(
        || "- (no origin headers)".into(),
        |o| format!("{} {}:{}", o.topic, o.partition, o.offset),
    )
}

/// A record timestamp (ms) as [`timestamp`] prints times, with its age when `now` is given;
/// `-` when it has none or it is beyond what microseconds hold.
fn time_text(timestamp_ms: Option<i64>, now: Option<i64>) -> String {
    timestamp_ms
        .and_then(|ms| ms.checked_mul(1_000))
        .map_or_else(|| "-".into(), |us| timestamp(us, Precision::Millis, now))
}

/// The first `n` bytes as hex pairs, with `…` when there are more.
fn hex_prefix(bytes: &[u8], n: usize) -> String {
    let mut text: Vec<String> = bytes.iter().take(n).map(|b| format!("{b:02x}")).collect();
    if bytes.len() > n {
        text.push("…".into());
    }
    text.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn selections_are_addresses_or_all_never_both_or_neither() {
        let parse = |args: &[&str]| crate::Cli::try_parse_from([&["sessionlog"], args].concat());
        assert!(parse(&["dlq", "replay", "0:1", "2:5"]).is_ok());
        assert!(parse(&["dlq", "replay", "--all", "--dry-run"]).is_ok());
        assert!(parse(&["dlq", "replay", "--all", "--partition", "1"]).is_ok());
        for refused in [
            &["dlq", "replay"][..],
            &["dlq", "replay", "0:1", "--all"],
            &["dlq", "replay", "0:1", "--partition", "1"],
            &["dlq", "replay", "--partition", "1"],
            &["dlq", "replay", "zero:one"],
            &["dlq", "show", "3"],
            &["dlq", "show", "-1:0"],
            &["dlq", "list", "--limit", "0"],
            &["dlq", "list", "--partition", "-2"],
        ] {
            let error = parse(refused).err();
            assert!(
                error.is_some_and(|e| e.kind() != clap::error::ErrorKind::DisplayHelp),
                "{refused:?} is a usage error"
            );
        }
    }

    #[test]
    fn an_undecodable_value_shows_its_first_bytes_only() {
        assert_eq!(hex_prefix(b"\x07 ab", 16), "07 20 61 62");
        let long = [0u8; 40];
        let shown = hex_prefix(&long, PREFIX_BYTES);
        assert_eq!(shown.split(' ').count(), PREFIX_BYTES + 1);
        assert!(shown.ends_with('…'));
        assert_eq!(hex_prefix(b"", 16), "");
    }

    #[test]
    fn times_out_of_range_print_as_a_dash() {
        assert_eq!(time_text(None, None), "-");
        assert_eq!(time_text(Some(i64::MAX), None), "-");
        assert_eq!(time_text(Some(0), None), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            time_text(Some(1_500), Some(61_500_000)),
            "1970-01-01T00:00:01.500Z (1 min ago)"
        );
    }
}
