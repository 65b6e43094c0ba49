//! Sending spans to the trace receiver, and acting on what it answers.
//!
//! The OTLP exporter only logs a partial success, and its error for a refusal carries the
//! status in a message. So the exporter sends through [`AnsweringClient`], our reqwest client
//! that keeps each answer's status and partial success, and [`Receiver::deliver`] decides from
//! those: retry, send a request the receiver found too large (413) or would not take (another
//! 4xx) again in halves, count the spans it rejected, or stop with an error that names the
//! setting to fix. The exporter's own retries are off: every try goes through
//! [`Receiver::deliver`], which takes off the texts of sessions erased since before each.

use crate::erasure::Erasures;
use crate::error::Refusal;
use crate::worker::ExportSummary;
use crate::{Error, ExportOptions, Result};
use backon::BackoffBuilder;
use opentelemetry::KeyValue;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use prost::Message;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Spans per OTLP request: with texts cut at [`crate::genai::MAX_TEXT_BYTES`], a request
/// stays within a few megabytes, under receivers' body limits (a receiver that answers 413
/// anyway gets the request again in halves).
pub(crate) const SPANS_PER_REQUEST: usize = 128;

/// What the receiver answered to one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Answer {
    /// The HTTP status.
    status: u16,
    /// Spans of the request the receiver took the request for but rejected (OTLP partial
    /// success), with its reason.
    rejected_spans: u64,
    /// The receiver's reason for the rejected spans, clipped.
    message: String,
}

impl Answer {
    /// Reads the status and, on success, the protobuf `ExportTraceServiceResponse`'s partial
    /// success (an empty body is a full success).
    fn of(response: &Response<Bytes>) -> Self {
        let status = response.status().as_u16();
        let partial = response
            .status()
            .is_success()
            .then(|| ExportTraceServiceResponse::decode(response.body().clone()).ok())
            .flatten()
            .and_then(|decoded| decoded.partial_success);
        let (rejected_spans, message) = match partial {
            Some(partial) => (
                u64::try_from(partial.rejected_spans).unwrap_or(0),
                partial.error_message.chars().take(200).collect(),
            ),
            None => (0, String::new()),
        };
        Self {
            status,
            rejected_spans,
            message,
        }
    }

    /// What a failed request's status says. OTLP/HTTP retries 429, 502, 503 and 504 and
    /// calls other statuses final; we also keep retrying other 5xx (a receiver's own trouble
    /// passes) and 408, stop on the statuses that say our settings are wrong, and treat any
    /// other 4xx as data the receiver will not take.
    fn verdict(&self) -> Verdict {
        match self.status {
            401 | 403 => Verdict::Stop(Refusal::Credentials),
            404 | 405 => Verdict::Stop(Refusal::Endpoint),
            415 => Verdict::Stop(Refusal::Format),
            413 => Verdict::TooLarge,
            408 | 429 => Verdict::Retry,
            400..=499 => Verdict::BadData,
            _ => Verdict::Retry,
        }
    }
}

/// What to do after a request the receiver did not take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Send it again, after a wait.
    Retry,
    /// 413: send it again in halves; a single span too large stops the export.
    TooLarge,
    /// Another 4xx: the receiver will not take some span of it. Halves find which; a single
    /// span it refuses is counted as rejected and not sent again, as in a partial success.
    BadData,
    /// The settings are wrong: stop with the fix.
    Stop(Refusal),
}

/// The HTTP client the OTLP exporter sends through: reqwest, keeping the last answer.
#[derive(Clone, Debug)]
pub(crate) struct AnsweringClient {
    http: reqwest::Client,
    last: Arc<Mutex<Option<Answer>>>,
}

impl AnsweringClient {
    /// The answer to the last request since the last call (`None` when it got none: the
    /// receiver could not be reached).
    fn take_last(&self) -> Option<Answer> {
        self.last.lock().map(|mut last| last.take()).unwrap_or(None)
    }
}

// One request at a time goes through an exporter (the export sends its requests in series),
// so one slot holds the answer to the request just sent.
#[async_trait::async_trait]
impl HttpClient for AnsweringClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let response = self.http.send_bytes(request).await?;
        if let Ok(mut last) = self.last.lock() {
            *last = Some(Answer::of(&response));
        }
        Ok(response)
    }
}

/// The trace receiver, as the export sends to it.
pub(crate) struct Receiver {
    exporter: opentelemetry_otlp::SpanExporter,
    client: AnsweringClient,
    endpoint: String,
}

impl Receiver {
    /// The OTLP/HTTP exporter to `options.endpoint`, over our reqwest client (rustls), with
    /// the spans' resource.
    pub(crate) fn new(options: &ExportOptions) -> Result<Self> {
        let client = AnsweringClient {
            http: reqwest::Client::builder()
                .timeout(options.request_timeout)
                .build()
                .map_err(Error::Client)?,
            last: Arc::default(),
        };
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client.clone())
            .with_endpoint(&options.endpoint)
            .with_headers(options.headers.clone())
            // Ours retry, each try after asking about erasures (see the module's comment).
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
            .with_timeout(options.request_timeout)
            .build()
            .map_err(|source| Error::Exporter {
                endpoint: options.endpoint.clone(),
                source,
            })?;
        exporter.set_resource(
            &Resource::builder_empty()
                .with_attributes([
                    KeyValue::new("service.name", options.service_name.clone()),
                    KeyValue::new("openinference.project.name", options.service_name.clone()),
                ])
                .build(),
        );
        Ok(Self {
            exporter,
            client,
            endpoint: options.endpoint.clone(),
        })
    }

    /// Sends `spans` in requests of at most [`SPANS_PER_REQUEST`], each retried with backoff
    /// until the receiver answers it for good, counting them in `summary`. Before every try,
    /// `erasures` takes off the texts of sessions erased since. `Ok(false)` when `shutdown`
    /// came first; [`Error::ReceiverRefused`] when the receiver refuses in a way no retry
    /// changes (its credentials, the endpoint, the format, a single span too large).
    pub(crate) async fn deliver(
        &self,
        spans: Vec<SpanData>,
        summary: &mut ExportSummary,
        shutdown: &mut (impl Future<Output = ()> + Unpin),
        erasures: &mut Erasures<'_>,
    ) -> Result<bool> {
        let mut requests: VecDeque<Vec<SpanData>> = VecDeque::new();
        let mut spans = spans.into_iter().peekable();
        while spans.peek().is_some() {
            requests.push_back(spans.by_ref().take(SPANS_PER_REQUEST).collect());
        }
        while let Some(request) = requests.pop_front() {
            let count = request.len();
            match self.send(request, shutdown, erasures, summary).await? {
                Sent::Taken { rejected } => {
                    summary.spans += count as u64;
                    summary.rejected_spans += rejected;
                    metrics::counter!(crate::observe::SPANS).increment(count as u64);
                    metrics::counter!(crate::observe::REJECTED_SPANS).increment(rejected);
                }
                Sent::Split(mut request) => {
                    // Halves, in order, ahead of the rest: the receiver's limit, not ours.
                    let second = request.split_off(request.len() / 2);
                    requests.push_front(second);
                    requests.push_front(request);
                }
                Sent::ShutDown => return Ok(false),
            }
        }
        Ok(true)
    }

    /// One request, retried with backoff until the receiver answers it for good; before each
    /// try, `erasures` takes off the texts of sessions erased since (counted in `summary`).
    async fn send(
        &self,
        mut spans: Vec<SpanData>,
        shutdown: &mut (impl Future<Output = ()> + Unpin),
        erasures: &mut Erasures<'_>,
        summary: &mut ExportSummary,
    ) -> Result<Sent> {
        let mut waits = sessionlog_log::retry::forever().build();
        loop {
            // Before every try, not once per request: a receiver in trouble may be retried
            // for an hour, and a session erased meanwhile must not have its texts sent.
            match erasures.withhold(&mut spans).await {
                Ok(withheld) => summary.content_withheld += withheld,
                // Nothing is sent while the key store cannot say what is erased; an outage is
                // waited out like a receiver's, not the end of the export.
                Err(e) if e.is_key_store_outage() => {
                    let wait = waits.next().unwrap_or(sessionlog_log::retry::MAX_DELAY);
                    tracing::warn!(error = %e, ?wait, "the key store did not answer whether a session is erased; retrying");
                    tokio::select! {
                        () = &mut *shutdown => return Ok(Sent::ShutDown),
                        () = tokio::time::sleep(wait) => {}
                    }
                    continue;
                }
                Err(e) => return Err(e),
            }
            self.client.take_last();
            let result = self.exporter.export(spans.clone()).await;
            let answer = self.client.take_last();
            let Err(e) = result else {
                let answer = answer.unwrap_or_default();
                // A receiver's count beyond the request is its mistake, not more rejections.
                let rejected = answer.rejected_spans.min(spans.len() as u64);
                if rejected > 0 {
                    // The receiver will not take them again: counted and logged, not retried.
                    tracing::warn!(
                        rejected_spans = rejected,
                        spans = spans.len(),
                        reason = %answer.message,
                        "the trace receiver took a request but rejected some of its spans"
                    );
                }
                return Ok(Sent::Taken { rejected });
            };
            metrics::counter!(crate::observe::SEND_FAILURES).increment(1);
            match answer.map(|answer| (answer.status, answer.verdict())) {
                Some((_, Verdict::TooLarge | Verdict::BadData)) if spans.len() > 1 => {
                    return Ok(Sent::Split(spans));
                }
                Some((status, Verdict::BadData)) => {
                    tracing::warn!(
                        status,
                        "the trace receiver refused a span; it is counted as rejected and not sent again"
                    );
                    return Ok(Sent::Taken { rejected: 1 });
                }
                Some((status, Verdict::TooLarge)) => {
                    return Err(self.refused(status, Refusal::TooLarge));
                }
                Some((status, Verdict::Stop(refusal))) => {
                    return Err(self.refused(status, refusal));
                }
                Some((_, Verdict::Retry)) | None => {
                    let wait = waits.next().unwrap_or(sessionlog_log::retry::MAX_DELAY);
                    tracing::warn!(error = %e, ?wait, "the trace receiver did not take the spans; retrying");
                    tokio::select! {
                        () = &mut *shutdown => return Ok(Sent::ShutDown),
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }

    /// The error for a refusal no retry changes.
    fn refused(&self, status: u16, refusal: Refusal) -> Error {
        Error::ReceiverRefused {
            endpoint: self.endpoint.clone(),
            status,
            refusal,
        }
    }
}

/// How one request ended.
enum Sent {
    /// The receiver took it, rejecting this many of its spans.
    Taken { rejected: u64 },
    /// The receiver would not take it whole (413, or a span it refuses): send it again in
    /// halves.
    Split(Vec<SpanData>),
    /// Shut down before the receiver took it.
    ShutDown,
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTracePartialSuccess, ExportTraceServiceRequest,
    };
    use opentelemetry_proto::tonic::trace::v1::Span;
    use sessionlog_keys::StoredKey;
    use sessionlog_schemas::SessionId;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// How the test receiver answers a request holding `spans`: status and body.
    type Answering = Arc<dyn Fn(&[Span]) -> (u16, Vec<u8>) + Send + Sync>;

    /// What the test receiver took: each span id of the requests it answered 200, in order.
    type Taken = Arc<Mutex<Vec<Vec<u8>>>>;

    /// An OTLP/HTTP receiver on a local port answering with `answering`; returns its traces
    /// endpoint and what it took.
    async fn receiver(answering: Answering) -> (String, Taken) {
        let taken = Taken::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a local port");
        let address = listener.local_addr().expect("its address");
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post({
                let taken = Arc::clone(&taken);
                move |body: axum::body::Bytes| async move {
                    let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                    let spans: Vec<Span> = request
                        .resource_spans
                        .into_iter()
                        .flat_map(|r| r.scope_spans)
                        .flat_map(|s| s.spans)
                        .collect();
                    let (status, body) = answering(&spans);
                    if status == 200 {
                        let mut taken = taken.lock().expect("not poisoned");
                        taken.extend(spans.into_iter().map(|span| span.span_id));
                    }
                    (
                        axum::http::StatusCode::from_u16(status).expect("a status"),
                        [("content-type", "application/x-protobuf")],
                        body,
                    )
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{address}/v1/traces"), taken)
    }

    /// `sessions` example sessions' spans (a model call, a tool call, the root, each).
    fn spans(sessions: usize) -> Vec<SpanData> {
        (0..sessions)
            .flat_map(|_| crate::genai::tests::follow(SessionId::new(), false))
            .map(|(_, span)| span)
            .collect()
    }

    /// The span ids of `spans` not named `except`, in order.
    fn ids(spans: &[SpanData], except: &str) -> Vec<Vec<u8>> {
        spans
            .iter()
            .filter(|span| span.name != except)
            .map(|span| span.span_context.span_id().to_bytes().to_vec())
            .collect()
    }

    /// Delivers `spans` with a shutdown that never comes, within a deadline.
    async fn deliver(endpoint: &str, spans: Vec<SpanData>) -> (Result<bool>, ExportSummary) {
        let options = ExportOptions {
            endpoint: endpoint.to_string(),
            request_timeout: Duration::from_secs(5),
            ..ExportOptions::default()
        };
        let receiver = Receiver::new(&options).expect("an exporter");
        let mut summary = ExportSummary::default();
        let mut never = std::pin::pin!(std::future::pending::<()>());
        let mut known = std::collections::HashSet::new();
        let mut erasures = Erasures::none(&mut known);
        let result = tokio::time::timeout(
            Duration::from_secs(60),
            receiver.deliver(spans, &mut summary, &mut never, &mut erasures),
        )
        .await
        .expect("delivered or refused within a minute");
        (result, summary)
    }

    /// A receiver answering every request with `status`, counting them.
    async fn always(status: u16) -> (String, Taken, Arc<AtomicUsize>) {
        let asked = Arc::new(AtomicUsize::new(0));
        let (endpoint, taken) = receiver({
            let asked = Arc::clone(&asked);
            Arc::new(move |_| {
                asked.fetch_add(1, Ordering::Relaxed);
                (status, Vec::new())
            })
        })
        .await;
        (endpoint, taken, asked)
    }

    /// Delivers `sessions` sessions' spans to a receiver answering every request with
    /// `status`, which must stop the export with that status after one request; returns the
    /// error, the summary and what the receiver took.
    async fn stopped_by(status: u16, sessions: usize) -> (Error, ExportSummary, Vec<Vec<u8>>) {
        let (endpoint, taken, asked) = always(status).await;
        let (result, summary) = deliver(&endpoint, spans(sessions)).await;
        let error = result.expect_err("a refusal is not retried forever");
        assert!(
            matches!(error, Error::ReceiverRefused { status: s, .. } if s == status),
            "{error:?}"
        );
        assert_eq!(asked.load(Ordering::Relaxed), 1, "asked once, not retried");
        let taken = taken.lock().expect("not poisoned").clone();
        (error, summary, taken)
    }

    #[tokio::test]
    async fn a_receiver_refusing_the_credentials_stops_the_export_naming_header() {
        let (error, summary, taken) = stopped_by(401, 2).await;
        assert!(error.to_string().contains("--header"), "{error}");
        assert_eq!(summary.spans, 0);
        assert!(taken.is_empty());
    }

    #[tokio::test]
    async fn no_traces_endpoint_stops_the_export_naming_endpoint() {
        let (error, _, _) = stopped_by(404, 1).await;
        assert!(error.to_string().contains("--endpoint"), "{error}");
    }

    #[tokio::test]
    async fn spans_rejected_in_a_partial_success_are_counted_not_sent_again() {
        let answering = |rejected_spans: i64| -> Answering {
            Arc::new(move |_| {
                let response = ExportTraceServiceResponse {
                    partial_success: Some(ExportTracePartialSuccess {
                        rejected_spans,
                        error_message: "spans without a name".into(),
                    }),
                };
                (200, response.encode_to_vec())
            })
        };
        let sent = spans(2);
        let (endpoint, taken) = receiver(answering(2)).await;
        let (result, summary) = deliver(&endpoint, sent.clone()).await;
        assert!(result.expect("taken"));
        assert_eq!((summary.spans, summary.rejected_spans), (6, 2));
        assert_eq!(*taken.lock().expect("not poisoned"), ids(&sent, ""), "once");

        // A count beyond the request's spans is the receiver's mistake: at most all of them.
        let (endpoint, _) = receiver(answering(i64::MAX)).await;
        let (result, summary) = deliver(&endpoint, spans(2)).await;
        assert!(result.expect("taken"));
        assert_eq!((summary.spans, summary.rejected_spans), (6, 6));
    }

    #[tokio::test]
    async fn a_request_too_large_goes_again_in_halves_in_order() {
        // Takes at most 40 spans a request: 60 sessions' 180 spans are two requests of 128
        // and 52, which it takes in pieces of 32 and 26.
        let (endpoint, taken) = receiver(Arc::new(|spans| {
            (if spans.len() > 40 { 413 } else { 200 }, Vec::new())
        }))
        .await;
        let sent = spans(60);
        let (result, summary) = deliver(&endpoint, sent.clone()).await;
        assert!(result.expect("taken"));
        assert_eq!((summary.spans, summary.rejected_spans), (180, 0));
        assert_eq!(*taken.lock().expect("not poisoned"), ids(&sent, ""));
    }

    #[tokio::test]
    async fn a_single_span_too_large_stops_the_export() {
        // Three spans would be split; one cannot be.
        let (endpoint, _, asked) = always(413).await;
        let (result, _) = deliver(&endpoint, spans(1).split_off(2)).await;
        let error = result.expect_err("one span too large cannot be split");
        assert!(
            matches!(error, Error::ReceiverRefused { status: 413, .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("size limit"), "{error}");
        assert_eq!(asked.load(Ordering::Relaxed), 1, "asked once, not retried");
    }

    #[tokio::test]
    async fn spans_a_receiver_refuses_are_found_by_halves_and_counted_as_rejected() {
        // Refuses any request holding a tool span: the rest goes through, in order.
        let tool = "execute_tool grep";
        let (endpoint, taken) = receiver(Arc::new(move |spans| {
            let refused = spans.iter().any(|span| span.name == tool);
            (if refused { 400 } else { 200 }, Vec::new())
        }))
        .await;
        let sent = spans(5);
        let (result, summary) = deliver(&endpoint, sent.clone()).await;
        assert!(result.expect("the export goes on"));
        assert_eq!((summary.spans, summary.rejected_spans), (15, 5));
        assert_eq!(*taken.lock().expect("not poisoned"), ids(&sent, tool));
    }

    /// Per span the receiver took: its trace id and how many texts it carried.
    type TextsTaken = Arc<Mutex<Vec<(Vec<u8>, usize)>>>;

    /// A key table in which session `erased` reads as erased once `erasing` is set.
    struct ErasedTable {
        erased: SessionId,
        erasing: Arc<std::sync::atomic::AtomicBool>,
    }

    impl sessionlog_keys::DataKeyStore for ErasedTable {
        fn get(
            &self,
            session: SessionId,
        ) -> futures::future::BoxFuture<'_, sessionlog_keys::Result<Option<StoredKey>>> {
            let erased = session == self.erased && self.erasing.load(Ordering::SeqCst);
            Box::pin(async move { Ok(erased.then_some(StoredKey::Destroyed { at: 1 })) })
        }
        fn create(
            &self,
            _: SessionId,
            _: sessionlog_keys::WrappedKey,
        ) -> futures::future::BoxFuture<'_, sessionlog_keys::Result<StoredKey>> {
            Box::pin(async { Err(not_here()) })
        }
        fn insert_fresh(
            &self,
            _: SessionId,
            _: sessionlog_keys::WrappedKey,
        ) -> futures::future::BoxFuture<'_, sessionlog_keys::Result<()>> {
            Box::pin(async { Err(not_here()) })
        }
        fn destroy(
            &self,
            _: sessionlog_keys::ErasureReceipt,
        ) -> futures::future::BoxFuture<'_, sessionlog_keys::Result<()>> {
            Box::pin(async { Err(not_here()) })
        }
        fn receipt(
            &self,
            _: SessionId,
        ) -> futures::future::BoxFuture<
            '_,
            sessionlog_keys::Result<Option<sessionlog_keys::ErasureReceipt>>,
        > {
            Box::pin(async { Err(not_here()) })
        }
        fn live_keys(
            &self,
        ) -> futures::stream::BoxStream<
            '_,
            sessionlog_keys::Result<(SessionId, sessionlog_keys::WrappedKey)>,
        > {
            Box::pin(futures::stream::empty())
        }
        fn rewrap(
            &self,
            _: SessionId,
            _: sessionlog_keys::WrappedKey,
            _: sessionlog_keys::WrappedKey,
        ) -> futures::future::BoxFuture<'_, sessionlog_keys::Result<bool>> {
            Box::pin(async { Err(not_here()) })
        }
    }

    /// What [`ErasedTable`] answers to what the export never asks it.
    fn not_here() -> sessionlog_keys::Error {
        sessionlog_keys::Error::Store("not asked in this test".into())
    }

    #[tokio::test]
    async fn a_retry_after_an_erasure_goes_without_the_erased_sessions_texts() {
        let (erased, kept) = (SessionId::new(), SessionId::new());
        let erasing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // The first request fails, and the session is erased while the export waits to try
        // again; the receiver counts the texts of each session it takes.
        let texts: TextsTaken = Arc::default();
        let (endpoint, _) = receiver({
            let (erasing, texts) = (Arc::clone(&erasing), Arc::clone(&texts));
            Arc::new(move |spans| {
                if !erasing.swap(true, Ordering::SeqCst) {
                    return (503, Vec::new());
                }
                let mut texts = texts.lock().expect("not poisoned");
                for span in spans {
                    let carried = span
                        .attributes
                        .iter()
                        .filter(|kv| crate::genai::CONTENT_ATTRIBUTES.contains(&kv.key.as_str()))
                        .count();
                    texts.push((span.trace_id.clone(), carried));
                }
                (200, Vec::new())
            })
        })
        .await;
        let sent: Vec<SpanData> = [erased, kept]
            .into_iter()
            .flat_map(|session| crate::genai::tests::follow(session, true))
            .map(|(_, span)| span)
            .collect();
        let table = ErasedTable {
            erased,
            erasing: Arc::clone(&erasing),
        };
        let options = ExportOptions {
            endpoint,
            request_timeout: Duration::from_secs(5),
            ..ExportOptions::default()
        };
        let receiver = Receiver::new(&options).expect("an exporter");
        let mut summary = ExportSummary::default();
        let mut never = std::pin::pin!(std::future::pending::<()>());
        let mut known = std::collections::HashSet::new();
        let mut erasures = Erasures::new(Some((&table, None)), &mut known);
        let delivered = tokio::time::timeout(
            Duration::from_secs(60),
            receiver.deliver(sent, &mut summary, &mut never, &mut erasures),
        )
        .await
        .expect("delivered within a minute");
        assert!(delivered.expect("taken once the receiver recovers"));
        assert_eq!(erasures.found(), [erased]);

        // Every span went, the erased session's (a model call and a tool call with texts,
        // its root without) without any text, the other's with theirs.
        let texts = texts.lock().expect("not poisoned").clone();
        let of = |session: SessionId| -> Vec<usize> {
            let id = crate::genai::trace_id(session).to_bytes().to_vec();
            texts
                .iter()
                .filter(|(trace, _)| *trace == id)
                .map(|(_, n)| *n)
                .collect()
        };
        assert_eq!(of(erased), [0, 0, 0]);
        assert_eq!(of(kept).iter().sum::<usize>(), 3, "{texts:?}");
        assert_eq!((summary.spans, summary.content_withheld), (6, 2));
    }

    #[tokio::test]
    async fn a_receiver_in_trouble_is_retried_until_it_takes_the_spans() {
        let asked = Arc::new(AtomicUsize::new(0));
        let (endpoint, taken) = receiver({
            let asked = Arc::clone(&asked);
            Arc::new(move |_| {
                let n = asked.fetch_add(1, Ordering::Relaxed);
                (if n < 2 { 500 } else { 200 }, Vec::new())
            })
        })
        .await;
        let (result, summary) = deliver(&endpoint, spans(1)).await;
        assert!(result.expect("taken once the receiver recovers"));
        assert_eq!(summary.spans, 3);
        assert_eq!(taken.lock().expect("not poisoned").len(), 3);
        assert!(asked.load(Ordering::Relaxed) >= 3);
    }
}
