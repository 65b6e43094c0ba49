//! Retention on the real stack: a session whose early events the brokers deleted is rebuilt
//! from its last checkpoint's stored state and resumed, a claim that would need the deleted
//! start says where to go instead, and `init` reports (and with `--apply` changes) the
//! retention of topics that already exist.

use anyhow::{Context, Result, bail, ensure};
use rdkafka::TopicPartitionList;
use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use sessionlog_log::settings::UNLIMITED;
use sessionlog_log::{PartitionReader, RetentionSettings, topic};
use sessionlog_producer::SessionWriter;
use sessionlog_recovery::{Recovery, StartPoint};
use sessionlog_testkit::TestStack;
use sessionlog_testkit::projector::{event_log, spawn_projector_expiring, store, wait_caught_up};
use std::collections::BTreeMap;
use std::time::Duration;

fn admin(stack: &TestStack) -> Result<AdminClient<DefaultClientContext>> {
    Ok(stack.settings.kafka.client_config().create()?)
}

fn options() -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)))
}

/// Deletes every record of `partition` before `before`, as retention deletes old segments:
/// the partition's log start offset moves to `before`. Returns the new low watermark.
async fn delete_records_before(stack: &TestStack, partition: i32, before: i64) -> Result<i64> {
    let mut offsets = TopicPartitionList::new();
    offsets.add_partition_offset(
        &stack.settings.kafka.topic,
        partition,
        rdkafka::Offset::Offset(before),
    )?;
    let result = admin(stack)?.delete_records(&offsets, &options()).await?;
    let element = result
        .elements()
        .into_iter()
        .next()
        .context("DeleteRecords answered for no partition")?;
    element.error()?;
    match element.offset() {
        rdkafka::Offset::Offset(low) => Ok(low),
        other => bail!("DeleteRecords answered {other:?}"),
    }
}

/// A topic's configuration values, by key.
async fn topic_config(stack: &TestStack, topic: &str) -> Result<BTreeMap<String, String>> {
    let described = admin(stack)?
        .describe_configs(&[ResourceSpecifier::Topic(topic)], &options())
        .await?;
    let resource = match described.into_iter().next() {
        Some(Ok(resource)) => resource,
        other => bail!("describing {topic}: {other:?}"),
    };
    Ok(resource
        .entries
        .into_iter()
        .filter_map(|e| Some((e.name, e.value?)))
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_older_than_retention_is_recovered_from_its_checkpoint_and_resumed() -> Result<()>
{
    let stack = TestStack::new("ret_recover", 1).await?;
    let log = event_log(&stack).await?;
    let (mut writer, started) = SessionWriter::create(log.clone(), "agent", Some("old")).await?;
    writer.user_request("first").await?;
    writer.user_request("second").await?;
    let checkpoint = writer.checkpoint(None).await?;
    writer.user_request("after the checkpoint").await?;
    writer.user_request("and another").await?;
    let session = writer.session_id();
    let before = writer.state().clone();
    drop(writer); // the harness went away; the session waits to be resumed

    let projector = stack.spawn_projector()?;
    let store = store(&stack).await?;
    wait_caught_up(&stack, &store, Duration::from_secs(120)).await?;
    let stored = store
        .latest_verified_checkpoint(session, None)
        .await?
        .context("the projector stored no verified checkpoint")?;
    ensure!(stored.offset == checkpoint.position.offset);

    // Retention deletes the session's start and its checkpoint record: only the stored state
    // of the checkpoint and the events after it remain.
    let partition = checkpoint.position.partition;
    let cut = checkpoint.position.offset + 1;
    ensure!(started.position.offset < cut);
    assert_eq!(delete_records_before(&stack, partition, cut).await?, cut);
    let reader = PartitionReader::new(&stack.settings.kafka, &stack.settings.kafka.topic)?;
    assert_eq!(reader.watermarks(partition).await?.0, cut);

    // A claim that folds the session from the start of its partition cannot; it says where
    // to go instead of calling the session unknown.
    match SessionWriter::prepare_takeover(log.clone(), session, "ingest-harness").await {
        Err(error) => {
            let text = error.to_string();
            assert!(
                text.contains("recover it through the recovery service"),
                "{text}"
            );
            assert!(text.contains(&session.to_string()), "{text}");
        }
        Ok(_) => bail!("a claim from the deleted start must fail"),
    }

    let recovery = Recovery::connect(&stack.settings).await?;
    let rebuilt = recovery.rebuild(session).await?;
    assert_eq!(
        rebuilt.start,
        StartPoint::Checkpoint {
            seq: checkpoint.envelope.seq,
            offset: checkpoint.position.offset
        }
    );
    assert_eq!(rebuilt.state.canonical_json(), before.canonical_json());

    let bundle = recovery.resume(session, "harness-2", Some(4_000)).await?;
    assert_eq!(bundle.epoch, before.epoch + 1);
    let mut writer = bundle.writer.context("resume hands back a writer")?;
    let appended = writer.user_request("after retention").await?;
    // A claim takes no seq of its own: the new event follows the last one before deletion,
    // in the new epoch.
    assert_eq!(appended.envelope.seq, before.last_seq + 1);
    assert_eq!(appended.envelope.writer_epoch, before.epoch + 1);
    assert_eq!(writer.state().last_seq, before.last_seq + 1);

    // The projector folds the claim and the new event onto the state it holds.
    wait_caught_up(&stack, &store, Duration::from_secs(120)).await?;
    let projected = store
        .load_session(session)
        .await?
        .context("projected session")?;
    assert_eq!(
        projected.state.canonical_json(),
        writer.state().canonical_json()
    );
    drop(projector);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn init_reports_retention_that_differs_on_existing_topics_and_apply_changes_it() -> Result<()>
{
    // The test's topics exist already, created with unlimited retention.
    let stack = TestStack::new("ret_init", 1).await?;
    let kafka = &stack.settings.kafka;
    // A value set on the topic that is not ours: `--apply` must keep it.
    let alter = AlterConfig::new(ResourceSpecifier::Topic(&kafka.topic))
        .set("cleanup.policy", "delete")
        .set("retention.ms", "-1")
        .set("retention.bytes", "-1")
        .set("min.insync.replicas", "1")
        .set("max.message.bytes", "2000000");
    for result in admin(&stack)?.alter_configs(&[alter], &options()).await? {
        if let Err(e) = result {
            bail!("setting up the topic: {e:?}");
        }
    }
    let wanted = RetentionSettings {
        retention_ms: 86_400_000,
        dead_letter_retention_ms: 604_800_000,
        ..RetentionSettings::default()
    };

    let report = topic::init_topics(kafka, &wanted, false).await?;
    assert!(report.created.is_empty(), "{report:?}");
    assert!(report.changed.is_empty(), "{report:?}");
    let found: Vec<(&str, &str, Option<&str>, &str)> = report
        .differences
        .iter()
        .map(|d| {
            (
                d.topic.as_str(),
                d.key.as_str(),
                d.actual.as_deref(),
                d.wanted.as_str(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            (kafka.topic.as_str(), "retention.ms", Some("-1"), "86400000"),
            (
                kafka.dead_letter_topic.as_str(),
                "retention.ms",
                Some("-1"),
                "604800000"
            ),
        ]
    );
    // Reporting changed nothing.
    assert_eq!(
        topic_config(&stack, &kafka.topic).await?["retention.ms"],
        "-1"
    );

    // The binary says the same, with the command that fixes each difference.
    let output = stack
        .command(&[])?
        .arg("init")
        .env("SESSIONLOG_RETENTION__RETENTION_MS", "86400000")
        .output()
        .context("running `sessionlog init`")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.success(),
        "sessionlog init failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = format!(
        "topic {}: retention.ms is -1, the settings want 86400000 (retention.retention_ms)",
        kafka.topic
    );
    assert!(stdout.contains(&line), "{stdout}");
    let fix = format!(
        "fix: kafka-configs.sh --bootstrap-server {} --alter --entity-type topics --entity-name {} \
         --add-config retention.ms=86400000",
        kafka.bootstrap, kafka.topic
    );
    assert!(stdout.contains(&fix), "{stdout}");
    assert!(stdout.contains("sessionlog init --apply"), "{stdout}");

    let applied = topic::init_topics(kafka, &wanted, true).await?;
    assert!(applied.differences.is_empty(), "{applied:?}");
    assert_eq!(applied.changed, report.differences);
    let main = topic_config(&stack, &kafka.topic).await?;
    assert_eq!(main["retention.ms"], "86400000");
    assert_eq!(main["retention.bytes"], UNLIMITED.to_string());
    assert_eq!(main["max.message.bytes"], "2000000", "kept by --apply");
    assert_eq!(main["cleanup.policy"], "delete");
    let dead = topic_config(&stack, &kafka.dead_letter_topic).await?;
    assert_eq!(dead["retention.ms"], "604800000");

    // Once applied, there is nothing left to report or change.
    let again = topic::init_topics(kafka, &wanted, false).await?;
    assert!(
        again.differences.is_empty() && again.changed.is_empty(),
        "{again:?}"
    );
    Ok(())
}

/// Seconds an ended session's rows live in the TTL test: long enough to look at them once
/// the projector has caught up, short enough to watch them expire.
const TEST_TTL_SECS: i32 = 15;

/// The TTL left on each row of `session` in `table`, read on `column` (a column every row
/// has): `None` for a row that never expires.
async fn ttls(
    store: &sessionlog_store::ProjectionStore,
    table: &str,
    column: &str,
    session: sessionlog_schemas::SessionId,
) -> Result<Vec<Option<i32>>> {
    let ks = store.keyspace();
    let result = store
        .cql()
        .query_unpaged(
            format!("SELECT TTL({column}) FROM {ks}.{table} WHERE session_id = ?"),
            (session.0,),
        )
        .await?
        .into_rows_result()?;
    Ok(result
        .rows::<(Option<i32>,)>()?
        .map(|row| row.map(|(ttl,)| ttl))
        .collect::<Result<_, _>>()?)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ended_sessions_rows_expire_and_a_running_sessions_do_not() -> Result<()> {
    use sessionlog_schemas::{Content, EffectClass, ResultSource, SessionEvent, TerminalOutcome};
    let stack = TestStack::new("ret_ttl", 1).await?;
    let projector = spawn_projector_expiring(&stack, TEST_TTL_SECS as u64)?;
    let store = store(&stack).await?;
    let log = event_log(&stack).await?;
    let (mut ended, _) = SessionWriter::create(log.clone(), "agent", Some("ends")).await?;
    let (mut running, _) = SessionWriter::create(log.clone(), "agent", Some("runs")).await?;
    ended.user_request("look it up").await?;
    ended.checkpoint(None).await?;
    let call = ended
        .append_with(
            SessionEvent::ToolCallRequested {
                tool: "search".into(),
                arguments: Content::plain("{}"),
                effect: EffectClass::Pure,
                approval_id: None,
            },
            None,
            Some("search-1".into()),
        )
        .await?;
    running.user_request("keep going").await?;
    // These rows are written while the session runs, without a TTL, in an earlier batch:
    // the end must give them one.
    wait_caught_up(&stack, &store, Duration::from_secs(120)).await?;
    let (session, other) = (ended.session_id(), running.session_id());
    assert_eq!(
        ttls(&store, "event_index", "log_offset", session).await?[0],
        None
    );

    ended
        .append_with(
            SessionEvent::ToolCallResult {
                call_seq: call.envelope.seq,
                outcome: sessionlog_schemas::CallOutcome::Succeeded,
                output: Content::plain("found"),
                source: ResultSource::Executed,
                recorded_by: None,
                note: None,
            },
            Some(call.envelope.event_id),
            None,
        )
        .await?;
    ended.close(TerminalOutcome::Completed, None).await?;
    wait_caught_up(&stack, &store, Duration::from_secs(120)).await?;

    let expiring = [
        ("sessions", "status"),
        ("context_view", "applied_offset"),
        ("event_index", "log_offset"),
        ("checkpoints", "state_json"),
        ("trace_spans_by_session", "start_us"),
        ("context_turns", "role"),
    ];
    for (table, column) in expiring {
        let found = ttls(&store, table, column, session).await?;
        ensure!(!found.is_empty(), "{table}: no rows of the ended session");
        for ttl in found {
            ensure!(
                matches!(ttl, Some(t) if t > 0 && t <= TEST_TTL_SECS),
                "{table}: a row of the ended session has TTL {ttl:?}"
            );
        }
        for ttl in ttls(&store, table, column, other).await? {
            ensure!(ttl.is_none(), "{table}: a running session's row expires");
        }
    }

    // And they do expire; the running session stays.
    sessionlog_testkit::wait_for(
        "the ended session's rows to expire",
        Duration::from_secs(TEST_TTL_SECS as u64 + 60),
        || {
            let store = store.clone();
            async move {
                let mut left = 0;
                for (table, column) in expiring {
                    left += ttls(&store, table, column, session).await?.len();
                }
                Ok((left == 0).then_some(()))
            }
        },
    )
    .await?;
    assert!(store.load_session(session).await?.is_none());
    assert!(store.load_session(other).await?.is_some());
    drop(projector);
    Ok(())
}
