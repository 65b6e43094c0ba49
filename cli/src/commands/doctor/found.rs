//! What a group of `doctor`'s checks found, as it collects it, and the words every check uses:
//! how a server answered, and where to change a setting.

use super::report::{ClockReport, KeyspaceCheck, Problem, ServerCheck, Status};
use crate::exit;
use sessionlog_log::topic::TopicCheck;
use sessionlog_log::{Resolution, SettingSource};

/// What one group of checks found.
#[derive(Default)]
pub struct Found {
    pub servers: Vec<ServerCheck>,
    pub topics: Vec<TopicCheck>,
    pub keyspaces: Vec<KeyspaceCheck>,
    pub clock: Option<ClockReport>,
    pub notes: Vec<String>,
    pub problems: Vec<Problem>,
}

impl Found {
    /// Adds a server asked, answering `ok` until a problem says otherwise.
    pub fn server(
        &mut self,
        server: &'static str,
        role: impl Into<String>,
        address: &str,
    ) -> &mut ServerCheck {
        self.servers.push(ServerCheck {
            server,
            role: role.into(),
            address: address.to_string(),
            status: Status::Ok,
            version: None,
            api_versions: Vec::new(),
        });
        let last = self.servers.len() - 1;
        &mut self.servers[last]
    }

    /// Records a problem and its fix; `status` says whether a server did not answer.
    pub fn problem(&mut self, check: &'static str, problem: String, fix: String, status: Status) {
        self.problems.push(Problem {
            check,
            problem,
            fix,
            unreachable: status == Status::Unreachable,
        });
    }

    /// Records the problem `error` is (the server did not answer, or answered wrongly, as the
    /// exit status reads errors) and marks the server added last with it.
    pub fn server_failed(
        &mut self,
        check: &'static str,
        error: &anyhow::Error,
        problem: String,
        fix: String,
    ) {
        let status = status_of(error);
        if let Some(last) = self.servers.last_mut() {
            last.status = status;
        }
        self.problem(check, problem, fix, status);
    }

    /// Adds what another group of checks found after this one's.
    pub fn merge(&mut self, other: Found) {
        self.servers.extend(other.servers);
        self.topics.extend(other.topics);
        self.keyspaces.extend(other.keyspaces);
        self.clock = self.clock.take().or(other.clock);
        self.notes.extend(other.notes);
        self.problems.extend(other.problems);
    }
}

/// `ok` unless the error says a server did not answer (as the exit status reads errors).
pub fn status_of(error: &anyhow::Error) -> Status {
    if exit::code(error) == exit::UNAVAILABLE {
        Status::Unreachable
    } else {
        Status::Failed
    }
}

/// Where to change `key`: the variable or the file that set it, or where it can be set.
pub fn change(resolution: &Resolution, key: &str) -> String {
    let variable = format!("SESSIONLOG_{}", key.replace('.', "__").to_ascii_uppercase());
    match resolution
        .values
        .iter()
        .find(|v| v.key == key)
        .map(|v| &v.source)
    {
        Some(SettingSource::Env { variable }) => {
            format!("correct {key}, set by the environment variable {variable}")
        }
        Some(SettingSource::File { path }) => {
            format!("correct {key} in {path} (or override it with {variable})")
        }
        _ => format!("set {key} in the settings file or with {variable} (it has its default)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use sessionlog_log::{ResolvedSetting, Settings};

    fn resolution(source: SettingSource) -> Resolution {
        Resolution {
            settings: Settings::default(),
            file: None,
            values: vec![ResolvedSetting {
                key: "registry.url".into(),
                value: serde_json::json!("http://r"),
                secret: false,
                source,
            }],
        }
    }

    #[test]
    fn a_fix_names_where_the_setting_came_from() {
        let env = resolution(SettingSource::Env {
            variable: "SESSIONLOG_REGISTRY__URL".into(),
        });
        assert_eq!(
            change(&env, "registry.url"),
            "correct registry.url, set by the environment variable SESSIONLOG_REGISTRY__URL"
        );
        let file = resolution(SettingSource::File {
            path: "/etc/sessionlog.toml".into(),
        });
        assert!(
            change(&file, "registry.url")
                .starts_with("correct registry.url in /etc/sessionlog.toml")
        );
        let default = resolution(SettingSource::Default);
        assert!(change(&default, "registry.url").contains("SESSIONLOG_REGISTRY__URL"));
    }
}
