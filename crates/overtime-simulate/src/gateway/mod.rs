//! The gateway in front of the agent API: a real nginx when one is
//! installed (unless `--no-nginx`), else the built-in proxy; both write the
//! same `overtime`-format access log.

pub(crate) mod access;
pub(crate) mod nginx;
pub(crate) mod proxy;

use crate::error::SimulateError;
use access::AccessLog;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Which gateway runs.
#[derive(Debug)]
pub(crate) enum Gateway {
    Nginx(nginx::Nginx),
    BuiltIn(crate::http::Server),
}

/// What both gateways need.
#[derive(Debug, Clone)]
pub(crate) struct GatewaySpec {
    pub(crate) listen_port: u16,
    pub(crate) upstream_port: u16,
    pub(crate) read_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) seed: u64,
}

impl Gateway {
    /// Starts nginx (`bin`, blocking until it runs) on a socket bound
    /// here first (port 0: any free port) and handed over to it, so no
    /// other process can take the port between the two.
    pub(crate) fn start_nginx(
        bin: &Path,
        spec: &GatewaySpec,
        log: &AccessLog,
    ) -> Result<Gateway, SimulateError> {
        let binding = || format!("binding the gateway on 127.0.0.1:{}", spec.listen_port);
        let listener =
            std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, spec.listen_port))
                .map_err(|e| SimulateError::io(binding(), e))?;
        let port = listener
            .local_addr()
            .map_err(|e| SimulateError::io(binding(), e))?
            .port();
        let c = nginx::NginxConfig {
            listen_port: port,
            upstream_port: spec.upstream_port,
            read_timeout: spec.read_timeout,
            connect_timeout: spec.connect_timeout,
            access_log: log.path.clone(),
        };
        Ok(Gateway::Nginx(nginx::Nginx::start(bin, &c, listener)?))
    }

    /// Starts the built-in proxy.
    pub(crate) async fn start_builtin(
        spec: &GatewaySpec,
        log: Arc<AccessLog>,
    ) -> Result<Gateway, SimulateError> {
        let cfg = proxy::ProxyConfig {
            listen_port: spec.listen_port,
            upstream_port: spec.upstream_port,
            read_timeout: spec.read_timeout,
            connect_timeout: spec.connect_timeout,
            seed: spec.seed,
        };
        let s = proxy::start(cfg, log).await.map_err(|e| {
            SimulateError::io(
                format!("starting the gateway on 127.0.0.1:{}", spec.listen_port),
                e,
            )
        })?;
        Ok(Gateway::BuiltIn(s))
    }

    /// The port clients connect to.
    pub(crate) fn port(&self) -> u16 {
        match self {
            Gateway::Nginx(n) => n.port,
            Gateway::BuiltIn(s) => s.port(),
        }
    }

    /// `nginx` or `built-in`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Gateway::Nginx(_) => "nginx",
            Gateway::BuiltIn(_) => "built-in",
        }
    }

    /// Stops it (nginx: gracefully, logs flushed).
    pub(crate) fn stop(&mut self) -> Result<(), SimulateError> {
        match self {
            Gateway::Nginx(n) => n.stop(),
            Gateway::BuiltIn(s) => {
                s.stop();
                Ok(())
            }
        }
    }
}
