//! What every page shares: the frame (navigation, who is logged in, logout), the login and
//! error pages, and how times and ages are written. Templates are [`maud`]'s: a value is
//! escaped wherever it is put, so text from a session cannot become markup.

use crate::error::Refused;
use crate::login::Visitor;
use maud::{DOCTYPE, Markup, html};
use sessionlog_schemas::Micros;

/// A whole page: `title`, the navigation and who is logged in (when someone is), `body`.
pub(crate) fn frame(visitor: Option<&Visitor>, title: &str, body: Markup) -> Markup {
    frame_with(visitor, title, body, None)
}

/// [`frame`] with a script of the console's (its path and integrity hash), loaded deferred.
pub(crate) fn frame_with(
    visitor: Option<&Visitor>,
    title: &str,
    body: Markup,
    script: Option<(&str, &str)>,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · sessionlog console" }
                link rel="stylesheet" href="/static/console.css";
                @if let Some((src, integrity)) = script {
                    script src=(src) integrity=(integrity) defer {}
                }
            }
            body {
                header {
                    nav aria-label="Main" {
                        a.brand href="/" { "sessionlog" }
                        @if visitor.is_some() {
                            a href="/" { "Inbox" }
                            a href="/sessions" { "Sessions" }
                            a href="/fleet" { "Fleet" }
                        }
                    }
                    @if let Some(v) = visitor {
                        div.who {
                            span { (v.caller.subject) " · " (v.tenant()) " · " }
                            span.roles {
                                @for role in &v.caller.roles { (role.as_str()) " " }
                            }
                            form method="post" action="/logout" {
                                (csrf(v))
                                button type="submit" { "Log out" }
                            }
                        }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

/// The hidden CSRF field every form of a logged-in page carries.
pub(crate) fn csrf(visitor: &Visitor) -> Markup {
    html! { input type="hidden" name="csrf" value=(visitor.csrf); }
}

/// The login form; `refusal` says why the last try was refused.
pub(crate) fn login(form_token: &str, refusal: Option<&str>) -> Markup {
    frame(
        None,
        "Log in",
        html! {
            @if let Some(why) = refusal {
                p.refusal role="alert" { "Not let in: " (why) }
            }
            form method="post" action="/login" {
                input type="hidden" name="csrf" value=(form_token);
                label for="credential" { "Bearer token or API key" }
                input id="credential" name="credential" type="password" autocomplete="off" required;
                button type="submit" { "Log in" }
            }
            p.hint { "The console keeps it on the server for this login; your browser gets only a login cookie. "
                "`sessionlog token mint --role approver` makes a token." }
        },
    )
}

/// The page of a refused request.
pub(crate) fn refused(refusal: &Refused) -> Markup {
    frame(
        None,
        refusal.status.canonical_reason().unwrap_or("Refused"),
        html! {
            p.refusal role="alert" { (refusal.detail) }
            p.hint { "code: " code { (refusal.code) } " · " a href="/" { "back to the inbox" } }
        },
    )
}

/// A time as people read it: `2026-12-07 12:50:05 UTC`.
pub(crate) fn when(micros: Micros) -> String {
    let format =
        time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1_000)
        .ok()
        .and_then(|t| t.format(&format).ok())
        .unwrap_or_else(|| "-".into())
}

/// How long ago `micros` was, roughly: `42s`, `7m`, `3h`, `2d`.
pub(crate) fn age(micros: Micros, now: Micros) -> String {
    let secs = now.saturating_sub(micros).max(0) / 1_000_000;
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7_200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

/// A time and how long ago it was, as one table cell's content.
pub(crate) fn since(micros: Micros, now: Micros) -> Markup {
    html! { time datetime=(when(micros)) { (when(micros)) } " (" (age(micros, now)) " ago)" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_ages_read_as_people_write_them() {
        assert_eq!(when(1_796_461_200_000_000), "2026-12-05 09:00:00 UTC");
        assert_eq!(age(0, 90_000_000), "90s");
        assert_eq!(age(0, 3 * 3_600_000_000), "3h");
        assert_eq!(age(10, 0), "0s");
    }
}
