//! The OpenAPI documents of both HTTP services: valid OpenAPI 3.1 by a validator we did not
//! write (openapi-spec-validator, from `scripts/python-env`), printed by `sessionlog openapi`
//! without any server, equal to what a served instance answers at `/v1/openapi.json`, and in
//! step with the routes a served instance answers.
//!
//! Routes and document come from the same `routes!` registrations, so a path can only be
//! routed without being documented through a plain axum `.route(...)`, which the services do
//! not use. What this test checks against the running process: every documented method of
//! every documented path reaches a handler (no `no_such_route` 404, no 405), every other
//! method of those paths is a 405, and the unversioned API paths of before are gone (404).

use anyhow::{Context, Result, bail, ensure};
use reqwest::{Client, Method};
use serde_json::Value;
use sessionlog_testkit::{ServedProcess, TestStack, python_env, sessionlog_bin};
use std::collections::BTreeSet;

/// `sessionlog openapi --service <service>`, parsed.
fn printed_document(service: &str) -> Result<Value> {
    let out = std::process::Command::new(sessionlog_bin()?)
        .args(["openapi", "--service", service])
        // No settings and no servers are needed to print it.
        .env("SESSIONLOG_CONFIG", "/dev/null")
        .output()
        .context("running `sessionlog openapi`")?;
    ensure!(
        out.status.success(),
        "sessionlog openapi --service {service}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).context("the printed document is not JSON")
}

/// Runs openapi-spec-validator on `document` as OpenAPI 3.1.
fn validate(service: &str, document: &Value) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("sessionlog-openapi-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join(format!("{service}.json"));
    std::fs::write(&file, serde_json::to_vec_pretty(document)?)?;
    let out = std::process::Command::new(python_env()?)
        .args(["-m", "openapi_spec_validator", "--schema", "3.1"])
        .arg(&file)
        .output()
        .context("running openapi-spec-validator")?;
    let _ = std::fs::remove_dir_all(&dir);
    if !out.status.success() {
        bail!(
            "the {service} document is not valid OpenAPI 3.1:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Every `(method, path)` the document declares.
fn documented(document: &Value) -> Result<BTreeSet<(String, String)>> {
    let paths = document["paths"].as_object().context("no paths")?;
    let mut operations = BTreeSet::new();
    for (path, item) in paths {
        for method in item.as_object().context("a path item")?.keys() {
            operations.insert((method.to_uppercase(), path.clone()));
        }
    }
    Ok(operations)
}

/// A documented path with its parameters filled in: a fresh UUID for session ids.
fn concrete(path: &str) -> String {
    path.replace("{session_id}", &uuid::Uuid::now_v7().to_string())
        .replace("{approval_id}", "an-approval")
}

/// Calls `method path` with `{}` as the body (which no route accepts, so nothing is written)
/// and returns the status and the problem code, if the answer is a problem.
async fn probe(
    http: &Client,
    base: &str,
    method: &str,
    path: &str,
) -> Result<(u16, Option<String>)> {
    let method = Method::from_bytes(method.as_bytes())?;
    let response = http
        .request(method, format!("{base}{path}"))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await?;
    let status = response.status().as_u16();
    let body: Value = serde_json::from_str(&response.text().await?).unwrap_or_default();
    Ok((status, body["code"].as_str().map(str::to_string)))
}

async fn check_service(stack: &TestStack, service: &str, command: &str) -> Result<()> {
    let document = printed_document(service)?;
    assert_eq!(document["openapi"], "3.1.0", "{service}");
    validate(service, &document)?;

    let served = ServedProcess::start(stack, command).await?;
    let http = sessionlog_testkit::auth::client()?;
    let answered: Value = http
        .get(format!("{}/v1/openapi.json", served.base))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert_eq!(
        answered, document,
        "{service}: served and printed documents differ"
    );

    let operations = documented(&document)?;
    let paths: BTreeSet<&String> = operations.iter().map(|(_, p)| p).collect();
    for path in paths {
        let url = concrete(path);
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
            let (status, code) = probe(&http, &served.base, method, &url).await?;
            if operations.contains(&(method.to_string(), path.clone())) {
                ensure!(
                    status != 405 && code.as_deref() != Some("no_such_route"),
                    "{service}: documented {method} {path} is not routed ({status} {code:?})"
                );
            } else {
                ensure!(
                    (status, code.as_deref()) == (405, Some("method_not_allowed")),
                    "{service}: {method} {path} is routed but not documented ({status} {code:?})"
                );
            }
        }
    }
    for gone in ["/openapi.json", "/sessions", "/sessions/x/events"] {
        let (status, code) = probe(&http, &served.base, "POST", gone).await?;
        ensure!(
            (status, code.as_deref()) == (404, Some("no_such_route")),
            "{service}: {gone} answers {status} {code:?}; the API lives under /v1"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn ingest_document_is_valid_openapi_3_1_and_matches_its_routes() -> Result<()> {
    let stack = TestStack::new("openapi_ing", 1).await?;
    check_service(&stack, "ingest", "ingest").await
}

#[tokio::test(flavor = "multi_thread")]
async fn recovery_document_is_valid_openapi_3_1_and_matches_its_routes() -> Result<()> {
    let stack = TestStack::new("openapi_rec", 1).await?;
    check_service(&stack, "recovery", "serve-recovery").await
}
