//! Sending spans to the trace receiver, and acting on what it answers.
//!
//! The OTLP exporter retries what OTLP/HTTP calls retryable (429, 502, 503, 504) and only
//! logs a partial success, and its error for a refusal carries the status in a message. So the
//! exporter sends through [`AnsweringClient`], our reqwest client that keeps each answer's
//! status and partial success, and [`Receiver::deliver`] decides from those: retry, split a
//! request the receiver found too large, count the spans it rejected, or stop with an error
//! that names the setting to fix.

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

    /// What a failed request's status says about sending it again. OTLP/HTTP retries 429,
    /// 502, 503 and 504 and calls other statuses final; we also keep retrying other 5xx (a
    /// receiver's own trouble passes) and 408, and stop only on the client errors a retry
    /// cannot fix.
    fn refusal(&self) -> Option<Refusal> {
        match self.status {
            401 | 403 => Some(Refusal::Credentials),
            404 | 405 => Some(Refusal::Endpoint),
            413 => Some(Refusal::TooLarge),
            415 => Some(Refusal::Format),
            408 | 429 => None,
            400..=499 => Some(Refusal::Data),
            _ => None,
        }
    }
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
    /// until the receiver takes it, counting them in `summary`. `Ok(false)` when `shutdown`
    /// came first; [`Error::ReceiverRefused`] when the receiver refuses a request in a way no
    /// retry changes (its credentials, the endpoint, a single span too large).
    pub(crate) async fn deliver(
        &self,
        spans: Vec<SpanData>,
        summary: &mut ExportSummary,
        shutdown: &mut (impl Future<Output = ()> + Unpin),
    ) -> Result<bool> {
        let mut requests: VecDeque<Vec<SpanData>> = VecDeque::new();
        let mut spans = spans.into_iter().peekable();
        while spans.peek().is_some() {
            requests.push_back(spans.by_ref().take(SPANS_PER_REQUEST).collect());
        }
        while let Some(request) = requests.pop_front() {
            let count = request.len();
            match self.send(request, shutdown).await? {
                Sent::Taken { rejected } => {
                    summary.spans += count as u64;
                    summary.rejected_spans += rejected;
                    metrics::counter!(crate::observe::SPANS).increment(count as u64);
                    metrics::counter!(crate::observe::REJECTED_SPANS).increment(rejected);
                }
                Sent::TooLarge(mut request) => {
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

    /// One request, retried with backoff until the receiver answers it for good.
    async fn send(
        &self,
        spans: Vec<SpanData>,
        shutdown: &mut (impl Future<Output = ()> + Unpin),
    ) -> Result<Sent> {
        let mut waits = sessionlog_log::retry::forever().build();
        loop {
            self.client.take_last();
            let result = self.exporter.export(spans.clone()).await;
            let answer = self.client.take_last();
            match (result, answer) {
                (Ok(()), answer) => {
                    let answer = answer.unwrap_or_default();
                    if answer.rejected_spans > 0 {
                        // The receiver will not take them again: counted and logged, not retried.
                        tracing::warn!(
                            rejected_spans = answer.rejected_spans,
                            spans = spans.len(),
                            reason = %answer.message,
                            "the trace receiver took a request but rejected some of its spans"
                        );
                    }
                    return Ok(Sent::Taken {
                        rejected: answer.rejected_spans,
                    });
                }
                (Err(_), Some(answer)) if answer.status == 413 && spans.len() > 1 => {
                    return Ok(Sent::TooLarge(spans));
                }
                (Err(_), Some(answer)) if answer.refusal().is_some() => {
                    metrics::counter!(crate::observe::SEND_FAILURES).increment(1);
                    return Err(Error::ReceiverRefused {
                        endpoint: self.endpoint.clone(),
                        status: answer.status,
                        refusal: answer.refusal().unwrap_or(Refusal::Data),
                    });
                }
                (Err(e), _) => {
                    metrics::counter!(crate::observe::SEND_FAILURES).increment(1);
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
}

/// How one request ended.
enum Sent {
    /// The receiver took it, rejecting this many of its spans.
    Taken { rejected: u64 },
    /// The receiver found it too large (413): send it again in halves.
    TooLarge(Vec<SpanData>),
    /// Shut down before the receiver took it.
    ShutDown,
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTracePartialSuccess, ExportTraceServiceRequest,
    };
    use sessionlog_schemas::SessionId;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// How the test receiver answers a request of `spans` spans: status and body.
    type Answering = Arc<dyn Fn(usize) -> (u16, Vec<u8>) + Send + Sync>;

    /// An OTLP/HTTP receiver on a local port answering with `answering`; returns its traces
    /// endpoint and the spans of every request it answered 200.
    async fn receiver(answering: Answering) -> (String, Arc<Mutex<Vec<usize>>>) {
        let taken = Arc::new(Mutex::new(Vec::new()));
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
                    let spans: usize = request
                        .resource_spans
                        .iter()
                        .flat_map(|r| &r.scope_spans)
                        .map(|s| s.spans.len())
                        .sum();
                    let (status, body) = answering(spans);
                    if status == 200 {
                        taken.lock().expect("not poisoned").push(spans);
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

    fn options(endpoint: &str) -> ExportOptions {
        ExportOptions {
            endpoint: endpoint.to_string(),
            request_timeout: Duration::from_secs(5),
            ..ExportOptions::default()
        }
    }

    /// `sessions` example sessions' spans (three each).
    fn spans(sessions: usize) -> Vec<SpanData> {
        (0..sessions)
            .flat_map(|_| crate::genai::tests::follow(SessionId::new(), false))
            .map(|(_, span)| span)
            .collect()
    }

    /// Delivers `spans` with a shutdown that never comes, within a deadline.
    async fn deliver(endpoint: &str, spans: Vec<SpanData>) -> (Result<bool>, ExportSummary) {
        let receiver = Receiver::new(&options(endpoint)).expect("an exporter");
        let mut summary = ExportSummary::default();
        let mut never = std::pin::pin!(std::future::pending::<()>());
        let result = tokio::time::timeout(
            Duration::from_secs(60),
            receiver.deliver(spans, &mut summary, &mut never),
        )
        .await
        .expect("delivered or refused within a minute");
        (result, summary)
    }

    #[tokio::test]
    async fn a_receiver_refusing_the_credentials_stops_the_export_naming_header() {
        let asked = Arc::new(AtomicUsize::new(0));
        let (endpoint, taken) = receiver({
            let asked = Arc::clone(&asked);
            Arc::new(move |_| {
                asked.fetch_add(1, Ordering::Relaxed);
                (401, Vec::new())
            })
        })
        .await;
        let (result, summary) = deliver(&endpoint, spans(2)).await;
        let error = result.expect_err("a 401 is not retried forever");
        assert!(
            matches!(error, Error::ReceiverRefused { status: 401, .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("--header"), "{error}");
        assert_eq!(asked.load(Ordering::Relaxed), 1, "asked once, not retried");
        assert_eq!(summary.spans, 0);
        assert!(taken.lock().expect("not poisoned").is_empty());
    }

    #[tokio::test]
    async fn spans_rejected_in_a_partial_success_are_counted_not_sent_again() {
        let (endpoint, taken) = receiver(Arc::new(|_| {
            let response = ExportTraceServiceResponse {
                partial_success: Some(ExportTracePartialSuccess {
                    rejected_spans: 2,
                    error_message: "two spans without a name".into(),
                }),
            };
            (200, response.encode_to_vec())
        }))
        .await;
        let (result, summary) = deliver(&endpoint, spans(2)).await;
        assert!(result.expect("taken"));
        assert_eq!(summary.spans, 6);
        assert_eq!(summary.rejected_spans, 2);
        assert_eq!(
            *taken.lock().expect("not poisoned"),
            [6],
            "one request, once"
        );
    }

    #[tokio::test]
    async fn a_request_too_large_goes_again_in_halves_until_the_receiver_takes_them() {
        // Takes at most 40 spans a request: 60 sessions' 180 spans are two requests of 128
        // and 52, which it takes in pieces of 32 and 26.
        let (endpoint, taken) = receiver(Arc::new(|spans| {
            (if spans > 40 { 413 } else { 200 }, Vec::new())
        }))
        .await;
        let (result, summary) = deliver(&endpoint, spans(60)).await;
        assert!(result.expect("taken"));
        assert_eq!(summary.spans, 180);
        let taken = taken.lock().expect("not poisoned").clone();
        assert_eq!(
            taken.iter().sum::<usize>(),
            180,
            "every span once: {taken:?}"
        );
        assert!(taken.iter().all(|n| *n <= 40), "{taken:?}");
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
        assert_eq!(*taken.lock().expect("not poisoned"), [3]);
        assert!(asked.load(Ordering::Relaxed) >= 3);
    }
}
