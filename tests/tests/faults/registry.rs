//! Health that tells the truth: with the schema registry stopped, the services that need it
//! answer 503 on `/health/ready` (and `/health`), naming the registry, while `/health/live`
//! stays 200; when it is back, they are ready again.
//!
//! One test in this file on purpose: it stops the shared registry, which no other test of this
//! binary may see (the faults binary runs them one at a time).

use anyhow::{Context, Result};
use reqwest::StatusCode;
use serde_json::Value;
use sessionlog_recovery::Recovery;
use sessionlog_testkit::ingest::IngestInstance;
use sessionlog_testkit::projector::spawn_projector_with;
use sessionlog_testkit::{TestStack, repo_root, wait_for};
use std::time::Duration;

/// Starts the registry again however the test ends.
struct RestartRegistry;

impl Drop for RestartRegistry {
    fn drop(&mut self) {
        let _ = std::process::Command::new(repo_root().join("scripts/stack"))
            .args(["start", "registry"])
            .status();
    }
}

async fn get(http: &reqwest::Client, url: &str) -> Result<(StatusCode, Value)> {
    let response = http.get(url).send().await?;
    let status = response.status();
    Ok((status, response.json().await.context("a JSON body")?))
}

#[tokio::test(flavor = "multi_thread")]
async fn readiness_names_a_stopped_registry_and_liveness_does_not_change() -> Result<()> {
    let _fault = crate::one_fault_at_a_time().await;
    let stack = TestStack::new("fregistry", 1).await?;
    let ingest = IngestInstance::start(&stack).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let projector_listen = format!("http://127.0.0.1:{port}");
    let mut projector = spawn_projector_with(&stack, &["--listen", &format!("127.0.0.1:{port}")])?;
    let http = reqwest::Client::new();
    // Each check's outcome is an operator's to see; anyone else learns ready or not.
    let operator = sessionlog_testkit::auth::client()?;
    let ready = format!("{}/health/ready", ingest.base);

    let (_, report) = wait_for("the services to be ready", Duration::from_secs(60), || {
        let (http, ready, projector_ready) = (
            operator.clone(),
            ready.clone(),
            format!("{projector_listen}/health/ready"),
        );
        async move {
            let answer = get(&http, &ready).await?;
            let projector = http.get(&projector_ready).send().await.ok();
            Ok((answer.0 == StatusCode::OK
                && projector.is_some_and(|p| p.status() == StatusCode::OK))
            .then_some(answer))
        }
    })
    .await?;
    assert_eq!(report["status"], "ready", "{report}");
    for check in ["kafka", "registry", "store"] {
        assert_eq!(report["checks"][check]["ok"], true, "{report}");
    }
    assert!(recovery.readiness().report().await.ready());

    let restart = RestartRegistry;
    let stopped = std::process::Command::new(repo_root().join("scripts/stack"))
        .args(["stop", "registry"])
        .status()
        .context("scripts/stack stop registry")?;
    assert!(stopped.success());

    for path in ["/health/ready", "/health"] {
        let (status, anonymous) = get(&http, &format!("{}{path}", ingest.base)).await?;
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{path}: {anonymous}"
        );
        assert_eq!(
            anonymous,
            serde_json::json!({ "status": "not_ready" }),
            "{path}"
        );
        let (status, report) = get(&operator, &format!("{}{path}", ingest.base)).await?;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {report}");
        assert_eq!(report["status"], "not_ready", "{report}");
        assert_eq!(report["checks"]["registry"]["ok"], false, "{report}");
        assert!(
            report["checks"]["registry"]["error"].is_string(),
            "{report}"
        );
        assert_eq!(report["checks"]["kafka"]["ok"], true, "{report}");
    }
    let (status, live) = get(&http, &format!("{}/health/live", ingest.base)).await?;
    assert_eq!(
        (status, &live["status"]),
        (StatusCode::OK, &Value::from("live"))
    );
    let recovery_report = recovery.readiness().report().await;
    assert!(!recovery_report.ready());
    assert!(!recovery_report.checks["registry"].ok);
    // The projector decodes with schemas it already fetched; it stays ready and live.
    let (status, _) = get(&http, &format!("{projector_listen}/health/live")).await?;
    assert_eq!(status, StatusCode::OK);

    drop(restart);
    wait_for(
        "ingest to be ready again with the registry back",
        Duration::from_secs(180),
        || {
            let (http, ready) = (http.clone(), ready.clone());
            async move { Ok((get(&http, &ready).await?.0 == StatusCode::OK).then_some(())) }
        },
    )
    .await?;
    assert!(recovery.readiness().report().await.ready());
    projector.assert_running()?;
    Ok(())
}
