//! `sessionlog dlq list|show|replay` on the real stack.
//!
//! A projector reading a registry that lacks the schemas (here: `registry.url` pointing at a
//! path of the registry that holds none, as a wrong URL or a registry restored without them
//! would) dead-letters every event of a session as an unknown schema id; a record of garbage
//! bytes is dead-lettered as well. `list` shows each with its reason and origin, `show` decodes
//! one through the right registry without printing what it says, and once a projector reads
//! the right registry, `replay` puts the session's events back into the events topic and the
//! projection gets them. Replayed twice, the log holds three copies of each event and the
//! projection has each once: the fold takes the second copy for a duplicate, not for a
//! rejection. Garbage is refused as still undecodable (exit 1); an unknown address is exit 1,
//! a malformed one exit 2, an unreachable registry exit 3 with nothing appended.

use anyhow::{Context, Result, ensure};
use rdkafka::message::Message;
use serde_json::Value;
use sessionlog_producer::SessionWriter;
use sessionlog_schemas::{Content, SessionEvent, SessionId, TerminalOutcome};
use sessionlog_testkit::projector::{
    dead_letters, event_log, every_record, send_raw, store, wait_caught_up,
};
use sessionlog_testkit::{TestStack, wait_for};
use std::collections::BTreeSet;
use std::time::Duration;

/// A text the dead-letter commands must never print.
const REQUEST: &str = "a request only the session may read";

/// What a command did: its exit code, its JSON output (`Null` if none), and stderr.
struct Ran {
    code: Option<i32>,
    json: Value,
    stderr: String,
}

/// `sessionlog dlq <args> --json`.
fn dlq(stack: &TestStack, args: &[&str]) -> Result<Ran> {
    let args: Vec<&str> = ["dlq"]
        .iter()
        .chain(args)
        .chain(&["--json"])
        .copied()
        .collect();
    let output = stack.sessionlog(&args)?;
    Ok(Ran {
        code: output.status.code(),
        json: serde_json::from_slice(&output.stdout).unwrap_or(Value::Null),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// `sessionlog dlq <args>` as text: exit code and stdout.
fn dlq_text(stack: &TestStack, args: &[&str]) -> Result<(Option<i32>, String)> {
    let args: Vec<&str> = ["dlq"].iter().chain(args).copied().collect();
    let output = stack.sessionlog(&args)?;
    Ok((
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    ))
}

/// `(partition, offset)` of a JSON object with those members.
fn position(value: &Value) -> Option<(i64, i64)> {
    Some((value["partition"].as_i64()?, value["offset"].as_i64()?))
}

/// Every record of the events topic as `(partition, offset, key)`.
async fn events_topic(stack: &TestStack) -> Result<Vec<(i32, i64, String)>> {
    let topic = stack.settings.kafka.topic.clone();
    every_record(stack, &topic, |m| {
        let key = m.key().map(String::from_utf8_lossy).unwrap_or_default();
        (m.partition(), m.offset(), key.into_owned())
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_are_listed_shown_and_replayed_into_the_projection_once() -> Result<()> {
    let stack = TestStack::new("cli_dlq", 2).await?;
    let store = store(&stack).await?;
    let mut misread = stack.clone();
    misread.settings.registry.url = format!(
        "{}/no-such-registry",
        stack.settings.registry.url.trim_end_matches('/')
    );
    let wrong_projector = misread.spawn_projector()?;

    // A session, written through the right registry, and a record of garbage bytes.
    let log = event_log(&stack).await?;
    let (mut writer, started) = SessionWriter::create(log, "dlq-agent", Some("dlq")).await?;
    let request = writer.user_request(REQUEST).await?;
    let plan = writer
        .append(SessionEvent::PlanUpdated {
            plan: Content::plain("a plan"),
        })
        .await?;
    let ended = writer.close(TerminalOutcome::Completed, None).await?;
    let session = writer.session_id();
    let appended = [&started, &request, &plan, &ended];
    let session_origins: BTreeSet<(i64, i64)> = appended
        .iter()
        .map(|a| (i64::from(a.position.partition), a.position.offset))
        .collect();
    let garbage = b"\x07 not a framed event";
    let garbage_key = SessionId::new().to_string();
    let (garbage_partition, garbage_offset) = send_raw(&stack, &garbage_key, garbage).await?;

    // The misreading projector dead-letters all five and records its progress past them.
    wait_for("five dead letters", Duration::from_secs(90), || async {
        Ok((dead_letters(&stack).await?.len() >= 5).then_some(()))
    })
    .await?;
    wait_caught_up(&stack, &store, Duration::from_secs(60)).await?;
    drop(wrong_projector);
    ensure!(
        store.load_session(session).await?.is_none(),
        "nothing of the session was projected"
    );
    let log_before = events_topic(&stack).await?;

    // list: each with its reason, origin, place, time and session.
    let listed = dlq(&stack, &["list"])?;
    ensure!(listed.code == Some(0), "list: {}", listed.stderr);
    let report = &listed.json;
    ensure!(
        report["total"] == 5 && report["listed"] == 5,
        "list: {report}"
    );
    let letters = report["dead_letters"].as_array().context("dead_letters")?;
    let events_topic_name = stack.settings.kafka.topic.as_str();
    let mut origins = BTreeSet::new();
    for letter in letters {
        ensure!(
            letter["reason"].as_str().is_some_and(|r| !r.is_empty())
                && letter["origin"]["topic"] == events_topic_name
                && letter["timestamp_ms"].as_i64().is_some_and(|t| t > 0)
                && position(letter).is_some(),
            "a dead letter with its reason, origin, place and time: {letter}"
        );
        origins.insert(position(&letter["origin"]).context("origin")?);
    }
    let garbage_origin = (i64::from(garbage_partition), garbage_offset);
    let mut expected = session_origins.clone();
    expected.insert(garbage_origin);
    ensure!(
        origins == expected,
        "origins {origins:?}, appended {expected:?}"
    );
    let by_origin = |origin: (i64, i64)| {
        letters
            .iter()
            .find(|l| position(&l["origin"]) == Some(origin))
            .cloned()
            .context("no dead letter of that origin")
    };
    let address = |letter: &Value| -> Result<String> {
        let (p, o) = position(letter).context("place")?;
        Ok(format!("{p}:{o}"))
    };
    let garbage_letter = by_origin(garbage_origin)?;
    ensure!(
        garbage_letter["reason"]
            .as_str()
            .is_some_and(|r| r.contains("magic byte")),
        "{garbage_letter}"
    );
    let session_letters: Vec<Value> = letters
        .iter()
        .filter(|l| l["key"] == session.to_string().as_str())
        .cloned()
        .collect();
    ensure!(session_letters.len() == 4, "{report}");
    ensure!(
        session_letters.iter().all(|l| l["reason"]
            .as_str()
            .is_some_and(|r| r.contains("unknown schema id"))),
        "the misread registry is the reason: {report}"
    );
    let session_addresses: Vec<String> =
        session_letters.iter().map(address).collect::<Result<_>>()?;

    let (code, text) = dlq_text(&stack, &["list"])?;
    let garbage_line = [
        address(&garbage_letter)?,
        format!("{garbage_partition}:{garbage_offset}"),
    ];
    ensure!(
        code == Some(0)
            && text.contains("5 dead letter(s)")
            && text.contains(&format!("origins in {events_topic_name}"))
            && text.lines().any(|l| {
                // Address, time (one RFC 3339 word), origin, key, reason.
                let columns: Vec<&str> = l.split_whitespace().collect();
                columns.first() == Some(&garbage_line[0].as_str())
                    && columns.get(2) == Some(&garbage_line[1].as_str())
                    && l.contains("magic byte")
            }),
        "{text}"
    );

    // Bounds: --limit and --partition.
    let limited = dlq(&stack, &["list", "--limit", "2"])?;
    ensure!(
        limited.json["listed"] == 2 && limited.json["total"] == 5,
        "{}",
        limited.json
    );
    let garbage_dead_partition = garbage_letter["partition"].as_i64().context("partition")?;
    let one = dlq(
        &stack,
        &["list", "--partition", &garbage_dead_partition.to_string()],
    )?;
    let in_partition = one.json["dead_letters"].as_array().context("listed")?;
    ensure!(
        !in_partition.is_empty()
            && in_partition
                .iter()
                .all(|l| l["partition"] == garbage_dead_partition),
        "{}",
        one.json
    );

    // show: garbage as its size and first bytes; an event by its envelope, never its text.
    let shown = dlq(&stack, &["show", &address(&garbage_letter)?])?;
    let g = &shown.json;
    ensure!(shown.code == Some(0), "show: {}", shown.stderr);
    ensure!(
        g["decoded"].is_null()
            && g["undecodable"]
                .as_str()
                .is_some_and(|r| r.contains("magic byte"))
            && g["value_bytes"] == garbage.len()
            && g["value_prefix_hex"]
                .as_str()
                .is_some_and(|h| h.starts_with("07 20 6e 6f 74"))
            && g["key"] == garbage_key.as_str(),
        "{g}"
    );
    let start_letter = by_origin((
        i64::from(started.position.partition),
        started.position.offset,
    ))?;
    let shown = dlq(&stack, &["show", &address(&start_letter)?])?;
    let s = &shown.json;
    ensure!(
        shown.code == Some(0)
            && s["decoded"]["kind"] == "SessionStarted"
            && s["decoded"]["seq"] == 1
            && s["decoded"]["session_id"] == session.to_string().as_str()
            && s["schema_id"].as_u64().is_some()
            && s["undecodable"].is_null()
            && s["headers"]
                .as_array()
                .is_some_and(|h| h.iter().any(|h| h["key"] == "sessionlog.reason")),
        "{s}"
    );
    let request_letter = by_origin((
        i64::from(request.position.partition),
        request.position.offset,
    ))?;
    for json in [true, false] {
        let mut args = vec!["dlq", "show"];
        let request_address = address(&request_letter)?;
        args.push(&request_address);
        if json {
            args.push("--json");
        }
        let output = stack.sessionlog(&args)?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        ensure!(
            output.status.success() && stdout.contains("UserRequest") && !stdout.contains(REQUEST),
            "show names the event and never prints its text: {stdout}"
        );
    }

    // With the registry unreachable, show prints what it has and exits 3; replay appends
    // nothing and exits 3.
    let mut offline = stack.clone();
    offline.settings.registry.url = "http://127.0.0.1:1/apis/ccompat/v7".into();
    let start_address = address(&start_letter)?;
    let unreached = offline.sessionlog(&["dlq", "show", &start_address, "--json"])?;
    let partial: Value = serde_json::from_slice(&unreached.stdout)?;
    ensure!(
        unreached.status.code() == Some(3)
            && partial["decoded"].is_null()
            && partial["reason"].as_str().is_some(),
        "{partial}"
    );
    let unreached = offline.sessionlog(&["dlq", "replay", &start_address])?;
    ensure!(unreached.status.code() == Some(3), "{unreached:?}");

    // Addresses that hold nothing are exit 1; malformed ones and bad selections exit 2.
    let nothing = dlq(&stack, &["show", "0:999999"])?;
    ensure!(
        nothing.code == Some(1) && nothing.stderr.contains("no dead letter at 0:999999"),
        "{}",
        nothing.stderr
    );
    ensure!(dlq(&stack, &["show", "9:0"])?.code == Some(1));
    for usage in [
        &["show", "nonsense"][..],
        &["replay"],
        &["replay", "0:0", "--all"],
        &["list", "--limit", "0"],
    ] {
        let ran = dlq(&stack, usage)?;
        ensure!(ran.code == Some(2), "{usage:?} exited {:?}", ran.code);
    }
    let unknown = dlq(&stack, &["replay", "0:999999"])?;
    ensure!(
        unknown.code == Some(1) && unknown.json["records"][0]["outcome"] == "not_found",
        "{}",
        unknown.json
    );

    // A dry run appends nothing, and says garbage still does not decode.
    let dry = dlq(&stack, &["replay", "--all", "--dry-run"])?;
    let outcomes = |report: &Value| -> Vec<(String, String)> {
        report["records"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    r["dead_letter"].as_str().unwrap_or_default().to_owned(),
                    r["outcome"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    let garbage_address = address(&garbage_letter)?;
    let mut expected_dry: Vec<(String, String)> = session_addresses
        .iter()
        .map(|a| (a.clone(), "would_append".to_owned()))
        .collect();
    expected_dry.push((garbage_address.clone(), "undecodable".to_owned()));
    let mut dry_outcomes = outcomes(&dry.json);
    dry_outcomes.sort();
    expected_dry.sort();
    ensure!(
        dry.code == Some(1) && dry_outcomes == expected_dry,
        "dry run: {}",
        dry.json
    );
    let log_after = events_topic(&stack).await?;
    ensure!(
        log_after == log_before,
        "a dry run, and a replay without the registry, append nothing: {log_before:?} then {log_after:?}"
    );

    // The cause fixed (a projector reading the right registry), the session's dead letters
    // go back into the events topic, on the session's partition, and are projected.
    let mut projector = stack.spawn_projector()?;
    let mut replay_args = vec!["replay"];
    replay_args.extend(session_addresses.iter().map(String::as_str));
    let replayed = dlq(&stack, &replay_args)?;
    ensure!(
        replayed.code == Some(0) && replayed.json["appended"] == 4,
        "replay: {} {}",
        replayed.json,
        replayed.stderr
    );
    let partition = i64::from(writer.partition());
    ensure!(
        replayed.json["records"].as_array().is_some_and(|r| r
            .iter()
            .all(|r| r["outcome"] == "appended" && r["appended"]["partition"] == partition)),
        "{}",
        replayed.json
    );
    let fold = writer.state().canonical_json();
    wait_for(
        "the replayed session in the projection",
        Duration::from_secs(60),
        || {
            let (store, fold) = (store.clone(), fold.clone());
            async move {
                Ok(store
                    .load_session(session)
                    .await?
                    .filter(|p| p.state.canonical_json() == fold))
            }
        },
    )
    .await?;

    // Replayed again (all of them: garbage is refused, exit 1): appended once more, and the
    // projection is what the writer folded, with no rejection.
    let again = dlq(&stack, &["replay", "--all"])?;
    let mut again_outcomes = outcomes(&again.json);
    again_outcomes.sort();
    let expected_again: Vec<(String, String)> = expected_dry
        .iter()
        .map(|(a, o)| {
            let o = if o == "would_append" { "appended" } else { o };
            (a.clone(), o.to_owned())
        })
        .collect();
    ensure!(
        again.code == Some(1)
            && again_outcomes == expected_again
            && again.stderr.contains("1 of 5 dead letter(s) not replayed"),
        "second replay: {} {}",
        again.json,
        again.stderr
    );
    wait_caught_up(&stack, &store, Duration::from_secs(60)).await?;
    projector.assert_running()?;
    let projected = store
        .load_session(session)
        .await?
        .context("the session is projected")?;
    ensure!(
        projected.state.canonical_json() == fold,
        "the projection took each event once: last seq {}",
        projected.state.last_seq
    );
    let rejected = store.rejected_events(session).await?;
    ensure!(
        rejected.is_empty(),
        "the second copies were duplicates, not rejections: {:?}",
        rejected.iter().map(|r| &r.label).collect::<Vec<_>>()
    );
    let copies = events_topic(&stack)
        .await?
        .iter()
        .filter(|(_, _, key)| *key == session.to_string())
        .count();
    ensure!(copies == 12, "each event three times in the log: {copies}");
    ensure!(
        dead_letters(&stack).await?.len() == 5,
        "nothing replayed was dead-lettered again"
    );

    // status names the command that reads them.
    let status = stack.sessionlog(&["status", "--group", &stack.group, "--json"])?;
    let status: Value = serde_json::from_slice(&status.stdout)?;
    ensure!(
        status["problems"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["fix"]
                .as_str()
                .is_some_and(|f| f.starts_with("sessionlog dlq list")))),
        "{status}"
    );
    Ok(())
}
