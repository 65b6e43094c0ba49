//! Cells an earlier release wrote and this one no longer writes do not outlive the session's
//! next write: the view row's `plan` (a plan's plain text) and `unresolved_calls`, and the
//! session row's `state_digest`. Left in place they would keep a plan's text after the session
//! is erased, and without the TTL an ended session's rows get (review of the compact rows).

use anyhow::{Context, Result};
use sessionlog_producer::SessionWriter;
use sessionlog_testkit::TestStack;
use sessionlog_testkit::projector::{
    event_log, spawn_projector_with, store, wait_projected_through,
};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn cells_an_earlier_release_wrote_are_cleared_by_the_next_write() -> Result<()> {
    let stack = TestStack::new("legacy_cells", 1).await?;
    let live = store(&stack).await?;
    let log = event_log(&stack).await?;
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "h", None).await?;
    writer.user_request("one").await?;
    let session = writer.session_id();
    let applied = {
        let _first = spawn_projector_with(&stack, &[])?;
        wait_projected_through(&live, session, 2, Duration::from_secs(60)).await?
    };

    // What an earlier release's projector left in the rows, at the rows' own timestamp.
    let ks = live.keyspace();
    live.cql()
        .query_unpaged(
            format!(
                "UPDATE {ks}.context_view USING TIMESTAMP ? SET plan = ?, unresolved_calls = ?
                 WHERE session_id = ?"
            ),
            (applied, "1. the old plan", "[]", session.0),
        )
        .await?;
    live.cql()
        .query_unpaged(
            format!(
                "UPDATE {ks}.sessions USING TIMESTAMP ? SET state_digest = ? WHERE session_id = ?"
            ),
            (applied, "00".repeat(32), session.0),
        )
        .await?;

    // This release's projector (a fresh instance, as after an upgrade) writes the session again.
    let mut projector = spawn_projector_with(&stack, &[])?;
    writer.user_request("two").await?;
    wait_projected_through(&live, session, 3, Duration::from_secs(60)).await?;
    let (plan, unresolved): (Option<String>, Option<String>) = live
        .cql()
        .query_unpaged(
            format!("SELECT plan, unresolved_calls FROM {ks}.context_view WHERE session_id = ?"),
            (session.0,),
        )
        .await?
        .into_rows_result()?
        .first_row()?;
    assert_eq!(
        (plan, unresolved),
        (None, None),
        "the view row's legacy cells"
    );
    let (digest,): (Option<String>,) = live
        .cql()
        .query_unpaged(
            format!("SELECT state_digest FROM {ks}.sessions WHERE session_id = ?"),
            (session.0,),
        )
        .await?
        .into_rows_result()?
        .first_row()?;
    assert_eq!(digest, None, "the session row's legacy digest");
    let _ = live
        .load_session(session)
        .await?
        .context("the session's row")?;
    projector.assert_running()
}
