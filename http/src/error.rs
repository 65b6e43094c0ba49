//! Errors of the HTTP layer's setup (answers to requests are [`crate::Problem`]s).

/// What can go wrong setting up a service's access check.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting of `[auth]` that cannot be used.
    #[error("setting {setting}: {reason}")]
    Setting {
        /// The setting, e.g. `auth.api_keys[0].sha256`.
        setting: String,
        /// What is wrong with it, and how to fix it.
        reason: String,
    },
    /// The JWKS could not be read.
    #[error("cannot read the JWKS from {from}: {reason}")]
    Jwks {
        /// The file or URL.
        from: String,
        /// Why.
        reason: String,
    },
    /// A signing key could not be made, read or used.
    #[error("signing key: {0}")]
    Key(String),
    /// A credential that cannot be sent in an `Authorization` header (a control character).
    #[error("the credential cannot be sent as an Authorization header")]
    Credential(#[source] reqwest::header::InvalidHeaderValue),
}
