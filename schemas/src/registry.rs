//! A Confluent-compatible schema registry client, and the record-value codec built on it.
//!
//! Works against Apicurio Registry 3's ccompat API (the default URL) and against Confluent
//! Schema Registry. Schema lookups and registration go through schema_registry_converter's
//! async API; the compatibility config, which that crate lacks, goes through plain reqwest.

use crate::avro::{BodyDecoder, encode_body, schema_versions};
use crate::error::{Error, Result};
use crate::event::EventEnvelope;
use crate::wire::{frame, unframe};
use apache_avro::Schema;
use schema_registry_converter::async_impl::schema_registry::{
    SrSettings, get_schema_by_id, post_schema,
};
use schema_registry_converter::error::SRCError;
use schema_registry_converter::schema_registry_common::{RawError, SchemaType, SuppliedSchema};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Apicurio Registry 3's Confluent-compatible API on its default port.
pub const DEFAULT_REGISTRY_URL: &str = "http://127.0.0.1:8081/apis/ccompat/v7";

/// What [`SchemaRegistry::kept`] calls itself where a registry has a URL.
#[cfg(any(test, feature = "testing"))]
const KEPT_URL: &str = "kept:session-event";

/// How long one registry HTTP call may take before it counts as unreachable.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The Confluent content type for registry requests.
const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// The subject for the values of `topic` under the TopicNameStrategy (`{topic}-value`),
/// which is what Java and Python Confluent serializers look up by default.
pub fn value_subject(topic: &str) -> String {
    format!("{topic}-value")
}

/// A subject's compatibility level, as the registry's `/config` API spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompatibilityLevel {
    /// New schemas can read data written by the latest one.
    Backward,
    /// New schemas can read data written by every earlier one (what sessionlog requires).
    BackwardTransitive,
    /// The latest schema can read data written by new ones.
    Forward,
    /// Every earlier schema can read data written by new ones.
    ForwardTransitive,
    /// Backward and forward against the latest.
    Full,
    /// Backward and forward against every earlier one.
    FullTransitive,
    /// No checks.
    None,
}

impl CompatibilityLevel {
    /// The registry's name for the level.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Backward => "BACKWARD",
            Self::BackwardTransitive => "BACKWARD_TRANSITIVE",
            Self::Forward => "FORWARD",
            Self::ForwardTransitive => "FORWARD_TRANSITIVE",
            Self::Full => "FULL",
            Self::FullTransitive => "FULL_TRANSITIVE",
            Self::None => "NONE",
        }
    }
}

/// How a registry client proves who it is.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum RegistryCredentials {
    /// No credentials (a registry without authentication).
    #[default]
    None,
    /// HTTP basic authentication (Apicurio's embedded users, Confluent Cloud's API key and secret).
    Basic {
        /// The user (or API key).
        username: String,
        /// The password (or API secret).
        password: String,
    },
    /// A bearer token (an OIDC access token).
    Bearer(String),
}

impl std::fmt::Debug for RegistryCredentials {
    // Secrets stay out of logs and panic messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Basic { username, .. } => write!(f, "Basic({username}, ***)"),
            Self::Bearer(_) => f.write_str("Bearer(***)"),
        }
    }
}

/// What a registry client needs beyond the URL: credentials, and a CA to trust for `https`.
#[derive(Clone, Debug, Default)]
pub struct RegistryAccess {
    /// Sent with every request.
    pub credentials: RegistryCredentials,
    /// A PEM file with the CA that signed the registry's certificate, added to the system's.
    pub ca_file: Option<std::path::PathBuf>,
}

/// What a registry says about itself ([`SchemaRegistry::about`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegistryAbout {
    /// Its software and version, when it reports them.
    pub version: Option<String>,
    /// Its global compatibility level; `None` when `GET /config` found nothing there, so the
    /// URL does not point at a Confluent-compatible API.
    pub compatibility: Option<String>,
}

/// A handle on a schema registry; cheap to clone, and clones share the schema cache.
#[derive(Clone, Debug)]
pub struct SchemaRegistry {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    url: String,
    settings: SrSettings,
    http: reqwest::Client,
    credentials: RegistryCredentials,
    /// Schemas by id. Registry ids are immutable, so entries never go stale; failures are not
    /// cached, so a registry outage heals by itself.
    by_id: Mutex<HashMap<u32, Arc<Schema>>>,
    /// Held while a schema is fetched: one fetch at a time.
    fetching: tokio::sync::Mutex<()>,
    /// No registry behind it: the cache holds the schemas this build keeps, and nothing is
    /// asked over HTTP ([`SchemaRegistry::kept`]).
    kept: bool,
}

impl SchemaRegistry {
    /// A client for the registry API at `url`, e.g. [`DEFAULT_REGISTRY_URL`], without
    /// credentials. No request is made yet.
    pub fn new(url: impl Into<String>) -> Result<Self> {
        Self::with_access(url, RegistryAccess::default())
    }

    /// A client for the registry API at `url` with `access`'s credentials and CA. No request is
    /// made yet.
    pub fn with_access(url: impl Into<String>, access: RegistryAccess) -> Result<Self> {
        let url = url.into().trim_end_matches('/').to_owned();
        let refused = |message: String| Error::Registry {
            url: url.clone(),
            message,
        };
        let ca = match &access.ca_file {
            None => None,
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    refused(format!(
                        "cannot read the registry CA file {} (setting registry.ca_file): {e}",
                        path.display()
                    ))
                })?;
                Some(reqwest::Certificate::from_pem(&pem).map_err(|e| {
                    refused(format!(
                        "the registry CA file {} (setting registry.ca_file) is not a PEM \
                         certificate: {e}",
                        path.display()
                    ))
                })?)
            }
        };
        // One builder for the converter's client, one for ours: builders do not clone.
        let client = || {
            let builder = reqwest::Client::builder().timeout(TIMEOUT);
            match &ca {
                Some(ca) => builder.add_root_certificate(ca.clone()),
                None => builder,
            }
        };
        let mut settings = SrSettings::new_builder(url.clone());
        settings.set_timeout(TIMEOUT);
        match &access.credentials {
            RegistryCredentials::None => {}
            RegistryCredentials::Basic { username, password } => {
                settings.set_basic_authorization(username, Some(password));
            }
            RegistryCredentials::Bearer(token) => {
                settings.set_token_authorization(token);
            }
        }
        let settings = settings
            .build_with(client())
            .map_err(|e| refused(e.to_string()))?;
        let http = client()
            .build()
            .map_err(|e| refused(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                url,
                settings,
                http,
                credentials: access.credentials,
                by_id: Mutex::new(HashMap::new()),
                fetching: tokio::sync::Mutex::new(()),
                kept: false,
            }),
        })
    }

    /// A registry-free stand-in: the schemas this build keeps (`avro/session-event.vN.avsc`),
    /// version N under id N, and no server. Encoding with it writes schema id
    /// [`crate::CURRENT_SCHEMA_VERSION`], and decoding reads records of every kept version: what
    /// unit tests and the in-memory log of `sessionlog-producer` (feature `test-util`) encode
    /// and decode with. An id it does not keep is [`Error::UnknownSchemaId`] (a dead letter).
    /// One per process, shared by its clones: building it (an HTTP client, every schema) is
    /// most of a unit test's time otherwise.
    #[cfg(any(test, feature = "testing"))]
    pub fn kept() -> Self {
        static KEPT: std::sync::OnceLock<SchemaRegistry> = std::sync::OnceLock::new();
        KEPT.get_or_init(Self::build_kept).clone()
    }

    #[cfg(any(test, feature = "testing"))]
    fn build_kept() -> Self {
        let by_id = schema_versions()
            .iter()
            .map(|v| (v.version, Arc::new(v.schema.clone())))
            .collect();
        Self {
            inner: Arc::new(Inner {
                url: KEPT_URL.to_owned(),
                settings: SrSettings::new(KEPT_URL.to_owned()),
                http: reqwest::Client::new(),
                credentials: RegistryCredentials::None,
                by_id: Mutex::new(by_id),
                fetching: tokio::sync::Mutex::new(()),
                kept: true,
            }),
        }
    }

    /// The registry base URL.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// Set `subject`'s compatibility level (`PUT /config/{subject}`).
    pub async fn ensure_compatibility(
        &self,
        subject: &str,
        level: CompatibilityLevel,
    ) -> Result<()> {
        if self.inner.kept {
            // The kept versions are checked BACKWARD_TRANSITIVE by this crate's tests.
            return Ok(());
        }
        let url = format!("{}/config/{}", self.inner.url, escape(subject));
        let response = self
            .authed(self.inner.http.put(&url))
            .header(reqwest::header::CONTENT_TYPE, CONTENT_TYPE)
            .header(reqwest::header::ACCEPT, CONTENT_TYPE)
            .body(serde_json::json!({ "compatibility": level.as_str() }).to_string())
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        self.succeeded(response, &format!("PUT {url}")).await
    }

    /// `Ok` for a 2xx answer; otherwise the error it means: credentials refused (401, 403),
    /// the registry failing (5xx, worth a retry), or our request refused.
    async fn succeeded(&self, response: reqwest::Response, request: &str) -> Result<()> {
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let body = response.text().await.unwrap_or_default();
        let message = format!("{request} answered {status}: {body}");
        if matches!(status.as_u16(), 401 | 403) {
            return Err(self.auth_refused(&message));
        }
        if status.is_server_error() {
            Err(self.unreachable(message))
        } else {
            Err(Error::Registry {
                url: self.inner.url.clone(),
                message,
            })
        }
    }

    /// Asks the registry for schema `id`, past the cache: whether it serves the schema events
    /// are written with, for a readiness check.
    pub async fn ping(&self, id: u32) -> Result<()> {
        if self.inner.kept {
            return self.schema_by_id(id).await.map(drop);
        }
        let url = format!("{}/schemas/ids/{id}", self.inner.url);
        let response = self
            .authed(self.inner.http.get(&url))
            .header(reqwest::header::ACCEPT, CONTENT_TYPE)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        self.succeeded(response, &format!("GET {url}")).await
    }

    /// What the registry says about itself: its software and version, e.g. `Confluent Schema
    /// Registry 8.3.0` (`GET /v1/metadata/version`) or `Apicurio Registry 3.3.3` (whose
    /// Confluent-compatible API lives under `/apis/ccompat/v7`: `GET
    /// /apis/registry/v3/system/info` beside it), and its global compatibility level (`GET
    /// /config`), which every Confluent-compatible API serves. A registry that cannot be
    /// reached is [`Error::RegistryUnreachable`], as for any request.
    pub async fn about(&self) -> Result<RegistryAbout> {
        #[derive(serde::Deserialize)]
        struct Confluent {
            version: String,
        }
        #[derive(serde::Deserialize)]
        struct Apicurio {
            name: Option<String>,
            version: String,
        }
        #[derive(serde::Deserialize)]
        struct Config {
            #[serde(rename = "compatibilityLevel")]
            compatibility_level: String,
        }
        if self.inner.kept {
            return Ok(RegistryAbout {
                version: Some("the schemas this build keeps (no registry)".to_owned()),
                compatibility: Some(CompatibilityLevel::BackwardTransitive.as_str().to_owned()),
            });
        }
        let url = &self.inner.url;
        let compatibility = self
            .get_json::<Config>(&format!("{url}/config"))
            .await?
            .map(|c| c.compatibility_level);
        let mut version = self
            .get_json::<Confluent>(&format!("{url}/v1/metadata/version"))
            .await?
            .map(|answer| format!("Confluent Schema Registry {}", answer.version));
        if version.is_none()
            && let Some((base, _)) = url.split_once("/apis/ccompat/")
        {
            version = self
                .get_json::<Apicurio>(&format!("{base}/apis/registry/v3/system/info"))
                .await?
                .map(|answer| {
                    let name = answer.name.unwrap_or_else(|| "Apicurio Registry".into());
                    format!("{name} {}", answer.version)
                });
        }
        Ok(RegistryAbout {
            version,
            compatibility,
        })
    }

    /// GETs `url` and reads its JSON answer; `None` for a 404 or an answer of another shape.
    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<Option<T>> {
        let send = || {
            self.authed(self.inner.http.get(url))
                .header(reqwest::header::ACCEPT, "application/json")
                .send()
        };
        let response = match send().await {
            // A GET may be sent again: a kept-alive connection the registry closed just as it
            // was reused fails the request unanswered (`sessionlog doctor` met one in CI). A
            // timeout is not tried again: it has waited long enough.
            Err(e) if !e.is_timeout() => send().await,
            sent => sent,
        }
        .map_err(|e| self.unreachable(e))?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let request = format!("GET {url}");
        if !response.status().is_success() {
            self.succeeded(response, &request).await?;
            return Ok(None);
        }
        Ok(response.json::<T>().await.ok())
    }

    /// `request` with the registry's credentials.
    fn authed(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.inner.credentials {
            RegistryCredentials::None => request,
            RegistryCredentials::Basic { username, password } => {
                request.basic_auth(username, Some(password))
            }
            RegistryCredentials::Bearer(token) => request.bearer_auth(token),
        }
    }

    /// Register one schema text under `subject`, returning its id. Registering a schema the
    /// subject already has returns the existing id.
    pub async fn register(&self, subject: &str, schema: &str) -> Result<u32> {
        if self.inner.kept {
            return schema_versions()
                .iter()
                .find(|v| v.text == schema)
                .map(|v| v.version)
                .ok_or_else(|| Error::Registry {
                    url: self.inner.url.clone(),
                    message: format!("{subject}: only the schemas this build keeps register here"),
                });
        }
        let supplied = SuppliedSchema::new(None, SchemaType::Avro, schema.to_owned());
        post_schema(&self.inner.settings, subject.to_owned(), supplied)
            .await
            .map(|registered| registered.id)
            .map_err(|e| self.classify(e, None))
    }

    /// Make `subject` BACKWARD_TRANSITIVE and register every kept schema version in order;
    /// returns the id of the current version. Idempotent.
    pub async fn register_all_versions(&self, subject: &str) -> Result<u32> {
        let mut versions = schema_versions().iter();
        let first = versions.next().ok_or_else(|| Error::Registry {
            url: self.inner.url.clone(),
            message: "no schema versions are kept".to_owned(),
        })?;
        // The oldest version goes first: Apicurio's ccompat API refuses to configure a subject
        // that does not exist yet, and the first version has nothing to be compatible with.
        let mut id = self.register(subject, first.text).await?;
        self.ensure_compatibility(subject, CompatibilityLevel::BackwardTransitive)
            .await?;
        for version in versions {
            id = self.register(subject, version.text).await?;
        }
        tracing::debug!(
            subject,
            id,
            "registered every kept session-event schema version"
        );
        Ok(id)
    }

    /// The schema registered under `id`, fetched once and then served from the cache.
    pub async fn schema_by_id(&self, id: u32) -> Result<Arc<Schema>> {
        if let Some(schema) = self.cache().get(&id) {
            return Ok(Arc::clone(schema));
        }
        if self.inner.kept {
            // Nobody to ask: every kept version is in the cache from the start.
            return Err(Error::UnknownSchemaId(id));
        }
        // One fetch at a time, and the cache looked at again once it is this one's turn: a
        // fresh process whose thousand sessions all read back at once would otherwise ask the
        // registry a thousand times for the same id, and time out together.
        let _turn = self.inner.fetching.lock().await;
        if let Some(schema) = self.cache().get(&id) {
            return Ok(Arc::clone(schema));
        }
        let registered = get_schema_by_id(id, &self.inner.settings)
            .await
            .map_err(|e| self.classify(e, Some(id)))?;
        if registered.schema_type != SchemaType::Avro {
            return Err(Error::Registry {
                url: self.inner.url.clone(),
                message: format!("schema id {id} is {:?}, not Avro", registered.schema_type),
            });
        }
        let schema = Schema::parse_str(&registered.schema).map_err(|source| Error::Schema {
            context: format!("registry id {id}"),
            source,
        })?;
        let schema = Arc::new(schema);
        Ok(Arc::clone(self.cache().entry(id).or_insert(schema)))
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Arc<Schema>>> {
        // The map holds only complete entries, so a panic elsewhere cannot leave it torn.
        self.inner
            .by_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn unreachable(&self, source: impl Into<crate::error::BoxError>) -> Error {
        Error::RegistryUnreachable {
            url: self.inner.url.clone(),
            source: source.into(),
        }
    }

    /// The registry refused who we are: a setting to fix, not an outage to wait out.
    fn auth_refused(&self, message: &str) -> Error {
        Error::Registry {
            url: self.inner.url.clone(),
            message: format!(
                "{message} (check registry.username and registry.password, or \
                 registry.bearer_token: SESSIONLOG_REGISTRY__USERNAME, SESSIONLOG_REGISTRY__PASSWORD)"
            ),
        }
    }

    /// Sort a schema_registry_converter error into "no such schema" (dead-letter),
    /// "try again" (network, 5xx) and "refused" (everything else).
    fn classify(&self, e: SRCError, id: Option<u32>) -> Error {
        let not_found = std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<RawError>())
            .is_some_and(|raw| raw.error_code == 40403 || raw.error_code == 40401)
            || e.error.contains("status 404");
        let auth_refused = ["status 401", "status 403"]
            .iter()
            .any(|status| e.error.contains(status));
        match id {
            _ if auth_refused => self.auth_refused(&e.to_string()),
            Some(id) if not_found => Error::UnknownSchemaId(id),
            _ if e.retriable => self.unreachable(e),
            _ => Error::Registry {
                url: self.inner.url.clone(),
                message: e.to_string(),
            },
        }
    }
}

/// Subjects go into a URL path; the Confluent clients escape `/` the same way.
fn escape(subject: &str) -> String {
    subject.replace('/', "%2F")
}

/// Encodes envelopes as Kafka record values: Confluent framing around the current schema's
/// body, with the schema id resolved once at construction.
#[derive(Clone, Copy, Debug)]
pub struct EventEncoder {
    schema_id: u32,
}

impl EventEncoder {
    /// Register every kept version under `subject` and encode with the current one's id.
    pub async fn register(registry: &SchemaRegistry, subject: &str) -> Result<Self> {
        Ok(Self {
            schema_id: registry.register_all_versions(subject).await?,
        })
    }

    /// An encoder for a schema id obtained elsewhere; it must be the current schema's id.
    pub fn with_schema_id(schema_id: u32) -> Self {
        Self { schema_id }
    }

    /// The registry id written in every record.
    pub fn schema_id(&self) -> u32 {
        self.schema_id
    }

    /// The record value for `envelope`.
    pub fn encode(&self, envelope: &EventEnvelope) -> Result<Vec<u8>> {
        Ok(frame(self.schema_id, &encode_body(envelope)?))
    }
}

/// Decodes Kafka record values written by any registered version of the schema.
///
/// Keeps one [`BodyDecoder`] per writer schema id, so the registry is asked once per id,
/// not once per record.
#[derive(Clone, Debug)]
pub struct EventDecoder {
    registry: SchemaRegistry,
    decoders: Arc<Mutex<HashMap<u32, Arc<BodyDecoder>>>>,
}

impl EventDecoder {
    /// A decoder that looks writer schemas up in `registry`.
    pub fn new(registry: SchemaRegistry) -> Self {
        Self {
            registry,
            decoders: Arc::default(),
        }
    }

    /// A decoder of every kept schema version with no registry ([`SchemaRegistry::kept`]).
    /// Clones of one process-wide decoder, so each version's body decoder is built once.
    #[cfg(any(test, feature = "testing"))]
    pub fn kept() -> Self {
        static KEPT: std::sync::OnceLock<EventDecoder> = std::sync::OnceLock::new();
        KEPT.get_or_init(|| Self::new(SchemaRegistry::kept()))
            .clone()
    }

    /// The registry this decoder asks.
    pub fn registry(&self) -> &SchemaRegistry {
        &self.registry
    }

    /// Decode one framed record value. [`Error::is_retriable`] tells a registry outage
    /// (retry) from a record that will never decode (dead-letter).
    pub async fn decode(&self, bytes: &[u8]) -> Result<EventEnvelope> {
        let (id, body) = unframe(bytes)?;
        self.decoder_for(id).await?.decode(body)
    }

    /// The body decoder for writer schema `id`, built on first use.
    pub async fn decoder_for(&self, id: u32) -> Result<Arc<BodyDecoder>> {
        if let Some(decoder) = self.decoders().get(&id) {
            return Ok(Arc::clone(decoder));
        }
        let schema = self.registry.schema_by_id(id).await?;
        let decoder = Arc::new(BodyDecoder::new(&schema)?);
        Ok(Arc::clone(self.decoders().entry(id).or_insert(decoder)))
    }

    fn decoders(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Arc<BodyDecoder>>> {
        self.decoders.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A registry that reads the first request and closes its connection without answering (as
    /// a server closing a kept-alive connection the client reuses at that moment does), then
    /// answers every later one.
    async fn closes_the_first_connection() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        tokio::spawn(async move {
            let mut request = vec![0u8; 8192];
            let Ok((mut first, _)) = listener.accept().await else {
                return;
            };
            let _ = first.read(&mut request).await;
            drop(first);
            while let Ok((mut next, _)) = listener.accept().await {
                let _ = next.read(&mut request).await;
                let body = r#"{"compatibilityLevel":"BACKWARD"}"#;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = next.write_all(answer.as_bytes()).await;
            }
        });
        url
    }

    /// Golden bodies of every kept version, framed with the version as the schema id: what a
    /// topic written by every earlier build holds, as the kept registry numbers them.
    fn golden_records() -> Vec<(u32, Vec<u8>, EventEnvelope)> {
        let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("golden");
        let mut records = Vec::new();
        for version in schema_versions() {
            let dir = golden.join(format!("v{}", version.version));
            let mut bodies: Vec<_> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .map(|entry| entry.expect("a readable entry").path())
                .filter(|path| path.extension().is_some_and(|x| x == "avro"))
                .collect();
            bodies.sort();
            for body in bodies {
                let json = std::fs::read_to_string(body.with_extension("json")).expect("its json");
                let expected = serde_json::from_str(&json).expect("golden json parses");
                let body = std::fs::read(&body).expect("a readable body");
                records.push((version.version, frame(version.version, &body), expected));
            }
        }
        records
    }

    #[tokio::test]
    async fn the_kept_registry_decodes_every_kept_version_without_a_server() {
        let decoder = EventDecoder::kept();
        let records = golden_records();
        let versions: std::collections::BTreeSet<u32> = records.iter().map(|r| r.0).collect();
        assert_eq!(versions.len(), schema_versions().len(), "{versions:?}");
        for (version, record, expected) in records {
            let decoded = decoder.decode(&record).await.expect("decodes");
            assert_eq!(decoded, expected, "a v{version} record");
        }
    }

    #[tokio::test]
    async fn the_kept_registry_encodes_with_the_current_version_and_reads_it_back() {
        let registry = SchemaRegistry::kept();
        let encoder = EventEncoder::register(&registry, &value_subject("session-events"))
            .await
            .expect("registers the kept versions");
        assert_eq!(encoder.schema_id(), crate::CURRENT_SCHEMA_VERSION);
        let (_, _, envelope) = golden_records().pop().expect("a golden record");
        let record = encoder.encode(&envelope).expect("encodes");
        let decoded = EventDecoder::new(registry.clone()).decode(&record).await;
        assert_eq!(decoded.expect("decodes"), envelope);
        registry
            .ping(encoder.schema_id())
            .await
            .expect("knows its id");
    }

    #[tokio::test]
    async fn an_id_the_build_does_not_keep_is_a_dead_letter_not_an_outage() {
        let decoder = EventDecoder::kept();
        let (_, record, _) = golden_records().pop().expect("a golden record");
        let (_, body) = unframe(&record).expect("framed");
        let unknown = crate::CURRENT_SCHEMA_VERSION + 1;
        let failed = decoder.decode(&frame(unknown, body)).await;
        assert!(
            matches!(&failed, Err(Error::UnknownSchemaId(id)) if *id == unknown),
            "{failed:?}"
        );
        assert!(!failed.is_err_and(|e| e.is_retriable()));
        let registered = SchemaRegistry::kept().register("s", "{}").await;
        assert!(
            matches!(registered, Err(Error::Registry { .. })),
            "{registered:?}"
        );
    }

    #[tokio::test]
    async fn a_read_whose_connection_closed_unanswered_is_sent_again() {
        #[derive(serde::Deserialize)]
        struct Config {
            #[serde(rename = "compatibilityLevel")]
            compatibility_level: String,
        }
        let url = closes_the_first_connection().await;
        let registry = SchemaRegistry::new(url.clone()).expect("a client");
        let config = registry
            .get_json::<Config>(&format!("{url}/config"))
            .await
            .expect("answered on the second attempt")
            .expect("a config");
        assert_eq!(config.compatibility_level, "BACKWARD");
    }
}
