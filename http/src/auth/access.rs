//! [`Access`]: the check both services run before every `/v1` route, from `[auth]`.

use super::caller::refused;
use super::{API_KEY_PREFIX, Caller, Claims, parse_jwks};
use crate::service::Authenticator;
use crate::{Error, Problem};
use axum::extract::MatchedPath;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use sessionlog_log::{AuthMode, AuthSettings, Role};
use sessionlog_schemas::{DEFAULT_TENANT, SessionId};
use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Grant, SigningKey, new_api_key};
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use jsonwebtoken::{EncodingKey, Header};
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
