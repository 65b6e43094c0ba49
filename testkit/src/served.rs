//! How a test or a benchmark runs a `sessionlog` process (a service, the projector, a command)
//! or a harness program: its settings come from one file written from the caller's
//! [`Settings`], never from a list of variables kept by hand, so every setting a test changes
//! reaches the process and a new setting needs no new line here.
//!
//! The file holds what differs from [`Settings::default`] (a process starts from the same
//! defaults), so `sessionlog doctor` still reports a value left alone as a default. The
//! process inherits no settings variable from the caller (`.stack/stack.env`'s would override
//! the file): a test that means to set one sets it on the returned command.

use anyhow::{Context, Result, bail};
use sessionlog_log::Settings;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};

/// Kills its process when dropped, so a failing test leaves nothing running.
pub struct ChildGuard(pub Child);

impl ChildGuard {
    /// Fails if the process already exited (it should still be serving).
    pub fn assert_running(&mut self) -> Result<()> {
        if let Some(status) = self.0.try_wait()? {
            bail!("process exited early with {status}");
        }
        Ok(())
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The built `sessionlog` binary: `$SESSIONLOG_BIN`, else beside the running executable
/// (a benchmark in `target/<profile>/`) or one directory up (a test in `target/<profile>/deps/`).
pub fn sessionlog_bin() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("SESSIONLOG_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe()?;
    let beside = exe.parent().context("locating the target directory")?;
    let candidates = [Some(beside), beside.parent()].map(|dir| dir.map(|d| d.join("sessionlog")));
    match candidates.iter().flatten().find(|path| path.exists()) {
        Some(bin) => Ok(bin.clone()),
        None => bail!(
            "no `sessionlog` binary beside {}: build it first with `cargo build -p sessionlog-cli` \
             (`--release` for a benchmark; scripts/test builds it for the tests)",
            exe.display()
        ),
    }
}

/// This process's scratch directory (settings files, keys): `$TMPDIR/sessionlog-testkit-<pid>`.
pub fn scratch_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("sessionlog-testkit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Removes [`scratch_dir`]: for a program (a benchmark) that ends when its run does. Tests
/// leave it, as tests of one binary run side by side to the process's end.
pub fn remove_scratch_dir() {
    let dir = std::env::temp_dir().join(format!("sessionlog-testkit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(dir);
}

/// `settings` as a settings file: every value that differs from [`Settings::default`], TOML.
pub fn settings_toml(settings: &Settings) -> Result<String> {
    let mut changed = toml::Value::try_from(settings).context("the settings as TOML")?;
    let defaults = toml::Value::try_from(Settings::default()).context("the defaults as TOML")?;
    drop_defaults(&mut changed, &defaults);
    Ok(toml::to_string(&changed)?)
}

/// Removes from `value` what equals `defaults`, table by table; empty tables go too.
fn drop_defaults(value: &mut toml::Value, defaults: &toml::Value) {
    let (toml::Value::Table(table), toml::Value::Table(defaults)) = (value, defaults) else {
        return;
    };
    table.retain(|key, value| match defaults.get(key) {
        Some(default) if value == default => false,
        Some(default @ toml::Value::Table(_)) => {
            drop_defaults(value, default);
            !matches!(value, toml::Value::Table(t) if t.is_empty())
        }
        _ => true,
    });
}

/// Writes `settings` as a settings file of its own in [`scratch_dir`] (readable by this user
/// alone: it may hold passwords); returns its path.
pub fn write_settings_file(settings: &Settings) -> Result<PathBuf> {
    static WRITTEN: AtomicU64 = AtomicU64::new(0);
    let n = WRITTEN.fetch_add(1, Ordering::Relaxed);
    let file = scratch_dir()?.join(format!("{}-{n}.toml", settings.kafka.topic));
    let text = settings_toml(settings)?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut out = options
        .open(&file)
        .with_context(|| format!("creating {}", file.display()))?;
    std::io::Write::write_all(&mut out, text.as_bytes())
        .with_context(|| format!("writing {}", file.display()))?;
    Ok(file)
}

/// `program` reading its settings from a file written from `settings` (`SESSIONLOG_CONFIG`),
/// with no settings variable inherited, stdin closed.
pub fn command_with(program: &Path, settings: &Settings) -> Result<Command> {
    let mut command = Command::new(program);
    for (name, _) in std::env::vars_os() {
        if is_settings_variable(&name.to_string_lossy()) {
            command.env_remove(name);
        }
    }
    command
        .env("SESSIONLOG_CONFIG", write_settings_file(settings)?)
        .stdin(std::process::Stdio::null());
    Ok(command)
}

/// `sessionlog <args>` in `settings`' corner ([`command_with`] on [`sessionlog_bin`]).
pub fn sessionlog(settings: &Settings, args: &[&str]) -> Result<Command> {
    let mut command = command_with(&sessionlog_bin()?, settings)?;
    command.args(args);
    Ok(command)
}

/// A variable `sessionlog` reads as a setting (`SESSIONLOG_<SECTION>__<KEY>`, librdkafka's
/// `SESSIONLOG_KAFKA__LIBRDKAFKA__*` too), as opposed to the scripts' own (`SESSIONLOG_BIN`).
fn is_settings_variable(name: &str) -> bool {
    name.strip_prefix("SESSIONLOG_")
        .is_some_and(|rest| rest.contains("__"))
}

/// `127.0.0.1:<port>` with a port free now: bind :0, read it, release it for a service.
pub fn free_address() -> Result<String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    Ok(format!("127.0.0.1:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file a process reads gives it the settings it was written from: what differs
    /// from the defaults survives, nested tables (a context policy per agent) included.
    #[test]
    fn a_settings_file_gives_back_the_settings_it_was_written_from() -> Result<()> {
        let mut settings = Settings::default();
        settings.kafka.topic = "session-events-t-file".into();
        settings.kafka.partitions = 3;
        settings.lease.ttl_ms = 1_500;
        settings.recovery.signing_key_file = Some("/keys/key.pem".into());
        settings.privacy.encrypt = !settings.privacy.encrypt;
        let mut policy = settings.context.default.clone();
        policy.recent_turns += 1;
        settings.context.agents.insert("Planner".into(), policy);
        let text = settings_toml(&settings)?;
        assert!(
            !text.contains("[retention]"),
            "defaults are left out:\n{text}"
        );
        let read: Settings = toml::from_str(&text)?;
        assert_eq!(read, settings, "{text}");
        Ok(())
    }

    #[test]
    fn settings_variables_are_told_from_the_scripts_own() {
        assert!(is_settings_variable("SESSIONLOG_KAFKA__BOOTSTRAP"));
        assert!(is_settings_variable(
            "SESSIONLOG_KAFKA__LIBRDKAFKA__SASL_PASSWORD"
        ));
        assert!(!is_settings_variable("SESSIONLOG_BIN"));
        assert!(!is_settings_variable("SESSIONLOG_CONFIG"));
        assert!(!is_settings_variable("KAFKA__BOOTSTRAP"));
    }
}
