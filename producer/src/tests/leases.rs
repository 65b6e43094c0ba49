//! Leases over the in-memory lease topic: held at the writer's epoch, released at close, and
//! left alone by a writer that learnt it was fenced.

use super::{process_with, started, topic};
use crate::{Error, SessionWriter};
use sessionlog_schemas::TerminalOutcome;
use std::time::Duration;

#[tokio::test]
async fn a_writers_lease_names_it_and_its_epoch_and_is_released_at_close() {
    let topic = topic();
    let log = process_with(&topic, |log| log.with_lease_ttl(Duration::from_secs(60)));
    let mut writer = started(&log).await;
    let session = writer.session_id();
    let held = writer.hold_lease("harness-1").await.expect("written");
    let lease = topic.lease(session).expect("on the lease topic");
    assert_eq!(held.as_ref(), Some(&lease));
    assert_eq!((lease.writer.as_str(), lease.epoch), ("harness-1", 1));
    writer
        .close(TerminalOutcome::Completed, None)
        .await
        .expect("closed");
    assert_eq!(
        topic.lease(session),
        None,
        "released with the session's end"
    );
}

#[tokio::test]
async fn a_fenced_writer_leaves_the_new_writers_lease_standing() {
    let topic = topic();
    let with_leases = |log: crate::EventLog| log.with_lease_ttl(Duration::from_secs(60));
    let (here, there) = (
        process_with(&topic, with_leases),
        process_with(&topic, with_leases),
    );
    let mut old = started(&here).await;
    let session = old.session_id();
    old.hold_lease("old").await.expect("written");
    let (mut new, _) = SessionWriter::claim(there, session, "new")
        .await
        .expect("claimed");
    new.hold_lease("new").await.expect("written");
    let closed = old.close(TerminalOutcome::Completed, None).await;
    assert!(matches!(closed, Err(Error::Fenced { .. })), "{closed:?}");
    let lease = topic.lease(session).expect("the new writer's lease stands");
    assert_eq!((lease.writer.as_str(), lease.epoch), ("new", 2));
}
