//! The recovery HTTP service as a separate `sessionlog serve-recovery` process: every operation
//! over the wire, and bad input answered with a 4xx problem (RFC 9457), never a 500.

use anyhow::{Context, Result, ensure};
use reqwest::{Client, Method};
use serde_json::{Value, json};
use sessionlog_producer::SessionWriter;
use sessionlog_schemas::{Content, EffectClass, SessionEvent, SessionId};
use sessionlog_testkit::projector::event_log;
use sessionlog_testkit::{ServedProcess, TestStack};

/// A running `serve-recovery` and a client for it.
struct Service {
    base: String,
    http: Client,
    _process: ServedProcess,
}

impl Service {
    async fn start(stack: &TestStack) -> Result<Self> {
        let process = ServedProcess::start(stack, "serve-recovery").await?;
        Ok(Self {
            base: process.base.clone(),
            http: sessionlog_testkit::auth::client()?,
            _process: process,
        })
    }

    /// Sends a request with an optional raw body; returns the status and the parsed JSON body.
    async fn call(&self, method: Method, path: &str, body: Option<String>) -> Result<(u16, Value)> {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        let body = serde_json::from_str(&text)
            .with_context(|| format!("{path}: status {status}, body not JSON: {text}"))?;
        Ok((status, body))
    }

    /// Expects a 2xx JSON answer.
    async fn ok(&self, method: Method, path: &str, body: Option<Value>) -> Result<Value> {
        let (status, value) = self.call(method, path, body.map(|b| b.to_string())).await?;
        ensure!((200..300).contains(&status), "{path}: {status} {value}");
        Ok(value)
    }

    /// Expects exactly `want` with a problem body naming its code.
    async fn refused(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
        want: u16,
    ) -> Result<Value> {
        let (status, value) = self.call(method, path, body).await?;
        ensure!(
            status == want,
            "{path}: expected {want}, got {status} {value}"
        );
        ensure!(
            value["code"].is_string(),
            "{path}: no problem code in {value}"
        );
        Ok(value)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_operation_over_http_and_bad_input_is_a_4xx() -> Result<()> {
    let stack = TestStack::new("rec_http", 2).await?;
    let log = event_log(&stack).await?;
    // One session stuck on an in-doubt non-idempotent call, one waiting for an approval.
    let (mut stuck, _) = SessionWriter::create(log.clone(), "agent", None).await?;
    stuck.user_request("pay").await?;
    let call = stuck
        .append_with(
            SessionEvent::ToolCallRequested {
                tool: "pay".into(),
                arguments: Content::plain("{}"),
                effect: EffectClass::NonIdempotent,
                approval_id: None,
            },
            None,
            Some("pay-1".into()),
        )
        .await?;
    let (mut waiting, _) = SessionWriter::create(log, "agent", None).await?;
    waiting
        .append(SessionEvent::ApprovalRequested {
            approval_id: "go".into(),
            action: "ship".into(),
            action_digest: None,
        })
        .await?;
    let (stuck_id, waiting_id) = (stuck.session_id(), waiting.session_id());

    let service = Service::start(&stack).await?;
    let spec = service.ok(Method::GET, "/v1/openapi.json", None).await?;
    ensure!(
        spec["paths"].is_object(),
        "no paths in the OpenAPI document"
    );

    let session = service
        .ok(Method::GET, &format!("/v1/sessions/{stuck_id}"), None)
        .await?;
    assert_eq!(session["rebuilt"]["state"]["last_seq"], json!(3));

    // Bad input: 400, 404, 409, 422, never 500.
    service
        .refused(Method::GET, "/v1/sessions/not-a-uuid", None, 400)
        .await?;
    service
        .refused(
            Method::GET,
            &format!("/v1/sessions/{}", SessionId::new()),
            None,
            404,
        )
        .await?;
    let resume = format!("/v1/sessions/{stuck_id}/resume");
    service
        .refused(Method::POST, &resume, Some("{not json".into()), 400)
        .await?;
    let refused = service
        .refused(
            Method::POST,
            &resume,
            Some(json!({"writer": "h2"}).to_string()),
            409,
        )
        .await?;
    assert_eq!(refused["code"], "needs_resolution");
    let resolutions = format!("/v1/sessions/{stuck_id}/resolutions");
    let resolution = |seq: u64| {
        json!({"call_seq": seq, "succeeded": true, "output": "paid", "operator": "bob",
               "reason": "bank statement"})
        .to_string()
    };
    let not_in_doubt = service
        .refused(Method::POST, &resolutions, Some(resolution(1)), 422)
        .await?;
    assert_eq!(not_in_doubt["code"], "not_in_doubt");
    // JSON of the wrong shape: 422, as on every service (malformed JSON is the 400 above).
    let wrong_shape = service
        .refused(Method::POST, &resolutions, Some("[]".into()), 422)
        .await?;
    assert_eq!(wrong_shape["code"], "invalid_request");
    // A misspelt field is refused, not silently dropped, on every body that takes one.
    let fork = format!("/v1/sessions/{stuck_id}/fork");
    let approvals = format!("/v1/sessions/{waiting_id}/approvals/deploy-1");
    for (path, body) in [
        (&resume, json!({"writer": "h2", "context_token": 100})),
        (
            &fork,
            json!({"at_seq": 1, "agent": "a", "inherit_approval": ["x"]}),
        ),
        (
            &resolutions,
            json!({"call_seq": 3, "succeeded": true, "output": "o", "reason": "r",
                   "operater": "bob"}),
        ),
        (&approvals, json!({"approved": true, "decided-by": "alice"})),
    ] {
        let misspelt = service
            .refused(Method::POST, path, Some(body.to_string()), 422)
            .await?;
        assert_eq!(misspelt["code"], "invalid_request", "{path}: {misspelt}");
    }
    let listed = service.ok(Method::GET, "/v1/resolutions", None).await?;
    ensure!(listed.is_array(), "{listed}");

    service
        .ok(
            Method::POST,
            &resolutions,
            Some(serde_json::from_str(&resolution(call.envelope.seq))?),
        )
        .await?;
    let bundle = service
        .ok(Method::POST, &resume, Some(json!({"writer": "h2"})))
        .await?;
    // Epoch 2 is the refused resume's claim (it recorded ResolutionRequired), 3 the operator's.
    assert_eq!(bundle["epoch"], json!(4));
    assert_eq!(bundle["in_doubt"], json!([]));

    // Approvals.
    let approval = |id: &str| format!("/v1/sessions/{waiting_id}/approvals/{id}");
    let decision = json!({"approved": true, "decided_by": "alice", "reason": null});
    let missing = service
        .refused(
            Method::POST,
            &approval("nope"),
            Some(decision.to_string()),
            422,
        )
        .await?;
    assert_eq!(missing["code"], "no_such_approval");
    service
        .refused(
            Method::POST,
            &format!("/v1/sessions/{waiting_id}/resume"),
            Some(json!({"writer": "h2"}).to_string()),
            409,
        )
        .await?;
    service
        .ok(Method::POST, &approval("go"), Some(decision))
        .await?;
    service
        .ok(
            Method::POST,
            &format!("/v1/sessions/{waiting_id}/resume"),
            Some(json!({"writer": "h2"})),
        )
        .await?;

    // Forks, lineage, diff.
    let fork = format!("/v1/sessions/{stuck_id}/fork");
    let beyond = service
        .refused(
            Method::POST,
            &fork,
            Some(json!({"at_seq": 999, "agent": "f"}).to_string()),
            422,
        )
        .await?;
    assert_eq!(beyond["code"], "bad_fork_point");
    service
        .refused(
            Method::POST,
            &fork,
            Some(json!({"at_seq": 1, "at_checkpoint": 1, "agent": "f"}).to_string()),
            400,
        )
        .await?;
    let child = service
        .ok(
            Method::POST,
            &fork,
            Some(json!({"at_seq": 2, "agent": "f"})),
        )
        .await?;
    let child_id = child["session_id"]
        .as_str()
        .context("child id")?
        .to_string();
    let lineage = service
        .ok(
            Method::GET,
            &format!("/v1/sessions/{child_id}/lineage"),
            None,
        )
        .await?;
    assert_eq!(
        lineage["ancestors"][0]["parent_session_id"],
        json!(stuck_id.to_string())
    );
    let diff = service
        .ok(Method::GET, &format!("/v1/sessions/{child_id}/diff"), None)
        .await?;
    ensure!(
        diff["parent_only"]
            .as_array()
            .is_some_and(|a| !a.is_empty()),
        "the parent went on after seq 2: {diff}"
    );
    service
        .refused(
            Method::GET,
            &format!("/v1/sessions/{stuck_id}/diff"),
            None,
            422,
        )
        .await?;
    Ok(())
}
