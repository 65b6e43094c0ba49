//! What a resume bundle says about the MCP server over the session's history (`sessionlog
//! mcp`): its endpoint and, when recovery holds a token key, a `reader` token narrowed to the
//! resumed session, so the harness can hand both to its model (`[recovery.mcp]`).
//!
//! The token grants less than the resume did: the resuming writer is about to append to the
//! session, and the token only reads it (and, through a fork, its ancestors up to the fork
//! point, as any credential narrowed to the fork does). It names the writer as its subject, so
//! the MCP server's audit lines say whose model read what.

use crate::Result;
use serde::Serialize;
use sessionlog_http::auth::{Grant, SigningKey};
use sessionlog_log::{Role, Settings};
use sessionlog_schemas::SessionId;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The MCP server a harness may give its model, as a resume bundle carries it.
#[derive(Clone, Serialize)]
pub struct McpAccess {
    /// The Streamable HTTP endpoint (`[recovery.mcp] url`).
    pub url: String,
    /// `Authorization: Bearer <token>` for it: the `reader` role on this session only. Absent
    /// when recovery holds no token key (`recovery.mcp.token_key_file`): the harness then
    /// presents a credential of its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// When the token stops being valid (RFC 3339); a harness running longer asks where it
    /// gets its own credentials for another (resuming again would fence its own writer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

impl std::fmt::Debug for McpAccess {
    // The token is a credential: never in a debug line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpAccess")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// Makes the [`McpAccess`] of each resume from `[recovery.mcp]`.
pub struct McpIssuer {
    url: String,
    key: Option<SigningKey>,
    ttl: Duration,
    issuer: String,
    audience: String,
}

impl McpIssuer {
    /// The issuer `settings` describe; `None` when `recovery.mcp.url` is not set. A token key
    /// that cannot be read or is not a P-256 key fails here, naming the setting, so a service
    /// never starts to find out at its first resume.
    pub fn from_settings(settings: &Settings) -> Result<Option<Self>> {
        let mcp = &settings.recovery.mcp;
        let Some(url) = &mcp.url else {
            return Ok(None);
        };
        let key = mcp
            .token_key_file
            .as_deref()
            .map(|path| crate::notary::signing_key_file(path, "recovery.mcp.token_key_file"))
            .transpose()?;
        Ok(Some(Self {
            url: url.clone(),
            key,
            ttl: mcp.token_ttl(),
            issuer: settings.auth.issuer.clone(),
            audience: settings.auth.audience.clone(),
        }))
    }

    /// The access for `writer` (who resumed `session` of `tenant`): the endpoint, and a
    /// reader token for the session when there is a key. Signing with a key that loaded
    /// cannot fail in practice; if it does, the bundle names the endpoint without a token
    /// (the claim is already in the log, so failing the resume would help no one).
    pub fn access(&self, session: SessionId, writer: &str, tenant: &str) -> McpAccess {
        let mut access = McpAccess {
            url: self.url.clone(),
            token: None,
            expires_at: None,
        };
        let Some(key) = &self.key else {
            return access;
        };
        let expires = SystemTime::now() + self.ttl;
        let grant = Grant {
            session: Some(session),
            tenant: Some(tenant.to_string()),
            issuer: self.issuer.clone(),
            audience: self.audience.clone(),
            expires,
            ..Grant::new(writer, &[Role::Reader], self.ttl)
        };
        match key.mint(&grant) {
            Ok(token) => {
                access.token = Some(token);
                let micros = expires
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
                access.expires_at = Some(crate::lease::rfc3339(micros));
            }
            Err(e) => {
                tracing::warn!(%session, error = %e, "could not sign the MCP token of a resume bundle");
            }
        }
        access
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuer(key: Option<SigningKey>) -> McpIssuer {
        McpIssuer {
            url: "http://127.0.0.1:8097/mcp".into(),
            key,
            ttl: Duration::from_secs(600),
            issuer: "sessionlog".into(),
            audience: "sessionlog".into(),
        }
    }

    #[test]
    fn a_bundle_token_reads_only_the_resumed_session_for_the_writer() {
        let key = SigningKey::generate().expect("key");
        let session = SessionId::new();
        let access = issuer(Some(key)).access(session, "alice/worker-1", "acme");
        let token = access.token.clone().expect("a token");
        // The claims, read without checking the signature (the MCP server's check of it is
        // tested on the stack, tests/tests/integration/mcp.rs); here, what was granted.
        let payload = token.split('.').nth(1).expect("a JWT");
        use base64::Engine;
        let claims: serde_json::Value = serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(payload)
                .expect("base64"),
        )
        .expect("json");
        assert_eq!(claims["sub"], "alice/worker-1");
        assert_eq!(claims["roles"], serde_json::json!(["reader"]));
        assert_eq!(claims["session"], session.to_string());
        assert_eq!(claims["tenant"], "acme");
        let exp = claims["exp"].as_u64().expect("exp");
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(
            (now + 590..=now + 610).contains(&exp),
            "exp {exp}, now {now}"
        );
        assert!(access.expires_at.is_some());
        assert!(
            !format!("{access:?}").contains(&token),
            "the token shows in Debug"
        );
    }

    #[test]
    fn without_a_key_a_bundle_names_the_endpoint_only() {
        let access = issuer(None).access(SessionId::new(), "w", "default");
        assert_eq!(access.url, "http://127.0.0.1:8097/mcp");
        assert!(access.token.is_none() && access.expires_at.is_none());
        let json = serde_json::to_value(&access).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"url": "http://127.0.0.1:8097/mcp"})
        );
    }
}
