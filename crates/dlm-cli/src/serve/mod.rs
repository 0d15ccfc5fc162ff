//! `dlm serve`: a read-mostly web dashboard, a JSON API and a Prometheus
//! endpoint for the queues and locks of one Redis.
//!
//! * [`state`]: what the server knows (the client, the queues it watches,
//!   the history behind the sparklines, the security settings) and the
//!   sampler that reads Redis and sets the Prometheus gauges;
//! * [`pages`]: the HTML, rendered on the server, every value from Redis
//!   escaped;
//! * [`task_page`]: one task's page, with its dependency graph as inline SVG;
//! * [`routes`]: the axum router: pages (overview, queue, dead letters,
//!   workers, task, locks), form actions (POST, CSRF token,
//!   admin token), `/api/*`, `/metrics`, `/healthz` and the embedded assets.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use crate::error::{CliError, EXIT_OK};
use crate::global::Global;
use crate::global::parse::{parse_duration, parse_queue_name};
use crate::global::target::{connect, redact};
use crate::signals::Signals;

mod pages;
mod routes;
mod state;
mod task_page;

use state::{Access, State};

/// `dlm serve`
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The address to listen on. Anything but a loopback address makes the
    /// dashboard read-only unless --admin-token is given.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9464")]
    pub listen: SocketAddr,
    /// A queue to watch (repeat for several). Default: every queue found by
    /// scanning dlm:queue:* (with SCAN, at most 100, again every 10 s).
    #[arg(long = "queue", value_name = "NAME", value_parser = parse_queue_name)]
    pub queues: Vec<String>,
    /// The locks to watch: a glob on lock names (`*`, `orders:*`).
    #[arg(long, value_name = "GLOB", default_value = "*")]
    pub lock_pattern: String,
    /// A secret every mutating action (retry, purge, force release) must
    /// carry, as the form's admin token or an `X-Admin-Token` header.
    /// Needed to allow actions when listening on a non-loopback address.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "DLM_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,
    /// How often Redis is sampled for the history behind the charts and
    /// throughput (1s to 60s).
    #[arg(long, value_name = "D", default_value = "2s", value_parser = parse_interval)]
    pub interval: Duration,
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_secs(1) || d > Duration::from_secs(60) {
        return Err(format!("{s} is outside 1s ..= 60s"));
    }
    Ok(d)
}

/// Who may act, from where the server listens and the admin token.
fn access(listen: &SocketAddr, admin_token: Option<&str>) -> Result<Access, CliError> {
    match admin_token {
        Some("") => Err(CliError::Usage("--admin-token must not be empty".into())),
        Some(token) => Ok(Access::Admin(token.to_string())),
        None if listen.ip().is_loopback() => Ok(Access::Local),
        None => Ok(Access::ReadOnly),
    }
}

/// Serve until SIGINT or SIGTERM (exit 0); exit 3 when Redis cannot be
/// reached at start or the address cannot be bound.
pub async fn serve(global: &Global, args: &ServeArgs) -> Result<u8, CliError> {
    if global.redis.len() > 1 && global.topology == crate::global::Topology::Plain {
        return Err(CliError::Usage(
            "serve watches one Redis: give a single --redis URL, not several".into(),
        ));
    }
    let access = access(&args.listen, args.admin_token.as_deref())?;
    let metrics = state::install_recorder()?;
    let client = connect(global, global.url()).await?;
    // Fail now (exit 3) rather than serve a dashboard of nothing.
    client.queue_names(1).await?;
    let mut signals = Signals::install()?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(CliError::io("binding the --listen address"))?;
    let local = listener
        .local_addr()
        .map_err(CliError::io("reading the bound address"))?;
    if matches!(access, Access::ReadOnly) {
        crate::output::error_line(&format!(
            "warning: listening on {local}, not loopback, without --admin-token: the dashboard is read-only"
        ));
    }
    let state = Arc::new(State::new(
        client,
        args.queues.clone(),
        args.lock_pattern.clone(),
        access,
        metrics,
        args.interval,
    )?);
    state.discover().await;
    let sampler = tokio::spawn(state::run_sampler(state.clone()));
    let url = format!("http://{local}/");
    let redis = redact(global.url());
    crate::output::emit(
        global.json,
        &serde_json::json!({"url": url, "redis": redis, "access": state.access().describe()}),
        || {
            format!(
                "dlm serve: {url} (Redis {redis}, {})",
                state.access().describe()
            )
        },
    )?;
    let app = routes::router(state);
    let shutdown = async move {
        signals.recv().await;
    };
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    sampler.abort();
    served.map_err(CliError::io("serving HTTP"))?;
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_follows_the_listen_address_and_the_token() -> Result<(), CliError> {
        let local: SocketAddr = "127.0.0.1:9464"
            .parse()
            .map_err(|_| CliError::Usage("addr".into()))?;
        let any: SocketAddr = "0.0.0.0:9464"
            .parse()
            .map_err(|_| CliError::Usage("addr".into()))?;
        assert!(matches!(access(&local, None)?, Access::Local));
        assert!(matches!(access(&any, None)?, Access::ReadOnly));
        assert!(matches!(access(&any, Some("s"))?, Access::Admin(_)));
        assert!(access(&any, Some("")).is_err());
        assert!(parse_interval("500ms").is_err());
        assert_eq!(parse_interval("2s"), Ok(Duration::from_secs(2)));
        Ok(())
    }
}
