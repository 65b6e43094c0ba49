//! `sessionlog schemas list|check`: the session-event schema versions registered for the
//! events topic's value subject, against the versions this build keeps (`schemas/avro`).
//!
//! Reads the registry's Confluent-compatible REST API directly (the `schemas` crate's client
//! registers and fetches by id; listing a subject is only needed here). Read-only.

use crate::args::Globals;
use crate::output::Output;
use anyhow::{Context, Result, anyhow, bail};
use clap::Subcommand;
use serde::{Deserialize, Serialize};
use sessionlog_log::Settings;
use sessionlog_schemas::{CompatibilityLevel, schema_versions, value_subject};
use std::time::Duration;

/// What `sessionlog schemas` does.
#[derive(Debug, Subcommand)]
pub enum SchemasCommand {
    /// List the versions registered for the events topic's value subject, each matched to
    /// the version this build keeps, and the subject's compatibility level.
    List,
    /// Like `list`, and exit 1 on drift: a kept version not registered, a registered one
    /// this build does not know, or a compatibility level other than BACKWARD_TRANSITIVE.
    Check,
}

/// The compatibility level `sessionlog init` sets and every version relies on.
const WANTED_LEVEL: CompatibilityLevel = CompatibilityLevel::BackwardTransitive;

/// One registry request may take this long before the registry counts as unreachable.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A version registered under the subject.
#[derive(Debug, Clone)]
pub struct Registered {
    /// The registry's version number under the subject.
    pub version: u32,
    /// The registry's schema id.
    pub id: u32,
    /// The schema text as the registry keeps it.
    pub schema: String,
}

/// One line of the listing: a kept version, a registered one, or both when they match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Line {
    /// The version this build keeps (`session-event.vN.avsc`), if the text is one of them.
    pub kept_version: Option<u32>,
    /// The registry's version number, if registered.
    pub registry_version: Option<u32>,
    /// The registry's schema id, if registered.
    pub id: Option<u32>,
    /// `registered`, `missing` (kept, not registered) or `unknown` (registered, not kept).
    pub status: &'static str,
}

/// A difference between the registry and this build, with what fixes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Drift {
    /// What differs.
    pub problem: String,
    /// The command that fixes it.
    pub fix: String,
}

/// What `list` and `check` print.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The registry API's base URL.
    pub registry: String,
    /// The subject, `{topic}-value`.
    pub subject: String,
    /// The compatibility level in force for the subject (None: the subject does not exist).
    pub compatibility: Option<String>,
    /// Where the level comes from: `subject`, or `global` when the subject sets none.
    pub compatibility_source: Option<&'static str>,
    /// The kept and registered versions, matched by schema text.
    pub versions: Vec<Line>,
    /// Every difference; empty when the registry agrees with this build.
    pub drift: Vec<Drift>,
}

/// The arguments of `sessionlog schemas`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    command: SchemasCommand,
}

/// Runs `sessionlog schemas ...`: the report, and for `check` a failure on drift.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let report = report(&globals.settings).await?;
    let output = Output::new(&report, human(&report))?;
    if matches!(args.command, SchemasCommand::Check) && !report.drift.is_empty() {
        return Ok(output.fail(anyhow!(
            "{} schema difference(s) between the registry and this build under {}; the fix \
             is under each (`sessionlog init` registers missing versions and sets \
             BACKWARD_TRANSITIVE)",
            report.drift.len(),
            report.subject
        )));
    }
    Ok(output)
}

/// Reads the subject's versions and level and compares them with the kept versions.
pub async fn report(settings: &Settings) -> Result<Report> {
    let subject = value_subject(&settings.kafka.topic);
    let registry = Rest::new(settings)?;
    let registered = registry.versions(&subject).await?;
    let compatibility = if registered.is_empty() {
        None
    } else {
        Some(registry.compatibility(&subject).await?)
    };
    let kept: Vec<(u32, &str)> = schema_versions()
        .iter()
        .map(|v| (v.version, v.text))
        .collect();
    let versions = compare(&kept, &registered)?;
    let level = compatibility.as_ref().map(|(level, _)| level.as_str());
    let drift = drift(&subject, &registry.url, &versions, level);
    Ok(Report {
        registry: registry.url,
        subject,
        compatibility: compatibility.as_ref().map(|(level, _)| level.clone()),
        compatibility_source: compatibility.map(|(_, source)| source),
        versions,
        drift,
    })
}

/// The differences `check` fails on, each with the command that fixes it.
pub fn drift(subject: &str, url: &str, lines: &[Line], level: Option<&str>) -> Vec<Drift> {
    let mut drift = Vec::new();
    if let Some(level) = level
        && level != WANTED_LEVEL.as_str()
    {
        drift.push(Drift {
            problem: format!(
                "the compatibility level of {subject} is {level}, not {}",
                WANTED_LEVEL.as_str()
            ),
            fix: "sessionlog init".into(),
        });
    }
    for line in lines {
        let show = |n: Option<u32>| n.unwrap_or_default();
        match line.status {
            "missing" => {
                let version = show(line.kept_version);
                // BACKWARD_TRANSITIVE refuses an older version after newer ones: init cannot
                // put it back, only a registration with the level lowered for the while.
                let newer_registered = lines.iter().any(|l| {
                    l.status == "registered" && l.kept_version.is_some_and(|k| k > version)
                });
                drift.push(Drift {
                    problem: format!(
                        "version {version} (schemas/avro/session-event.v{version}.avsc) is not \
                         registered under {subject}"
                    ),
                    fix: if newer_registered {
                        format!(
                            "newer versions are registered, so BACKWARD_TRANSITIVE refuses it \
                             again: curl -X PUT {url}/config/{subject} -d \
                             '{{\"compatibility\":\"NONE\"}}', register \
                             session-event.v{version}.avsc (POST {url}/subjects/{subject}/versions), \
                             then sessionlog init sets BACKWARD_TRANSITIVE back"
                        )
                    } else {
                        "sessionlog init".into()
                    },
                });
            }
            "unknown" => drift.push(Drift {
                problem: format!(
                    "registry version {} (id {}) of {subject} is no schema this build keeps",
                    show(line.registry_version),
                    show(line.id)
                ),
                fix: format!(
                    "run the newer sessionlog that registered it, or delete it (curl -X DELETE \
                     {url}/subjects/{subject}/versions/{}) and run sessionlog init",
                    show(line.registry_version)
                ),
            }),
            _ => {}
        }
    }
    drift
}

/// Matches the kept versions with the registered ones by schema text, compared as JSON (the
/// registry may keep a schema compacted or with its keys reordered). Returns the lines, kept
/// versions first in order, then the unknown registered ones.
pub fn compare(kept: &[(u32, &str)], registered: &[Registered]) -> Result<Vec<Line>> {
    let parse = |what: &str, text: &str| -> Result<serde_json::Value> {
        serde_json::from_str(text).with_context(|| format!("{what} is not JSON"))
    };
    let kept_json = kept
        .iter()
        .map(|(version, text)| Ok((*version, parse(&format!("kept version {version}"), text)?)))
        .collect::<Result<Vec<_>>>()?;
    let registered_json = registered
        .iter()
        .map(|r| {
            Ok((
                r,
                parse(&format!("registry version {}", r.version), &r.schema)?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut lines = Vec::new();
    for (version, json) in &kept_json {
        let found = registered_json.iter().find(|(_, r)| r == json);
        lines.push(Line {
            kept_version: Some(*version),
            registry_version: found.map(|(r, _)| r.version),
            id: found.map(|(r, _)| r.id),
            status: if found.is_some() {
                "registered"
            } else {
                "missing"
            },
        });
    }
    for (r, json) in &registered_json {
        if !kept_json.iter().any(|(_, k)| k == json) {
            lines.push(Line {
                kept_version: None,
                registry_version: Some(r.version),
                id: Some(r.id),
                status: "unknown",
            });
        }
    }
    Ok(lines)
}

/// The subject, its compatibility level and the kept and registered versions as a table (what
/// `list` prints before the drift; `sessionlog status` prints it too).
pub fn versions_table(report: &Report) -> String {
    let mut text = format!(
        "subject {} at {}\ncompatibility {}\n{:<6} {:<9} {:<6} status",
        report.subject,
        report.registry,
        match (&report.compatibility, report.compatibility_source) {
            (Some(level), Some(source)) => format!("{level} ({source})"),
            _ => "- (the subject does not exist)".into(),
        },
        "kept",
        "registry",
        "id"
    );
    let show = |n: Option<u32>| n.map_or_else(|| "-".into(), |n| n.to_string());
    for line in &report.versions {
        text.push_str(&format!(
            "\n{:<6} {:<9} {:<6} {}",
            show(line.kept_version),
            show(line.registry_version),
            show(line.id),
            line.status
        ));
    }
    text
}

fn human(report: &Report) -> String {
    let mut text = versions_table(report);
    if report.drift.is_empty() {
        text.push_str("\nno drift: the registry has every version this build keeps");
    }
    for drift in &report.drift {
        text.push_str(&format!("\ndrift: {}\n  fix: {}", drift.problem, drift.fix));
    }
    text
}

/// The few registry REST calls `list` and `check` make, with the settings' credentials.
struct Rest {
    url: String,
    http: reqwest::Client,
    settings: sessionlog_log::settings::RegistrySettings,
}

#[derive(Deserialize)]
struct VersionBody {
    version: u32,
    id: u32,
    schema: String,
}

#[derive(Deserialize)]
struct ConfigBody {
    #[serde(rename = "compatibilityLevel")]
    compatibility_level: String,
}

impl Rest {
    fn new(settings: &Settings) -> Result<Self> {
        let registry = settings.registry.clone();
        let mut builder = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT);
        if !registry.ca_file.is_empty() {
            let pem = std::fs::read(&registry.ca_file).with_context(|| {
                format!(
                    "reading the registry CA file {} (setting registry.ca_file)",
                    registry.ca_file
                )
            })?;
            builder = builder.add_root_certificate(
                reqwest::Certificate::from_pem(&pem).with_context(|| {
                    format!(
                        "registry.ca_file {} is not a PEM certificate",
                        registry.ca_file
                    )
                })?,
            );
        }
        Ok(Self {
            url: registry.url.trim_end_matches('/').to_owned(),
            http: builder.build().context("building an HTTP client")?,
            settings: registry,
        })
    }

    /// GETs `path`; `None` for a 404 (no such subject or config).
    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<Option<T>> {
        let url = format!("{}{path}", self.url);
        let mut request = self.http.get(&url);
        if !self.settings.bearer_token.is_empty() {
            request = request.bearer_auth(self.settings.bearer_token.expose());
        } else if !self.settings.username.is_empty() {
            request = request.basic_auth(
                &self.settings.username,
                Some(self.settings.password.expose()),
            );
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("GET {url} (setting registry.url)"))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if matches!(status.as_u16(), 401 | 403) {
            bail!(
                "GET {url} answered {status}: check registry.username and registry.password, \
                 or registry.bearer_token"
            );
        }
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            bail!("GET {url} answered {status}: {body}");
        }
        Ok(Some(response.json().await.with_context(|| {
            format!("GET {url}: an answer that is not the registry's JSON")
        })?))
    }

    /// Every version registered under `subject`, oldest first; empty if there is no subject.
    async fn versions(&self, subject: &str) -> Result<Vec<Registered>> {
        let subject_path = format!("/subjects/{}", escape(subject));
        let numbers: Vec<u32> = self
            .get(&format!("{subject_path}/versions"))
            .await?
            .unwrap_or_default();
        let mut versions = Vec::with_capacity(numbers.len());
        for number in numbers {
            let body: VersionBody = self
                .get(&format!("{subject_path}/versions/{number}"))
                .await?
                .with_context(|| format!("version {number} of {subject} vanished while read"))?;
            versions.push(Registered {
                version: body.version,
                id: body.id,
                schema: body.schema,
            });
        }
        Ok(versions)
    }

    /// The subject's level and `subject`, or the global one and `global` if it sets none.
    async fn compatibility(&self, subject: &str) -> Result<(String, &'static str)> {
        if let Some(body) = self
            .get::<ConfigBody>(&format!("/config/{}", escape(subject)))
            .await?
        {
            return Ok((body.compatibility_level, "subject"));
        }
        let global: ConfigBody = self
            .get("/config")
            .await?
            .context("the registry has no global /config")?;
        Ok((global.compatibility_level, "global"))
    }
}

/// Subjects go into a URL path; `/` escaped as the Confluent clients do.
fn escape(subject: &str) -> String {
    subject.replace('/', "%2F")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registered(version: u32, id: u32, schema: &str) -> Registered {
        Registered {
            version,
            id,
            schema: schema.into(),
        }
    }

    const V1: &str = r#"{"type": "record", "name": "A", "fields": []}"#;
    const V2: &str = r#"{"type": "record", "name": "A", "fields": [{"name": "x", "type": "int", "default": 0}]}"#;

    #[test]
    fn versions_match_by_json_not_by_spacing_or_key_order() -> Result<()> {
        let lines = compare(
            &[(1, V1), (2, V2)],
            &[
                registered(1, 10, r#"{"name":"A","type":"record","fields":[]}"#),
                registered(
                    2,
                    11,
                    &serde_json::to_string(&serde_json::from_str::<serde_json::Value>(V2)?)?,
                ),
            ],
        )?;
        assert_eq!(
            lines
                .iter()
                .map(|l| (l.kept_version, l.registry_version, l.id, l.status))
                .collect::<Vec<_>>(),
            vec![
                (Some(1), Some(1), Some(10), "registered"),
                (Some(2), Some(2), Some(11), "registered")
            ]
        );
        Ok(())
    }

    #[test]
    fn a_missing_and_an_unknown_version_are_told_apart() -> Result<()> {
        let other = r#"{"type": "record", "name": "B", "fields": []}"#;
        let lines = compare(
            &[(1, V1), (2, V2)],
            &[registered(1, 10, V1), registered(2, 12, other)],
        )?;
        let statuses: Vec<_> = lines
            .iter()
            .map(|l| (l.kept_version, l.registry_version, l.status))
            .collect();
        assert_eq!(
            statuses,
            vec![
                (Some(1), Some(1), "registered"),
                (Some(2), None, "missing"),
                (None, Some(2), "unknown")
            ]
        );
        Ok(())
    }

    #[test]
    fn no_subject_leaves_every_kept_version_missing() -> Result<()> {
        let lines = compare(&[(1, V1), (2, V2)], &[])?;
        assert!(lines.iter().all(|l| l.status == "missing"), "{lines:?}");
        let drift = drift("t-value", "http://r", &lines, None);
        assert_eq!(drift.len(), 2);
        assert!(
            drift.iter().all(|d| d.fix == "sessionlog init"),
            "{drift:?}"
        );
        Ok(())
    }

    #[test]
    fn drift_names_the_level_and_the_unknown_version_with_their_fixes() -> Result<()> {
        let other = r#"{"type": "record", "name": "B", "fields": []}"#;
        let lines = compare(
            &[(1, V1)],
            &[registered(1, 10, V1), registered(2, 11, other)],
        )?;
        let drift = drift("t-value", "http://r", &lines, Some("BACKWARD"));
        assert_eq!(drift.len(), 2, "{drift:?}");
        assert!(
            drift[0]
                .problem
                .contains("BACKWARD, not BACKWARD_TRANSITIVE"),
            "{drift:?}"
        );
        assert_eq!(drift[0].fix, "sessionlog init");
        assert!(
            drift[1].problem.contains("registry version 2 (id 11)"),
            "{drift:?}"
        );
        assert!(
            drift[1]
                .fix
                .contains("curl -X DELETE http://r/subjects/t-value/versions/2"),
            "{drift:?}"
        );
        let agreed = compare(&[(1, V1)], &[registered(1, 10, V1)])?;
        assert!(
            super::drift("t-value", "http://r", &agreed, Some("BACKWARD_TRANSITIVE")).is_empty()
        );
        Ok(())
    }

    #[test]
    fn an_older_version_missing_under_newer_ones_needs_more_than_init() -> Result<()> {
        let lines = compare(&[(1, V1), (2, V2)], &[registered(2, 11, V2)])?;
        let drift = drift("t-value", "http://r", &lines, Some("BACKWARD_TRANSITIVE"));
        assert_eq!(drift.len(), 1, "{drift:?}");
        assert!(drift[0].problem.contains("version 1 "), "{drift:?}");
        assert!(
            drift[0].fix.contains("http://r/config/t-value"),
            "{drift:?}"
        );
        assert!(
            drift[0]
                .fix
                .ends_with("sessionlog init sets BACKWARD_TRANSITIVE back")
        );
        Ok(())
    }
}
