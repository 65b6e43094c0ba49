//! Access control on both HTTP services, on the real stack: every `/v1` route refuses a
//! missing, expired, wrong-audience or wrongly signed token (401 with `WWW-Authenticate`), a
//! token without the route's role (403) and a token narrowed to another session (404), and
//! nothing is appended for any of them. Privileged events record the verified subject.

use anyhow::{Context, Result, ensure};
use reqwest::Method;
use serde_json::{Value, json};
use sessionlog_http::auth::{Grant, SigningKey};
use sessionlog_log::Role;
use sessionlog_producer::SessionWriter;
use sessionlog_recovery::Recovery;
use sessionlog_schemas::{SessionEvent, SessionId};
use sessionlog_testkit::auth::{client, client_with, mint, token, token_with};
use sessionlog_testkit::projector::event_log;
use sessionlog_testkit::recovery::{accepted_events, end_offset};
use sessionlog_testkit::{ServedProcess, TestStack, wait_for};
use std::time::{Duration, SystemTime};
use uuid::Uuid;

/// One API route: which service, method, path, and the role it needs.
struct Route {
    service: Svc,
    method: Method,
    path: String,
    role: Role,
    /// Whether the path names a session (a narrowed token for another one gets 404).
    names_session: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Svc {
    Ingest,
    Recovery,
}

fn routes(s: SessionId) -> Vec<Route> {
    use Svc::*;
    let r = |service, method, path: String, role, names_session| Route {
        service,
        method,
        path,
        role,
        names_session,
    };
    vec![
        r(
            Ingest,
            Method::POST,
            "/v1/sessions".into(),
            Role::Harness,
            false,
        ),
        r(
            Ingest,
            Method::GET,
            "/v1/sessions?name=thread:1".into(),
            Role::Harness,
            false,
        ),
        r(
            Ingest,
            Method::POST,
            format!("/v1/sessions/{s}/claim"),
            Role::Harness,
            true,
        ),
        r(
            Ingest,
            Method::POST,
            format!("/v1/sessions/{s}/events"),
            Role::Harness,
            true,
        ),
        r(
            Ingest,
            Method::POST,
            format!("/v1/sessions/{s}/checkpoint"),
            Role::Harness,
            true,
        ),
        r(
            Ingest,
            Method::POST,
            format!("/v1/sessions/{s}/close"),
            Role::Harness,
            true,
        ),
        r(
            Ingest,
            Method::POST,
            format!("/v1/sessions/{s}/lease"),
            Role::Harness,
            true,
        ),
        r(
            Ingest,
            Method::DELETE,
            format!("/v1/sessions/{s}/lease?epoch=1"),
            Role::Harness,
            true,
        ),
        r(
            Recovery,
            Method::GET,
            format!("/v1/sessions/{s}"),
            Role::Reader,
            true,
        ),
        r(
            Recovery,
            Method::POST,
            format!("/v1/sessions/{s}/resume"),
            Role::Harness,
            true,
        ),
        r(
            Recovery,
            Method::POST,
            format!("/v1/sessions/{s}/fork"),
            Role::Operator,
            true,
        ),
        r(
            Recovery,
            Method::GET,
            format!("/v1/sessions/{s}/lineage"),
            Role::Reader,
            true,
        ),
        r(
            Recovery,
            Method::GET,
            format!("/v1/sessions/{s}/trace"),
            Role::Reader,
            true,
        ),
        r(
            Recovery,
            Method::GET,
            format!("/v1/sessions/{s}/diff"),
            Role::Reader,
            true,
        ),
        r(
            Recovery,
            Method::GET,
            format!("/v1/sessions/{s}/events"),
            Role::Reader,
            true,
        ),
        r(
            Recovery,
            Method::POST,
            format!("/v1/sessions/{s}/resolutions"),
            Role::Operator,
            true,
        ),
        r(
            Recovery,
            Method::POST,
            format!("/v1/sessions/{s}/approvals/a1"),
            Role::Approver,
            true,
        ),
        r(
            Recovery,
            Method::POST,
            format!("/v1/sessions/{s}/pause"),
            Role::Operator,
            true,
        ),
        r(
            Recovery,
            Method::POST,
            format!("/v1/sessions/{s}/unpause"),
            Role::Operator,
            true,
        ),
        r(
            Recovery,
            Method::POST,
            format!("/v1/sessions/{s}/steering"),
            Role::Operator,
            true,
        ),
        r(
            Recovery,
            Method::POST,
            format!("/v1/sessions/{s}/erase"),
            Role::Operator,
            true,
        ),
        r(
            Recovery,
            Method::POST,
            format!("/v1/sessions/{s}/redactions"),
            Role::Operator,
            true,
        ),
        r(
            Recovery,
            Method::GET,
            format!("/v1/sessions/{s}/redactions"),
            Role::Operator,
            true,
        ),
        r(
            Recovery,
            Method::GET,
            format!("/v1/sessions/{s}/erasure"),
            Role::Operator,
            true,
        ),
        r(
            Recovery,
            Method::GET,
            "/v1/resolutions".into(),
            Role::Operator,
            false,
        ),
        r(
            Recovery,
            Method::GET,
            "/v1/usage?from=2026-01-01".into(),
            Role::Reader,
            false,
        ),
        r(
            Recovery,
            Method::GET,
            "/v1/spans?from=2026-01-01T00:00:00Z".into(),
            Role::Reader,
            false,
        ),
        r(
            Recovery,
            Method::GET,
            "/v1/work?agent=a&wait=0".into(),
            Role::Harness,
            false,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn every_route_refuses_bad_credentials_wrong_roles_and_other_sessions_and_appends_nothing()
-> Result<()> {
    // One partition: any append, by any route, would move its end.
    let stack = TestStack::new("access", 1).await?;
    let ingest = ServedProcess::start(&stack, "ingest").await?;
    let recovery_service = ServedProcess::start(&stack, "serve-recovery").await?;
    let recovery = Recovery::connect(&stack.settings).await?;

    let (mut writer, _) = SessionWriter::create(event_log(&stack).await?, "agent", None).await?;
    writer
        .append(SessionEvent::ApprovalRequested {
            approval_id: "a1".into(),
            action: "deploy".into(),
            action_digest: None,
        })
        .await?;
    let session = writer.session_id();
    let before = end_offset(&recovery, session).await?;

    let stranger = SigningKey::generate()?;
    let foreign = stranger.mint(&Grant::new("mallory", &Role::ALL, Duration::from_secs(600)))?;
    // Two minutes past its expiry: beyond the services' 30 s of leeway.
    let expired = mint(&Grant {
        expires: SystemTime::now() - Duration::from_secs(120),
        ..Grant::new("alice", &Role::ALL, Duration::ZERO)
    })?;
    let wrong_audience = mint(&Grant {
        audience: "another-service".into(),
        ..Grant::new("alice", &Role::ALL, Duration::from_secs(600))
    })?;
    let plain = reqwest::Client::new();

    // The table covers every API operation the two services document, so a new route cannot
    // go untested here.
    let documented = [
        sessionlog_ingest::service().openapi(),
        sessionlog_recovery::http::openapi(),
    ]
    .iter()
    .flat_map(|doc| doc.paths.paths.iter())
    .filter(|(path, _)| path.starts_with("/v1/") && path.as_str() != "/v1/openapi.json")
    .map(|(_, item)| {
        [&item.get, &item.post, &item.put, &item.delete, &item.patch]
            .iter()
            .filter(|o| o.is_some())
            .count()
    })
    .sum::<usize>();
    ensure!(
        routes(session).len() == documented,
        "the table has {} routes, the services document {documented} operations",
        routes(session).len()
    );
    for route in routes(session) {
        let base = match route.service {
            Svc::Ingest => &ingest.base,
            Svc::Recovery => &recovery_service.base,
        };
        let url = format!("{base}{}", route.path);
        let others: Vec<Role> = Role::ALL.into_iter().filter(|r| *r != route.role).collect();
        let mut cases: Vec<(String, reqwest::Client, (u16, &str))> = vec![
            (
                "no credential".into(),
                plain.clone(),
                (401, "unauthenticated"),
            ),
            (
                "a foreign key's token".into(),
                client_with(&foreign)?,
                (401, "invalid_token"),
            ),
            (
                "a wrong audience".into(),
                client_with(&wrong_audience)?,
                (401, "invalid_token"),
            ),
            (
                "garbage".into(),
                client_with("not-a-token")?,
                (401, "invalid_token"),
            ),
            (
                "an unknown API key".into(),
                client_with("slk_nobody_xyz")?,
                (401, "invalid_token"),
            ),
            (
                "the wrong roles".into(),
                client_with(&token("bob", &others)?)?,
                (403, "forbidden"),
            ),
        ];
        let narrowed = client_with(&token_with(
            "carol",
            &Role::ALL,
            Some(SessionId::new()),
            Duration::from_secs(600),
        )?)?;
        cases.push(if route.names_session {
            (
                "a token for another session".into(),
                narrowed,
                (404, "unknown_session"),
            )
        } else {
            (
                "a token narrowed to a session".into(),
                narrowed,
                (403, "forbidden"),
            )
        });
        cases.push((
            "an expired token".into(),
            client_with(&expired)?,
            (401, "invalid_token"),
        ));
        for (what, http, expect) in cases {
            let (want, code) = expect;
            let mut request = http.request(route.method.clone(), &url);
            if route.method == Method::POST {
                request = request.json(&json!({ "writer": "w", "agent": "a", "at_seq": 1 }));
            }
            let response = request.send().await?;
            let status = response.status().as_u16();
            let challenge = response.headers().get("www-authenticate").cloned();
            let body: Value = response
                .json()
                .await
                .with_context(|| format!("{what} on {url}"))?;
            ensure!(
                status == want && body["code"] == code,
                "{} {} with {what}: wanted {want} {code}, got {status} {body}",
                route.method,
                route.path
            );
            if want == 401 {
                let challenge = challenge.context("a 401 carries WWW-Authenticate")?;
                ensure!(
                    challenge
                        .to_str()?
                        .starts_with("Bearer realm=\"sessionlog\"")
                );
            }
        }
    }
    assert_eq!(
        end_offset(&recovery, session).await?,
        before,
        "no refused request appended anything"
    );

    // Refusals are counted by route and reason.
    let metrics = client()?
        .get(format!("{}/metrics", recovery_service.base))
        .send()
        .await?
        .text()
        .await?;
    ensure!(
        metrics
            .lines()
            .any(|l| l.starts_with("sessionlog_access_refusals_total")
                && l.contains("reason=\"forbidden\"")),
        "refusals are counted: {metrics}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_decision_records_the_verified_subject_not_a_typed_name() -> Result<()> {
    let stack = TestStack::new("access_subject", 1).await?;
    let service = ServedProcess::start(&stack, "serve-recovery").await?;
    let (mut writer, _) = SessionWriter::create(event_log(&stack).await?, "agent", None).await?;
    writer
        .append(SessionEvent::ApprovalRequested {
            approval_id: "a1".into(),
            action: "deploy".into(),
            action_digest: None,
        })
        .await?;
    let session = writer.session_id();
    let approver = client_with(&token("alice", &[Role::Approver])?)?;
    let answer = approver
        .post(format!(
            "{}/v1/sessions/{session}/approvals/a1",
            service.base
        ))
        .json(&json!({ "approved": true, "decided_by": "the-ceo" }))
        .send()
        .await?;
    ensure!(answer.status() == 200, "approved: {}", answer.text().await?);
    let recovery = Recovery::connect(&stack.settings).await?;
    let decided = accepted_events(&recovery, session)
        .await?
        .into_iter()
        .find_map(|e| match e.envelope.event {
            SessionEvent::ApprovalDecided { decided_by, .. } => Some(decided_by),
            _ => None,
        })
        .context("the decision is in the log")?;
    assert_eq!(decided, "alice/the-ceo", "the verified subject comes first");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn ingest_with_default_settings_answers_401_without_a_token() -> Result<()> {
    let mut stack = TestStack::new("access_default", 1).await?;
    // The `[auth]` a deployment gets when it names nothing: no JWKS.
    stack.settings.auth = sessionlog_log::AuthSettings::default();
    let ingest = ServedProcess::start(&stack, "ingest").await?;
    let response = reqwest::Client::new()
        .post(format!("{}/v1/sessions", ingest.base))
        .json(&json!({ "agent": "a" }))
        .send()
        .await?;
    assert_eq!(response.status().as_u16(), 401);
    // With no JWKS configured even a well-formed token is refused.
    let response = client()?
        .post(format!("{}/v1/sessions", ingest.base))
        .json(&json!({ "agent": "a" }))
        .send()
        .await?;
    assert_eq!(response.status().as_u16(), 401);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_sees_only_its_own_sessions() -> Result<()> {
    let stack = TestStack::new("access_tenant", 1).await?;
    let ingest = ServedProcess::start(&stack, "ingest").await?;
    let recovery_service = ServedProcess::start(&stack, "serve-recovery").await?;
    let tenant_token = |tenant: &str| {
        mint(&Grant {
            tenant: Some(tenant.into()),
            ..Grant::new("someone", &Role::ALL, Duration::from_secs(600))
        })
    };
    let acme = client_with(&tenant_token("acme")?)?;
    let globex = client_with(&tenant_token("globex")?)?;

    let created: Value = acme
        .post(format!("{}/v1/sessions", ingest.base))
        .json(&json!({ "agent": "a" }))
        .send()
        .await?
        .json()
        .await?;
    let session = created["session_id"]
        .as_str()
        .context("a session id")?
        .to_string();
    let recovery = Recovery::connect(&stack.settings).await?;
    let id: SessionId = session.parse()?;
    let rebuilt = recovery.rebuild(id).await?;
    assert_eq!(
        rebuilt.state.tenant, "acme",
        "the tenant is recorded in the log"
    );
    let before = end_offset(&recovery, id).await?;

    // Well-formed bodies, so that only the tenant can be the reason for a refusal.
    let (ingest_base, recovery_base) = (&ingest.base, &recovery_service.base);
    let routes = [
        (ingest_base, Method::POST, "claim", json!({ "writer": "w" })),
        (
            ingest_base,
            Method::POST,
            "events",
            json!({ "epoch": 1, "events": [] }),
        ),
        (
            ingest_base,
            Method::POST,
            "checkpoint",
            json!({ "epoch": 1 }),
        ),
        (
            ingest_base,
            Method::POST,
            "close",
            json!({ "epoch": 1, "outcome": "Completed" }),
        ),
        (recovery_base, Method::GET, "", Value::Null),
        (
            recovery_base,
            Method::POST,
            "resume",
            json!({ "writer": "w" }),
        ),
        (
            recovery_base,
            Method::POST,
            "fork",
            json!({ "at_seq": 1, "agent": "a" }),
        ),
        (recovery_base, Method::GET, "lineage", Value::Null),
        (recovery_base, Method::GET, "diff", Value::Null),
        (recovery_base, Method::GET, "trace", Value::Null),
        (recovery_base, Method::GET, "events", Value::Null),
        (
            recovery_base,
            Method::POST,
            "resolutions",
            json!({ "call_seq": 1, "succeeded": true, "output": "", "reason": "r" }),
        ),
        (
            recovery_base,
            Method::POST,
            "approvals/a1",
            json!({ "approved": true }),
        ),
        (
            recovery_base,
            Method::POST,
            "pause",
            json!({ "reason": "r" }),
        ),
        (recovery_base, Method::POST, "unpause", json!({})),
        (
            recovery_base,
            Method::POST,
            "steering",
            json!({ "text": "t" }),
        ),
        (
            recovery_base,
            Method::POST,
            "erase",
            json!({ "reason": "r" }),
        ),
        (recovery_base, Method::GET, "erasure", Value::Null),
        (
            recovery_base,
            Method::POST,
            "redactions",
            json!({ "seq": 1, "field": "output", "reason": "r" }),
        ),
        (recovery_base, Method::GET, "redactions", Value::Null),
    ];
    for (base, method, tail, body) in &routes {
        let path = match *tail {
            "" => format!("/v1/sessions/{session}"),
            tail => format!("/v1/sessions/{session}/{tail}"),
        };
        let mut request = globex.request(method.clone(), format!("{base}{path}"));
        if *method == Method::POST {
            request = request.json(body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let answer: Value = response.json().await?;
        ensure!(
            status == 404 && answer["code"] == "unknown_session",
            "{method} {path} for another tenant: wanted 404 unknown_session, got {status} {answer}"
        );
    }
    assert_eq!(
        end_offset(&recovery, id).await?,
        before,
        "nothing was appended"
    );

    // The owner still reads it, and a fork stays in the tenant and names who asked.
    let own = acme
        .get(format!("{}/v1/sessions/{session}", recovery_service.base))
        .send()
        .await?;
    assert_eq!(own.status().as_u16(), 200);
    let forked: Value = acme
        .post(format!(
            "{}/v1/sessions/{session}/fork",
            recovery_service.base
        ))
        .json(&json!({ "at_seq": 1, "agent": "branch" }))
        .send()
        .await?
        .json()
        .await?;
    let first = &forked["event"]["event"]["SessionForked"];
    assert_eq!(first["tenant"], "acme", "{forked}");
    assert_eq!(first["forked_by"], "someone", "{forked}");
    Ok(())
}

/// A bearer client of `tenant` holding every role.
fn tenant_client(tenant: &str) -> Result<reqwest::Client> {
    client_with(&mint(&Grant {
        tenant: Some(tenant.into()),
        ..Grant::new("someone", &Role::ALL, Duration::from_secs(600))
    })?)
}

/// POSTs a create and returns the status and the answer's JSON.
async fn create(client: &reqwest::Client, base: &str, body: Value) -> Result<(u16, Value)> {
    let answer = client
        .post(format!("{base}/v1/sessions"))
        .json(&body)
        .send()
        .await?;
    Ok((answer.status().as_u16(), answer.json().await?))
}

/// Sessions are named within their tenant: two tenants use one name at once, each for its
/// own session, and neither can find, take or learn the other's; within a tenant a name is
/// one session's, whoever creates it concurrently; a replay restores the names from the log.
#[tokio::test(flavor = "multi_thread")]
async fn names_belong_to_a_tenant() -> Result<()> {
    let stack = TestStack::new("access_names", 2).await?;
    let ingest = ServedProcess::start(&stack, "ingest").await?;
    let base = ingest.base.as_str();
    let (acme, globex, initech) = (
        tenant_client("acme")?,
        tenant_client("globex")?,
        tenant_client("initech")?,
    );
    let name = "thread:support-4711";

    // Eight creates of one name in one tenant at once: one session, every answer names it.
    let racing = futures::future::join_all(
        (0..8).map(|_| create(&acme, base, json!({ "agent": "a", "name": name }))),
    )
    .await;
    let mut created = 0;
    let mut ids = std::collections::BTreeSet::new();
    for answer in racing {
        let (status, body) = answer?;
        match status {
            201 => {
                created += 1;
                ensure!(body["name"] == name, "{body}");
                ids.insert(body["session_id"].as_str().unwrap_or_default().to_string());
            }
            409 => {
                ensure!(body["code"] == "name_taken", "{body}");
                ids.insert(body["session_id"].as_str().unwrap_or_default().to_string());
            }
            other => anyhow::bail!("create answered {other}: {body}"),
        }
    }
    assert_eq!(created, 1, "one create of a name wins");
    assert_eq!(ids.len(), 1, "every answer names the one session: {ids:?}");
    let acme_session = ids.pop_first().unwrap_or_default();

    // Another tenant uses the same name at the same time, for a session of its own.
    let (status, body) = create(&globex, base, json!({ "agent": "g", "name": name })).await?;
    assert_eq!(status, 201, "{body}");
    let globex_session = body["session_id"].as_str().unwrap_or_default().to_string();
    assert_ne!(globex_session, acme_session);

    // Each finds its own; a third tenant finds nothing, exactly as for a name nobody used.
    let find = |client: &reqwest::Client, name: &str| {
        let request = client.get(format!(
            "{base}/v1/sessions?name={}",
            percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC)
        ));
        async move {
            let answer = request.send().await?;
            anyhow::Ok((answer.status().as_u16(), answer.json::<Value>().await?))
        }
    };
    let (status, body) = find(&acme, name).await?;
    assert_eq!(
        (status, body["session_id"].as_str()),
        (200, Some(acme_session.as_str()))
    );
    let (status, body) = find(&globex, name).await?;
    assert_eq!(
        (status, body["session_id"].as_str()),
        (200, Some(globex_session.as_str()))
    );
    let (status, unused) = find(&initech, name).await?;
    assert_eq!(status, 404, "{unused}");
    let (never_status, never_used) = find(&initech, "thread:never-used").await?;
    assert_eq!(unused["code"], "unknown_name");
    assert_eq!(
        (status, &unused),
        (never_status, &never_used),
        "the same answer"
    );

    // A caller-chosen id another tenant started is refused exactly as one's own started id:
    // the answer says the id cannot be used, never whose it is.
    let refuse = |client: &reqwest::Client, id: &str| {
        let body = json!({ "agent": "x", "session_id": id });
        let client = client.clone();
        async move { create(&client, base, body).await }
    };
    let (own_status, own) = refuse(&acme, &acme_session).await?;
    let (other_status, other) = refuse(&initech, &acme_session).await?;
    assert_eq!((own_status, other_status), (409, 409), "{own} {other}");
    assert_eq!(
        own, other,
        "one answer for a started id, whoever started it"
    );

    // A create that took a name and died before its start is finished by the next create.
    let store = sessionlog_testkit::projector::store(&stack).await?;
    let orphan = SessionId::new();
    let digest = sessionlog_schemas::session_name_sha256("acme", "thread:orphan");
    let names = store.names().await?;
    names.claim("acme", &digest, orphan).await?;
    let (status, body) = create(
        &acme,
        base,
        json!({ "agent": "a", "name": "thread:orphan" }),
    )
    .await?;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        body["session_id"],
        orphan.to_string(),
        "the name's session is started"
    );
    // The create that took the name was only a moment behind: its start now comes second, and
    // it must be refused, not answered as if its session had started (review: a start written
    // as a fresh id's was never read back, so both creates were told 201).
    let late = SessionWriter::create_named(
        event_log(&stack).await?,
        orphan,
        "late",
        None,
        "acme",
        &digest,
    )
    .await;
    ensure!(
        matches!(
            late,
            Err(sessionlog_producer::Error::Refused(
                sessionlog_session::Rejection::AlreadyStarted
            ))
        ),
        "a second start of the named session was answered {:?}",
        late.map(|(_, a)| a.position)
    );

    // Names break no rule: a NUL is refused before anything is written.
    let (status, body) = create(&acme, base, json!({ "agent": "a", "name": "a\u{0}b" })).await?;
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("invalid_identifier")),
        "{body}"
    );

    // The log keeps each start's name digest: a replay into a fresh keyspace finds them.
    let fresh = format!("{}_names", stack.settings.cql.keyspace);
    sessionlog_testkit::projector::replay_into(&stack, &fresh).await?;
    let mut cql = stack.settings.cql.clone();
    cql.keyspace = fresh;
    let replayed = sessionlog_store::ProjectionStore::open(&cql).await?;
    let replayed = replayed.names().await?;
    for (tenant, session) in [("acme", &acme_session), ("globex", &globex_session)] {
        let digest = sessionlog_schemas::session_name_sha256(tenant, name);
        assert_eq!(
            replayed
                .find(tenant, &digest)
                .await?
                .map(|s| s.to_string())
                .as_deref(),
            Some(session.as_str()),
            "{tenant}'s name after a replay"
        );
    }
    Ok(())
}

/// A credential narrowed to a fork reads the fork, not its parent: `diff` shows the child's
/// side only and `lineage` the parent as an id; a credential of the whole tenant reads both.
#[tokio::test(flavor = "multi_thread")]
async fn a_credential_narrowed_to_a_fork_reads_only_the_fork() -> Result<()> {
    let stack = TestStack::new("access_narrowed", 1).await?;
    let recovery_service = ServedProcess::start(&stack, "serve-recovery").await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let log = event_log(&stack).await?;
    let (mut parent, _) = SessionWriter::create(log, "agent", None).await?;
    parent.user_request("before the fork").await?;
    let parent_id = parent.session_id();
    let child: SessionId = recovery
        .fork(parent_id, sessionlog_recovery::ForkAt::Seq(2), "branch")
        .await?
        .envelope
        .session_id;
    parent.user_request("PARENT-ONLY secret").await?;

    let narrowed = client_with(&token_with(
        "carol",
        &[Role::Reader],
        Some(child),
        Duration::from_secs(600),
    )?)?;
    let whole = client_with(&token("dave", &[Role::Reader])?)?;
    let get = |client: &reqwest::Client, tail: &'static str| {
        let request = client.get(format!(
            "{}/v1/sessions/{child}/{tail}",
            recovery_service.base
        ));
        async move {
            let answer = request.send().await?;
            ensure!(answer.status().is_success(), "{tail}: {}", answer.status());
            anyhow::Ok(answer.text().await?)
        }
    };
    let diff = get(&narrowed, "diff").await?;
    ensure!(
        !diff.contains("PARENT-ONLY"),
        "a narrowed diff read the parent: {diff}"
    );
    let diff: Value = serde_json::from_str(&diff)?;
    assert_eq!(diff["withheld"], true, "{diff}");
    assert_eq!(diff["parent_only"], json!([]), "{diff}");
    let lineage: Value = serde_json::from_str(&get(&narrowed, "lineage").await?)?;
    assert_eq!(lineage["withheld"], true, "{lineage}");
    assert_eq!(
        lineage["ancestors"][0]["parent_session_id"],
        parent_id.to_string(),
        "{lineage}"
    );
    // The parent itself stays another session for the narrowed credential.
    let parent_answer = narrowed
        .get(format!("{}/v1/sessions/{parent_id}", recovery_service.base))
        .send()
        .await?;
    assert_eq!(parent_answer.status().as_u16(), 404);
    // A credential of the tenant reads both sides.
    let diff = get(&whole, "diff").await?;
    ensure!(diff.contains("PARENT-ONLY"), "the tenant's diff: {diff}");
    Ok(())
}

/// Every list a tenant's credential reads (spans, usage, sessions awaiting someone) holds
/// only its own tenant's: another tenant holding every role finds nothing of the first in any
/// body, not even a count.
#[tokio::test(flavor = "multi_thread")]
async fn lists_show_a_tenant_only_its_own() -> Result<()> {
    let stack = TestStack::new("access_lists", 1).await?;
    let _projector = stack.spawn_projector()?;
    let ingest = ServedProcess::start(&stack, "ingest").await?;
    let recovery_service = ServedProcess::start(&stack, "serve-recovery").await?;
    let (acme, globex) = (tenant_client("acme")?, tenant_client("globex")?);
    let agent = format!("acme-agent-{}", Uuid::now_v7().simple());
    let (status, created) = create(&acme, &ingest.base, json!({ "agent": agent })).await?;
    assert_eq!(status, 201, "{created}");
    let session = created["session_id"].as_str().context("id")?.to_string();
    let token = created["writer_token"].as_str().context("token")?;
    let now = sessionlog_schemas::now_micros();
    let events = json!({ "epoch": 1, "events": [
        { "seq": 2, "kind": "ModelResponse", "data": { "model": "m-acme", "tokens_in": 7,
          "tokens_out": 3, "cost_micros": 11, "started_at": now - 1_000,
          "content": { "Plain": "hi" } } },
        { "seq": 3, "kind": "ToolCallRequested", "idempotency_key": "charge-1",
          "data": { "tool": "payments.charge", "arguments": { "Plain": "{}" },
                    "effect": "NonIdempotent" } },
    ]});
    let appended = acme
        .post(format!("{}/v1/sessions/{session}/events", ingest.base))
        .header(sessionlog_ingest::WRITER_TOKEN_HEADER, token)
        .json(&events)
        .send()
        .await?;
    ensure!(appended.status().is_success(), "{}", appended.text().await?);
    // The harness dies mid-call; resuming stops the session for an operator, which lists it.
    let resumed = acme
        .post(format!(
            "{}/v1/sessions/{session}/resume",
            recovery_service.base
        ))
        .json(&json!({ "writer": "harness-2" }))
        .send()
        .await?;
    ensure!(
        resumed.status().as_u16() == 409,
        "resume of a call in doubt: {}",
        resumed.text().await?
    );

    let today = time::OffsetDateTime::now_utc().date();
    let lists = [
        format!("/v1/spans?from={today}T00:00:00Z"),
        format!("/v1/usage?from={today}&by=agent"),
        "/v1/resolutions".to_string(),
    ];
    let read = |client: &reqwest::Client, path: &str| {
        let request = client.get(format!("{}{path}", recovery_service.base));
        async move {
            let answer = request.send().await?;
            let status = answer.status().as_u16();
            anyhow::Ok((status, answer.text().await?))
        }
    };
    // Each list shows the session to its own tenant once the projector wrote it.
    for path in &lists {
        wait_for(
            &format!("acme's {path} to show its session"),
            Duration::from_secs(60),
            || {
                let (acme, path, session, agent) = (&acme, path, &session, &agent);
                async move {
                    let (status, body) = read(acme, path).await?;
                    Ok((status == 200
                        && (body.contains(session.as_str()) || body.contains(agent.as_str())))
                    .then_some(()))
                }
            },
        )
        .await?;
    }
    for path in &lists {
        let (status, body) = read(&globex, path).await?;
        assert_eq!(status, 200, "{path}: {body}");
        for secret in [session.as_str(), agent.as_str(), "m-acme", "acme"] {
            ensure!(
                !body.contains(secret),
                "globex's {path} shows {secret:?}: {body}"
            );
        }
    }
    Ok(())
}
