//! `doctor`'s registry check: it answers, with what it runs, through a Confluent-compatible
//! API.

use super::found::{Found, change, status_of};
use super::report::Status;
use crate::exit;
use sessionlog_log::Resolution;
use std::time::Duration;

/// Asks the registry what it runs and whether it serves a Confluent-compatible API.
pub async fn checks(resolution: &Resolution, timeout: Duration) -> Found {
    let settings = &resolution.settings.registry;
    let mut found = Found::default();
    let line = found.server("registry", "registry", &settings.url);
    let client = match settings.client() {
        Ok(client) => client,
        Err(e) => {
            line.status = Status::Failed;
            found.problem(
                "registry",
                format!("the registry client cannot be made: {e}"),
                change(resolution, "registry.ca_file"),
                Status::Failed,
            );
            return found;
        }
    };
    let about = tokio::time::timeout(timeout, client.about())
        .await
        .map_err(|_| {
            anyhow::Error::new(exit::Unreachable(format!(
                "no answer within {}",
                crate::duration::show(timeout)
            )))
        })
        .and_then(|answer| answer.map_err(anyhow::Error::new));
    match about {
        Ok(about) => {
            line.version = Some(about.version.clone().unwrap_or_else(|| {
                "unknown (it answers neither /v1/metadata/version nor Apicurio's system info)"
                    .into()
            }));
            if about.compatibility.is_none() {
                line.status = Status::Failed;
                found.problem(
                    "registry",
                    format!(
                        "{} answers, but not with a Confluent-compatible API (GET /config found \
                         nothing)",
                        settings.url
                    ),
                    format!(
                        "point registry.url at the API's root (Apicurio: \
                         http://HOST:8080/apis/ccompat/v7; Confluent: http://HOST:8081): {}",
                        change(resolution, "registry.url")
                    ),
                    Status::Failed,
                );
            }
        }
        Err(e) => {
            let status = status_of(&e);
            line.status = status;
            let fix = if status == Status::Unreachable {
                format!(
                    "start the registry, or {}",
                    change(resolution, "registry.url")
                )
            } else {
                format!(
                    "{}; or check registry.username, registry.password and \
                     registry.bearer_token",
                    change(resolution, "registry.url")
                )
            };
            found.problem(
                "registry",
                format!("the registry at {}: {e}", settings.url),
                fix,
                status,
            );
        }
    }
    found
}
