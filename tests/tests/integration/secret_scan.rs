//! The secret scan (issue 54, item 4): an AWS-shaped key and a PEM private key sent through
//! HTTP ingest and through the Rust library are never readable afterwards, through any door
//! (recovery's readers, its HTTP history, the context view, a resumed harness's bundle, the
//! topic's bytes); the append's answer names the redaction; every other text of the session
//! still reads and it resumes. With encryption off such an append is refused, naming the rule
//! and the setting, and nothing is written.

use anyhow::{Context, Result};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sessionlog_keys::{SecretAction, SecretFound};
use sessionlog_producer::SessionWriter;
use sessionlog_recovery::Recovery;
use sessionlog_schemas::{
    CallOutcome, Content, EffectClass, ResultSource, SessionEvent, SessionId,
};
use sessionlog_testkit::auth::client;
use sessionlog_testkit::projector::{event_log, every_record};
use sessionlog_testkit::{ServedProcess, TestStack, wait_for};
use std::sync::Arc;
use std::time::Duration;

/// The header a harness presents its writer token in.
const WRITER_TOKEN: &str = sessionlog_ingest::WRITER_TOKEN_HEADER;

/// An AWS access key id of the real shape, unique to `tag` (never the documentation's
/// `...EXAMPLE`, which the rule lets through).
fn aws_key(tag: char) -> String {
    format!("AKIA{tag}3MQTLW7RD4XBN2V")
}

/// The body of a PEM private key, unique to `tag`: what must be in no byte anywhere.
fn pem_body(tag: &str) -> String {
    format!("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj{tag}")
}

fn pem(tag: &str) -> String {
    format!(
        "here is the key:\n-----BEGIN PRIVATE KEY-----\n{}\nMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n-----END PRIVATE KEY-----\n",
        pem_body(tag)
    )
}

/// What a reader shows of a redacted field, and the reason the scan gives it.
fn redacted(rule: &str) -> String {
    format!("redacted: secret detected: {rule}")
}

/// A session written through the library: a tool result printing an AWS key, a request
/// pasting a private key, and texts that hold none. Returns it, with the canaries that must
/// read back.
async fn library_session(
    log: &Arc<sessionlog_producer::EventLog>,
) -> Result<(SessionId, Vec<String>)> {
    let (mut writer, _) = SessionWriter::create(Arc::clone(log), "agent", None).await?;
    let session = writer.session_id();
    let call = writer
        .append(SessionEvent::ToolCallRequested {
            tool: "shell".into(),
            arguments: Content::plain("CANARY-lib-arguments: cat ~/.aws/credentials"),
            effect: EffectClass::Pure,
            approval_id: None,
        })
        .await?;
    assert!(call.secrets.is_empty(), "{:?}", call.secrets);
    let result = writer
        .append(SessionEvent::ToolCallResult {
            call_seq: call.envelope.seq,
            outcome: CallOutcome::Succeeded,
            output: Content::plain(format!("[default]\naws_access_key_id = {}\n", aws_key('L'))),
            source: ResultSource::Executed,
            recorded_by: None,
            note: Some(Content::plain("CANARY-lib-note")),
        })
        .await?;
    assert_eq!(
        result.secrets,
        [SecretFound {
            session,
            seq: result.envelope.seq,
            field: "output",
            rule: "aws-access-token".into(),
            action: SecretAction::Redacted,
            reason: "secret detected: aws-access-token".into(),
        }],
        "the library's append result names the redaction"
    );
    let request = writer
        .append(SessionEvent::UserRequest {
            content: Content::plain(pem("lib")),
        })
        .await?;
    assert_eq!(
        request
            .secrets
            .iter()
            .map(|s| (s.field, s.rule.as_str(), s.action))
            .collect::<Vec<_>>(),
        [("content", "private-key", SecretAction::Redacted)]
    );
    writer
        .append(SessionEvent::PlanUpdated {
            plan: Content::plain("CANARY-lib-plan"),
        })
        .await?;
    Ok((
        session,
        vec![
            "CANARY-lib-arguments".into(),
            "CANARY-lib-note".into(),
            "CANARY-lib-plan".into(),
        ],
    ))
}

/// A session created through the ingest service, and its writer token.
async fn create_over_http(
    http: &reqwest::Client,
    ingest: &ServedProcess,
) -> Result<(SessionId, String)> {
    let created: Value = http
        .post(format!("{}/v1/sessions", ingest.base))
        .json(&json!({"agent": "python-harness"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let session = created["session_id"].as_str().context("id")?.parse()?;
    let token = created["writer_token"].as_str().context("writer token")?;
    Ok((session, token.to_string()))
}

/// The same through the ingest service's HTTP API; checks the append's answer names each
/// redaction.
async fn http_session(ingest: &ServedProcess) -> Result<(SessionId, Vec<String>)> {
    let http = client()?;
    let (session, token) = create_over_http(&http, ingest).await?;
    let token = token.as_str();
    let events = json!({"epoch": 1, "events": [
        {"seq": 2, "kind": "ToolCallRequested", "data": {"tool": "shell",
            "arguments": {"Plain": "CANARY-http-arguments"}, "effect": "Pure"}},
        {"seq": 3, "kind": "ToolCallResult", "data": {"call_seq": 2, "outcome": "Succeeded",
            "output": {"Plain": format!("AWS_ACCESS_KEY_ID={}", aws_key('H'))},
            "source": "Executed", "recorded_by": null, "note": "CANARY-http-note"}},
        {"seq": 4, "kind": "UserRequest", "data": {"content": {"Plain": pem("http")}}},
        {"seq": 5, "kind": "PlanUpdated", "data": {"plan": {"Plain": "CANARY-http-plan"}}},
    ]});
    let answer: Value = http
        .post(format!("{}/v1/sessions/{session}/events", ingest.base))
        .header(WRITER_TOKEN, token)
        .json(&events)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let acks = answer["events"].as_array().context("events")?;
    assert_eq!(
        acks[1]["secrets"],
        json!([{"field": "output", "rule": "aws-access-token", "action": "redacted",
            "reason": "secret detected: aws-access-token"}]),
        "{answer}"
    );
    assert_eq!(acks[2]["secrets"][0]["rule"], "private-key", "{answer}");
    assert_eq!(acks[2]["secrets"][0]["field"], "content", "{answer}");
    for clean in [&acks[0], &acks[3]] {
        assert!(clean.get("secrets").is_none(), "{answer}");
    }
    assert_eq!(
        answer["next_seq"], 6,
        "the harness's seqs are its own: {answer}"
    );
    Ok((
        session,
        vec![
            "CANARY-http-arguments".into(),
            "CANARY-http-note".into(),
            "CANARY-http-plan".into(),
        ],
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_sent_through_ingest_or_the_library_is_never_readable_and_the_rest_reads()
-> Result<()> {
    let stack = TestStack::new("secretscan", 1).await?;
    let _projector = stack.spawn_projector()?;
    let ingest = ServedProcess::start(&stack, "ingest").await?;
    let log = event_log(&stack).await?;
    let (library, library_canaries) = library_session(&log).await?;
    let (served, http_canaries) = http_session(&ingest).await?;
    let secrets = [
        aws_key('L'),
        aws_key('H'),
        pem_body("lib"),
        pem_body("http"),
    ];
    let holds_secret = |text: &str| secrets.iter().find(|s| text.contains(s.as_str())).cloned();

    // Recovery, started after the writes (a reader's key predating a redaction reads the
    // withheld field as unreadable, never as its text, until key_cache_secs is up).
    let recovery = Recovery::connect(&stack.settings).await?;
    let recovery_service = ServedProcess::start(&stack, "serve-recovery").await?;
    let http = client()?;
    for (session, canaries) in [(library, &library_canaries), (served, &http_canaries)] {
        // The library's history: the fields read as redacted with the scan's reason.
        let page = recovery
            .events(
                session,
                sessionlog_recovery::EventRange {
                    limit: Some(100),
                    ..Default::default()
                },
            )
            .await?;
        let mut unopened = Vec::new();
        for event in &page.events {
            for (field, why) in &event.unopened {
                unopened.push((event.kind.clone(), field.clone(), why.clone()));
            }
        }
        unopened.sort();
        assert_eq!(
            unopened,
            [
                (
                    "ToolCallResult".to_string(),
                    "output".to_string(),
                    redacted("aws-access-token")
                ),
                (
                    "UserRequest".to_string(),
                    "content".to_string(),
                    redacted("private-key")
                ),
            ],
            "session {session}"
        );
        let history = serde_json::to_string(&page.events)?;
        assert_eq!(holds_secret(&history), None, "recovery's history");
        for canary in canaries {
            assert!(history.contains(canary.as_str()), "{canary} reads back");
        }

        // The recovery service's HTTP history.
        let body = http
            .get(format!(
                "{}/v1/sessions/{session}/events",
                recovery_service.base
            ))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        assert_eq!(holds_secret(&body), None, "the HTTP history");
        assert!(body.contains(&redacted("aws-access-token")), "{body}");
        assert!(body.contains(&redacted("private-key")), "{body}");
        for canary in canaries {
            assert!(body.contains(canary.as_str()), "{canary} over HTTP");
        }

        // The projection's context view, once the projector has the session's last event.
        let view = wait_for(
            "the projected context view to hold the session's plan",
            Duration::from_secs(60),
            || async {
                let view = serde_json::to_string(&recovery.context_view(session, None).await?)?;
                Ok(view.contains("-plan").then_some(view))
            },
        )
        .await?;
        assert_eq!(holds_secret(&view), None, "the context view");

        // The session resumes: a new harness's bundle holds no secret, and it writes on.
        let bundle = recovery.resume(session, "harness-2", None).await?;
        let resumed = serde_json::to_string(&bundle.context)?;
        assert_eq!(holds_secret(&resumed), None, "the resumed context");
        let (mut writer, _) = SessionWriter::claim(Arc::clone(&log), session, "harness-3").await?;
        let more = writer
            .append(SessionEvent::PlanUpdated {
                plan: Content::plain("CANARY-after-resume"),
            })
            .await?;
        assert!(more.secrets.is_empty());
    }

    // No byte of the topic holds a secret: the withheld fields were never written, not even
    // sealed.
    let records = every_record(&stack, &stack.settings.kafka.topic, |m| {
        use rdkafka::message::Message;
        m.payload().unwrap_or_default().to_vec()
    })
    .await?;
    assert!(!records.is_empty());
    for secret in &secrets {
        let hits = records
            .iter()
            .filter(|r| r.windows(secret.len()).any(|w| w == secret.as_bytes()))
            .count();
        assert_eq!(hits, 0, "{hits} record(s) of the topic hold a secret");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn with_encryption_off_a_secret_is_refused_naming_the_rule_and_the_setting() -> Result<()> {
    let mut stack = TestStack::new("secretplain", 1).await?;
    stack.settings.privacy.encrypt = false;
    let log = event_log(&stack).await?;
    assert!(log.keyring().is_none());
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "agent", None).await?;
    let refused = writer
        .append(SessionEvent::UserRequest {
            content: Content::plain(format!("my key is {}", aws_key('P'))),
        })
        .await;
    let message = match refused {
        Err(sessionlog_producer::Error::Keys(
            e @ sessionlog_keys::Error::SecretNotSealable { .. },
        )) => e.to_string(),
        other => anyhow::bail!("the library wrote it: {other:?}"),
    };
    assert!(
        message.contains("aws-access-token") && message.contains("secret_scan"),
        "{message}"
    );
    assert_eq!(writer.next_seq(), 2, "nothing was written");

    let ingest = ServedProcess::start(&stack, "ingest").await?;
    let http = client()?;
    let (session, token) = create_over_http(&http, &ingest).await?;
    let token = token.as_str();
    let append = |events: Value| {
        http.post(format!("{}/v1/sessions/{session}/events", ingest.base))
            .header(WRITER_TOKEN, token)
            .json(&json!({"epoch": 1, "events": events}))
            .send()
    };
    let answer = append(json!([
        {"seq": 2, "kind": "PlanUpdated", "data": {"plan": {"Plain": "a plan"}}},
        {"seq": 3, "kind": "UserRequest", "data": {"content": {"Plain": pem("plain")}}},
    ]))
    .await?;
    assert_eq!(answer.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let problem: Value = answer.json().await?;
    assert_eq!(problem["code"], "secret_detected", "{problem}");
    assert_eq!(problem["rule"], "private-key", "{problem}");
    assert_eq!(problem["seq"], 3, "{problem}");
    let detail = problem.to_string();
    assert!(
        detail.contains("secret_scan") && detail.contains("encrypt"),
        "{detail}"
    );
    assert!(
        !detail.contains(&pem_body("plain")),
        "the problem holds the secret"
    );
    // Nothing of the batch was written: seq 2 is still the next one.
    let next = append(json!([
        {"seq": 2, "kind": "PlanUpdated", "data": {"plan": {"Plain": "a plan"}}},
    ]))
    .await?
    .error_for_status()?
    .json::<Value>()
    .await?;
    assert_eq!(next["next_seq"], 3, "{next}");
    Ok(())
}

/// A writer fenced by a takeover does not know it yet: its next appends are acknowledged by
/// Kafka and refused by the fold (their seqs are the winner's). The scan withholds a secret
/// it writes at the seq of the winner's tool output; that must not make the winner's output
/// read as redacted, nor leave the operator unable to redact it for real afterwards (found
/// by review: the scan's redaction destroyed the key of field `output` at that seq, which is
/// the winner's field's key).
#[tokio::test(flavor = "multi_thread")]
async fn a_fenced_writers_withheld_secret_leaves_the_winners_field_at_that_seq_readable()
-> Result<()> {
    let stack = TestStack::new("secretzombie", 1).await?;
    let _projector = stack.spawn_projector()?;
    let log = event_log(&stack).await?;
    let (mut zombie, _) = SessionWriter::create(Arc::clone(&log), "agent", None).await?;
    let session = zombie.session_id();
    let call = zombie
        .append(SessionEvent::ToolCallRequested {
            tool: "shell".into(),
            arguments: Content::plain("env"),
            effect: EffectClass::Pure,
            approval_id: None,
        })
        .await?
        .envelope
        .seq;
    // The winner in another process (its own log): the zombie learns nothing of the claim.
    let (mut winner, _) =
        SessionWriter::claim(event_log(&stack).await?, session, "harness-2").await?;
    let result = |output: String| SessionEvent::ToolCallResult {
        call_seq: call,
        outcome: CallOutcome::Succeeded,
        output: Content::plain(output),
        source: ResultSource::Executed,
        recorded_by: None,
        note: None,
    };
    // Its envelope as written (sealed), to open later with nothing but the session's key.
    let written = winner
        .append_with_confirmed(result("CANARY-winner-output".into()), None, None)
        .await?
        .envelope;
    let target = written.seq;

    // The zombie fills up to the winner's seq, then prints a secret there.
    let mut batch: Vec<SessionEvent> = (zombie.next_seq()..target)
        .map(|n| SessionEvent::PlanUpdated {
            plan: Content::plain(format!("zombie plan {n}")),
        })
        .collect();
    batch.push(result(format!("AWS_ACCESS_KEY_ID={}", aws_key('Z'))));
    let appended = zombie.append_batch(batch).await?;
    let withheld = appended.last().context("the zombie's result")?;
    assert_eq!(
        withheld.envelope.seq, target,
        "the zombie wrote at the winner's seq"
    );
    assert_eq!(withheld.secrets.len(), 1, "{:?}", withheld.secrets);

    let output_at = |page: &sessionlog_recovery::EventPage| -> Result<(String, Option<String>)> {
        let event = page
            .events
            .iter()
            .find(|e| e.seq == target)
            .context("the winner's result")?;
        let text = match &event.event {
            Some(SessionEvent::ToolCallResult { output, .. }) => match output {
                Content::Plain(text) => text.clone(),
                sealed => format!("{sealed:?}"),
            },
            other => anyhow::bail!("not the winner's result: {other:?}"),
        };
        Ok((text, event.unopened.get("output").cloned()))
    };
    let range = || sessionlog_recovery::EventRange {
        limit: Some(100),
        ..Default::default()
    };
    let recovery = Recovery::connect(&stack.settings).await?;
    let page = wait_for(
        "the index to hold the winner's result",
        Duration::from_secs(60),
        || async {
            let page = recovery.events(session, range()).await?;
            Ok(page.events.iter().any(|e| e.seq == target).then_some(page))
        },
    )
    .await?;
    assert_eq!(
        output_at(&page)?,
        ("CANARY-winner-output".to_string(), None),
        "the winner's output reads as its text"
    );

    // An operator's redaction of the winner's output still destroys its key: a reader that
    // knows nothing of the session's state (its own key, fetched after) reads it redacted.
    recovery
        .redact(
            session,
            target,
            "output",
            "alice",
            "the winner's output, withdrawn",
        )
        .await?;
    let fresh = Recovery::connect(&stack.settings).await?;
    let (opened, unopened) = fresh.opener(session, false).await?.open_event(&written);
    assert!(
        matches!(
            &opened.event,
            SessionEvent::ToolCallResult {
                output: Content::Sealed { .. },
                ..
            }
        ),
        "{opened:?}"
    );
    assert_eq!(unopened.len(), 1, "{unopened:?}");
    assert!(
        matches!(&unopened[0], ("output", sessionlog_keys::Text::Redacted(_))),
        "{unopened:?}"
    );
    Ok(())
}
