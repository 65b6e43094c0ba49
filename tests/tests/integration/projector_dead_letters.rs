//! Records that cannot join a session's history land where they should — the dead-letter
//! topic (undecodable) or `rejected_events` (the fold said no) — while valid events keep
//! flowing; and checkpoint verification catches a wrong declared digest.

use anyhow::{Context, Result};
use sessionlog_producer::SessionWriter;
use sessionlog_schemas::{SessionEvent, SessionId, frame};
use sessionlog_testkit::projector::{
    dead_letters, envelope, event_log, send_raw, store, wait_caught_up,
};
use sessionlog_testkit::{TestStack, wait_for};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn bad_records_are_dead_lettered_or_rejected_and_valid_events_keep_flowing() -> Result<()> {
    let stack = TestStack::new("pdlq", 2).await?;
    let mut projector = stack.spawn_projector()?;
    let log = event_log(&stack).await?;
    let store = store(&stack).await?;

    let (mut valid, _) = SessionWriter::create(log.clone(), "agent", Some("valid")).await?;
    valid.user_request("before the bad records").await?;

    // Undecodable: not Confluent-framed at all, and framed with a schema id nobody registered.
    let garbage_key = SessionId::new().to_string();
    let (garbage_partition, garbage_offset) =
        send_raw(&stack, &garbage_key, b"\x07 this is not avro").await?;
    let (unknown_partition, unknown_offset) =
        send_raw(&stack, &garbage_key, &frame(987_654_321, b"\x02\x04")).await?;

    // A zombie: epoch 2 claims the session, then the epoch-1 writer appends.
    let (mut fenced, _) = SessionWriter::create(log.clone(), "agent", Some("zombie")).await?;
    let zombie_session = fenced.session_id();
    fenced.user_request("as epoch 1").await?;
    let claim = envelope(
        zombie_session,
        3,
        2,
        SessionEvent::WriterClaimed {
            writer: "new-harness".into(),
            writer_token_sha256: None,
        },
    );
    log.append(&claim).await?;
    let zombie = envelope(
        zombie_session,
        3,
        1,
        SessionEvent::UserRequest {
            content: sessionlog_schemas::Content::plain("late write of the fenced harness"),
        },
    );
    let zombie_position = log.append(&zombie).await?;

    // A gap: seq 5 after seq 1.
    let (gapped, _) = SessionWriter::create(log.clone(), "agent", Some("gap")).await?;
    let gap = envelope(
        gapped.session_id(),
        5,
        1,
        SessionEvent::UserRequest {
            content: sessionlog_schemas::Content::plain("skipped ahead"),
        },
    );
    log.append(&gap).await?;

    // Valid events after all of it still reach the projection.
    valid.user_request("after the bad records").await?;
    let last_seq = valid.state().last_seq;
    let session = valid.session_id();
    wait_for(
        "the valid session to keep flowing",
        Duration::from_secs(60),
        || {
            let store = store.clone();
            async move {
                Ok(store
                    .load_session(session)
                    .await?
                    .filter(|p| p.state.last_seq >= last_seq))
            }
        },
    )
    .await?;
    wait_caught_up(&stack, &store, Duration::from_secs(60)).await?;
    projector.assert_running()?;

    let letters = dead_letters(&stack).await?;
    assert_eq!(
        letters.len(),
        2,
        "exactly the two undecodable records: {letters:?}"
    );
    for (partition, offset) in [
        (garbage_partition, garbage_offset),
        (unknown_partition, unknown_offset),
    ] {
        let letter = letters
            .iter()
            .find(|h| {
                h.get("sessionlog.origin.offset") == Some(&offset.to_string())
                    && h.get("sessionlog.origin.partition") == Some(&partition.to_string())
            })
            .with_context(|| format!("no dead letter for {partition}:{offset}: {letters:?}"))?;
        assert_eq!(
            letter.get("sessionlog.origin.topic"),
            Some(&stack.settings.kafka.topic)
        );
        assert!(
            letter
                .get("sessionlog.reason")
                .is_some_and(|r| !r.is_empty())
        );
    }
    let unknown = letters
        .iter()
        .find(|h| h.get("sessionlog.origin.offset") == Some(&unknown_offset.to_string()))
        .and_then(|h| h.get("sessionlog.reason"))
        .context("reason of the unknown schema id")?;
    assert!(
        unknown.contains("987654321"),
        "reason names the schema id: {unknown}"
    );

    let rejected = |session: SessionId| {
        let store = store.clone();
        async move {
            let rows: Vec<(i64, String, String)> = store
                .rejected_events(session)
                .await?
                .into_iter()
                .map(|r| (r.log_offset, r.label, r.reason))
                .collect();
            Ok::<_, anyhow::Error>(rows)
        }
    };
    let zombies = rejected(zombie_session).await?;
    assert_eq!(zombies.len(), 1, "{zombies:?}");
    assert_eq!(zombies[0].0, zombie_position.offset);
    assert_eq!(zombies[0].1, "zombie");
    let gaps = rejected(gapped.session_id()).await?;
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert_eq!(gaps[0].1, "gap");
    assert!(gaps[0].2.contains("expected seq 2, got 5"), "{}", gaps[0].2);

    // The zombie's session moved on to epoch 2 without its write.
    let projected = store
        .load_session(zombie_session)
        .await?
        .context("zombie session projected")?;
    assert_eq!(projected.state.epoch, 2);
    assert_eq!(projected.state.last_seq, 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn checkpoint_verification_catches_a_wrong_declared_digest() -> Result<()> {
    let stack = TestStack::new("pckpt", 1).await?;
    let _projector = stack.spawn_projector()?;
    let log = event_log(&stack).await?;
    let store = store(&stack).await?;

    let (mut writer, _) = SessionWriter::create(log.clone(), "agent", None).await?;
    writer.user_request("work").await?;
    let good = writer.checkpoint(None).await?;
    let session = writer.session_id();
    let bad = envelope(
        session,
        writer.next_seq(),
        1,
        SessionEvent::Checkpoint {
            state_digest: "0".repeat(64),
            workspace_revision: None,
        },
    );
    log.append(&bad).await?;

    let rows = wait_for(
        "both checkpoints to be projected",
        Duration::from_secs(60),
        || {
            let store = store.clone();
            async move {
                let rows: Vec<(i64, String, String, bool)> = store
                    .checkpoints(session)
                    .await?
                    .into_iter()
                    .map(|r| (r.seq, r.declared_digest, r.computed_digest, r.verified))
                    .collect();
                Ok((rows.len() == 2).then_some(rows))
            }
        },
    )
    .await?;
    let by_seq = |seq: u64| rows.iter().find(|r| r.0 == seq as i64);
    let good_row = by_seq(good.envelope.seq).context("good checkpoint row")?;
    assert!(good_row.3, "the writer's own digest verifies: {good_row:?}");
    assert_eq!(good_row.1, good_row.2);
    let bad_row = by_seq(bad.seq).context("bad checkpoint row")?;
    assert!(!bad_row.3, "a wrong digest must not verify: {bad_row:?}");
    assert_eq!(bad_row.1, "0".repeat(64));
    assert_ne!(bad_row.1, bad_row.2);
    Ok(())
}
