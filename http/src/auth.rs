//! Who may call a service: bearer JWTs (RS256 or ES256, checked against a JWKS) and API keys
//! stored hashed in the settings. [`Access`] is the [`Authenticator`] both services run before
//! every `/v1` route; it puts the [`Caller`] in the request, and each handler asks the caller
//! for the role its operation needs ([`Caller::require`], [`Caller::require_for`]).
//!
//! Answers: no credential, or a bad one (expired, wrong issuer or audience, unknown key,
//! wrong signature) → 401 with `WWW-Authenticate`; the wrong role → 403; a token narrowed to
//! one session used on another → 404, as if the session did not exist.

use crate::service::Authenticator;
use crate::{Error, Problem};
use axum::extract::{FromRequestParts, MatchedPath};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sessionlog_log::{AuthMode, AuthSettings, Role};
use sessionlog_schemas::{DEFAULT_TENANT, SessionId};
use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

/// The counter of refused requests, labelled `route` and `reason`.
pub const REFUSALS: &str = "sessionlog_access_refusals_total";

/// Describes the access metrics for the Prometheus recorder.
pub fn describe_metrics() {
    metrics::describe_counter!(
        REFUSALS,
        "API requests refused by access control, by route and reason (unauthenticated, invalid_token, forbidden, other_session)"
    );
}

/// The prefix of every API key: tells a key from a JWT at a glance.
pub const API_KEY_PREFIX: &str = "slk_";

/// How long a JWKS fetched from a URL is trusted to be complete before an unknown key id
/// makes the service fetch it again.
const JWKS_REFRESH: Duration = Duration::from_secs(60);

/// Verified tokens an instance remembers. A harness presents the same token on every request,
/// and each check parses the JWK and verifies an ES256 signature (public-key arithmetic, the
/// costliest step of authenticating); a remembered token is checked again only for its expiry
/// and for its key still being trusted.
const VERIFIED_TOKENS: usize = 10_000;

/// A token that passed verification, remembered by its SHA-256.
struct Verified {
    caller: Caller,
    /// The key that signed it: dropped from the JWKS, the token stops working at once.
    kid: String,
    /// Unix seconds (its `exp` plus the leeway) from which it is refused.
    refused_from: u64,
}

/// Who is calling, as authentication established it.
#[derive(Clone, Debug)]
pub struct Caller {
    /// The verified subject (`sub` of the token, `subject` of the API key): what audit
    /// records and privileged events name.
    pub subject: String,
    /// What the caller may do.
    pub roles: BTreeSet<Role>,
    /// The one session a narrowed credential may act on.
    pub session: Option<SessionId>,
    /// The tenant whose sessions the caller may see and create; `None` only when
    /// authentication is disabled (every tenant).
    pub tenant: Option<String>,
    /// The route template called, for refusal logs.
    pub route: String,
    /// False when authentication is disabled and nobody was checked.
    pub authenticated: bool,
}

impl Caller {
    /// The caller when authentication is disabled: anyone, with every role.
    fn anyone(route: String) -> Self {
        Self {
            subject: "anonymous".into(),
            roles: Role::ALL.into_iter().collect(),
            session: None,
            tenant: None,
            route,
            authenticated: false,
        }
    }

    /// The tenant a session this caller creates belongs to.
    pub fn home_tenant(&self) -> &str {
        self.tenant.as_deref().unwrap_or(DEFAULT_TENANT)
    }

    /// Refuses a session of another tenant with 404 `unknown_session`, exactly what a session
    /// that does not exist gets: a caller learns nothing about other tenants' sessions.
    pub fn require_tenant(&self, session: SessionId, tenant: &str) -> Result<(), Problem> {
        if self.sees_tenant(tenant) {
            return Ok(());
        }
        Err(self.unknown_session(session, "other_tenant"))
    }

    /// The 404 a session the caller may not know about gets: the same as a missing one.
    pub fn unknown_session(&self, session: SessionId, reason: &'static str) -> Problem {
        self.refuse(
            Problem::new(
                StatusCode::NOT_FOUND,
                "unknown_session",
                format!("unknown session {session}"),
            ),
            reason,
        )
    }

    /// Whether the caller may see sessions of `tenant` (for filtering lists).
    pub fn sees_tenant(&self, tenant: &str) -> bool {
        self.tenant.as_deref().is_none_or(|mine| mine == tenant)
    }

    /// The name a privileged event records for what the caller did as `label` (a writer or
    /// operator name it gave): the verified subject, with the label when it adds something.
    /// With authentication disabled there is no subject, and the label is all there is.
    pub fn on_behalf(&self, label: &str) -> String {
        if !self.authenticated && !label.is_empty() {
            label.to_string()
        } else if label.is_empty() || label == self.subject {
            self.subject.clone()
        } else {
            format!("{}/{label}", self.subject)
        }
    }

    /// Writes the audit line of a privileged action (claim, approve, resolve, fork, resume).
    pub fn audit(&self, action: &'static str, session: SessionId) {
        tracing::info!(
            target: "sessionlog::audit",
            subject = %self.subject,
            authenticated = self.authenticated,
            action,
            %session,
            route = %self.route,
            "privileged action"
        );
    }

    /// Refuses with 403 unless the caller holds `role`.
    pub fn require(&self, role: Role) -> Result<(), Problem> {
        if self.roles.contains(&role) {
            return Ok(());
        }
        Err(self.refuse(
            Problem::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("this operation needs the {} role", role.as_str()),
            )
            .with("required_role", role.as_str()),
            "forbidden",
        ))
    }

    /// [`Self::require`], and for a credential narrowed to one session, that `session` is it:
    /// another session answers 404 `unknown_session`, the same as a session that does not
    /// exist, so a narrowed credential learns nothing about other sessions.
    pub fn require_for(&self, role: Role, session: SessionId) -> Result<(), Problem> {
        self.require(role)?;
        match self.session {
            Some(only) if only != session => Err(self.unknown_session(session, "other_session")),
            _ => Ok(()),
        }
    }

    /// Refuses a credential narrowed to one session for an operation on no particular one
    /// (creating a session, listing sessions).
    pub fn require_unnarrowed(&self, role: Role) -> Result<(), Problem> {
        self.require(role)?;
        if self.session.is_some() {
            return Err(self.refuse(
                Problem::new(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    "this credential is narrowed to one session; this operation needs an unnarrowed one",
                ),
                "forbidden",
            ));
        }
        Ok(())
    }

    fn refuse(&self, problem: Problem, reason: &'static str) -> Problem {
        refused(&self.route, reason, Some(&self.subject));
        problem
    }
}

/// Counts and logs one refusal. Never the credential itself, nor the request body.
fn refused(route: &str, reason: &'static str, subject: Option<&str>) {
    metrics::counter!(REFUSALS, "route" => route.to_string(), "reason" => reason).increment(1);
    tracing::warn!(
        route,
        reason,
        subject = subject.unwrap_or("-"),
        "request refused by access control"
    );
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Problem> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            Problem::internal(
                "the route has no caller: it is not behind the service's access check",
            )
        })
    }
}

/// A role an operation needs, as a type: handlers name it in their arguments
/// (`Authorized<Harness>`), so the check runs before the body is read.
pub trait Permission: Send + Sync + 'static {
    /// The role.
    const ROLE: Role;
}

/// Needs the `harness` role.
pub struct Harness;
/// Needs the `approver` role.
pub struct Approver;
/// Needs the `operator` role.
pub struct Operator;
/// Needs the `reader` role.
pub struct Reader;

impl Permission for Harness {
    const ROLE: Role = Role::Harness;
}
impl Permission for Approver {
    const ROLE: Role = Role::Approver;
}
impl Permission for Operator {
    const ROLE: Role = Role::Operator;
}
impl Permission for Reader {
    const ROLE: Role = Role::Reader;
}

/// A caller allowed to do what `P` names: it holds the role, and if its credential is
/// narrowed to one session, the route's `{session_id}` is that session (another answers 404);
/// a narrowed credential may not use a route without a session in its path (403).
pub struct Authorized<P: Permission>(pub Caller, pub std::marker::PhantomData<P>);

impl<S: Send + Sync, P: Permission> FromRequestParts<S> for Authorized<P> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let session = axum::extract::RawPathParams::from_request_parts(parts, state)
            .await
            .ok()
            .and_then(|params| {
                params
                    .iter()
                    .find(|(name, _)| *name == "session_id")
                    .map(|(_, value)| value.to_string())
            });
        match session {
            // An unparseable id is the handler's 400; nothing to compare it with here.
            Some(text) => match text.parse::<SessionId>() {
                Ok(id) => caller.require_for(P::ROLE, id)?,
                Err(_) => caller.require(P::ROLE)?,
            },
            None => caller.require_unnarrowed(P::ROLE)?,
        }
        Ok(Self(caller, std::marker::PhantomData))
    }
}

/// The claims sessionlog reads from a bearer token (`exp`, `nbf`, `iss` and `aud` are checked by the
/// validation itself).
#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    /// Role names; names this build does not know are ignored, so newer issuers work.
    #[serde(default)]
    roles: Vec<String>,
    /// Narrows the token to one session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    session: Option<String>,
    /// The tenant; `default` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    exp: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iss: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    aud: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iat: Option<u64>,
    /// Not valid before (seconds since the Unix epoch), checked when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nbf: Option<u64>,
}

/// An API key as the settings hold it, checked.
struct KnownKey {
    sha256: [u8; 32],
    subject: String,
    tenant: String,
    roles: BTreeSet<Role>,
    session: Option<SessionId>,
}

/// The access check of a service, built from `[auth]`.
pub struct Access {
    mode: AuthMode,
    issuer: String,
    audience: String,
    leeway: u64,
    keys: RwLock<JwkSet>,
    jwks_url: Option<String>,
    fetched: Mutex<Option<Instant>>,
    http: reqwest::Client,
    api_keys: HashMap<String, KnownKey>,
    verified: Mutex<lru::LruCache<[u8; 32], Verified>>,
}

impl Access {
    /// Reads the JWKS (file or URL) and the API keys of `settings`. Warns when authentication
    /// is disabled, and when it is on with nothing to accept (every request will get 401).
    pub async fn from_settings(settings: &AuthSettings) -> Result<Self, Error> {
        let mut api_keys = HashMap::new();
        for (i, key) in settings.api_keys.iter().enumerate() {
            let setting = format!("auth.api_keys[{i}]");
            let sha256 = hex::decode(&key.sha256)
                .ok()
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
                .ok_or_else(|| Error::Setting {
                    setting: format!("{setting}.sha256"),
                    reason:
                        "not 64 hex digits (run `sessionlog token api-key` for a key and its hash)"
                            .into(),
                })?;
            let session =
                parse_session(key.session.as_deref()).map_err(|reason| Error::Setting {
                    setting: format!("{setting}.session"),
                    reason,
                })?;
            api_keys.insert(
                key.id.clone(),
                KnownKey {
                    sha256,
                    subject: key.subject.clone(),
                    tenant: key.tenant.clone(),
                    roles: key.roles.iter().copied().collect(),
                    session,
                },
            );
        }
        let access = Self {
            mode: settings.mode,
            issuer: settings.issuer.clone(),
            audience: settings.audience.clone(),
            leeway: settings.leeway_secs,
            keys: RwLock::new(JwkSet { keys: Vec::new() }),
            jwks_url: settings.jwks_url.clone(),
            fetched: Mutex::new(None),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .map_err(|source| Error::Jwks {
                    from: "the HTTP client".into(),
                    reason: source.to_string(),
                })?,
            api_keys,
            verified: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(VERIFIED_TOKENS).unwrap_or(std::num::NonZeroUsize::MIN),
            )),
        };
        if let Some(path) = &settings.jwks_file {
            let text = std::fs::read_to_string(path).map_err(|e| Error::Jwks {
                from: path.clone(),
                reason: format!("{e} (set auth.jwks_file, or run `sessionlog token init`)"),
            })?;
            *access.write_keys() = parse_jwks(&text, path)?;
        }
        if access.jwks_url.is_some() {
            access.fetch_jwks().await?;
        }
        match access.mode {
            AuthMode::Disabled => tracing::warn!(
                "authentication is DISABLED (auth.mode = \"disabled\"): anyone who can reach this port may do anything"
            ),
            AuthMode::Required
                if access.read_keys().keys.is_empty()
                    && access.jwks_url.is_none()
                    && access.api_keys.is_empty() =>
            {
                tracing::warn!(
                    "no JWKS and no API keys are configured: every API request will be refused with 401 (run `sessionlog token init`, or set auth.jwks_file, auth.jwks_url or auth.api_keys)"
                )
            }
            AuthMode::Required => {}
        }
        Ok(access)
    }

    fn read_keys(&self) -> std::sync::RwLockReadGuard<'_, JwkSet> {
        self.keys.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_keys(&self) -> std::sync::RwLockWriteGuard<'_, JwkSet> {
        self.keys.write().unwrap_or_else(|p| p.into_inner())
    }

    async fn fetch_jwks(&self) -> Result<(), Error> {
        let Some(url) = &self.jwks_url else {
            return Ok(());
        };
        *self.fetched.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        let failed = |reason: String| Error::Jwks {
            from: url.clone(),
            reason,
        };
        let response = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| failed(e.to_string()))?;
        if !response.status().is_success() {
            return Err(failed(format!("answered {}", response.status())));
        }
        let text = response.text().await.map_err(|e| failed(e.to_string()))?;
        *self.write_keys() = parse_jwks(&text, url)?;
        Ok(())
    }

    /// The key a token names, fetching the JWKS again (at most once a minute) when the id is
    /// unknown and the keys come from a URL: the issuer may have rotated.
    async fn key_for(&self, kid: &str) -> Option<Jwk> {
        if let Some(jwk) = self.read_keys().find(kid) {
            return Some(jwk.clone());
        }
        let stale = self
            .fetched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none_or(|at| at.elapsed() >= JWKS_REFRESH);
        if self.jwks_url.is_some() && stale {
            if let Err(e) = self.fetch_jwks().await {
                tracing::warn!(error = %e, "could not refresh the JWKS");
            }
            return self.read_keys().find(kid).cloned();
        }
        None
    }

    async fn caller(&self, credential: &str, route: &str) -> Result<Caller, &'static str> {
        if let Some(rest) = credential.strip_prefix(API_KEY_PREFIX) {
            let id = rest.split('_').next().unwrap_or_default();
            let key = self.api_keys.get(id).ok_or("unknown API key")?;
            // Comparing hashes, not keys: how long this takes says nothing usable about the key.
            if Sha256::digest(credential.as_bytes()).as_slice() != key.sha256 {
                return Err("unknown API key");
            }
            return Ok(Caller {
                subject: key.subject.clone(),
                roles: key.roles.clone(),
                session: key.session,
                tenant: Some(key.tenant.clone()),
                route: route.to_string(),
                authenticated: true,
            });
        }
        let digest: [u8; 32] = Sha256::digest(credential.as_bytes()).into();
        if let Some(caller) = self.remembered(&digest, route) {
            return Ok(caller);
        }
        let header = jsonwebtoken::decode_header(credential).map_err(|_| "not a JWT")?;
        // Pinned: a JWKS `oct` key must never turn a token into an HMAC the caller can forge.
        if !matches!(header.alg, Algorithm::RS256 | Algorithm::ES256) {
            return Err("algorithm not allowed (RS256 or ES256)");
        }
        let kid = header.kid.ok_or("token without a key id (kid)")?;
        let jwk = self.key_for(&kid).await.ok_or("unknown key id")?;
        if jwk
            .common
            .key_algorithm
            .is_some_and(|alg| alg.to_string() != format!("{:?}", header.alg))
        {
            return Err("the key is not for this algorithm");
        }
        let key = DecodingKey::from_jwk(&jwk).map_err(|_| "unusable key in the JWKS")?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        // Off by default in jsonwebtoken: a token minted for later must not work now.
        validation.validate_nbf = true;
        validation.leeway = self.leeway;
        let claims = jsonwebtoken::decode::<Claims>(credential, &key, &validation)
            .map_err(|e| match e.kind() {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => "token expired",
                jsonwebtoken::errors::ErrorKind::InvalidAudience => "wrong audience",
                jsonwebtoken::errors::ErrorKind::InvalidIssuer => "wrong issuer",
                jsonwebtoken::errors::ErrorKind::InvalidSignature => "wrong signature",
                jsonwebtoken::errors::ErrorKind::ImmatureSignature => "token not valid yet",
                _ => "invalid token",
            })?
            .claims;
        let session = parse_session(claims.session.as_deref()).map_err(|_| "bad session claim")?;
        let caller = Caller {
            subject: claims.sub,
            roles: claims.roles.iter().filter_map(|r| r.parse().ok()).collect(),
            session,
            tenant: Some(claims.tenant.unwrap_or_else(|| DEFAULT_TENANT.to_string())),
            route: route.to_string(),
            authenticated: true,
        };
        if let Some(exp) = claims.exp {
            let remembered = Verified {
                caller: caller.clone(),
                kid,
                refused_from: exp.saturating_add(self.leeway),
            };
            self.verified_tokens().put(digest, remembered);
        }
        Ok(caller)
    }

    /// The caller of a token verified before, if it is not expired and its key is still
    /// trusted (a token whose key left the JWKS, or that expired, is verified again, and
    /// refused).
    fn remembered(&self, digest: &[u8; 32], route: &str) -> Option<Caller> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(u64::MAX, |d| d.as_secs());
        let mut verified = self.verified_tokens();
        let entry = verified.get(digest)?;
        if now >= entry.refused_from || self.read_keys().find(&entry.kid).is_none() {
            verified.pop(digest);
            return None;
        }
        Some(Caller {
            route: route.to_string(),
            ..entry.caller.clone()
        })
    }

    fn verified_tokens(&self) -> std::sync::MutexGuard<'_, lru::LruCache<[u8; 32], Verified>> {
        // Each use is one call on the cache: a panic cannot leave it torn.
        self.verified.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn parse_session(text: Option<&str>) -> Result<Option<SessionId>, String> {
    text.map(|t| {
        t.parse()
            .map_err(|_| format!("{t:?} is not a session id (a UUID)"))
    })
    .transpose()
}

fn parse_jwks(text: &str, from: &str) -> Result<JwkSet, Error> {
    serde_json::from_str(text).map_err(|e| Error::Jwks {
        from: from.to_string(),
        reason: format!("not a JWKS document: {e}"),
    })
}

/// 401 with the RFC 6750 challenge.
fn unauthenticated(route: &str, why: &'static str, had_credential: bool) -> Problem {
    let (code, challenge) = if had_credential {
        (
            "invalid_token",
            format!(
                "Bearer realm=\"sessionlog\", error=\"invalid_token\", error_description=\"{why}\""
            ),
        )
    } else {
        ("unauthenticated", "Bearer realm=\"sessionlog\"".to_string())
    };
    refused(route, code, None);
    let mut problem = Problem::new(
        StatusCode::UNAUTHORIZED,
        code,
        format!(
            "{why}: send `Authorization: Bearer <token or API key>` (`sessionlog token mint` makes one)"
        ),
    );
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        problem.headers.push((header::WWW_AUTHENTICATE, value));
    }
    problem
}

impl Authenticator for Access {
    fn authenticate<'a>(
        &'a self,
        request: &'a mut Parts,
    ) -> Pin<Box<dyn Future<Output = Result<(), Problem>> + Send + 'a>> {
        Box::pin(async move {
            let route = request
                .extensions
                .get::<MatchedPath>()
                .map_or("unmatched", |p| p.as_str())
                .to_string();
            if self.mode == AuthMode::Disabled {
                request.extensions.insert(Caller::anyone(route));
                return Ok(());
            }
            let credential = request
                .headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| {
                    let (scheme, rest) = v.split_once(' ')?;
                    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
                })
                .filter(|c| !c.is_empty());
            let Some(credential) = credential else {
                return Err(unauthenticated(&route, "no credential", false));
            };
            let caller = self
                .caller(credential, &route)
                .await
                .map_err(|why| unauthenticated(&route, why, true))?;
            request.extensions.insert(caller);
            Ok(())
        })
    }
}

/// What a minted token grants.
#[derive(Clone, Debug)]
pub struct Grant {
    /// Who it speaks for.
    pub subject: String,
    /// What it may do.
    pub roles: Vec<Role>,
    /// The one session it may act on, if narrowed.
    pub session: Option<SessionId>,
    /// The tenant (`default` when `None`).
    pub tenant: Option<String>,
    /// `iss`; must equal `auth.issuer` of the services.
    pub issuer: String,
    /// `aud`; must equal `auth.audience` of the services.
    pub audience: String,
    /// When it stops being valid (`exp`).
    pub expires: std::time::SystemTime,
}

impl Grant {
    /// A grant for `subject` with `roles`, for the default issuer and audience, valid for
    /// `ttl` from now.
    pub fn new(subject: &str, roles: &[Role], ttl: Duration) -> Self {
        let defaults = AuthSettings::default();
        Self {
            subject: subject.to_string(),
            roles: roles.to_vec(),
            session: None,
            tenant: None,
            issuer: defaults.issuer,
            audience: defaults.audience,
            expires: std::time::SystemTime::now() + ttl,
        }
    }
}

/// Headers a client sends to present `credential` (a token or an API key) to the services:
/// `Authorization: Bearer <credential>`, marked sensitive so a client's debug output never
/// shows it.
pub fn bearer_headers(credential: &str) -> Result<reqwest::header::HeaderMap, Error> {
    let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {credential}"))
        .map_err(Error::Credential)?;
    value.set_sensitive(true);
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(reqwest::header::AUTHORIZATION, value);
    Ok(headers)
}

/// A signing key for development and tests: ES256 (P-256), made here, published as a JWKS
/// that the services read (`auth.jwks_file`). Production tokens come from your identity
/// provider instead; the services only ever see its JWKS.
pub struct SigningKey {
    kid: String,
    pkcs8: Vec<u8>,
    x: Vec<u8>,
    y: Vec<u8>,
}

impl SigningKey {
    /// A fresh key.
    pub fn generate() -> Result<Self, Error> {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| Error::Key("could not generate a P-256 key".into()))?;
        Self::from_pkcs8(pkcs8.as_ref())
    }

    /// The key from its PEM (`PRIVATE KEY`, PKCS#8), as [`Self::pem`] writes it.
    pub fn from_pem(pem: &str) -> Result<Self, Error> {
        // PEM is base64 between two marker lines; written out here because the one PEM reader
        // in the tree (inside jsonwebtoken) is private to it.
        let body: String = pem
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .map(str::trim)
            .collect();
        let der = STANDARD
            .decode(body)
            .map_err(|e| Error::Key(format!("not a PEM private key: {e}")))?;
        Self::from_pkcs8(&der)
    }

    fn from_pkcs8(der: &[u8]) -> Result<Self, Error> {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der)
            .map_err(|e| Error::Key(format!("not a P-256 PKCS#8 key: {e}")))?;
        // Uncompressed point: 0x04, then 32 bytes of x and 32 of y.
        let point = pair.public_key().as_ref();
        if point.len() != 65 {
            return Err(Error::Key("unexpected public key encoding".into()));
        }
        Ok(Self {
            kid: hex::encode(&Sha256::digest(point)[..8]),
            pkcs8: der.to_vec(),
            x: point[1..33].to_vec(),
            y: point[33..].to_vec(),
        })
    }

    /// The key id tokens name in their header.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// An ECDSA P-256 (SHA-256, fixed-length r‖s) signature of `message`: how the recovery
    /// service attests the privileged events it appends.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, Error> {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &self.pkcs8)
            .map_err(|e| Error::Key(format!("unusable signing key: {e}")))?;
        let rng = aws_lc_rs::rand::SystemRandom::new();
        pair.sign(&rng, message)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| Error::Key("could not sign".into()))
    }

    /// The public half, to verify what [`Self::sign`] signed.
    pub fn public_key(&self) -> PublicKey {
        let mut point = vec![4u8];
        point.extend_from_slice(&self.x);
        point.extend_from_slice(&self.y);
        PublicKey {
            kid: self.kid.clone(),
            point,
        }
    }

    /// The private key as PEM, to keep in a file of mode 600.
    pub fn pem(&self) -> String {
        let b64 = STANDARD.encode(&self.pkcs8);
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap_or_default())
            .collect();
        format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            lines.join("\n")
        )
    }

    /// The public key as a JWKS document for `auth.jwks_file`.
    pub fn jwks(&self) -> serde_json::Value {
        serde_json::json!({ "keys": [{
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": self.kid,
            "x": URL_SAFE_NO_PAD.encode(&self.x), "y": URL_SAFE_NO_PAD.encode(&self.y),
        }]})
    }

    /// A signed token for `grant`.
    pub fn mint(&self, grant: &Grant) -> Result<String, Error> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let claims = Claims {
            sub: grant.subject.clone(),
            roles: grant.roles.iter().map(|r| r.as_str().to_string()).collect(),
            session: grant.session.map(|s| s.to_string()),
            tenant: grant.tenant.clone(),
            exp: Some(
                grant
                    .expires
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
            ),
            iss: Some(grant.issuer.clone()),
            aud: Some(grant.audience.clone()),
            iat: Some(now),
            nbf: None,
        };
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, &claims, &EncodingKey::from_ec_der(&self.pkcs8))
            .map_err(|e| Error::Key(format!("could not sign: {e}")))
    }
}

/// A P-256 public key that checks [`SigningKey::sign`] signatures.
#[derive(Clone, Debug)]
pub struct PublicKey {
    /// Its key id.
    pub kid: String,
    point: Vec<u8>,
}

impl PublicKey {
    /// The EC P-256 keys of a JWKS document (other keys are skipped): the retired keys whose
    /// old signatures must still verify after a rotation.
    pub fn from_jwks(text: &str, from: &str) -> Result<Vec<Self>, Error> {
        let set = parse_jwks(text, from)?;
        Ok(set
            .keys
            .iter()
            .filter_map(|jwk| {
                let kid = jwk.common.key_id.clone()?;
                match &jwk.algorithm {
                    jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(ec) => {
                        let x = URL_SAFE_NO_PAD.decode(&ec.x).ok()?;
                        let y = URL_SAFE_NO_PAD.decode(&ec.y).ok()?;
                        let mut point = vec![4u8];
                        point.extend_from_slice(&x);
                        point.extend_from_slice(&y);
                        Some(Self { kid, point })
                    }
                    _ => None,
                }
            })
            .collect())
    }

    /// Whether `signature` is this key's signature of `message`.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &self.point)
            .verify(message, signature)
            .is_ok()
    }
}

/// A new API key for `id`: the key to give the machine, and the hex SHA-256 for the settings.
pub fn new_api_key(id: &str) -> Result<(String, String), Error> {
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(Error::Key(format!(
            "API key id {id:?}: use letters, digits and '-' only"
        )));
    }
    let mut secret = [0u8; 32];
    aws_lc_rs::rand::fill(&mut secret).map_err(|_| Error::Key("no randomness".into()))?;
    let key = format!("{API_KEY_PREFIX}{id}_{}", URL_SAFE_NO_PAD.encode(secret));
    let hash = hex::encode(Sha256::digest(key.as_bytes()));
    Ok((key, hash))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_headers_carry_the_credential_hidden_and_refuse_a_broken_one() {
        let headers = bearer_headers("slk_abc").unwrap();
        let value = &headers[reqwest::header::AUTHORIZATION];
        assert_eq!(value.to_str().unwrap(), "Bearer slk_abc");
        assert!(value.is_sensitive());
        assert!(!format!("{headers:?}").contains("slk_abc"));
        assert!(matches!(
            bearer_headers("slk\nX-Injected: 1"),
            Err(Error::Credential(_))
        ));
    }
    use sessionlog_log::ApiKey;

    fn grant(roles: &[Role]) -> Grant {
        Grant::new("alice", roles, Duration::from_secs(60))
    }

    async fn access_trusting(key: &SigningKey, api_keys: Vec<ApiKey>) -> Access {
        let dir = std::env::temp_dir().join(format!("sessionlog-auth-{}", key.kid()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let path = dir.join("jwks.json");
        std::fs::write(&path, key.jwks().to_string()).unwrap_or_default();
        let settings = AuthSettings {
            jwks_file: Some(path.display().to_string()),
            api_keys,
            ..AuthSettings::default()
        };
        match Access::from_settings(&settings).await {
            Ok(access) => access,
            Err(e) => panic!("access: {e}"),
        }
    }

    #[tokio::test]
    async fn a_minted_token_and_a_pem_round_trip_are_accepted_with_their_roles() {
        let key = SigningKey::generate().expect("key");
        let again = SigningKey::from_pem(&key.pem()).expect("pem reads back");
        assert_eq!(again.kid(), key.kid());
        let access = access_trusting(&key, Vec::new()).await;
        let token = again.mint(&grant(&[Role::Approver])).expect("mint");
        let caller = access.caller(&token, "/r").await.expect("accepted");
        assert_eq!(caller.subject, "alice");
        assert!(caller.require(Role::Approver).is_ok());
        assert_eq!(
            caller.require(Role::Operator).map_err(|p| p.status),
            Err(StatusCode::FORBIDDEN)
        );
    }

    #[tokio::test]
    async fn a_remembered_token_is_refused_once_its_key_leaves_the_jwks_or_it_expires() {
        let key = SigningKey::generate().expect("key");
        let access = access_trusting(&key, Vec::new()).await;
        let token = key.mint(&grant(&[Role::Reader])).expect("mint");
        let first = access.caller(&token, "/a").await.expect("accepted");
        assert_eq!(access.verified_tokens().len(), 1, "remembered");
        let again = access.caller(&token, "/b").await.expect("accepted again");
        assert_eq!(
            (again.subject.as_str(), again.route.as_str()),
            ("alice", "/b")
        );
        assert_eq!(again.roles, first.roles);

        // Expired while remembered: verified again, and refused by the validation.
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(entry) = access.verified_tokens().get_mut(&digest) {
            entry.refused_from = 0;
        }
        assert!(access.remembered(&digest, "/c").is_none());
        assert_eq!(access.verified_tokens().len(), 0, "forgotten");

        // Its key dropped from the JWKS: refused at once, though it was remembered.
        access.caller(&token, "/d").await.expect("accepted");
        *access.write_keys() = JwkSet { keys: Vec::new() };
        assert_eq!(
            access.caller(&token, "/e").await.err(),
            Some("unknown key id")
        );
    }

    #[tokio::test]
    async fn a_token_not_valid_yet_is_refused() {
        let key = SigningKey::generate().expect("key");
        let access = access_trusting(&key, Vec::new()).await;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let claims = |nbf: u64| Claims {
            sub: "alice".into(),
            roles: vec!["reader".into()],
            session: None,
            tenant: None,
            exp: Some(now + 3_600),
            iss: Some(grant(&[]).issuer),
            aud: Some(grant(&[]).audience),
            iat: Some(now),
            nbf: Some(nbf),
        };
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(key.kid().to_string());
        let sign = |claims: &Claims| {
            jsonwebtoken::encode(&header, claims, &EncodingKey::from_ec_der(&key.pkcs8))
                .expect("sign")
        };
        // An hour ahead, beyond the leeway: refused; from now on: accepted.
        let early = sign(&claims(now + 3_600));
        assert_eq!(
            access.caller(&early, "/r").await.err(),
            Some("token not valid yet")
        );
        assert!(access.caller(&sign(&claims(now)), "/r").await.is_ok());
    }

    #[tokio::test]
    async fn expired_foreign_wrong_audience_and_forged_tokens_are_refused() {
        let key = SigningKey::generate().expect("key");
        let stranger = SigningKey::generate().expect("key");
        let access = access_trusting(&key, Vec::new()).await;
        let mut wrong_audience = grant(&[Role::Reader]);
        wrong_audience.audience = "someone-else".into();
        // Two minutes past expiry, beyond the leeway.
        let old = key
            .mint(&Grant {
                expires: std::time::SystemTime::now() - Duration::from_secs(120),
                ..grant(&[Role::Reader])
            })
            .expect("mint");
        let forged = {
            // Signed by a stranger but naming our key id.
            let token = stranger.mint(&grant(&[Role::Reader])).expect("mint");
            let mut parts: Vec<String> = token.split('.').map(String::from).collect();
            let mut header: serde_json::Value =
                serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&parts[0]).expect("b64"))
                    .expect("json");
            header["kid"] = key.kid().into();
            parts[0] = URL_SAFE_NO_PAD.encode(header.to_string());
            parts.join(".")
        };
        let hmac = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &serde_json::json!({"sub": "x", "exp": u64::MAX / 2, "iss": "sessionlog", "aud": "sessionlog"}),
            &EncodingKey::from_secret(b"guess"),
        )
        .expect("sign");
        for (token, why) in [
            (old, "token expired"),
            (key.mint(&wrong_audience).expect("mint"), "wrong audience"),
            (
                stranger.mint(&grant(&[Role::Reader])).expect("mint"),
                "unknown key id",
            ),
            (forged, "wrong signature"),
            (hmac, "algorithm not allowed (RS256 or ES256)"),
            ("garbage".to_string(), "not a JWT"),
        ] {
            assert_eq!(access.caller(&token, "/r").await.err(), Some(why));
        }
    }

    #[test]
    fn a_signature_verifies_under_its_key_only_and_only_for_its_message() {
        let key = SigningKey::generate().expect("key");
        let other = SigningKey::generate().expect("key");
        let signature = key.sign(b"statement").expect("sign");
        assert!(key.public_key().verifies(b"statement", &signature));
        assert!(!key.public_key().verifies(b"statement!", &signature));
        assert!(!other.public_key().verifies(b"statement", &signature));
        let from_jwks = PublicKey::from_jwks(&key.jwks().to_string(), "test").expect("jwks");
        assert!(from_jwks[0].verifies(b"statement", &signature));
    }

    #[tokio::test]
    async fn an_api_key_is_accepted_by_its_hash_and_a_narrowed_one_sees_only_its_session() {
        let key = SigningKey::generate().expect("key");
        let (api_key, sha256) = new_api_key("ci-1").expect("api key");
        let only = SessionId::new();
        let access = access_trusting(
            &key,
            vec![ApiKey {
                id: "ci-1".into(),
                sha256,
                subject: "ci".into(),
                tenant: "acme".into(),
                roles: vec![Role::Harness],
                session: Some(only.to_string()),
            }],
        )
        .await;
        let caller = access.caller(&api_key, "/r").await.expect("accepted");
        assert_eq!(caller.subject, "ci");
        assert!(caller.require_for(Role::Harness, only).is_ok());
        assert_eq!(
            caller
                .require_for(Role::Harness, SessionId::new())
                .map_err(|p| p.status),
            Err(StatusCode::NOT_FOUND)
        );
        assert_eq!(caller.home_tenant(), "acme");
        assert!(caller.require_tenant(only, "acme").is_ok());
        assert_eq!(
            caller.require_tenant(only, "globex").map_err(|p| p.status),
            Err(StatusCode::NOT_FOUND)
        );
        let tampered = format!("{}x", api_key);
        assert_eq!(
            access.caller(&tampered, "/r").await.err(),
            Some("unknown API key")
        );
    }
}
