//! Spans listed by tenant: the projector writes each span under its session's tenant
//! (`trace_spans_by_tenant_day`, migration 14), so a tenant's `GET /v1/spans` lists its own
//! spans from its own partitions alone, and an operator's listing (no tenant) lists every
//! tenant's. What a listing read is the store's own report of it ([`SpanListing`]): the
//! partitions it queried and the rows it took from them.

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use sessionlog_http::auth::Grant;
use sessionlog_log::Role;
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_recovery::SpanQuery;
use sessionlog_schemas::{Content, SessionEvent, SessionId, TerminalOutcome};
use sessionlog_store::{DaySpanRow, ProjectionStore, SpanListing, SpanPartition, SpanSearch};
use sessionlog_testkit::projector::{event_log, now_micros, store};
use sessionlog_testkit::{ServedProcess, TestStack, wait_for};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// A span's place in a listing: start, session, seq.
type OrderKey = (i64, Uuid, i64);

/// The keyspace's day bucket count (`[projector] trace_day_buckets`, its default).
const BUCKETS: u16 = 16;

/// A session of `calls` model calls of `model` in `tenant`, ended.
async fn session_in(
    log: &Arc<EventLog>,
    tenant: &str,
    model: &str,
    calls: usize,
) -> Result<SessionId> {
    let (mut writer, _) =
        SessionWriter::create_new_in(Arc::clone(log), "lister", None, tenant).await?;
    for _ in 0..calls {
        writer
            .append(SessionEvent::ModelResponse {
                model: model.into(),
                tokens_in: 10,
                tokens_out: 5,
                cost_micros: 7,
                started_at: now_micros(),
                content: Content::plain("ok"),
                cache_read_tokens: 0,
                cache_creation_tokens: 0,
                provider: None,
            })
            .await?;
    }
    writer.close(TerminalOutcome::Completed, None).await?;
    Ok(writer.session_id())
}

/// Waits until the projector has closed `session`'s own span, then returns its spans' order
/// keys from `trace_spans_by_session` (a table partitioned by the session, independent of the
/// listing under test). The session's by-day rows and their notes are written before the
/// session's rows, so they are in place by then.
async fn projected(store: &ProjectionStore, session: SessionId) -> Result<Vec<OrderKey>> {
    wait_for(
        "the session span to close",
        Duration::from_secs(90),
        || async {
            let spans = store.spans(session).await?;
            let closed = spans
                .iter()
                .any(|s| s.span_kind == "session" && s.end_seq.is_some());
            Ok(closed.then(|| {
                spans
                    .iter()
                    .map(|s| (s.start_us, session.0, s.span_seq))
                    .collect()
            }))
        },
    )
    .await
}

/// Every span of `[from_us, to_us)` that `tenant` may see, from the store, `limit` at a time
/// through the cursor; with the listings of each page.
async fn list_all(
    store: &ProjectionStore,
    tenant: Option<&str>,
    (from_us, to_us): (i64, i64),
    limit: usize,
) -> Result<(Vec<DaySpanRow>, Vec<SpanListing>)> {
    let (mut spans, mut pages) = (Vec::new(), Vec::new());
    let mut after = None;
    for _ in 0..100 {
        let search = SpanSearch {
            from_us,
            to_us,
            after,
            limit,
            tenant: tenant.map(String::from),
        };
        let page = store.spans_between(&search, |_| true).await?;
        spans.extend(page.spans.iter().cloned());
        let full = page.spans.len() == limit;
        after = page.spans.last().map(DaySpanRow::order_key);
        pages.push(page);
        if !full {
            return Ok((spans, pages));
        }
    }
    anyhow::bail!("more than 100 pages")
}

fn keys(spans: &[DaySpanRow]) -> Vec<OrderKey> {
    spans.iter().map(DaySpanRow::order_key).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_lists_its_own_spans_from_its_own_partitions_and_an_operator_lists_all()
-> Result<()> {
    let stack = TestStack::new("spans_tenant", 2).await?;
    let _projector = stack.spawn_projector()?;
    let log = event_log(&stack).await?;
    let from_us = now_micros() - 60_000_000;
    // A large tenant, a small one, and a session started without a tenant (as a harness with
    // authentication off starts one), which is `default`'s.
    let mut sessions: BTreeMap<&str, Vec<SessionId>> = BTreeMap::new();
    for (tenant, model, count, calls) in [
        ("acme", "acme-model", 6, 5),
        ("globex", "globex-model", 1, 2),
    ] {
        for _ in 0..count {
            let session = session_in(&log, tenant, model, calls).await?;
            sessions.entry(tenant).or_default().push(session);
        }
    }
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "lister", None).await?;
    writer.close(TerminalOutcome::Completed, None).await?;
    sessions.insert("default", vec![writer.session_id()]);
    let store = store(&stack).await?;
    let mut expected: BTreeMap<&str, Vec<OrderKey>> = BTreeMap::new();
    for (tenant, ids) in &sessions {
        for id in ids {
            expected
                .entry(tenant)
                .or_default()
                .extend(projected(&store, *id).await?);
        }
        expected.entry(tenant).or_default().sort();
    }
    assert_eq!(expected["acme"].len(), 6 * (1 + 5));
    assert_eq!(expected["globex"].len(), 1 + 2);
    assert_eq!(expected["default"].len(), 1);
    let range = (from_us, now_micros() + 60_000_000);
    // The partitions each tenant's sessions went to (a session's bucket, on each day its
    // spans began: the day of each span's start).
    let partitions_of = |tenant: &str| -> BTreeSet<SpanPartition> {
        sessions[tenant]
            .iter()
            .flat_map(|id| {
                expected[tenant]
                    .iter()
                    .filter(move |(_, s, _)| *s == id.0)
                    .map(move |(start, _, _)| SpanPartition {
                        tenant: tenant.to_string(),
                        day: sessionlog_session::trace::day_of(*start),
                        bucket: sessionlog_session::trace::day_bucket(*id, BUCKETS),
                    })
            })
            .collect()
    };

    // Each tenant: its spans exactly, in order, read from its own partitions alone, and no
    // more rows read than it has spans, however many the other tenants have.
    for tenant in ["acme", "globex", "default"] {
        let (spans, pages) = list_all(&store, Some(tenant), range, 1_000).await?;
        assert_eq!(keys(&spans), expected[tenant], "{tenant}'s spans");
        assert!(
            spans.iter().all(|s| s.tenant.as_deref() == Some(tenant)),
            "{tenant}: {spans:?}"
        );
        let [page] = &pages[..] else {
            anyhow::bail!("{tenant}: one page holds them: {pages:?}");
        };
        let queried: BTreeSet<SpanPartition> = page.partitions.iter().cloned().collect();
        assert_eq!(queried, partitions_of(tenant), "{tenant}'s partitions");
        assert_eq!(
            page.partitions.len(),
            queried.len(),
            "{tenant}: each partition queried once"
        );
        assert_eq!(
            page.rows_read,
            expected[tenant].len() as u64,
            "{tenant}: rows read"
        );
    }

    // The operator: every tenant's spans, merged in order, from every tenant's partitions.
    let mut everyone: Vec<OrderKey> = expected.values().flatten().copied().collect();
    everyone.sort();
    let (spans, pages) = list_all(&store, None, range, 1_000).await?;
    assert_eq!(keys(&spans), everyone, "the operator's listing");
    let queried: BTreeSet<SpanPartition> = pages[0].partitions.iter().cloned().collect();
    let all_partitions: BTreeSet<SpanPartition> = ["acme", "globex", "default"]
        .into_iter()
        .flat_map(partitions_of)
        .collect();
    assert_eq!(queried, all_partitions, "every tenant's partitions");
    assert_eq!(pages[0].rows_read, everyone.len() as u64);

    // Pages through the cursor: a tenant's add up to its whole listing, and each page reads
    // no more than its own tenant's rows; the operator's add up to everyone's.
    for (tenant, want) in [(Some("acme"), &expected["acme"]), (None, &everyone)] {
        let (spans, pages) = list_all(&store, tenant, range, 4).await?;
        assert_eq!(&keys(&spans), want, "{tenant:?} in pages of 4");
        assert!(pages.len() > 2, "{tenant:?}: {} pages", pages.len());
        if let Some(tenant) = tenant {
            for page in &pages {
                assert!(page.partitions.iter().all(|p| p.tenant == tenant));
                assert!(page.rows_read <= want.len() as u64);
            }
        }
    }

    // A filter drops rows after they are read: the read is still the tenant's alone.
    let search = SpanSearch {
        from_us: range.0,
        to_us: range.1,
        after: None,
        limit: 100,
        tenant: Some("globex".into()),
    };
    let nothing = store.spans_between(&search, |_| false).await?;
    assert!(nothing.spans.is_empty());
    assert_eq!(nothing.rows_read, expected["globex"].len() as u64);

    // The route's own query, without a tenant (authentication off): everyone's, filters
    // applied; with a tenant, a filter on another tenant's model finds nothing.
    let rfc3339 = |micros: i64| -> Result<String> {
        let time = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1_000)?;
        Ok(time.format(&time::format_description::well_known::Rfc3339)?)
    };
    let (from, to) = (rfc3339(range.0)?, rfc3339(range.1)?);
    let query = |model: Option<&str>| SpanQuery {
        from: from.clone(),
        to: Some(to.clone()),
        model: model.map(String::from),
        limit: Some(1_000),
        ..SpanQuery::default()
    };
    let operator = query(None).page(&store, None).await?;
    assert_eq!(keys(&operator.spans), everyone);
    let globex_calls = query(Some("globex-model")).page(&store, None).await?;
    assert_eq!(globex_calls.spans.len(), 2, "{globex_calls:?}");
    let across = query(Some("globex-model"))
        .page(&store, Some("acme"))
        .await?;
    assert!(across.spans.is_empty(), "{across:?}");

    // Over HTTP, each tenant's credential lists its own spans, paging included.
    let service = ServedProcess::start(&stack, "serve-recovery").await?;
    for tenant in ["acme", "globex", "default"] {
        let token = sessionlog_testkit::auth::mint(&Grant {
            tenant: Some(tenant.into()),
            ..Grant::new("lister", &[Role::Reader], Duration::from_secs(600))
        })?;
        let http = sessionlog_testkit::auth::client_with(&token)?;
        let mut listed: Vec<OrderKey> = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let mut address = reqwest::Url::parse(&format!("{}/v1/spans", service.base))?;
            address
                .query_pairs_mut()
                .append_pair("from", &from)
                .append_pair("to", &to)
                .append_pair("limit", "5");
            if let Some(cursor) = &cursor {
                address.query_pairs_mut().append_pair("cursor", cursor);
            }
            let answer = http.get(address).send().await?;
            let status = answer.status().as_u16();
            let page: Value = answer.json().await?;
            ensure!(status == 200, "{tenant}: {status} {page}");
            for span in page["spans"].as_array().context("spans")? {
                ensure!(span["tenant"] == tenant, "{tenant} was shown {span}");
                let session: Uuid = span["session_id"].as_str().context("session_id")?.parse()?;
                let number = |field: &str| span[field].as_i64().context("a number");
                listed.push((number("start_us")?, session, number("span_seq")?));
            }
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_string()),
                None => break,
            }
        }
        assert_eq!(listed, expected[tenant], "{tenant} over HTTP");
    }
    Ok(())
}
