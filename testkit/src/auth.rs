//! Authentication for tests and benchmarks: one development signing key per process, trusted
//! by every service it starts (its JWKS is in [`crate::TestStack`]'s settings, so in each
//! served process's settings file), and tokens minted with it. They run with authentication on.

use anyhow::{Context, Result};
use sessionlog_http::auth::{Grant, SigningKey};
use sessionlog_log::{AuthSettings, Role};
use sessionlog_schemas::SessionId;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

struct TestKey {
    key: SigningKey,
    jwks_file: PathBuf,
    /// The same key as PEM: recovery signs privileged events with it in the tests.
    pem_file: PathBuf,
}

fn test_key() -> Result<&'static TestKey> {
    static KEY: OnceLock<TestKey> = OnceLock::new();
    if let Some(key) = KEY.get() {
        return Ok(key);
    }
    let key = SigningKey::generate()?;
    let dir = crate::served::scratch_dir()?;
    let jwks_file = dir.join(format!("jwks-{}.json", key.kid()));
    std::fs::write(&jwks_file, key.jwks().to_string())
        .with_context(|| format!("writing {}", jwks_file.display()))?;
    let pem_file = dir.join(format!("key-{}.pem", key.kid()));
    std::fs::write(&pem_file, key.pem())
        .with_context(|| format!("writing {}", pem_file.display()))?;
    // Two threads may race to make one; either key is fine as long as all use the winner.
    Ok(KEY.get_or_init(|| TestKey {
        key,
        jwks_file,
        pem_file,
    }))
}

/// This process's key-encryption key, in a file like the one `sessionlog keys init` writes:
/// the tests run with encryption on.
pub fn kek_file() -> Result<String> {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    if let Some(file) = FILE.get() {
        return Ok(file.display().to_string());
    }
    let dir = crate::served::scratch_dir()?;
    let kek = sessionlog_keys::Kek::generate();
    let file = dir.join(format!("{}.key", kek.id()));
    std::fs::write(&file, kek.to_base64().as_str())
        .with_context(|| format!("writing {}", file.display()))?;
    Ok(FILE.get_or_init(|| file).display().to_string())
}

/// The `[auth]` settings that trust this process's test key.
pub fn settings() -> Result<AuthSettings> {
    Ok(AuthSettings {
        jwks_file: Some(test_key()?.jwks_file.display().to_string()),
        ..AuthSettings::default()
    })
}

/// The private key file recovery signs privileged events with in the tests.
pub fn signing_key_file() -> Result<String> {
    Ok(test_key()?.pem_file.display().to_string())
}

/// A token for `subject` with `roles`, valid for ten minutes.
pub fn token(subject: &str, roles: &[Role]) -> Result<String> {
    token_with(subject, roles, None, Duration::from_secs(600))
}

/// A token narrowed to `session`, or with another lifetime.
pub fn token_with(
    subject: &str,
    roles: &[Role],
    session: Option<SessionId>,
    ttl: Duration,
) -> Result<String> {
    mint(&Grant {
        session,
        ..Grant::new(subject, roles, ttl)
    })
}

/// A token for any grant (an expired one, another audience), signed by the trusted test key.
pub fn mint(grant: &Grant) -> Result<String> {
    Ok(test_key()?.key.mint(grant)?)
}

/// A token with every role, for tests about something other than access control.
pub fn full_token() -> Result<String> {
    token("test", &Role::ALL)
}

/// An HTTP client that sends `token` with every request.
pub fn client_with(token: &str) -> Result<reqwest::Client> {
    Ok(client_builder(token)?.build()?)
}

/// A client builder that sends `token` with every request, for a client with its own pool or
/// timeouts (a benchmark's).
pub fn client_builder(token: &str) -> Result<reqwest::ClientBuilder> {
    Ok(reqwest::Client::builder().default_headers(sessionlog_http::auth::bearer_headers(token)?))
}

/// An HTTP client with every role.
pub fn client() -> Result<reqwest::Client> {
    client_with(&full_token()?)
}
