//! `sessionlog console`: the console's web pages, until interrupted.

use crate::args::Globals;
use crate::output::Output;
use crate::signal::shutdown_signal;
use anyhow::{Context, Result};
use sessionlog_http::Access;
use sessionlog_log::{AuthMode, AuthSettings};
use std::sync::Arc;

/// Where this command's log lines go (see `commands`).
const LOG_TARGET: &str = "sessionlog_cli::console";

/// The arguments of `sessionlog console`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on: this machine only by default. Put a TLS-terminating proxy in
    /// front (and pass --behind-tls) to serve others.
    #[arg(long, default_value = "127.0.0.1:8098")]
    listen: String,
    /// Browsers reach the console over HTTPS through a proxy: its cookies are Secure.
    #[arg(long)]
    behind_tls: bool,
    /// Serve without a login, everyone with every role: only for a deployment whose services
    /// run with `[auth] mode = "disabled"`, on a trusted network.
    #[arg(long)]
    no_auth: bool,
}

/// Serves until Ctrl-C or SIGTERM.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let settings = &globals.settings;
    let access = if args.no_auth {
        let disabled = AuthSettings {
            mode: AuthMode::Disabled,
            ..AuthSettings::default()
        };
        Access::from_settings(&disabled).await?
    } else if settings.auth.mode == AuthMode::Disabled {
        return Err(sessionlog_console::Error::AuthDisabled.into());
    } else {
        Access::from_settings(&settings.auth).await?
    };
    // Bound first: a taken port is said at once, before connecting takes seconds.
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| {
            format!(
                "binding {} (is another service on it? use --listen)",
                args.listen
            )
        })?;
    let recovery = crate::recovery::connect(settings).await?;
    // As the recovery service does: decisions confirm through the tail.
    recovery.log().start_tail().await;
    if !recovery.notary().can_sign() {
        tracing::warn!(target: LOG_TARGET, "{}", sessionlog_recovery::notary::Notary::UNSIGNED_WARNING);
    }
    let options = sessionlog_console::Options {
        authenticate: !args.no_auth,
        behind_tls: args.behind_tls,
    };
    let app = sessionlog_console::router(Arc::new(recovery), Arc::new(access), options);
    tracing::info!(target: LOG_TARGET, address = %args.listen, "console listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    Ok(Output::none())
}
