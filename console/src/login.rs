//! Logins: a person gives a bearer token or an API key once; the console checks it with the
//! services' authenticator, keeps it on the server, and hands the browser an opaque random id
//! in an `HttpOnly`, `SameSite=Strict` cookie. Every request checks the kept credential again
//! (an expired token or a key dropped from the settings stops working at once), and every
//! form must carry the login's CSRF token.
//!
//! Logins live in this process's memory: a restart logs everyone out, and two console
//! instances behind one address need sticky sessions.

use crate::Console;
use crate::error::Refused;
use axum::Form;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use cookie::{Cookie, SameSite};
use rand::RngCore;
use serde::Deserialize;
use sessionlog_http::Caller;
use sessionlog_log::Role;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// How long a login lasts, whatever its credential allows.
const LOGIN_LIFETIME: Duration = Duration::from_secs(8 * 3600);
/// Logins kept at once; the oldest give way.
const MAX_LOGINS: usize = 10_000;
/// How long the login form's own CSRF cookie lasts.
const LOGIN_FORM_LIFETIME: Duration = Duration::from_secs(3600);

/// One login: the credential (never sent back to the browser) and its CSRF token.
struct Login {
    credential: String,
    csrf: String,
    ends: Instant,
}

/// Every login of this process, by the SHA-256 of its cookie.
#[derive(Default)]
pub(crate) struct Logins {
    kept: Mutex<HashMap<[u8; 32], Login>>,
}

/// 32 random bytes as URL-safe text.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

fn digest(cookie: &str) -> [u8; 32] {
    Sha256::digest(cookie.as_bytes()).into()
}

/// Whether two tokens are equal, in time that says nothing about where they differ.
fn same_token(a: &str, b: &str) -> bool {
    !a.is_empty() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

impl Logins {
    fn kept(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Login>> {
        // Each use is one call on the map: a panic cannot leave it torn.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `credential` as a new login; its cookie value.
    fn start(&self, credential: String) -> String {
        let cookie = random_token();
        let now = Instant::now();
        let mut kept = self.kept();
        kept.retain(|_, login| login.ends > now);
        if kept.len() >= MAX_LOGINS
            && let Some(oldest) = kept.iter().min_by_key(|(_, l)| l.ends).map(|(k, _)| *k)
        {
            kept.remove(&oldest);
        }
        kept.insert(
            digest(&cookie),
            Login {
                credential,
                csrf: random_token(),
                ends: now + LOGIN_LIFETIME,
            },
        );
        cookie
    }

    /// The credential and CSRF token of the login whose cookie is `cookie`, if it lasts.
    fn find(&self, cookie: &str) -> Option<(String, String)> {
        let mut kept = self.kept();
        let key = digest(cookie);
        let login = kept.get(&key)?;
        if login.ends <= Instant::now() {
            kept.remove(&key);
            return None;
        }
        Some((login.credential.clone(), login.csrf.clone()))
    }

    fn end(&self, cookie: &str) {
        self.kept().remove(&digest(cookie));
    }
}

/// The names of the two cookies: the login's, and the login form's CSRF cookie.
fn cookie_names(behind_tls: bool) -> (&'static str, &'static str) {
    // `__Host-` makes browsers refuse the cookie unless it is Secure, host-only and for `/`.
    if behind_tls {
        (
            "__Host-sessionlog-console",
            "__Host-sessionlog-console-form",
        )
    } else {
        ("sessionlog-console", "sessionlog-console-form")
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == name)
        .map(|c| c.value().to_string())
}

/// A `Set-Cookie` value: `HttpOnly`, `SameSite=Strict`, for the whole console; `Secure`
/// behind TLS; gone after `lifetime` (zero: remove it now).
fn set_cookie(name: &str, value: String, lifetime: Duration, behind_tls: bool) -> HeaderValue {
    let cookie = Cookie::build((name, value))
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(behind_tls)
        .path("/")
        .max_age(cookie::time::Duration::seconds(
            i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX),
        ))
        .build();
    // Our own names and base64 values: always a valid header.
    HeaderValue::from_str(&cookie.to_string()).unwrap_or(HeaderValue::from_static(""))
}

/// Who is looking at a page: the caller the kept credential authenticates as, now, and the
/// login's CSRF token for the page's forms.
pub(crate) struct Visitor {
    pub(crate) caller: Caller,
    pub(crate) csrf: String,
    /// The login's cookie: a long answer (the live timeline) asks again whether it lasts.
    login: String,
}

impl Visitor {
    /// Whether the visitor holds `role` (pages show a role's buttons only to its holders).
    pub(crate) fn may(&self, role: Role) -> bool {
        self.caller.roles.contains(&role)
    }

    /// Refuses a form without this login's CSRF token (403).
    pub(crate) fn check_csrf(&self, given: &str) -> Result<(), Refused> {
        if same_token(given, &self.csrf) {
            return Ok(());
        }
        Err(Refused::new(
            StatusCode::FORBIDDEN,
            "csrf",
            "the form did not come from this login's page: reload the page and try again",
        ))
    }

    /// What the visitor's tenant is, for the header: `every tenant` for an operator of all.
    pub(crate) fn tenant(&self) -> &str {
        self.caller.tenant.as_deref().unwrap_or("every tenant")
    }
}

impl Console {
    /// The caller `credential` authenticates as (with the authenticator the services run),
    /// or why not. `route` names the page in audit and refusal lines.
    async fn authenticate(&self, credential: &str, route: &str) -> Result<Caller, Refused> {
        let mut request = axum::http::Request::builder().uri("/console");
        if !credential.is_empty() {
            request = request.header(header::AUTHORIZATION, format!("Bearer {credential}"));
        }
        let (mut parts, ()) = request
            .body(())
            .map_err(|e| Refused::new(StatusCode::BAD_REQUEST, "bad_credential", e.to_string()))?
            .into_parts();
        self.access.authenticate(&mut parts).await?;
        let mut caller = parts.extensions.remove::<Caller>().ok_or_else(|| {
            Refused::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the authenticator named no caller",
            )
        })?;
        caller.route = format!("console {route}");
        Ok(caller)
    }
}

impl Visitor {
    /// Whether the visitor's login still holds, asked again now: not logged out nor expired,
    /// its credential still authenticates, as a caller of the same tenant. `None` when it does;
    /// else why not, for the page. Which sessions a caller sees follows from its tenant alone (a
    /// session's tenant never changes), so the session is not read again: an open page costs
    /// no store read for this.
    pub(crate) async fn still_logged_in(&self, console: &Console) -> Option<String> {
        let Some((credential, _)) = console.logins.find(&self.login) else {
            return Some("the login ended: log in again".into());
        };
        match console.authenticate(&credential, "live timeline").await {
            Ok(caller) if caller.tenant == self.caller.tenant => None,
            Ok(_) => Some("the login's tenant changed: log in again".into()),
            Err(refused) if refused.status.is_client_error() => Some(format!(
                "the login no longer authenticates: {}",
                refused.detail
            )),
            // Not an answer about the login: asked again at the next look.
            Err(_) => None,
        }
    }
}

impl FromRequestParts<Arc<Console>> for Visitor {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        console: &Arc<Console>,
    ) -> Result<Self, Response> {
        let (name, _) = cookie_names(console.options.behind_tls);
        let login = cookie_value(&parts.headers, name)
            .and_then(|c| console.logins.find(&c).map(|found| (c, found)));
        let route = parts
            .extensions
            .get::<axum::extract::MatchedPath>()
            .map_or("unmatched", |p| p.as_str())
            .to_string();
        let Some((cookie, (credential, csrf))) = login else {
            return Err(not_logged_in(parts));
        };
        match console.authenticate(&credential, &route).await {
            Ok(caller) => Ok(Visitor {
                caller,
                csrf,
                login: cookie,
            }),
            // The credential stopped working (expired, its key withdrawn): log in again.
            Err(refused) if refused.status == StatusCode::UNAUTHORIZED => Err(not_logged_in(parts)),
            Err(refused) => Err(refused.into_response()),
        }
    }
}

/// A page asked for without a login: to the login form; a form sent without one: 401.
fn not_logged_in(parts: &Parts) -> Response {
    if parts.method == axum::http::Method::GET {
        Redirect::to("/login").into_response()
    } else {
        Refused::new(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "log in first (your login ended, or the console restarted)",
        )
        .into_response()
    }
}

/// The login form, with a CSRF token of its own in a cookie of its own (so nobody else's page
/// can log a browser in as someone else). Without authentication, a login is made at once.
pub(crate) async fn form(State(console): State<Arc<Console>>) -> Response {
    let behind_tls = console.options.behind_tls;
    let (login_name, form_name) = cookie_names(behind_tls);
    if !console.options.authenticate {
        let cookie = console.logins.start(String::new());
        return (
            [(
                header::SET_COOKIE,
                set_cookie(login_name, cookie, LOGIN_LIFETIME, behind_tls),
            )],
            Redirect::to("/"),
        )
            .into_response();
    }
    let token = random_token();
    let page = crate::pages::login(&token, None);
    (
        [(
            header::SET_COOKIE,
            set_cookie(form_name, token, LOGIN_FORM_LIFETIME, behind_tls),
        )],
        page,
    )
        .into_response()
}

/// What the login form sends.
#[derive(Deserialize)]
pub(crate) struct LoginForm {
    credential: String,
    csrf: String,
}

/// Checks the credential with the services' authenticator and, if it is let in, starts a
/// login. A credential narrowed to one session is refused: the console lists sessions.
pub(crate) async fn submit(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let behind_tls = console.options.behind_tls;
    let (login_name, form_name) = cookie_names(behind_tls);
    let expected = cookie_value(&headers, form_name).unwrap_or_default();
    if !same_token(&form.csrf, &expected) {
        return Refused::new(
            StatusCode::FORBIDDEN,
            "csrf",
            "the login form did not come from this console: open /login again",
        )
        .into_response();
    }
    let credential = form.credential.trim().to_string();
    let refusal = match console.authenticate(&credential, "/login").await {
        Ok(caller) if caller.session.is_some() => Refused::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this credential is narrowed to one session; the console needs an unnarrowed one",
        ),
        Ok(caller) => {
            tracing::info!(
                target: "sessionlog::audit",
                subject = %caller.subject,
                action = "console_login",
                "privileged action"
            );
            let cookie = console.logins.start(credential);
            let set = [
                (
                    header::SET_COOKIE,
                    set_cookie(login_name, cookie, LOGIN_LIFETIME, behind_tls),
                ),
                (
                    header::SET_COOKIE,
                    set_cookie(form_name, String::new(), Duration::ZERO, behind_tls),
                ),
            ];
            return (axum::response::AppendHeaders(set), Redirect::to("/")).into_response();
        }
        Err(refused) => refused,
    };
    // The form again, with the reason (the authenticator's words, never the credential).
    let page = crate::pages::login(&expected, Some(&refusal.detail));
    (refusal.status, page).into_response()
}

/// What the logout form sends.
#[derive(Deserialize)]
pub(crate) struct LogoutForm {
    csrf: String,
}

/// Ends the login and removes its cookie.
pub(crate) async fn logout(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    headers: HeaderMap,
    Form(form): Form<LogoutForm>,
) -> Result<Response, Refused> {
    visitor.check_csrf(&form.csrf)?;
    let behind_tls = console.options.behind_tls;
    let (login_name, _) = cookie_names(behind_tls);
    if let Some(cookie) = cookie_value(&headers, login_name) {
        console.logins.end(&cookie);
    }
    let gone = set_cookie(login_name, String::new(), Duration::ZERO, behind_tls);
    Ok(([(header::SET_COOKIE, gone)], Redirect::to("/login")).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_is_found_by_its_cookie_alone_and_ends() {
        let logins = Logins::default();
        let cookie = logins.start("slk_secret".into());
        let (credential, csrf) = logins.find(&cookie).expect("kept");
        assert_eq!(credential, "slk_secret");
        assert!(same_token(&csrf, &csrf) && !same_token(&csrf, "other") && !same_token("", ""));
        assert!(logins.find(&random_token()).is_none());
        logins.end(&cookie);
        assert!(logins.find(&cookie).is_none());
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_behind_tls() {
        let plain = set_cookie("n", "v".into(), LOGIN_LIFETIME, false);
        let plain = plain.to_str().expect("text");
        assert!(plain.contains("HttpOnly") && plain.contains("SameSite=Strict"));
        assert!(!plain.contains("Secure"));
        let tls = set_cookie("n", "v".into(), LOGIN_LIFETIME, true);
        assert!(tls.to_str().expect("text").contains("Secure"));
    }
}
