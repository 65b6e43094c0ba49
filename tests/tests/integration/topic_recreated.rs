//! A topic deleted and created again under the same name is not read through the old one's
//! progress: the projector, ingest and recovery refuse it with what to do, and the documented
//! fix (a fresh keyspace) projects the new topic from its start.

use anyhow::{Context, Result, bail};
use sessionlog_log::topic;
use sessionlog_producer::SessionWriter;
use sessionlog_schemas::{Content, SessionEvent, SessionId};
use sessionlog_store::{Error as StoreError, ProjectionStore};
use sessionlog_testkit::projector::{event_log, store, wait_caught_up};
use sessionlog_testkit::{TestStack, wait_for};
use std::process::Stdio;
use std::time::Duration;

/// Starts a session and appends `events` requests to it; returns its id.
async fn session_of(stack: &TestStack, events: usize) -> Result<SessionId> {
    let (mut writer, _) = SessionWriter::create(event_log(stack).await?, "agent", None).await?;
    for i in 0..events {
        writer
            .append(SessionEvent::UserRequest {
                content: Content::plain(format!("request {i}")),
            })
            .await?;
    }
    Ok(writer.session_id())
}

/// The session's projected last seq in `store`, once it is there.
async fn projected_seq(store: &ProjectionStore, session: SessionId) -> Result<Option<u64>> {
    Ok(store.load_session(session).await?.map(|s| s.state.last_seq))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_recreated_topic_is_refused_and_a_fresh_keyspace_projects_it_from_its_start() -> Result<()>
{
    let stack = TestStack::new("trecreate", 1).await?;
    let live = store(&stack).await?;

    // The old log: 11 records, projected.
    let old = session_of(&stack, 10).await?;
    {
        let _projector = stack.spawn_projector()?;
        wait_caught_up(&stack, &live, Duration::from_secs(90)).await?;
    }
    live.check_topic(&stack.settings.kafka)
        .await
        .context("the topic progress was made on passes")?;

    // Deleted and created again under the same name, then written: 16 records, more than the
    // old progress covers, so offsets alone cannot tell.
    topic::delete_topics(&stack.settings.kafka).await?;
    wait_for(
        "the topic to be created again",
        Duration::from_secs(60),
        || async {
            // Creation fails while the deletion is still going on.
            Ok(topic::ensure_topics(&stack.settings.kafka).await.ok())
        },
    )
    .await?;
    let new = wait_for(
        "a session on the new topic",
        Duration::from_secs(60),
        || async { Ok(session_of(&stack, 15).await.ok()) },
    )
    .await?;

    let refused = live.check_topic(&stack.settings.kafka).await;
    assert!(
        matches!(
            refused,
            Err(StoreError::TopicRecreated { partition: 0, .. })
        ),
        "{refused:?}"
    );
    let opened = ProjectionStore::open_checked(&stack.settings).await;
    assert!(
        matches!(opened, Err(StoreError::TopicRecreated { .. })),
        "ingest and recovery open the projection this way: {:?}",
        opened.err()
    );

    // The projector refuses to start, saying what to do, and applies nothing.
    let mut projector = stack
        .command(&[])?
        .args(["project", "--group", &stack.group])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let status = wait_for("the projector to refuse", Duration::from_secs(60), || {
        let exited = projector.try_wait();
        async move { Ok(exited?) }
    })
    .await;
    let status = match status {
        Ok(status) => status,
        Err(e) => {
            let _ = projector.kill();
            bail!("the projector went on with a recreated topic: {e}");
        }
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(projector.stderr.as_mut().context("stderr")?, &mut stderr)?;
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("deleted and created again") && stderr.contains("SESSIONLOG_CQL__KEYSPACE"),
        "the error says what happened and what to set: {stderr}"
    );
    assert_eq!(
        projected_seq(&live, new).await?,
        None,
        "nothing of the new log applied"
    );
    assert_eq!(projected_seq(&live, old).await?, Some(11));

    // The fix the error gives: a fresh keyspace, into which the new topic projects whole.
    let mut fresh = stack.clone();
    fresh.settings.cql.keyspace = format!("{}_new", stack.settings.cql.keyspace);
    ProjectionStore::migrate(&fresh.settings.cql).await?;
    let fresh_store = store(&fresh).await?;
    let _projector = fresh.spawn_projector()?;
    wait_caught_up(&fresh, &fresh_store, Duration::from_secs(90)).await?;
    assert_eq!(projected_seq(&fresh_store, new).await?, Some(16));
    assert_eq!(projected_seq(&fresh_store, old).await?, None);
    fresh_store
        .check_topic(&fresh.settings.kafka)
        .await
        .context("the fresh keyspace's progress is the new topic's")?;
    Ok(())
}
