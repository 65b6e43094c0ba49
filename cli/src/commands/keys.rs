//! `sessionlog keys`: the key-encryption key: make one, or rewrap every data key under a new
//! one.

use crate::args::Globals;
use crate::output::Output;
use anyhow::{Context, Result, bail};
use clap::Subcommand;
use sessionlog_keys::{Kek, Keks};
use sessionlog_log::Settings;
use std::path::PathBuf;

/// Where `keys init` writes unless `--out` says otherwise.
const DEFAULT_KEK_FILE: &str = ".sessionlog/keys/kek.key";

/// The arguments of `sessionlog keys`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    command: KeysCommand,
}

/// What `sessionlog keys` does.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Make a key-encryption key (32 random bytes, base64, readable by its owner only) and print
    /// the setting that makes the services use it. Never overwrites a file: the data keys a
    /// KEK wraps are lost with it.
    Init {
        /// The file to write (default: .sessionlog/keys/kek.key).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Rewrap every live data key under the current KEK (`[privacy] kek_file`), unwrapping with
    /// the retired ones (`[privacy] previous_kek_files`); then says which retired KEK wraps
    /// nothing any more and can be destroyed.
    Rotate,
}

/// Runs `sessionlog keys`.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    match args.command {
        KeysCommand::Init { out } => init(out),
        KeysCommand::Rotate => rotate(&globals.settings).await,
    }
}

fn init(out: Option<PathBuf>) -> Result<Output> {
    let path = out.unwrap_or_else(|| PathBuf::from(DEFAULT_KEK_FILE));
    if path.exists() {
        bail!(
            "{} exists and is never overwritten (the data keys it wraps would be lost); for a \
             rotation write the new key elsewhere: `sessionlog keys init --out <new file>`",
            path.display()
        );
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let kek = Kek::generate();
    super::token::write_private(&path, &format!("{}\n", kek.to_base64().as_str()))?;
    let absolute = std::fs::canonicalize(&path).unwrap_or(path);
    Output::new(
        &serde_json::json!({"kek_file": absolute, "kek_id": kek.id()}),
        format!(
            "wrote key-encryption key {} to {}\nuse it with:\n  SESSIONLOG_PRIVACY__KEK_FILE={}",
            kek.id(),
            absolute.display(),
            absolute.display()
        ),
    )
}

async fn rotate(settings: &Settings) -> Result<Output> {
    let Some(keyring) = sessionlog_store::keyring(settings)
        .await
        .context("opening the key store")?
    else {
        bail!("[privacy] encrypt is off: there are no data keys to rotate");
    };
    let progress = indicatif::ProgressBar::new_spinner();
    progress.set_message("rewrapping data keys");
    let rotation = keyring
        .rotate(|examined| {
            if examined % 256 == 0 {
                progress.set_position(examined);
            }
        })
        .await?;
    progress.finish_and_clear();
    // Which retired KEKs this rotation freed: configured, and wrapping nothing now.
    let keks = Keks::from_settings(&settings.privacy)?
        .context("[privacy] encrypt is on but no KEK is configured")?;
    let retired: Vec<String> = settings
        .privacy
        .previous_kek_files
        .iter()
        .map(|path| Kek::from_file(path).map(|k| (path.clone(), k.id().to_string())))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|(_, id)| !rotation.missing_kek.contains_key(id) && keks.current().id() != id)
        .map(|(path, id)| format!("{id} ({path})"))
        .collect();
    let mut human = format!(
        "{} live data key(s): {} rewrapped under {}, {} already under it",
        rotation.examined,
        rotation.rewrapped.values().sum::<u64>(),
        rotation.current_kek_id,
        rotation.already_current
    );
    for (kek, n) in &rotation.rewrapped {
        human.push_str(&format!("\n  {n:>8} from {kek}"));
    }
    if rotation.destroyed_meanwhile > 0 {
        human.push_str(&format!(
            "\n{} key(s) were destroyed (erased) during the rotation and stay destroyed",
            rotation.destroyed_meanwhile
        ));
    }
    for (kek, n) in &rotation.missing_kek {
        human.push_str(&format!(
            "\nstill needed: {kek} wraps {n} key(s) and is not in [privacy] previous_kek_files \
             here; add its file and rotate again"
        ));
    }
    if rotation.missing_kek.is_empty() {
        for kek in &retired {
            human.push_str(&format!(
                "\nretired: {kek} wraps no data key any more: remove it from \
                 [privacy] previous_kek_files everywhere and destroy the file"
            ));
        }
    }
    Output::new(
        &serde_json::json!({
            "current_kek_id": rotation.current_kek_id,
            "examined": rotation.examined,
            "already_current": rotation.already_current,
            "rewrapped": rotation.rewrapped,
            "missing_kek": rotation.missing_kek,
            "destroyed_meanwhile": rotation.destroyed_meanwhile,
            "retired": retired,
        }),
        human,
    )
}
