//! `sessionlog token`: a development signing key, tokens minted with it, and API keys.
//!
//! Production tokens come from your identity provider; the services only need its JWKS
//! (`auth.jwks_file` or `auth.jwks_url`). This command is for development, tests and the demo.

use crate::args::{Globals, parse_session};
use crate::output::Output;
use anyhow::{Context, Result, bail};
use clap::Subcommand;
use sessionlog_http::auth::{Grant, SigningKey, new_api_key};
use sessionlog_log::Role;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The directory of the development key unless `--dir` or `SESSIONLOG_AUTH_DIR` says otherwise.
const DEFAULT_DIR: &str = ".sessionlog/auth";
const KEY_FILE: &str = "signing-key.pem";
const JWKS_FILE: &str = "jwks.json";
const RECOVERY_KEY_FILE: &str = "recovery-key.pem";

/// The arguments of `sessionlog token`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where the development key lives (default: $SESSIONLOG_AUTH_DIR, else .sessionlog/auth).
    #[arg(long, global = true)]
    dir: Option<PathBuf>,
    /// What to make.
    #[command(subcommand)]
    command: TokenCommand,
}

/// What `sessionlog token` does.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a development token-signing key (ES256) and its JWKS, and the recovery service's
    /// attestation key, and print the settings that make the services use them.
    Init {
        /// Replace a key that is already there (tokens it signed stop working).
        #[arg(long)]
        force: bool,
    },
    /// Mint a bearer token with the development key.
    Mint(MintArgs),
    /// Make an API key for a machine and print the `[[auth.api_keys]]` entry for the services.
    ApiKey(ApiKeyArgs),
}

/// Who a token or an API key speaks for and what it may do.
#[derive(Debug, clap::Args)]
pub struct GrantArgs {
    /// Who it speaks for (a token's `sub`).
    #[arg(long)]
    subject: String,
    /// A role it grants (harness, approver, operator, reader); repeat for several.
    #[arg(long = "role", required = true)]
    roles: Vec<Role>,
    /// Narrow it to this one session.
    #[arg(long)]
    session: Option<String>,
    /// The tenant whose sessions it may see and create.
    #[arg(long, default_value = "default")]
    tenant: String,
}

/// `sessionlog token mint`.
#[derive(Debug, clap::Args)]
pub struct MintArgs {
    #[command(flatten)]
    grant: GrantArgs,
    /// How long it is valid: `1h`, `30m`, `7d` (a bare number is seconds). `--ttl-secs` is
    /// the older name, still accepted.
    #[arg(long, alias = "ttl-secs", default_value = "1h", value_parser = crate::duration::parse)]
    ttl: Duration,
}

/// `sessionlog token api-key`.
#[derive(Debug, clap::Args)]
pub struct ApiKeyArgs {
    /// The key's id (letters, digits, '-'): names it in the settings and in logs.
    #[arg(long)]
    id: String,
    #[command(flatten)]
    grant: GrantArgs,
}

impl GrantArgs {
    /// The session it is narrowed to, checked to be a session id.
    fn session(&self) -> Result<Option<sessionlog_schemas::SessionId>> {
        self.session.as_deref().map(parse_session).transpose()
    }
}

/// Runs `sessionlog token ...` with the development key in `--dir`. What is printed is meant
/// for a pipe or a settings file (a token, a key, variables), so it is the same with `--json`;
/// the words for the person around it go to stderr.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let dir = args
        .dir
        .or_else(|| std::env::var_os("SESSIONLOG_AUTH_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR));
    match args.command {
        TokenCommand::Init { force } => init(&dir, force),
        TokenCommand::Mint(args) => {
            let key = load(&dir)?;
            let session = args.grant.session()?;
            let token = key.mint(&Grant {
                session,
                tenant: Some(args.grant.tenant),
                issuer: globals.settings.auth.issuer.clone(),
                audience: globals.settings.auth.audience.clone(),
                ..Grant::new(&args.grant.subject, &args.grant.roles, args.ttl)
            })?;
            Ok(Output::none().line(token))
        }
        TokenCommand::ApiKey(args) => {
            let session = args.grant.session()?;
            let (key, sha256) = new_api_key(&args.id)?;
            let roles: Vec<String> = args
                .grant
                .roles
                .iter()
                .map(|r| format!("{:?}", r.as_str()))
                .collect();
            let mut output = Output::none()
                .note("# Give the machine this key (shown once; only its hash is kept):")
                .line(key)
                .note("# Add to the services' sessionlog.toml:")
                .note("[[auth.api_keys]]")
                .note(format!("id = {:?}", args.id))
                .note(format!("sha256 = {sha256:?}"))
                .note(format!("subject = {:?}", args.grant.subject))
                .note(format!("tenant = {:?}", args.grant.tenant))
                .note(format!("roles = [{}]", roles.join(", ")));
            if let Some(session) = session {
                output = output.note(format!("session = \"{session}\""));
            }
            Ok(output)
        }
    }
}

fn init(dir: &Path, force: bool) -> Result<Output> {
    let key_path = dir.join(KEY_FILE);
    if key_path.exists() && !force {
        bail!(
            "{} already holds a signing key; use it (`sessionlog token mint`) or replace it with --force",
            key_path.display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let key = SigningKey::generate()?;
    write_private(&key_path, &key.pem())?;
    let jwks_path = dir.join(JWKS_FILE);
    std::fs::write(&jwks_path, serde_json::to_string_pretty(&key.jwks())?)
        .with_context(|| format!("writing {}", jwks_path.display()))?;
    // A key of its own for recovery's signatures on decisions: a token key and an
    // attestation key are rotated and guarded separately.
    let recovery_path = dir.join(RECOVERY_KEY_FILE);
    write_private(&recovery_path, &SigningKey::generate()?.pem())?;
    let absolute = |p: PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
    Ok(Output::none()
        .note(format!(
            "# Token signing key in {}, recovery's attestation key in {} (keep both private).",
            key_path.display(),
            recovery_path.display()
        ))
        .note("# The services use them with these settings:")
        .line(format!(
            "SESSIONLOG_AUTH__JWKS_FILE={}",
            absolute(jwks_path).display()
        ))
        .line(format!(
            "SESSIONLOG_RECOVERY__SIGNING_KEY_FILE={}",
            absolute(recovery_path).display()
        )))
}

fn load(dir: &Path) -> Result<SigningKey> {
    let path = dir.join(KEY_FILE);
    let pem = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (run `sessionlog token init` first, or pass --dir)",
            path.display()
        )
    })?;
    Ok(SigningKey::from_pem(&pem)?)
}

/// Writes a file only its owner can read.
pub(crate) fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(text.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Mint {
        #[command(flatten)]
        args: MintArgs,
    }

    fn ttl(extra: &[&str]) -> Option<Duration> {
        let base = ["mint", "--subject", "a", "--role", "reader"];
        Mint::try_parse_from(base.iter().chain(extra))
            .ok()
            .map(|m| m.args.ttl)
    }

    #[test]
    fn the_ttl_takes_units_and_the_older_flag_takes_seconds() {
        assert_eq!(ttl(&["--ttl", "2h"]), Some(Duration::from_secs(7200)));
        assert_eq!(ttl(&["--ttl", "90"]), Some(Duration::from_secs(90)));
        assert_eq!(
            ttl(&["--ttl-secs", "3600"]),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(ttl(&[]), Some(Duration::from_secs(3600)));
        assert_eq!(ttl(&["--ttl", "2 fortnights"]), None);
    }
}
