//! The producer library on the real stack: per-session order under concurrency, idempotent
//! retries, the size limit, backpressure, and a clear error when the registry is unreachable.

use anyhow::{Context, Result, bail};
use sessionlog_log::Settings;
use sessionlog_producer::{Appended, Error, EventLog, SessionWriter};
use sessionlog_schemas::{Content, EventEnvelope, SessionEvent, SessionId};
use sessionlog_session::{DUPLICATE_WINDOW, Verdict};
use sessionlog_testkit::TestStack;
use sessionlog_testkit::producer::fold_topic;
use std::collections::HashMap;
use std::sync::Arc;

fn request(text: String) -> SessionEvent {
    SessionEvent::UserRequest {
        content: Content::plain(text),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn per_session_order_holds_with_many_sessions_appended_from_concurrent_tasks() -> Result<()> {
    const TASKS: usize = 6;
    const SESSIONS_PER_TASK: usize = 8;
    const ROUNDS: usize = 25;
    let stack = TestStack::new("porder", 4).await?;
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..TASKS {
        let log = Arc::clone(&log);
        tasks.spawn(async move {
            let mut writers = Vec::new();
            let mut appended: HashMap<SessionId, Vec<Appended>> = HashMap::new();
            for _ in 0..SESSIONS_PER_TASK {
                let (writer, start) =
                    SessionWriter::create(Arc::clone(&log), "order-test", None).await?;
                appended.insert(writer.session_id(), vec![start]);
                writers.push(writer);
            }
            // Every round appends to all of this task's sessions at once: single events and
            // batches, so many sessions' events are in flight together on shared partitions.
            for round in 0..ROUNDS {
                let appends = writers.iter_mut().map(|w| async move {
                    let text = |i: usize| format!("task {task} round {round} event {i}");
                    if round % 3 == 0 {
                        w.append_batch(vec![request(text(0)), request(text(1)), request(text(2))])
                            .await
                    } else {
                        w.append(request(text(0))).await.map(|a| vec![a])
                    }
                });
                for batch in futures::future::try_join_all(appends).await? {
                    for a in batch {
                        appended.entry(a.envelope.session_id).or_default().push(a);
                    }
                }
            }
            Ok::<_, Error>(appended)
        });
    }
    let mut appended: HashMap<SessionId, Vec<Appended>> = HashMap::new();
    while let Some(done) = tasks.join_next().await {
        appended.extend(done??);
    }
    assert_eq!(appended.len(), TASKS * SESSIONS_PER_TASK);

    let histories = fold_topic(&log).await?;
    assert_eq!(
        histories.len(),
        appended.len(),
        "no session more, none less"
    );
    for (session, written) in &appended {
        let history = histories.get(session).context("session in the topic")?;
        assert!(
            history.verdicts.iter().all(|(_, v)| v.is_accepted()),
            "session {session}: every event accepted"
        );
        let expected: Vec<&EventEnvelope> = written.iter().map(|a| &a.envelope).collect();
        assert_eq!(
            history.accepted(),
            expected,
            "session {session}: accepted history"
        );
        let positions: Vec<_> = history.verdicts.iter().map(|(a, _)| a.position).collect();
        let acked: Vec<_> = written.iter().map(|a| a.position).collect();
        assert_eq!(
            positions, acked,
            "session {session}: the acks name the real positions"
        );
        assert_eq!(history.state.last_seq, written.len() as u64);
    }
    log.flush(std::time::Duration::from_secs(10)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_writer_retrying_the_same_envelopes_leaves_no_duplicate_in_the_history() -> Result<()> {
    let stack = TestStack::new("pretry", 2).await?;
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "retry-test", None).await?;
    let session = writer.session_id();
    let batch = writer.envelopes((0..10).map(|i| request(format!("step {i}"))).collect());

    // The first six reach the log, but the "crashed" writer never saw their acks ...
    log.append_batch(&batch[..6]).await?;
    assert_eq!(
        writer.next_seq(),
        2,
        "the writer does not know they were written"
    );
    // ... so it sends the whole batch again, same seqs and event ids, and then one of them again.
    writer.append_envelopes(batch.clone()).await?;
    writer.append_envelope(batch[3].clone()).await?;
    writer.user_request("after the retries").await?;

    let histories = fold_topic(&log).await?;
    let history = &histories[&session];
    let seqs: Vec<u64> = history.accepted().iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=12).collect::<Vec<_>>(),
        "each seq once, in order"
    );
    let ids: Vec<_> = history.accepted()[1..11]
        .iter()
        .map(|e| e.event_id)
        .collect();
    let sent: Vec<_> = batch.iter().map(|e| e.event_id).collect();
    assert_eq!(
        ids, sent,
        "the accepted events are the first writes' envelopes"
    );
    assert_eq!(
        history.count("duplicate"),
        7,
        "six retried plus one repeated"
    );
    assert_eq!(history.verdicts.len(), 19);
    assert_eq!(
        history.state.canonical_json(),
        writer.state().canonical_json(),
        "the writer's fold equals the log's"
    );

    // Another harness claims the session; the old writer's replay of the same envelopes is
    // still recognised as duplicates, and anything new it writes is a zombie write.
    let (_, claim) = SessionWriter::claim(Arc::clone(&log), session, "restarted").await?;
    let stale = writer.envelopes(vec![request("from the old epoch".into())]);
    log.append_batch(&batch).await?;
    log.append_batch(&stale).await?;
    let histories = fold_topic(&log).await?;
    let after = &histories[&session];
    assert_eq!(after.count("duplicate"), 7 + batch.len());
    assert_eq!(after.count("zombie"), 1);
    assert_eq!(
        after.state.last_seq, 12,
        "the accepted history did not change"
    );
    assert_eq!(after.state.epoch, claim.envelope.writer_epoch);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_event_over_the_size_limit_fails_before_it_is_sent() -> Result<()> {
    let mut stack = TestStack::new("psize", 1).await?;
    stack.settings.producer.max_event_bytes = 64 * 1024;
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "size-test", None).await?;
    let big = request("x".repeat(100 * 1024));

    match writer.append(big.clone()).await {
        Err(Error::TooLarge { size, limit }) => {
            assert_eq!(limit, 64 * 1024);
            assert!(size > 100 * 1024, "size {size} is the encoded size");
        }
        other => bail!("expected TooLarge, got {other:?}"),
    }
    // In a batch, one oversized event keeps the whole batch from being sent.
    let batch = writer
        .append_batch(vec![request("small".into()), big])
        .await;
    assert!(matches!(batch, Err(Error::TooLarge { .. })), "{batch:?}");
    assert_eq!(writer.next_seq(), 2);

    let histories = fold_topic(&log).await?;
    assert_eq!(
        histories[&writer.session_id()].verdicts.len(),
        1,
        "only the start event reached the log"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_longer_than_the_duplicate_window_is_refused_whole() -> Result<()> {
    let stack = TestStack::new("pbatch", 1).await?;
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "batch-test", None).await?;
    let events = |n: usize| (0..n).map(|i| request(format!("e{i}"))).collect::<Vec<_>>();

    // A retry of a longer batch could not be told from a conflicting write, so it never starts.
    match writer.append_batch(events(DUPLICATE_WINDOW + 1)).await {
        Err(Error::BatchTooLong { events, limit }) => {
            assert_eq!((events, limit), (DUPLICATE_WINDOW + 1, DUPLICATE_WINDOW));
        }
        other => bail!("expected BatchTooLong, got {other:?}"),
    }
    assert_eq!(writer.next_seq(), 2);
    // Exactly the window is accepted, and a retry of all of it is a set of duplicates.
    let envelopes = writer.envelopes(events(DUPLICATE_WINDOW));
    writer.append_envelopes(envelopes.clone()).await?;
    writer.append_envelopes(envelopes).await?;

    let histories = fold_topic(&log).await?;
    let verdicts = &histories[&writer.session_id()].verdicts;
    assert_eq!(verdicts.len(), 1 + 2 * DUPLICATE_WINDOW);
    let duplicates = verdicts
        .iter()
        .filter(|(_, v)| *v == Verdict::Duplicate)
        .count();
    assert_eq!(
        duplicates, DUPLICATE_WINDOW,
        "the whole retried batch is recognised"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_in_flight_window_refuses_the_non_waiting_append() -> Result<()> {
    let mut stack = TestStack::new("pbackp", 1).await?;
    stack.settings.producer.max_in_flight = 1;
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (mut writer, _) =
        SessionWriter::create(Arc::clone(&log), "backpressure-test", None).await?;
    // The session's data key is made and cached by a first sealed event, so sealing the next
    // ones needs no round trip and an append reaches the in-flight window on its first poll.
    writer.append(request("warm-up".into())).await?;
    let envelopes = writer.envelopes(vec![request("a".into()), request("b".into())]);

    // Polled once, the first append has taken the only slot and waits for its ack.
    let mut first = Box::pin(log.append(&envelopes[0]));
    assert!(futures::poll!(&mut first).is_pending());
    assert_eq!(log.in_flight(), 1);
    match log.try_append(&envelopes[1]).await {
        Err(Error::Backpressure {
            limit: 1,
            wanted: 1,
        }) => {}
        other => bail!("expected Backpressure, got {other:?}"),
    }
    first.await?;
    assert_eq!(log.in_flight(), 0);
    log.try_append(&envelopes[1]).await?;

    let histories = fold_topic(&log).await?;
    let history = &histories[&writer.session_id()];
    assert_eq!(
        history.state.last_seq, 4,
        "the refused event was not sent twice"
    );
    assert!(
        history
            .verdicts
            .iter()
            .all(|(_, v)| *v == Verdict::Accepted)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_registry_is_a_clear_error_at_start_up() -> Result<()> {
    let mut settings = Settings::load(None)?;
    // Nothing listens on the discard port: the connection is refused at once.
    settings.registry.url = "http://127.0.0.1:9/apis/ccompat/v7".into();
    match EventLog::from_settings(&settings).await {
        Err(e @ Error::RegistryUnavailable { .. }) => {
            let message = e.to_string();
            assert!(
                message.contains("http://127.0.0.1:9/apis/ccompat/v7"),
                "{message}"
            );
            assert!(message.contains("unreachable"), "{message}");
        }
        Err(other) => bail!("expected RegistryUnavailable, got {other:?}"),
        Ok(_) => bail!("connected without a registry"),
    }
    Ok(())
}
