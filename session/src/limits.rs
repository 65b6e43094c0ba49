//! What the identifiers a client chooses may hold.
//!
//! Approval ids travel in URL paths (`/v1/sessions/{id}/approvals/{approval_id}`): a client
//! that forgets to escape one must not be able to aim at another route or session, so they are
//! a short, path-safe set of characters. Idempotency keys, framework keys and session names
//! travel in bodies and query strings, so they may hold any text but control characters
//! (NUL among them), up to a size that keeps rows and indexes small.
//!
//! The services answer 422 with [`BadIdentifier`]'s text before anything is written; in a
//! session started under schema v6 or later the fold refuses an event that breaks a rule too,
//! so a raw Kafka producer meets them.

use std::fmt;

/// The first schema version whose sessions' folds enforce these limits.
pub const LIMITS_FROM_SCHEMA: u32 = 6;

/// The most characters an approval id may have.
pub const MAX_APPROVAL_ID_CHARS: usize = 128;

/// The most bytes (UTF-8) of an idempotency key, a framework key or a session name.
pub const MAX_KEY_BYTES: usize = 512;

/// What an identifier is, for the error's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdentifierKind {
    /// `approval_id` of a request, a decision or a call.
    ApprovalId,
    /// An event's `idempotency_key`.
    IdempotencyKey,
    /// `FrameworkStateSaved.key`.
    FrameworkKey,
    /// A session's name within its tenant.
    SessionName,
}

impl IdentifierKind {
    /// The field's name, as clients write it.
    pub fn field(self) -> &'static str {
        match self {
            Self::ApprovalId => "approval_id",
            Self::IdempotencyKey => "idempotency_key",
            Self::FrameworkKey => "key",
            Self::SessionName => "name",
        }
    }

    /// The rule, as the error states it.
    pub fn rule(self) -> String {
        match self {
            Self::ApprovalId => format!(
                "1 to {MAX_APPROVAL_ID_CHARS} characters of A-Z a-z 0-9 . _ : @ + = -, and not `.` or `..`"
            ),
            _ => format!("1 to {MAX_KEY_BYTES} bytes of UTF-8 without control characters"),
        }
    }
}

/// An identifier that breaks its rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadIdentifier {
    /// Which identifier.
    pub kind: IdentifierKind,
}

impl fmt::Display for BadIdentifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The rule only: the identifier itself may be the very text that should not be echoed
        // (10 KB of it, a NUL, a user's own id).
        write!(f, "{} must be {}", self.kind.field(), self.kind.rule())
    }
}

impl std::error::Error for BadIdentifier {}

/// Checks `text` against `kind`'s rule.
pub fn check(kind: IdentifierKind, text: &str) -> Result<(), BadIdentifier> {
    let fits = match kind {
        IdentifierKind::ApprovalId => {
            !text.is_empty()
                && text.len() <= MAX_APPROVAL_ID_CHARS
                && text != "."
                && text != ".."
                && text
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".:_@+=-".contains(&b))
        }
        _ => !text.is_empty() && text.len() <= MAX_KEY_BYTES && !text.chars().any(char::is_control),
    };
    if fits {
        Ok(())
    } else {
        Err(BadIdentifier { kind })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use IdentifierKind::*;

    #[test]
    fn approval_ids_are_path_safe() {
        for good in [
            "deploy",
            "deploy-2026.12:prod",
            "a@b+c=d_e",
            &"x".repeat(128),
        ] {
            assert_eq!(check(ApprovalId, good), Ok(()), "{good:?}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../../other/approvals/x",
            "a/b",
            "a?b",
            "a#b",
            "a%2Fb",
            "a\0b",
            "a b",
            "é",
            &"x".repeat(129),
        ] {
            assert!(check(ApprovalId, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn keys_hold_any_text_but_control_characters() {
        for good in [
            "thread:abc/../x?#%2F",
            "checkpoint:|ns:1",
            "日本語",
            &"é".repeat(256),
        ] {
            for kind in [IdempotencyKey, FrameworkKey, SessionName] {
                assert_eq!(check(kind, good), Ok(()), "{kind:?} {good:?}");
            }
        }
        for bad in ["", "a\0b", "a\nb", "\u{7f}", "a\u{85}b", &"x".repeat(513)] {
            for kind in [IdempotencyKey, FrameworkKey, SessionName] {
                assert!(check(kind, bad).is_err(), "{kind:?} {bad:?}");
            }
        }
    }

    #[test]
    fn the_error_states_the_rule_and_never_the_text() {
        let error = check(ApprovalId, "secret\0").unwrap_err().to_string();
        assert!(error.starts_with("approval_id must be 1 to 128"), "{error}");
        assert!(!error.contains("secret"), "{error}");
    }
}
