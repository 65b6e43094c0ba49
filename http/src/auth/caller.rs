//! Who is calling ([`Caller`]) and the roles operations need ([`Authorized`]).

use super::REFUSALS;
use crate::Problem;
use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use sessionlog_log::Role;
use sessionlog_schemas::{DEFAULT_TENANT, SessionId};
use std::collections::BTreeSet;

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
    pub(super) fn anyone(route: String) -> Self {
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
pub(super) fn refused(route: &str, reason: &'static str, subject: Option<&str>) {
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
            // An unparseable id is `SessionPath`'s 400; nothing to compare it with here.
            Some(text) => match text.parse::<SessionId>() {
                Ok(id) => caller.require_for(P::ROLE, id)?,
                Err(_) => caller.require(P::ROLE)?,
            },
            None => caller.require_unnarrowed(P::ROLE)?,
        }
        Ok(Self(caller, std::marker::PhantomData))
    }
}
