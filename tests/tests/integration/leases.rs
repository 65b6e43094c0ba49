//! Writer leases on the real stack: a writer's lease is visible with its writer, epoch and
//! expiry while it runs, renewed, released at close; a writer gone without closing leaves a
//! lease that stops being live after its TTL; over HTTP, a lease for a stale epoch is refused.

use anyhow::{Context, Result, bail, ensure};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sessionlog_log::Lease;
use sessionlog_log::lease::read_lease;
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_schemas::{SessionId, TerminalOutcome, now_micros};
use sessionlog_testkit::ingest::IngestInstance;
use sessionlog_testkit::recovery::{Step, ToolService, run_harness_until};
use sessionlog_testkit::{ServedProcess, TestStack, metric_value, metrics_page};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Short enough for a test to watch a lease lapse, long enough for renewals every 500 ms.
const TTL_MS: u64 = 1_500;

async fn stack(name: &str) -> Result<TestStack> {
    let mut stack = TestStack::new(name, 3).await?;
    stack.settings.lease.ttl_ms = TTL_MS;
    Ok(stack)
}

async fn lease_of(stack: &TestStack, session: SessionId) -> Result<Option<Lease>> {
    let kafka = &stack.settings.kafka;
    Ok(read_lease(kafka, session, kafka.partitions).await?)
}

/// Reads the session's lease until `done` holds of it, for at most `limit`.
async fn lease_until(
    stack: &TestStack,
    session: SessionId,
    limit: Duration,
    what: &str,
    done: impl Fn(&Option<Lease>) -> bool,
) -> Result<Option<Lease>> {
    let deadline = Instant::now() + limit;
    loop {
        let lease = lease_of(stack, session).await?;
        if done(&lease) {
            return Ok(lease);
        }
        if Instant::now() > deadline {
            bail!("{what} within {limit:?}; the lease is {lease:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_writers_lease_is_renewed_while_it_runs_and_released_at_close() -> Result<()> {
    let stack = stack("lease_run").await?;
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "agent", None).await?;
    let session = writer.session_id();
    let before = now_micros();
    let held = writer.hold_lease("harness-1").await?.context("leases on")?;
    ensure!(writer.holds_lease());

    let first = lease_of(&stack, session)
        .await?
        .context("a lease while it runs")?;
    // A renewal (every third of the TTL) may land before this read on a loaded machine: the
    // lease read is the one held, or a renewal of it by the same writer at the same epoch.
    ensure!(
        first == held
            || ((&first.writer, first.epoch) == (&held.writer, held.epoch)
                && first.renewed_at > held.renewed_at),
        "{first:?} is neither {held:?} nor a renewal of it"
    );
    ensure!((first.writer.as_str(), first.epoch) == ("harness-1", 1));
    ensure!(first.renewed_at >= before);
    ensure!(first.expires_at == first.renewed_at + 1_000 * TTL_MS as i64);
    ensure!(first.is_live(now_micros()));

    // Renewed every third of the TTL: the expiry moves forward while the writer runs.
    let renewed = lease_until(&stack, session, Duration::from_secs(10), "a renewal", |l| {
        l.as_ref().is_some_and(|l| l.expires_at > first.expires_at)
    })
    .await?
    .context("renewed")?;
    ensure!((renewed.writer.as_str(), renewed.epoch) == ("harness-1", 1));

    // Readers show it: the recovery service's session view, and `sessionlog status SESSION`.
    let recovery = ServedProcess::start(&stack, "serve-recovery").await?;
    let view: Value = sessionlog_testkit::auth::client()?
        .get(format!("{}/v1/sessions/{session}", recovery.base))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let lease = &view["lease"];
    ensure!(
        lease["writer"] == "harness-1" && lease["epoch"] == 1 && lease["live"] == true,
        "{lease}"
    );
    ensure!(
        lease["expires_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    let out = stack.sessionlog(&["status", &session.to_string(), "--json"])?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: Value = serde_json::from_slice(&out.stdout)?;
    ensure!(
        status["status"] == "running"
            && status["lease"]["writer"] == "harness-1"
            && status["lease"]["live"] == true,
        "{status}"
    );
    let out = stack.sessionlog(&["status", &session.to_string()])?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        text.contains("lease: held by harness-1 at epoch 1"),
        "{text}"
    );

    writer.close(TerminalOutcome::Completed, None).await?;
    ensure!(!writer.holds_lease());
    ensure!(
        lease_of(&stack, session).await?.is_none(),
        "released at close"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_writer_gone_without_closing_leaves_a_lease_that_lapses_after_its_ttl() -> Result<()> {
    let stack = stack("lease_gone").await?;
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "agent", None).await?;
    let session = writer.session_id();
    writer.hold_lease("doomed").await?;
    // The harness's task dies mid-run (aborted: no close, no release), as a crash would end it.
    let (ready, running) = tokio::sync::oneshot::channel();
    let harness = tokio::spawn(async move {
        let _writer = writer;
        let _ = ready.send(());
        std::future::pending::<()>().await;
    });
    running.await?;
    harness.abort();
    let _ = harness.await;

    let left = lease_of(&stack, session)
        .await?
        .context("the lease is left")?;
    ensure!(left.writer == "doomed");
    // Not renewed any more: once its expiry passes it is not live, and it stays as it was.
    let wait = Duration::from_micros((left.expires_at - now_micros()).max(0) as u64);
    tokio::time::sleep(wait + Duration::from_millis(TTL_MS / 3 + 200)).await;
    let after = lease_of(&stack, session).await?.context("still there")?;
    ensure!(after == left || after.renewed_at <= left.renewed_at + 1_000 * TTL_MS as i64 / 3);
    ensure!(!after.is_live(now_micros()), "lapsed: {after:?}");
    let again = lease_until(&stack, session, Duration::from_secs(1), "", |_| true).await?;
    ensure!(again == Some(after), "no renewal after the writer was gone");
    Ok(())
}

/// A session whose writer (named "old", through the returned log) holds a lease, taken over
/// by another process's writer ("new", epoch 2) that holds its own.
async fn taken_over(stack: &TestStack) -> Result<(Arc<EventLog>, SessionWriter, SessionWriter)> {
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (mut old, _) = SessionWriter::create(Arc::clone(&log), "agent", None).await?;
    old.hold_lease("old").await?;
    let other = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (mut new, _) = SessionWriter::claim(other, old.session_id(), "new").await?;
    let held = new.hold_lease("new").await?.context("leases on")?;
    ensure!(held.epoch == 2, "{held:?}");
    Ok((log, old, new))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fenced_writer_stops_renewing_and_the_new_writers_lease_stands() -> Result<()> {
    let stack = stack("lease_fenced").await?;
    // Another process takes over and holds its own lease (kept renewing to the end).
    let (_log, mut old, _new) = taken_over(&stack).await?;
    let session = old.session_id();
    // The old writer learns it was fenced at its next confirmed append.
    let fenced = old.checkpoint(None).await;
    ensure!(
        matches!(fenced, Err(sessionlog_producer::Error::Fenced { .. })),
        "{fenced:?}"
    );
    ensure!(!old.holds_lease(), "a fenced writer stops renewing");
    let lease = lease_until(
        &stack,
        session,
        Duration::from_secs(5),
        "the new lease",
        |l| l.as_ref().is_some_and(|l| l.epoch == 2),
    )
    .await?
    .context("held")?;
    ensure!(lease.writer == "new");
    // Dropping the fenced writer releases nothing: the new writer's lease stands.
    drop(old);
    let renewed = lease_until(&stack, session, Duration::from_secs(5), "a renewal", |l| {
        l.as_ref().is_some_and(|l| l.expires_at > lease.expires_at)
    })
    .await?
    .context("renewed")?;
    ensure!((renewed.writer.as_str(), renewed.epoch) == ("new", 2));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn over_http_a_lease_is_renewed_for_the_current_epoch_only_and_released() -> Result<()> {
    let stack = stack("lease_http").await?;
    let ingest = IngestInstance::start(&stack).await?;
    let (status, created) = ingest
        .post("/v1/sessions", json!({"agent": "py-harness"}))
        .await?;
    ensure!(status == StatusCode::CREATED, "{status} {created}");
    let id = created["session_id"].as_str().context("id")?.to_string();
    let session: SessionId = serde_json::from_value(Value::String(id.clone()))?;
    let first_token = created["writer_token"]
        .as_str()
        .context("token")?
        .to_string();

    let path = format!("/v1/sessions/{id}/lease");
    let (status, lease) = ingest.post(&path, json!({"epoch": 1})).await?;
    ensure!(status == StatusCode::OK, "{status} {lease}");
    ensure!(
        lease["writer"] == "py-harness" && lease["epoch"] == 1,
        "{lease}"
    );
    ensure!(lease["ttl_ms"] == TTL_MS, "{lease}");
    let held = lease_of(&stack, session).await?.context("written")?;
    ensure!(held.expires_at == lease["expires_at"].as_i64().context("expiry")?);

    // Another harness takes over: the first one's epoch is stale, and its renewal refused.
    let (status, claimed) = ingest
        .post(
            &format!("/v1/sessions/{id}/claim"),
            json!({"writer": "second"}),
        )
        .await?;
    ensure!(status == StatusCode::OK, "{status} {claimed}");
    let (status, refused) = ingest
        .post_with_token(&path, json!({"epoch": 1}), Some(&first_token))
        .await?;
    ensure!(status == StatusCode::CONFLICT, "{status} {refused}");
    ensure!(refused["code"] == "fenced", "{refused}");
    ensure!(
        lease_of(&stack, session)
            .await?
            .is_some_and(|l| l.epoch == 1),
        "nothing written for the stale epoch"
    );
    let (status, lease) = ingest
        .post(&path, json!({"epoch": 2, "writer": "second"}))
        .await?;
    ensure!(status == StatusCode::OK, "{status} {lease}");
    ensure!(lease["epoch"] == 2, "{lease}");

    // Released by the current writer: gone.
    let token = sessionlog_testkit::ingest::writer_token(&id).context("the claim's token")?;
    let response = reqwest_client()?
        .delete(format!("{}{path}?epoch=2", ingest.base))
        .header(sessionlog_ingest::WRITER_TOKEN_HEADER, token)
        .send()
        .await?;
    ensure!(
        response.status() == StatusCode::NO_CONTENT,
        "{}",
        response.text().await?
    );
    ensure!(lease_of(&stack, session).await?.is_none(), "released");

    // Once the session ended, nobody runs it: a renewal is refused and writes nothing.
    let (status, ended) = ingest
        .post(
            &format!("/v1/sessions/{id}/close"),
            json!({"epoch": 2, "outcome": "Completed"}),
        )
        .await?;
    ensure!(status == StatusCode::OK, "{status} {ended}");
    let (status, refused) = ingest.post(&path, json!({"epoch": 2})).await?;
    ensure!(status == StatusCode::CONFLICT, "{status} {refused}");
    ensure!(refused["code"] == "session_ended", "{refused}");
    ensure!(
        lease_of(&stack, session).await?.is_none(),
        "no lease after the end"
    );
    Ok(())
}

fn reqwest_client() -> Result<reqwest::Client> {
    sessionlog_testkit::auth::client()
}

/// The value of the metric `name` (no labels) on a service's `/metrics` page.
async fn metric(http: &reqwest::Client, base: &str, name: &str) -> Result<f64> {
    let page = metrics_page(http, base).await?;
    metric_value(&page, name).with_context(|| format!("no {name} on {base}/metrics:\n{page}"))
}

/// The value of the counter `name` (no labels) on a service's `/metrics` page: 0 until the
/// service first counts one (a counter is rendered once it exists).
async fn counter(http: &reqwest::Client, base: &str, name: &str) -> Result<f64> {
    Ok(metric_value(&metrics_page(http, base).await?, name).unwrap_or(0.0))
}

/// POSTs `body` as JSON to `base` + `path` presenting `token` as the writer token.
async fn post(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    body: Value,
    token: Option<&str>,
) -> Result<(StatusCode, Value)> {
    let mut request = http.post(format!("{base}{path}")).json(&body);
    if let Some(token) = token {
        request = request.header(sessionlog_ingest::WRITER_TOKEN_HEADER, token);
    }
    let response = request.send().await?;
    Ok((response.status(), response.json().await?))
}

/// An HTTP harness renews its lease every third of the TTL, so 10,000 of them make 2,000
/// renewals a second: a renewal at the session's current epoch is judged by what the ingest
/// instance already knows (its writer of the session, and its tail of the log, which sees
/// every claim), not by reading the session's partition each time. A renewal at an epoch a
/// claim fenced, from any process, is still refused.
#[tokio::test(flavor = "multi_thread")]
async fn renewing_a_lease_over_http_does_not_read_the_log_per_renewal() -> Result<()> {
    const CATCH_UPS: &str = "sessionlog_ingest_catch_ups_total";
    const RENEWALS: usize = 20;
    let stack = stack("lease_renewals").await?;
    let ingest = ServedProcess::start(&stack, "ingest").await?;
    let (http, base) = (reqwest_client()?, ingest.base.as_str());
    let (status, created) = post(&http, base, "/v1/sessions", json!({"agent": "py"}), None).await?;
    ensure!(status == StatusCode::CREATED, "{status} {created}");
    let id = created["session_id"].as_str().context("id")?.to_string();
    let session: SessionId = serde_json::from_value(Value::String(id.clone()))?;
    let token = created["writer_token"]
        .as_str()
        .context("token")?
        .to_string();
    let path = format!("/v1/sessions/{id}/lease");

    let (status, lease) = post(&http, base, &path, json!({"epoch": 1}), Some(&token)).await?;
    ensure!(status == StatusCode::OK, "{status} {lease}");
    let before = counter(&http, base, CATCH_UPS).await?;
    for renewal in 0..RENEWALS {
        let (status, lease) = post(&http, base, &path, json!({"epoch": 1}), Some(&token)).await?;
        ensure!(
            status == StatusCode::OK && lease["epoch"] == 1,
            "renewal {renewal}: {status} {lease}"
        );
    }
    let read = counter(&http, base, CATCH_UPS).await? - before;
    ensure!(
        read == 0.0,
        "{RENEWALS} renewals of a live session read the log {read} times"
    );

    // Another process claims the session: the instance learns of it from its tail, a moment
    // after the claim is acknowledged, and refuses the old epoch's renewals from then on.
    let other = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (second, _) = SessionWriter::claim(other, session, "second").await?;
    let deadline = Instant::now() + Duration::from_secs(5);
    let refused = loop {
        let (status, answer) = post(&http, base, &path, json!({"epoch": 1}), Some(&token)).await?;
        if status == StatusCode::CONFLICT {
            break answer;
        }
        ensure!(status == StatusCode::OK, "{status} {answer}");
        ensure!(
            Instant::now() < deadline,
            "a fenced epoch's renewal still accepted after 5 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    ensure!(refused["code"] == "fenced", "{refused}");
    let (status, refused) = post(&http, base, &path, json!({"epoch": 1}), Some(&token)).await?;
    ensure!(
        status == StatusCode::CONFLICT && refused["code"] == "fenced",
        "{status} {refused}"
    );
    let new_token = second.token().context("the claim's token")?.as_str();
    let (status, lease) = post(
        &http,
        base,
        &path,
        json!({"epoch": 2, "writer": "second"}),
        Some(new_token),
    )
    .await?;
    ensure!(
        status == StatusCode::OK && lease["epoch"] == 2,
        "{status} {lease}"
    );
    // The caller's subject prefixes a holder named on its behalf.
    let holder = lease["writer"].as_str().context("holder")?;
    ensure!(holder.ends_with("second"), "{lease}");
    ensure!(
        lease_of(&stack, session)
            .await?
            .is_some_and(|l| l.epoch == 2 && l.writer == holder),
        "the new epoch's lease is written"
    );
    Ok(())
}

/// The lease `GET /v1/sessions/{id}` shows (null when there is none).
async fn shown_lease(http: &reqwest::Client, base: &str, session: SessionId) -> Result<Value> {
    let view: Value = http
        .get(format!("{base}/v1/sessions/{session}"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(view["lease"].clone())
}

/// A session view shows the lease, so every `GET /v1/sessions/{id}` reads it: a read must
/// borrow one of the process's readers of the lease topic and trust a topic check made once,
/// not make a consumer (a client, its threads, a connection per broker) and a metadata round
/// trip each time. Reused readers must still see what was written since their last read.
#[tokio::test(flavor = "multi_thread")]
async fn reading_leases_per_request_makes_no_consumer_and_no_topic_check_per_read() -> Result<()> {
    const READERS: &str = "sessionlog_recovery_lease_readers_made_total";
    const CHECKS: &str = "sessionlog_recovery_lease_topic_checks_total";
    let stack = stack("lease_reads").await?;
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "agent", None).await?;
    let session = writer.session_id();
    writer.hold_lease("harness-1").await?.context("leases on")?;
    let recovery = ServedProcess::start(&stack, "serve-recovery").await?;
    let (http, base) = (reqwest_client()?, recovery.base.as_str());

    let lease = shown_lease(&http, base, session).await?;
    ensure!(
        lease["writer"] == "harness-1" && lease["live"] == true,
        "{lease}"
    );
    let (readers, checks) = (
        metric(&http, base, READERS).await?,
        metric(&http, base, CHECKS).await?,
    );
    ensure!(
        readers >= 1.0 && checks >= 1.0,
        "readers {readers}, checks {checks}"
    );
    for read in 0..20 {
        let lease = shown_lease(&http, base, session).await?;
        ensure!(
            lease["writer"] == "harness-1" && lease["live"] == true,
            "read {read}: {lease}"
        );
    }
    let made = metric(&http, base, READERS).await? - readers;
    let checked = metric(&http, base, CHECKS).await? - checks;
    ensure!(
        made == 0.0,
        "20 more lease reads made {made} more consumers"
    );
    ensure!(
        checked == 0.0,
        "20 more lease reads checked the topic {checked} more times"
    );

    // What was written since is read: another holder's lease, then its release at close.
    writer.hold_lease("harness-2").await?.context("leases on")?;
    let lease = shown_lease(&http, base, session).await?;
    ensure!(
        lease["writer"] == "harness-2" && lease["epoch"] == 1,
        "{lease}"
    );
    writer.close(TerminalOutcome::Completed, None).await?;
    let lease = shown_lease(&http, base, session).await?;
    ensure!(lease.is_null(), "released at close, yet shown: {lease}");
    ensure!(
        metric(&http, base, READERS).await? == readers,
        "no consumer made since"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_harness_killed_with_sigkill_leaves_a_lease_that_stops_being_live_after_its_ttl()
-> Result<()> {
    let stack = stack("lease_killed").await?;
    let service = ToolService::start(&["deploy"]).await?;
    let bin = env!("CARGO_BIN_EXE_tool_harness");
    // The harness holds a lease, reaches its tool call, and is killed there (kill -9).
    let killed = run_harness_until(
        bin,
        &stack,
        &service,
        "deploy",
        "idempotent",
        Step::BeforeCall,
    )
    .await?;
    let left = lease_of(&stack, killed.session)
        .await?
        .context("a killed harness's lease is left behind")?;
    ensure!((left.writer.as_str(), left.epoch) == ("tool-harness", 1));
    // Nobody renews it: it stops being live at its expiry, at most a TTL after the kill.
    let lapsed = lease_until(
        &stack,
        killed.session,
        Duration::from_millis(3 * TTL_MS),
        "the lease to lapse",
        |l| l.as_ref().is_some_and(|l| !l.is_live(now_micros())),
    )
    .await?
    .context("still there")?;
    ensure!(lapsed.expires_at <= left.expires_at + 1_000 * TTL_MS as i64 / 3);
    Ok(())
}

/// The release race: a writer decides to release its lease (the log shows no later epoch
/// yet), another process claims the session and holds its own lease, and the first writer's
/// release reaches the lease topic only after that lease. The release names the epoch it
/// releases: it does not hide the successor's lease, which readers still show as held.
#[tokio::test(flavor = "multi_thread")]
async fn a_release_landing_after_the_successors_lease_does_not_hide_it() -> Result<()> {
    let stack = stack("lease_release_race").await?;
    let (log, old, mut new) = taken_over(&stack).await?;
    let session = old.session_id();
    // The old writer's release, decided before the claim, lands now.
    drop(old);
    log.release_lease(session, 1, "old").await?;
    let lease = lease_of(&stack, session)
        .await?
        .context("the successor's lease is hidden by the old writer's release")?;
    ensure!(
        (lease.writer.as_str(), lease.epoch) == ("new", 2),
        "{lease:?}"
    );
    ensure!(lease.is_live(now_micros()), "{lease:?}");
    // Released by its holder, it is gone; a renewal of the old epoch landing after that (a
    // fenced writer that has not learnt it yet) does not take the session back.
    new.release_lease().await?;
    ensure!(lease_of(&stack, session).await?.is_none(), "released");
    let late =
        Lease::renewed(session, "old", 1, now_micros(), Duration::from_secs(60)).context("fits")?;
    log.put_lease(&late).await?;
    let shown = lease_of(&stack, session).await?;
    ensure!(
        shown.is_none(),
        "a fenced writer's renewal shown: {shown:?}"
    );
    Ok(())
}
