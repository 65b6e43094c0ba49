//! `GET /v1/work` on a `sessionlog serve-recovery` process: a wake written by hand is handed to
//! the worker that asks for its agent's work, with the session taken at the next epoch and a
//! writer token; a wait with no wake answers 204; a duplicate wake of a session taken since is
//! skipped (counted by reason) rather than taken twice; a bad `wait` is a 422.

use anyhow::{Context, Result, ensure};
use reqwest::{Client, StatusCode};
use serde_json::Value;
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_schemas::{SessionId, now_micros};
use sessionlog_testkit::wake::lease_wake;
use sessionlog_testkit::{ServedProcess, TestStack, metric_value, metrics_page, wait_for};
use std::sync::Arc;
use std::time::Duration;

/// `GET /v1/work` with `query`: the status and the body (JSON, or null when empty).
async fn work(http: &Client, base: &str, query: &str) -> Result<(StatusCode, Value)> {
    let response = http.get(format!("{base}/v1/work?{query}")).send().await?;
    let status = response.status();
    let text = response.text().await?;
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).with_context(|| format!("status {status}: {text}"))?
    };
    Ok((status, body))
}

/// The value of `sessionlog_work_skipped_total{reason="<reason>"}` the service reports, and
/// whether the counter has its `# HELP` line.
async fn skipped(http: &Client, base: &str, reason: &str) -> Result<(u64, bool)> {
    let page = metrics_page(http, base).await?;
    let series = format!("sessionlog_work_skipped_total{{reason=\"{reason}\"}}");
    Ok((
        metric_value(&page, &series).unwrap_or(0.0) as u64,
        page.contains("# HELP sessionlog_work_skipped_total "),
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wake_hands_its_session_to_the_worker_of_its_agent_and_an_empty_wait_answers_204()
-> Result<()> {
    let stack = TestStack::new("work_take", 3).await?;
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let recovery = ServedProcess::start(&stack, "serve-recovery").await?;
    let http = sessionlog_testkit::auth::client()?;

    // Bad requests first: nothing is read for them.
    for query in [
        "agent=triage&wait=soon",
        "agent=triage&wait=-1s",
        "agent=triage&wait=1.5s",
        "agent=triage&wait=99999999999999999999999h",
        "wait=1s",
    ] {
        let (status, body) = work(&http, &recovery.base, query).await?;
        ensure!(
            status == StatusCode::UNPROCESSABLE_ENTITY && body["code"] == "invalid_request",
            "{query}: {status} {body}"
        );
    }

    let (writer, _) = SessionWriter::create(Arc::clone(&log), "triage", None).await?;
    let session = writer.session_id();
    ensure!(writer.state().epoch == 1);
    let caused_at = now_micros();
    log.put_wake(&lease_wake(session, "triage", 1, caused_at))
        .await?;

    let (status, body) = work(&http, &recovery.base, "agent=triage&wait=10s&writer=w1").await?;
    ensure!(status == StatusCode::OK, "{status} {body}");
    ensure!(body["state"]["session_id"] == session.to_string(), "{body}");
    ensure!(body["epoch"] == 2, "taken at the next epoch: {body}");
    ensure!(body["state"]["epoch"] == 2, "{body}");
    ensure!(
        body["writer_token"].as_str().is_some_and(|t| !t.is_empty()),
        "a writer token: {body}"
    );
    ensure!(body["next_seq"].as_u64().is_some(), "{body}");
    let woken = &body["wake"];
    ensure!(
        woken["reason"] == "lease_expired"
            && woken["caused_at"] == caused_at
            && woken["epoch"] == 1
            && woken["session_id"] == session.to_string(),
        "{woken}"
    );
    // The writer is the caller's, with the label it gave.
    let claimed_by = body["state"]["writer"].as_str().unwrap_or_default();
    ensure!(claimed_by.ends_with("w1"), "{body}");

    // No wake left: the wait runs out.
    let (status, body) = work(&http, &recovery.base, "agent=triage&wait=1s").await?;
    ensure!(status == StatusCode::NO_CONTENT, "{status} {body}");
    ensure!(body.is_null(), "{body}");
    // Another agent's wakes are not this agent's work.
    let (other, _) = SessionWriter::create(Arc::clone(&log), "billing", None).await?;
    log.put_wake(&lease_wake(other.session_id(), "billing", 1, now_micros()))
        .await?;
    let (status, body) = work(&http, &recovery.base, "agent=triage&wait=2s").await?;
    ensure!(status == StatusCode::NO_CONTENT, "{status} {body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_duplicate_wake_of_a_session_taken_since_is_skipped_not_taken_twice() -> Result<()> {
    let stack = TestStack::new("work_dup", 3).await?;
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let recovery = ServedProcess::start(&stack, "serve-recovery").await?;
    let http = sessionlog_testkit::auth::client()?;

    let (writer, _) = SessionWriter::create(Arc::clone(&log), "dup", None).await?;
    let session = writer.session_id();
    let duplicate = lease_wake(session, "dup", 1, now_micros());
    log.put_wake(&duplicate).await?;
    log.put_wake(&duplicate).await?;

    let (status, body) = work(&http, &recovery.base, "agent=dup&wait=10s").await?;
    ensure!(status == StatusCode::OK, "{status} {body}");
    ensure!(
        body["state"]["session_id"] == session.to_string() && body["epoch"] == 2,
        "{body}"
    );
    let (before, _) = skipped(&http, &recovery.base, "already_taken").await?;
    ensure!(before == 0, "nothing skipped yet: {before}");

    // The second wake names epoch 1; the session is at 2 now: skipped, and no work is left.
    let (status, body) = work(&http, &recovery.base, "agent=dup&wait=5s").await?;
    ensure!(status == StatusCode::NO_CONTENT, "{status} {body}");
    ensure!(
        skipped(&http, &recovery.base, "already_taken").await? == (1, true),
        "the duplicate was counted as already taken, in a described counter"
    );

    // Nobody claimed it a third time: the log's epoch is still the worker's.
    let view = wait_for("the session view", Duration::from_secs(10), || {
        let request = http
            .get(format!("{}/v1/sessions/{session}", recovery.base))
            .send();
        async move {
            Ok(Some(
                request.await?.error_for_status()?.json::<Value>().await?,
            ))
        }
    })
    .await?;
    ensure!(view["rebuilt"]["state"]["epoch"] == 2, "{view}");
    Ok(())
}

/// A client whose credential is `tenant`'s worker's (roles harness and reader).
fn as_tenant(tenant: &str) -> Result<Client> {
    use sessionlog_http::auth::Grant;
    use sessionlog_log::Role;
    let token = sessionlog_testkit::auth::mint(&Grant {
        tenant: Some(tenant.into()),
        ..Grant::new(
            &format!("{tenant}-worker"),
            &[Role::Harness, Role::Reader],
            Duration::from_secs(600),
        )
    })?;
    sessionlog_testkit::auth::client_with(&token)
}

/// A session of `tenant` run by `agent`, woken for its agent's workers.
async fn woken_session(log: &Arc<EventLog>, agent: &str, tenant: &str) -> Result<SessionId> {
    let (writer, _) = SessionWriter::create_new_in(Arc::clone(log), agent, None, tenant).await?;
    let mut woken = lease_wake(writer.session_id(), agent, 1, now_micros());
    woken.tenant = tenant.into();
    log.put_wake(&woken).await?;
    Ok(writer.session_id())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenants_worker_reads_only_its_tenants_wakes_and_never_consumes_anothers() -> Result<()> {
    let stack = TestStack::new("work_tenant", 3).await?;
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let recovery = ServedProcess::start(&stack, "serve-recovery").await?;
    let (acme, globex) = (as_tenant("acme")?, as_tenant("globex")?);
    // One agent name, two tenants' sessions, each woken.
    let mut theirs = Vec::new();
    for tenant in ["globex", "acme"] {
        theirs.push(woken_session(&log, "support", tenant).await?);
    }
    // Acme's worker asks first: it gets acme's session, and globex's wake is left for globex.
    let (status, body) = work(&acme, &recovery.base, "agent=support&wait=10s").await?;
    ensure!(status == StatusCode::OK, "{status} {body}");
    ensure!(
        body["state"]["session_id"] == theirs[1].to_string(),
        "{body}"
    );
    let (status, _) = work(&acme, &recovery.base, "agent=support&wait=1s").await?;
    ensure!(status == StatusCode::NO_CONTENT, "acme has no more work");
    let (status, body) = work(&globex, &recovery.base, "agent=support&wait=10s").await?;
    ensure!(
        status == StatusCode::OK,
        "globex's wake was kept for it: {status} {body}"
    );
    ensure!(
        body["state"]["session_id"] == theirs[0].to_string(),
        "{body}"
    );
    let (other_tenant, _) = skipped(
        &sessionlog_testkit::auth::client()?,
        &recovery.base,
        "other_tenant",
    )
    .await?;
    ensure!(other_tenant == 0, "no wake was read by the wrong tenant");
    Ok(())
}

/// One reader of the wake topic serves every agent's workers, so a tenant's share of agents
/// (`[recovery] work_agents_per_tenant`) is what bounds it: a tenant whose workers wait for as
/// many agents as its share is refused another (503 `too_many_agents`, naming the setting),
/// and another tenant's workers still get their work, as do its own agents'.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_over_its_share_of_agents_is_refused_and_another_tenant_still_gets_work()
-> Result<()> {
    let mut stack = TestStack::new("work_share", 3).await?;
    stack.settings.recovery.work_agents_per_tenant = 2;
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let recovery = ServedProcess::start(&stack, "serve-recovery").await?;
    let (acme, globex) = (as_tenant("acme")?, as_tenant("globex")?);

    // Acme's workers wait for two agents: its share.
    for agent in ["acme-1", "acme-2"] {
        let (status, body) = work(&acme, &recovery.base, &format!("agent={agent}&wait=1s")).await?;
        ensure!(status == StatusCode::NO_CONTENT, "{agent}: {status} {body}");
    }
    let (status, body) = work(&acme, &recovery.base, "agent=acme-3&wait=1s").await?;
    ensure!(
        status == StatusCode::SERVICE_UNAVAILABLE && body["code"] == "too_many_agents",
        "a third agent of acme: {status} {body}"
    );
    ensure!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("work_agents_per_tenant")),
        "the answer names the setting: {body}"
    );

    // Globex's worker still gets its work, and so does acme's for an agent within its share.
    let theirs = woken_session(&log, "globex-1", "globex").await?;
    let (status, body) = work(&globex, &recovery.base, "agent=globex-1&wait=10s").await?;
    ensure!(status == StatusCode::OK, "globex: {status} {body}");
    ensure!(body["state"]["session_id"] == theirs.to_string(), "{body}");
    let ours = woken_session(&log, "acme-1", "acme").await?;
    let (status, body) = work(&acme, &recovery.base, "agent=acme-1&wait=10s").await?;
    ensure!(status == StatusCode::OK, "acme: {status} {body}");
    ensure!(body["state"]["session_id"] == ours.to_string(), "{body}");
    Ok(())
}
