//! A stored session row the projector cannot read is never silent: its partition stalls (the
//! fold cannot go on without the session's state), `/health/ready` answers 503 naming the
//! session, and `sessionlog_projector_corrupt_rows_total` counts it; once the row is repaired
//! the projector goes on and is ready again.
//!
//! Before: a `CorruptRow` was retried forever with only a log line, and `/health` said the
//! store was down.

use anyhow::{Context, Result};
use reqwest::StatusCode;
use sessionlog_producer::SessionWriter;
use sessionlog_testkit::projector::{
    event_log, spawn_projector_with, store, wait_projected_through,
};
use sessionlog_testkit::{TestStack, free_address, wait_for};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn a_corrupt_session_row_is_reported_counted_and_survived() -> Result<()> {
    let stack = TestStack::new("corrupt", 1).await?;
    let live = store(&stack).await?;
    let log = event_log(&stack).await?;
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "h", None).await?;
    writer.user_request("one").await?;
    let session = writer.session_id();
    {
        let _first = spawn_projector_with(&stack, &[])?;
        wait_projected_through(&live, session, 2, Duration::from_secs(60)).await?;
    }

    // Rows are written `USING TIMESTAMP` the offset they applied: the garbling and the repair
    // get timestamps above the row's and below the next event's, which other sessions' events
    // push further along the partition.
    let applied = live
        .load_session(session)
        .await?
        .context("the session's row")?
        .applied_offset;
    let (mut other, _) = SessionWriter::create(Arc::clone(&log), "h", None).await?;
    for i in 0..5 {
        other.user_request(&format!("other {i}")).await?;
    }
    // The row's state, as it is, then garbled in place.
    let select = format!(
        "SELECT state_json FROM {}.sessions WHERE session_id = ?",
        live.keyspace()
    );
    let (state_json,): (Option<String>,) = live
        .cql()
        .query_unpaged(select, (session.0,))
        .await?
        .into_rows_result()?
        .first_row()?;
    let update = format!(
        "UPDATE {}.sessions USING TIMESTAMP ? SET state_json = ? WHERE session_id = ?",
        live.keyspace()
    );
    live.cql()
        .query_unpaged(update.clone(), (applied + 1, "{not a state", session.0))
        .await?;
    writer.user_request("two").await?;

    let listen = free_address()?;
    let mut projector = spawn_projector_with(&stack, &["--listen", &listen])?;
    let http = reqwest::Client::new();
    let ready = format!("http://{listen}/health/ready");
    let report = wait_for(
        "/health/ready to name the unreadable row",
        Duration::from_secs(60),
        || {
            let (http, ready) = (http.clone(), ready.clone());
            async move {
                let Ok(response) = http.get(&ready).send().await else {
                    return Ok(None);
                };
                let status = response.status();
                let body = response.text().await?;
                Ok((status == StatusCode::SERVICE_UNAVAILABLE
                    && body.contains(&session.to_string()))
                .then_some(body))
            }
        },
    )
    .await?;
    assert!(report.contains("cannot read"), "{report}");
    let metrics = http
        .get(format!("http://{listen}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    let counted = metrics
        .lines()
        .find(|l| l.starts_with("sessionlog_projector_corrupt_rows_total"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|n| n.parse::<f64>().ok())
        .context("the corrupt-row counter")?;
    assert!(counted >= 1.0, "{metrics}");

    // Repaired, the projector goes on from where it stalled.
    live.cql()
        .query_unpaged(
            update,
            (
                applied + 2,
                state_json.context("a stored state")?,
                session.0,
            ),
        )
        .await?;
    wait_projected_through(&live, session, 3, Duration::from_secs(120)).await?;
    wait_for("/health/ready to be 200 again", Duration::from_secs(60), || {
        let (http, ready) = (http.clone(), ready.clone());
        async move { Ok((http.get(&ready).send().await?.status() == StatusCode::OK).then_some(())) }
    })
    .await?;
    projector.assert_running()
}
