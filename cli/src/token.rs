//! `sessionlog token`: a development signing key, tokens minted with it, and API keys.
//!
//! Production tokens come from your identity provider; the services only need its JWKS
//! (`auth.jwks_file` or `auth.jwks_url`). This command is for development, tests and the demo.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use sessionlog_http::auth::{Grant, SigningKey, new_api_key};
use sessionlog_log::{Role, Settings};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The directory of the development key unless `--dir` or `SESSIONLOG_AUTH_DIR` says otherwise.
const DEFAULT_DIR: &str = ".sessionlog/auth";
const KEY_FILE: &str = "signing-key.pem";
const JWKS_FILE: &str = "jwks.json";
const RECOVERY_KEY_FILE: &str = "recovery-key.pem";

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
#[derive(Debug, Args)]
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
#[derive(Debug, Args)]
pub struct MintArgs {
    #[command(flatten)]
    grant: GrantArgs,
    /// How long it is valid: `1h`, `30m`, `7d` (a bare number is seconds). `--ttl-secs` is
    /// the older name, still accepted.
    #[arg(long, alias = "ttl-secs", default_value = "1h", value_parser = crate::duration::parse)]
    ttl: Duration,
}

/// `sessionlog token api-key`.
#[derive(Debug, Args)]
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
        self.session
            .as_deref()
            .map(crate::args::parse_session)
            .transpose()
    }
}

/// Runs `sessionlog token ...` with the development key in `dir`.
pub fn run(settings: &Settings, dir: Option<PathBuf>, command: TokenCommand) -> Result<()> {
    let dir = dir
        .or_else(|| std::env::var_os("SESSIONLOG_AUTH_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR));
    match command {
        TokenCommand::Init { force } => init(&dir, force),
        TokenCommand::Mint(args) => {
            let key = load(&dir)?;
            let session = args.grant.session()?;
            let token = key.mint(&Grant {
                session,
                tenant: Some(args.grant.tenant),
                issuer: settings.auth.issuer.clone(),
                audience: settings.auth.audience.clone(),
                ..Grant::new(&args.grant.subject, &args.grant.roles, args.ttl)
            })?;
            println!("{token}");
            Ok(())
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
            eprintln!("# Give the machine this key (shown once; only its hash is kept):");
            println!("{key}");
            eprintln!("# Add to the services' sessionlog.toml:");
            eprintln!("[[auth.api_keys]]");
            eprintln!("id = {:?}", args.id);
            eprintln!("sha256 = {sha256:?}");
            eprintln!("subject = {:?}", args.grant.subject);
            eprintln!("tenant = {:?}", args.grant.tenant);
            eprintln!("roles = [{}]", roles.join(", "));
            if let Some(session) = session {
                eprintln!("session = \"{session}\"");
            }
            Ok(())
        }
    }
}

fn init(dir: &Path, force: bool) -> Result<()> {
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
    eprintln!(
        "# Token signing key in {}, recovery's attestation key in {} (keep both private).",
        key_path.display(),
        recovery_path.display()
    );
    eprintln!("# The services use them with these settings:");
    println!(
        "SESSIONLOG_AUTH__JWKS_FILE={}",
        absolute(jwks_path).display()
    );
    println!(
        "SESSIONLOG_RECOVERY__SIGNING_KEY_FILE={}",
        absolute(recovery_path).display()
    );
    Ok(())
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
