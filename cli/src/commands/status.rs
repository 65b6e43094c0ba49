//! `sessionlog status`: the events topic, each projector group's lag and live instances, the
//! dead-letter depth, the registered schemas and the store, and whether all of it is healthy.
//!
//! The facts come from the libraries (`log` for Kafka, `store` for CQL, `schemas list` for the
//! registry); this module only judges them ([`problems`]) and prints them.

use super::schemas;
use crate::args::{Globals, parse_session};
use crate::output::Output;
use anyhow::{Result, anyhow};
use serde::Serialize;
use sessionlog_log::{GroupStatus, Settings, TopicSpan, group_status, topic_span};
use sessionlog_recovery::LeaseStatus;
use sessionlog_schemas::SessionId;
use sessionlog_store::ProjectionStore;

/// What `status` gathered: the facts, then the problems found in them.
#[derive(Debug, Serialize)]
pub struct Status {
    /// The events topic and its partitions.
    pub topic: TopicSpan,
    /// The dead-letter topic and its partitions.
    pub dead_letter_topic: TopicSpan,
    /// Records in the dead-letter topic: end minus start over its partitions.
    pub dead_letters: i64,
    /// The wake topic (`<topic>-wake`), which the wake component writes for workers.
    pub wake_topic: TopicSpan,
    /// The wake component's group on the events topic: its live instances and lag.
    pub wake_group: GroupStatus,
    /// Each projector group asked about.
    pub groups: Vec<GroupStatus>,
    /// The schema versions registered for the events subject, and the level.
    pub schemas: schemas::Report,
    /// The projection keyspace.
    pub store: StoreHealth,
    /// Records of a partition past its projector's position beyond which claims, cold appends
    /// and resumes answer 503 `projection_behind` (`[producer] max_unprojected_records`).
    pub max_unprojected_records: i64,
    /// Whether nothing is wrong.
    pub healthy: bool,
    /// What is wrong, each with its fix.
    pub problems: Vec<Problem>,
}

/// Where the projection keyspace stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreHealth {
    /// The CQL nodes.
    pub nodes: String,
    /// The keyspace.
    pub keyspace: String,
    /// `migrated`, `missing` or `outdated`.
    pub state: &'static str,
    /// What the store said when it is not `migrated`.
    pub detail: Option<String>,
}

/// Something unhealthy and what fixes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// What is wrong.
    pub problem: String,
    /// The command or setting that fixes it.
    pub fix: String,
}

/// The arguments of `sessionlog status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A session to report on instead of the deployment.
    session: Option<String>,
    /// A projector consumer group to report on; repeat for several (default:
    /// `[projector] group_id`, the group `sessionlog project` joins).
    #[arg(long = "group")]
    groups: Vec<String>,
}

/// Runs `sessionlog status`, or `sessionlog status SESSION`.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    match args.session {
        Some(session) => run_session(&globals.settings, parse_session(&session)?).await,
        None => run_deployment(&globals.settings, args.groups).await,
    }
}

/// The deployment's status; it fails (exit 1) when something is unhealthy. A server that
/// cannot be reached fails the command with its error (exit 3).
async fn run_deployment(settings: &Settings, groups: Vec<String>) -> Result<Output> {
    let status = gather(settings, groups).await?;
    let output = Output::new(&status, human(&status))?;
    if !status.healthy {
        return Ok(output.fail(anyhow!(
            "{} problem(s); each is listed with its fix above",
            status.problems.len()
        )));
    }
    Ok(output)
}

/// One session as `sessionlog status SESSION` reports it.
#[derive(Debug, Serialize)]
pub struct SessionStatus {
    /// The session.
    pub session_id: SessionId,
    /// Its status, as the fold has it (`running`, `paused`, `completed`, ...).
    pub status: String,
    /// Its current writer epoch.
    pub epoch: u64,
    /// Its writer lease, if a writer holds one.
    pub lease: Option<LeaseStatus>,
    /// When its pause lapses and it wants its harness again, RFC 3339; absent unless it is
    /// paused with an end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused_until: Option<String>,
}

/// Runs `sessionlog status SESSION`: the session rebuilt from the log, and its writer lease.
async fn run_session(settings: &Settings, session: SessionId) -> Result<Output> {
    let recovery = sessionlog_recovery::Recovery::connect_reader(settings).await?;
    let rebuilt = recovery.rebuild(session).await?;
    let lease = recovery.lease(session).await?;
    let epoch = rebuilt.state.epoch;
    let status = SessionStatus {
        session_id: session,
        status: rebuilt.state.status().as_str().to_string(),
        epoch,
        lease: lease.map(|l| LeaseStatus::of(l, epoch, sessionlog_schemas::now_micros())),
        paused_until: rebuilt
            .state
            .paused_until
            .map(|at| crate::when::timestamp(at, crate::when::Precision::Seconds, None)),
    };
    Output::new(&status, session_text(&status))
}

/// [`SessionStatus`] for a person.
fn session_text(status: &SessionStatus) -> String {
    let lease = match &status.lease {
        None => "lease: none (no writer holds one: never taken, released, or leases are off)"
            .to_string(),
        Some(lease) => {
            let state = if lease.live {
                "live"
            } else if lease.epoch != status.epoch {
                "not live: a fenced epoch's"
            } else {
                "not live: expired"
            };
            format!(
                "lease: held by {} at epoch {}, renewed {}, expires {} ({state})",
                lease.writer, lease.epoch, lease.renewed_at, lease.expires_at
            )
        }
    };
    let until = match &status.paused_until {
        Some(until) => format!(" until {until}"),
        None => String::new(),
    };
    format!(
        "session {}: {}{until}, epoch {}\n{lease}",
        status.session_id, status.status, status.epoch
    )
}

async fn gather(settings: &Settings, groups: Vec<String>) -> Result<Status> {
    let groups = if groups.is_empty() {
        vec![settings.projector.group_id.clone()]
    } else {
        groups
    };
    let kafka = &settings.kafka;
    let topic = topic_span(kafka, &kafka.topic).await?;
    let dead_letter_topic = topic_span(kafka, &kafka.dead_letter_topic).await?;
    let wake_topic = topic_span(kafka, &kafka.wake_topic()).await?;
    let wake_group =
        group_status(kafka, &kafka.topic, &sessionlog_wake::wake_group(settings)).await?;
    let mut group_statuses = Vec::with_capacity(groups.len());
    for group in &groups {
        group_statuses.push(group_status(kafka, &kafka.topic, group).await?);
    }
    let schemas = schemas::report(settings).await?;
    let store = store_health(settings).await?;
    let mut status = Status {
        dead_letters: dead_letter_topic.records(),
        topic,
        dead_letter_topic,
        wake_topic,
        wake_group,
        groups: group_statuses,
        schemas,
        store,
        max_unprojected_records: settings.producer.max_unprojected_records,
        healthy: true,
        problems: Vec::new(),
    };
    status.problems = problems(&status);
    status.healthy = status.problems.is_empty();
    Ok(status)
}

/// Opens the keyspace read-only as every reading command does: a missing or outdated keyspace
/// is a finding, a store that cannot be reached an error.
pub(crate) async fn store_health(settings: &Settings) -> Result<StoreHealth> {
    use sessionlog_store::Error as E;
    let (state, detail) = match ProjectionStore::open(&settings.cql).await {
        Ok(_) => ("migrated", None),
        Err(e @ E::NoKeyspace { .. }) => ("missing", Some(e.to_string())),
        Err(e @ E::SchemaBehind { .. }) => ("outdated", Some(e.to_string())),
        Err(e) => return Err(e.into()),
    };
    Ok(StoreHealth {
        nodes: settings.cql.nodes.clone(),
        keyspace: settings.cql.keyspace.clone(),
        state,
        detail,
    })
}

/// The health rules over the gathered facts: the events topic missing, a group with lag and no
/// live instance, dead letters, schema drift (as `schemas check` finds it), and a keyspace
/// missing or outdated.
pub fn problems(status: &Status) -> Vec<Problem> {
    let mut found = Vec::new();
    if !status.topic.exists() {
        found.push(Problem {
            problem: format!("the events topic {} does not exist", status.topic.topic),
            fix: "sessionlog init (or set kafka.topic, SESSIONLOG_KAFKA__TOPIC)".into(),
        });
    }
    if status.topic.exists() && !status.wake_topic.exists() {
        found.push(Problem {
            problem: format!(
                "the wake topic {} does not exist: no session can be handed to a worker",
                status.wake_topic.topic
            ),
            fix: "sessionlog init".into(),
        });
    }
    // A group that never ran has no progress to lag behind: only a wake component that ran and
    // stopped is a problem (sessions whose harness dies wait for a person meanwhile).
    let wake = &status.wake_group;
    if wake.members.is_empty()
        && wake.partitions.iter().any(|p| p.committed.is_some())
        && wake.total_lag() > 0
    {
        found.push(Problem {
            problem: format!(
                "the wake component's group {} is {} record(s) behind {} and has no live instance",
                wake.group,
                wake.total_lag(),
                status.topic.topic
            ),
            fix: "start one: sessionlog wake".into(),
        });
    }
    for group in &status.groups {
        let lag = group.total_lag();
        if group.members.is_empty() && lag > 0 {
            found.push(Problem {
                problem: format!(
                    "group {} is {lag} record(s) behind {} and has no live instance",
                    group.group, status.topic.topic
                ),
                fix: format!(
                    "start a projector: sessionlog project --group {}",
                    group.group
                ),
            });
        }
        let limit = status.max_unprojected_records;
        for p in group.partitions.iter().filter(|p| p.lag > limit) {
            found.push(Problem {
                problem: format!(
                    "partition {} is {} records ahead of group {}: claims, cold appends and \
                     resumes of its sessions answer 503 projection_behind (limit {limit})",
                    p.partition, p.lag, group.group
                ),
                fix: format!(
                    "wait for the projector, or start more (sessionlog project --group {}); \
                     producer.max_unprojected_records (SESSIONLOG_PRODUCER__MAX_UNPROJECTED_RECORDS) \
                     raises the limit",
                    group.group
                ),
            });
        }
    }
    if status.dead_letters > 0 {
        found.push(Problem {
            problem: format!(
                "{} dead letter(s) in {}",
                status.dead_letters, status.dead_letter_topic.topic
            ),
            fix: format!(
                "sessionlog dlq list shows each with why the projector refused it; fix the cause, \
                 then sessionlog dlq replay puts them back into {} (they expire after \
                 retention.dead_letter_retention_ms, or delete them with \
                 kafka-delete-records.sh on {})",
                status.topic.topic, status.dead_letter_topic.topic
            ),
        });
    }
    found.extend(status.schemas.drift.iter().map(|d| Problem {
        problem: format!("schema drift: {}", d.problem),
        fix: d.fix.clone(),
    }));
    if status.store.state != "migrated" {
        found.push(Problem {
            problem: format!(
                "keyspace {} is {}{}",
                status.store.keyspace,
                status.store.state,
                status
                    .store
                    .detail
                    .as_deref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            ),
            fix: "sessionlog init (or set cql.keyspace, SESSIONLOG_CQL__KEYSPACE)".into(),
        });
    }
    found
}

fn human(status: &Status) -> String {
    let mut text = String::new();
    let topic = |span: &TopicSpan, what: &str| {
        if span.exists() {
            format!(
                "{what:<18} {} ({} partitions, {} records)\n",
                span.topic,
                span.partitions.len(),
                span.records()
            )
        } else {
            format!("{what:<18} {} (does not exist)\n", span.topic)
        }
    };
    text.push_str(&topic(&status.topic, "topic"));
    text.push_str(&topic(&status.dead_letter_topic, "dead-letter topic"));
    text.push_str(&format!("{:<18} {}\n", "dead letters", status.dead_letters));
    text.push_str(&topic(&status.wake_topic, "wake topic"));
    text.push_str(&format!(
        "{:<18} {} ({}): {} live instance(s), lag {}\n",
        "wake component",
        status.wake_group.group,
        status.wake_group.state,
        status.wake_group.members.len(),
        status.wake_group.total_lag()
    ));
    for group in &status.groups {
        text.push_str(&format!(
            "\ngroup {} ({}): {} live instance(s), lag {} (claims refuse past {} per partition)\n",
            group.group,
            group.state,
            group.members.len(),
            group.total_lag(),
            status.max_unprojected_records
        ));
        text.push_str(&format!(
            "  {:<9} {:>10} {:>10} {:>10} {:>8}\n",
            "partition", "start", "end", "committed", "lag"
        ));
        for p in &group.partitions {
            text.push_str(&format!(
                "  {:<9} {:>10} {:>10} {:>10} {:>8}\n",
                p.partition,
                p.start,
                p.end,
                p.committed.map_or_else(|| "-".into(), |c| c.to_string()),
                p.lag
            ));
        }
        for m in &group.members {
            text.push_str(&format!(
                "  instance {} ({} at {})\n",
                m.member_id, m.client_id, m.host
            ));
        }
    }
    text.push('\n');
    text.push_str(&schemas::versions_table(&status.schemas));
    text.push('\n');
    text.push_str(&format!(
        "\nstore {} keyspace {}: {}\n",
        status.store.nodes, status.store.keyspace, status.store.state
    ));
    if status.healthy {
        text.push_str("\nhealthy");
    } else {
        text.push_str(&format!(
            "\nunhealthy: {} problem(s)",
            status.problems.len()
        ));
        for p in &status.problems {
            text.push_str(&format!("\n  {}\n    fix: {}", p.problem, p.fix));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionlog_log::{GroupMember, PartitionLag, PartitionSpan};

    #[test]
    fn a_sessions_status_names_its_lease_holder_expiry_and_liveness() {
        let lease = |live, epoch| LeaseStatus {
            writer: "h1".into(),
            epoch,
            renewed_at: "2026-01-01T00:00:00Z".into(),
            expires_at: "2026-01-01T00:00:15Z".into(),
            live,
        };
        let mut status = SessionStatus {
            session_id: SessionId::new(),
            status: "running".into(),
            epoch: 2,
            lease: Some(lease(true, 2)),
            paused_until: None,
        };
        let text = session_text(&status);
        assert!(text.ends_with(
            "lease: held by h1 at epoch 2, renewed 2026-01-01T00:00:00Z, expires \
             2026-01-01T00:00:15Z (live)"
        ));
        assert!(text.contains(": running, epoch 2\n"), "{text}");
        status.lease = Some(lease(false, 2));
        assert!(session_text(&status).ends_with("(not live: expired)"));
        status.lease = Some(lease(false, 1));
        assert!(session_text(&status).ends_with("(not live: a fenced epoch's)"));
        status.lease = None;
        assert!(session_text(&status).contains("lease: none"));
        // A pause with an end says when it lapses.
        status.status = "paused".into();
        status.paused_until = Some("2026-12-05T09:00:00Z".into());
        let text = session_text(&status);
        assert!(
            text.contains(": paused until 2026-12-05T09:00:00Z, epoch 2\n"),
            "{text}"
        );
    }

    fn span(topic: &str, ends: &[i64]) -> TopicSpan {
        TopicSpan {
            topic: topic.into(),
            partitions: ends
                .iter()
                .enumerate()
                .map(|(p, end)| PartitionSpan {
                    partition: p as i32,
                    start: 0,
                    end: *end,
                })
                .collect(),
        }
    }

    fn group(lags: &[i64], members: usize) -> GroupStatus {
        GroupStatus {
            group: "g".into(),
            state: if members > 0 { "Stable" } else { "Empty" }.into(),
            members: (0..members)
                .map(|i| GroupMember {
                    member_id: format!("m{i}"),
                    client_id: "rdkafka".into(),
                    host: "/127.0.0.1".into(),
                })
                .collect(),
            partitions: lags
                .iter()
                .enumerate()
                .map(|(p, lag)| PartitionLag {
                    partition: p as i32,
                    start: 0,
                    end: 10,
                    committed: Some(10 - lag),
                    lag: *lag,
                })
                .collect(),
        }
    }

    fn healthy() -> Status {
        Status {
            topic: span("t", &[10, 10]),
            dead_letter_topic: span("t-dlq", &[0, 0]),
            dead_letters: 0,
            wake_topic: span("t-wake", &[0, 0]),
            wake_group: GroupStatus {
                group: "sessionlog-wake-t".into(),
                state: "Dead".into(),
                members: Vec::new(),
                partitions: Vec::new(),
            },
            groups: vec![group(&[0, 0], 1)],
            schemas: schemas::Report {
                registry: "http://r".into(),
                subject: "t-value".into(),
                compatibility: Some("BACKWARD_TRANSITIVE".into()),
                compatibility_source: Some("subject"),
                versions: Vec::new(),
                drift: Vec::new(),
            },
            store: StoreHealth {
                nodes: "n".into(),
                keyspace: "k".into(),
                state: "migrated",
                detail: None,
            },
            max_unprojected_records: 5,
            healthy: true,
            problems: Vec::new(),
        }
    }

    #[test]
    fn a_caught_up_group_with_an_instance_and_nothing_else_wrong_is_healthy() {
        assert_eq!(problems(&healthy()), Vec::new());
        // No instance is fine while nothing is behind; lag is fine while one runs.
        let mut idle = healthy();
        idle.groups = vec![group(&[0, 0], 0), group(&[3, 0], 2)];
        assert_eq!(problems(&idle), Vec::new());
    }

    #[test]
    fn a_partition_past_the_unprojected_limit_says_claims_are_refused_and_what_fixes_it() {
        let mut behind = healthy();
        behind.groups = vec![group(&[5, 6], 1)];
        let found = problems(&behind);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].problem.contains("partition 1 is 6 records"),
            "{found:?}"
        );
        assert!(found[0].problem.contains("projection_behind"), "{found:?}");
        assert!(
            found[0].fix.contains("max_unprojected_records"),
            "{found:?}"
        );
    }

    #[test]
    fn a_missing_wake_topic_and_a_stopped_wake_component_are_problems_a_never_run_one_is_not() {
        let mut status = healthy();
        status.wake_topic = span("t-wake", &[]);
        let found = problems(&status);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0]
                .problem
                .contains("wake topic t-wake does not exist")
        );
        assert_eq!(found[0].fix, "sessionlog init");

        // Never ran: no progress, so its lag is not a problem.
        let mut never = healthy();
        never.wake_group = GroupStatus {
            group: "sessionlog-wake-t".into(),
            ..group(&[0, 0], 0)
        };
        never.wake_group.partitions.iter_mut().for_each(|p| {
            p.committed = None;
            p.lag = 10;
        });
        assert_eq!(problems(&never), Vec::new());

        // Ran, stopped, and fell behind.
        let mut stopped = healthy();
        stopped.wake_group = GroupStatus {
            group: "sessionlog-wake-t".into(),
            ..group(&[4, 0], 0)
        };
        let found = problems(&stopped);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].problem.contains("4 record(s) behind"), "{found:?}");
        assert_eq!(found[0].fix, "start one: sessionlog wake");
    }

    #[test]
    fn lag_without_a_live_instance_names_the_group_and_the_command() {
        let mut status = healthy();
        status.groups = vec![group(&[2, 5], 0)];
        let found = problems(&status);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].problem.contains("7 record(s) behind"), "{found:?}");
        assert_eq!(
            found[0].fix,
            "start a projector: sessionlog project --group g"
        );
    }

    #[test]
    fn dead_letters_drift_and_the_keyspace_are_each_a_problem_with_a_fix() {
        let mut status = healthy();
        status.dead_letters = 4;
        status.schemas.drift = vec![schemas::Drift {
            problem: "the compatibility level of t-value is BACKWARD".into(),
            fix: "sessionlog init".into(),
        }];
        status.store.state = "outdated";
        status.topic = span("t", &[]);
        let found = problems(&status);
        let fixes: Vec<&str> = found.iter().map(|p| p.fix.as_str()).collect();
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(found[0].problem.contains("does not exist"), "{found:?}");
        assert!(found[1].problem.contains("4 dead letter(s) in t-dlq"));
        assert!(
            fixes[1].starts_with("sessionlog dlq list") && fixes[1].contains("dlq replay"),
            "{found:?}"
        );
        assert!(found[2].problem.starts_with("schema drift: "));
        assert_eq!(fixes[2], "sessionlog init");
        assert!(found[3].problem.contains("keyspace k is outdated"));
        assert!(fixes[3].starts_with("sessionlog init"));
    }
}
