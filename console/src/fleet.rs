//! The fleet: what `sessionlog status` knows, read with the same library calls
//! (`topic_span`, `group_status`, the dead-letter listing, the wake component's orphans, the
//! registry and the schema versions this build keeps), and usage by model, agent, tool and day
//! from the projector's rollups (`sessionlog_recovery::usage::usage`, as `GET /v1/usage`), as
//! bar charts drawn on the server in SVG (no script).
//!
//! The deployment's parts (topics, groups, dead letters, orphans, schemas) are shown to the
//! operator role; a dead letter or an orphaned session is listed only to a caller who may see
//! its session's tenant (as the inbox lists orphans), the counts to every operator. Usage is
//! the caller's tenant's.

use crate::Console;
use crate::error::Refused;
use crate::login::Visitor;
use crate::pages::{age, frame};
use axum::extract::{Query, State};
use maud::{Markup, html};
use serde::Deserialize;
use sessionlog_log::Role;
use sessionlog_log::{GroupStatus, Settings, TopicSpan, group_status, topic_span};
use sessionlog_recovery::{UsageBy, UsageLine};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Days of usage shown by default, and at most.
const DEFAULT_DAYS: i64 = 7;
const MAX_DAYS: i64 = 31;
/// Dead letters listed at most.
const DEAD_LETTERS: usize = 50;
/// Bars a chart shows at most (the largest).
const BARS: usize = 12;
/// How long the page waits for each of Kafka's and the registry's answers.
const WITHIN: Duration = Duration::from_secs(5);
/// The width of a chart's bar area, in SVG units.
const CHART_WIDTH: f64 = 360.0;

/// The fleet page's query.
#[derive(Deserialize, Default)]
pub(crate) struct FleetQuery {
    days: Option<String>,
}

/// A part of the page that could not be read, and why; the rest is shown.
type Part<T> = Result<T, String>;

async fn within<T, E: std::fmt::Display>(
    what: &str,
    read: impl std::future::Future<Output = Result<T, E>>,
) -> Part<T> {
    match tokio::time::timeout(WITHIN, read).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("{what} could not be read: {e}")),
        Err(_) => Err(format!("{what} was not read within {WITHIN:?}")),
    }
}

/// What `sessionlog status` reports of the deployment.
struct Deployment {
    topic: Part<TopicSpan>,
    projector: Part<GroupStatus>,
    wake: Part<GroupStatus>,
    wake_topic: Part<TopicSpan>,
    dead_letters: Part<sessionlog_log::dead_letters::Listing>,
    orphans: Part<Vec<(sessionlog_wake::OrphanedSession, String)>>,
    registry: Part<sessionlog_schemas::RegistryAbout>,
}

async fn deployment(console: &Console, visitor: &Visitor) -> Deployment {
    let settings: &Settings = console.recovery.settings();
    let kafka = &settings.kafka;
    let wake_group = sessionlog_wake::wake_group(settings);
    let wake_topic = kafka.wake_topic();
    let dead_letters = async {
        let listing = sessionlog_log::DeadLetters::new(kafka)?;
        listing.list(&[], DEAD_LETTERS).await
    };
    let registry = async {
        settings
            .registry
            .client()
            .map_err(|e| e.to_string())?
            .about()
            .await
            .map_err(|e| e.to_string())
    };
    let (topic, projector, wake, wake_topic, dead_letters, orphans, registry) = tokio::join!(
        within("the events topic", topic_span(kafka, &kafka.topic)),
        within(
            "the projector group",
            group_status(kafka, &kafka.topic, &settings.projector.group_id)
        ),
        within(
            "the wake component's group",
            group_status(kafka, &kafka.topic, &wake_group)
        ),
        within("the wake topic", topic_span(kafka, &wake_topic)),
        within("the dead-letter topic", dead_letters),
        console.orphaned(visitor),
        within("the schema registry", registry),
    );
    let dead_letters = match dead_letters {
        Ok(mut listing) => {
            listing.letters = visible_letters(console, visitor, listing.letters).await;
            Ok(listing)
        }
        Err(why) => Err(why),
    };
    Deployment {
        topic,
        projector,
        wake,
        wake_topic,
        dead_letters,
        orphans,
        registry,
    }
}

/// The dead letters whose session the visitor may see: a letter whose key is no projected
/// session only to a caller of every tenant.
async fn visible_letters(
    console: &Console,
    visitor: &Visitor,
    letters: Vec<sessionlog_log::DeadLetter>,
) -> Vec<sessionlog_log::DeadLetter> {
    if visitor.caller.tenant.is_none() {
        return letters;
    }
    let mut visible = Vec::new();
    for letter in letters {
        let session = letter
            .record
            .key
            .as_deref()
            .and_then(|k| std::str::from_utf8(k).ok())
            .and_then(|k| k.parse::<sessionlog_schemas::SessionId>().ok());
        let Some(session) = session else { continue };
        if let Ok(Some(state)) = console.recovery.store().session_state(session).await
            && visitor.caller.sees_tenant(&state.tenant)
        {
            visible.push(letter);
        }
    }
    visible
}

/// `GET /fleet`.
pub(crate) async fn page(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    Query(query): Query<FleetQuery>,
) -> Result<Markup, Refused> {
    let days = crate::sessions::days(&query.days, DEFAULT_DAYS, MAX_DAYS)?;
    let now = sessionlog_schemas::now_micros();
    let (from, to) = (day(now - (days - 1) * 86_400_000_000), day(now));
    let tenant = visitor.caller.tenant.as_deref();
    let store = console.recovery.store();
    let usage = |by| sessionlog_recovery::usage::usage(store, tenant, &from, &to, by);
    let (by_model, by_agent, by_tool, by_day) = tokio::try_join!(
        usage(UsageBy::Model),
        usage(UsageBy::Agent),
        usage(UsageBy::Tool),
        usage(UsageBy::Day),
    )?;
    let deployment = if visitor.may(Role::Operator) {
        Some(deployment(&console, &visitor).await)
    } else {
        None
    };
    let body = html! {
        @if let Some(d) = &deployment { (deployment_sections(&console, d, now)) }
        @else { p.hint { "The deployment's topics, groups and dead letters are shown to the operator role; below is the usage of your tenant's sessions." } }
        section aria-labelledby="usage" {
            h2 #usage { "Usage from " (from) " to " (to) }
            form.filters method="get" action="/fleet" {
                label for="days" { "Days" }
                input id="days" name="days" type="number" min="1" max=(MAX_DAYS) value=(days);
                button type="submit" { "Show" }
            }
            div.charts {
                (chart("Calls by model", &by_model.lines, false))
                (chart("Calls by agent", &by_agent.lines, false))
                (chart("Calls by tool", &by_tool.lines, false))
                (chart("Calls by day", &by_day.lines, true))
            }
        }
    };
    Ok(frame(Some(&visitor), "Fleet", body))
}

/// `micros` as its UTC day, `YYYY-MM-DD`.
fn day(micros: i64) -> String {
    crate::pages::when(micros).chars().take(10).collect()
}

fn failed(why: &str) -> Markup {
    html! { p.refusal role="alert" { (why) } }
}

fn deployment_sections(console: &Console, d: &Deployment, now: i64) -> Markup {
    let settings = console.recovery.settings();
    html! {
        section aria-labelledby="projector" {
            h2 #projector { "Projector lag" }
            @match (&d.topic, &d.projector) {
                (Err(why), _) | (_, Err(why)) => (failed(why)),
                (Ok(topic), Ok(group)) => {
                    p { "Events topic " code { (topic.topic) } ": " (topic.partitions.len()) " partitions, " (topic.records()) " records. Group " code { (group.group) } " is " (group.state) " with " (group.members.len()) " live instance(s), " (group.total_lag()) " record(s) behind." }
                    @if group.members.is_empty() && group.total_lag() > 0 {
                        p.refusal role="alert" { "No projector runs while records wait: start one (sessionlog project --group " (group.group) ")." }
                    }
                    (lag_table(group, settings.producer.max_unprojected_records))
                }
            }
        }
        section aria-labelledby="dead-letters" {
            h2 #dead-letters { "Dead letters" }
            @match &d.dead_letters {
                Err(why) => (failed(why)),
                Ok(listing) => (dead_letters(listing)),
            }
        }
        section aria-labelledby="wake" {
            h2 #wake { "Wake component and orphaned sessions" }
            @match (&d.wake, &d.wake_topic) {
                (Err(why), _) | (_, Err(why)) => (failed(why)),
                (Ok(group), Ok(topic)) => p {
                    "Group " code { (group.group) } " is " (group.state) " with " (group.members.len()) " live instance(s), " (group.total_lag()) " record(s) behind; wake topic " code { (topic.topic) } @if topic.exists() { " holds " (topic.records()) " wake(s)." } @else { " does not exist (sessionlog init)." }
                },
            }
            @match &d.orphans {
                Err(why) => (failed(why)),
                Ok(orphans) => (orphans_by_reason(orphans, now)),
            }
        }
        section aria-labelledby="schemas" {
            h2 #schemas { "Schema versions" }
            (schemas(settings, &d.registry))
        }
    }
}

fn lag_table(group: &GroupStatus, limit: i64) -> Markup {
    let most = group
        .partitions
        .iter()
        .map(|p| p.lag)
        .max()
        .unwrap_or(0)
        .max(1);
    html! {
        table.lag {
            caption { "Each partition of the events topic; past " (limit) " records behind, its claims and resumes answer 503 projection_behind" }
            thead { tr { th scope="col" { "Partition" } th scope="col" { "Start" } th scope="col" { "End" } th scope="col" { "Committed" } th scope="col" { "Lag" } th scope="col" { "" } } }
            tbody {
                @for p in &group.partitions {
                    tr {
                        td { (p.partition) } td { (p.start) } td { (p.end) }
                        td { (p.committed.map_or_else(|| "-".to_string(), |c| c.to_string())) }
                        td { (p.lag) @if p.lag > limit { " " span.flag { "behind" } } }
                        td { (bar(p.lag as f64 / most as f64, &format!("partition {} lag {}", p.partition, p.lag), p.lag > limit)) }
                    }
                }
            }
        }
    }
}

fn dead_letters(listing: &sessionlog_log::dead_letters::Listing) -> Markup {
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    for letter in &listing.letters {
        *reasons
            .entry(letter.reason.as_deref().unwrap_or("(no reason header)"))
            .or_default() += 1;
    }
    html! {
        p { (listing.span.records()) " dead letter(s) in " code { (listing.span.topic) } "."
            @if listing.span.records() > 0 { " sessionlog dlq list shows each; sessionlog dlq replay puts them back once their cause is fixed." } }
        @if !listing.letters.is_empty() {
            table.reasons {
                caption { "Reasons among the first " (listing.letters.len()) " you may see" }
                thead { tr { th scope="col" { "Reason" } th scope="col" { "Dead letters" } } }
                tbody { @for (reason, n) in &reasons { tr { td.text { (reason) } td { (n) } } } }
            }
            table.dead {
                caption { "The first dead letters, oldest first" }
                thead { tr { th scope="col" { "Where" } th scope="col" { "Session (key)" } th scope="col" { "Origin" } th scope="col" { "Reason" } } }
                tbody {
                    @for l in &listing.letters {
                        tr {
                            td { (l.id.partition) ":" (l.id.offset) }
                            td { code { (l.record.key.as_deref().map(String::from_utf8_lossy).unwrap_or_default()) } }
                            td { @if let Some(o) = &l.origin { (o.topic) " " (o.partition) ":" (o.offset) } @else { "-" } }
                            td.text { (l.reason.as_deref().unwrap_or("-")) }
                        }
                    }
                }
            }
        }
    }
}

fn orphans_by_reason(orphans: &[(sessionlog_wake::OrphanedSession, String)], now: i64) -> Markup {
    // By what each waits for: how many, and the oldest lapse.
    let mut by: BTreeMap<&str, (usize, i64)> = BTreeMap::new();
    for (o, _) in orphans {
        let entry = by.entry(o.waits_for).or_insert((0, i64::MAX));
        entry.0 += 1;
        entry.1 = entry.1.min(o.expired_at);
    }
    html! {
        @if orphans.is_empty() { p.empty { "Every session that has not ended has a live writer." } }
        @else {
            table.orphans {
                caption { "Sessions whose writer lease lapsed, by what they wait for (the inbox lists each)" }
                thead { tr { th scope="col" { "Waits for" } th scope="col" { "Sessions" } th scope="col" { "Oldest lapse" } } }
                tbody { @for (why, (n, oldest)) in &by { tr { td { (why) } td { (n) } td { (age(*oldest, now)) " ago" } } } }
            }
        }
    }
}

fn schemas(settings: &Settings, registry: &Part<sessionlog_schemas::RegistryAbout>) -> Markup {
    let kept = sessionlog_schemas::schema_versions();
    html! {
        p { "This build reads versions "
            (kept.iter().map(|v| v.version.to_string()).collect::<Vec<_>>().join(", "))
            " of the session-event schema and writes version " (sessionlog_schemas::CURRENT_SCHEMA_VERSION)
            ", under subject " code { (sessionlog_schemas::value_subject(&settings.kafka.topic)) } "." }
        @match registry {
            Err(why) => (failed(why)),
            Ok(about) => p {
                "Registry " code { (settings.registry.url) } ": " (about.version.as_deref().unwrap_or("version not reported"))
                ", global compatibility " (about.compatibility.as_deref().unwrap_or("unknown (not a Confluent-compatible API?)")) ". "
                "sessionlog schemas check compares each registered version with this build's."
            },
        }
    }
}

/// A horizontal bar of `share` (0 to 1) of the chart's width, described by `label`.
fn bar(share: f64, label: &str, alarm: bool) -> Markup {
    let width = (share.clamp(0.0, 1.0) * CHART_WIDTH).max(1.0);
    html! {
        svg.bar width=(CHART_WIDTH) height="12" viewBox={ "0 0 " (CHART_WIDTH) " 12" } preserveAspectRatio="none" role="img" aria-label=(label) {
            rect x="0" y="1" width=(format!("{width:.1}")) height="10" class=(if alarm { "failed" } else { "span" }) {}
        }
    }
}

/// A chart of calls per line (the largest [`BARS`], or in order of `key` for days), with
/// tokens and cost beside each bar.
fn chart(title: &str, lines: &[UsageLine], in_key_order: bool) -> Markup {
    let mut shown: Vec<&UsageLine> = lines.iter().collect();
    if in_key_order {
        shown.sort_by(|a, b| a.key.cmp(&b.key));
    } else {
        shown.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.key.cmp(&b.key)));
        shown.truncate(BARS);
    }
    let most = shown.iter().map(|l| l.calls).max().unwrap_or(0).max(1);
    html! {
        figure.chart {
            figcaption { (title) }
            @if shown.is_empty() { p.empty { "No call in these days." } }
            @else {
                table {
                    thead { tr { th scope="col" { "Key" } th scope="col" { "Calls" } th scope="col" { "Failed" } th scope="col" { "Tokens in / out" } th scope="col" { "Cost" } th scope="col" { "" } } }
                    tbody {
                        @for l in &shown {
                            tr {
                                td { (l.key) } td { (l.calls) } td { (l.errors) }
                                td { (l.tokens_in) " / " (l.tokens_out) }
                                td { (crate::session::dollars(l.cost_micros as f64)) }
                                td { (bar(l.calls as f64 / most as f64, &format!("{}: {} calls", l.key, l.calls), false)) }
                            }
                        }
                    }
                }
            }
        }
    }
}
