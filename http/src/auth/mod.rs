//! Who may call a service: bearer JWTs (RS256 or ES256, checked against a JWKS) and API keys
//! stored hashed in the settings. [`Access`] is the [`Authenticator`] both services run before
//! every `/v1` route; it puts the [`Caller`] in the request, and each handler asks the caller
//! for the role its operation needs ([`Caller::require`], [`Caller::require_for`]).
//!
//! Answers: no credential, or a bad one (expired, wrong issuer or audience, unknown key,
//! wrong signature) → 401 with `WWW-Authenticate`; the wrong role → 403; a token narrowed to
//! one session used on another → 404, as if the session did not exist.
//!
//! `access` holds the check itself, `caller` who is calling and the roles handlers ask for
//! ([`Authorized`]), `signing` the development signing key, minted tokens and API keys.

mod access;
mod caller;
mod signing;

pub use access::Access;
pub use caller::{Approver, Authorized, Caller, Harness, Operator, Permission, Reader};
pub use signing::{Grant, PublicKey, SigningKey, bearer_headers, new_api_key};

use crate::Error;
use jsonwebtoken::jwk::JwkSet;
use serde::{Deserialize, Serialize};

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

/// The JWKS document `text`, read from `from` (a file or a URL, for the error).
fn parse_jwks(text: &str, from: &str) -> Result<JwkSet, Error> {
    serde_json::from_str(text).map_err(|e| Error::Jwks {
        from: from.to_string(),
        reason: format!("not a JWKS document: {e}"),
    })
}
