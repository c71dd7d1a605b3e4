//! The whole simulated platform in one process: every service on its own
//! 127.0.0.1 port, real HTTP between them.

use crate::agent::{AgentApi, Ports, Registry};
use crate::clock::TimeScale;
use crate::error::SimulateError;
use crate::http::{self, Server};
use crate::model::{LegacyLlm, ModelServer};
use crate::overrides::Overrides;
use crate::service::{Ctx, serve_service};
use crate::telemetry::Telemetry;
use crate::tools::{MemoryStore, ToolGateway, external_api};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

/// The running services.
#[derive(Debug)]
pub struct Platform {
    /// Where the gateway sends `/v1/agent/*`.
    pub agent_port: u16,
    pub registry: Arc<Registry>,
    /// The model server, whose load [`ModelServer::exposition`] reads.
    pub model_server: Arc<ModelServer>,
    /// Where the model server's Prometheus metrics are served
    /// (`http://127.0.0.1:<port>/metrics`, vLLM's names).
    pub model_metrics_port: u16,
    busy: Arc<AtomicUsize>,
    servers: Vec<Server>,
}

impl Platform {
    /// Starts external APIs, model servers, tool gateway, memory store and
    /// the agent API.
    pub async fn start(
        tel: &Telemetry,
        scale: TimeScale,
        overrides: &Overrides,
    ) -> Result<Platform, SimulateError> {
        let busy = Arc::new(AtomicUsize::new(0));
        let ctx = |name: &'static str| -> Result<Arc<Ctx>, SimulateError> {
            Ok(Arc::new(Ctx::new(
                name,
                tel.tracer(name)?,
                scale,
                busy.clone(),
            )))
        };
        let bind = |what: &str, e: std::io::Error| SimulateError::io(format!("starting {what}"), e);
        let local = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));

        let ext_busy = busy.clone();
        let external = http::serve(local, move |req, _| {
            let guard = crate::service::Busy::new(&ext_busy);
            let path = req.uri().path().to_string();
            let query = req.uri().query().unwrap_or("").to_string();
            async move {
                let r = external_api(scale, &path, &query).await;
                drop(guard);
                r
            }
        })
        .await
        .map_err(|e| bind("external-apis", e))?;

        let m = Arc::new(ModelServer::new(ctx("model-server")?));
        let model = serve_service(
            m.ctx.clone(),
            m.clone(),
            ModelServer::route,
            ModelServer::handle,
        )
        .await
        .map_err(|e| bind("model-server", e))?;
        // Its metrics on a port of their own: a scrape is no traced request.
        let scraped = m.clone();
        let model_metrics = http::serve(local, move |req, _| {
            let text = match req.uri().path() {
                "/metrics" => Ok(scraped.exposition()),
                _ => Err(()),
            };
            async move {
                match text {
                    Ok(t) => crate::service::plain(200, &t),
                    Err(()) => crate::service::plain(404, "not found"),
                }
            }
        })
        .await
        .map_err(|e| bind("model-server metrics", e))?;
        let l = Arc::new(LegacyLlm {
            ctx: ctx("legacy-llm")?,
        });
        let legacy = serve_service(l.ctx.clone(), l, ModelServer::route, LegacyLlm::handle)
            .await
            .map_err(|e| bind("legacy-llm", e))?;
        let t = Arc::new(ToolGateway {
            ctx: ctx("tool-gateway")?,
            external_port: external.port(),
        });
        let tools = serve_service(t.ctx.clone(), t, ToolGateway::route, ToolGateway::handle)
            .await
            .map_err(|e| bind("tool-gateway", e))?;
        let s = Arc::new(MemoryStore {
            ctx: ctx("memory-store")?,
        });
        let memory = serve_service(s.ctx.clone(), s, |p| p.to_string(), MemoryStore::handle)
            .await
            .map_err(|e| bind("memory-store", e))?;
        let ports = Ports {
            model: model.port(),
            legacy: legacy.port(),
            tools: tools.port(),
            memory: memory.port(),
        };
        let a = Arc::new(AgentApi::new(ctx("agent-api")?, ports).with_overrides(overrides.clone()));
        let registry = a.registry.clone();
        let agent = serve_service(a.ctx.clone(), a, AgentApi::route_of, AgentApi::handle)
            .await
            .map_err(|e| bind("agent-api", e))?;
        Ok(Platform {
            agent_port: agent.port(),
            registry,
            model_metrics_port: model_metrics.port(),
            model_server: m,
            busy,
            servers: vec![agent, model, model_metrics, legacy, tools, memory, external],
        })
    }

    /// Requests in progress on any service.
    pub fn busy(&self) -> usize {
        self.busy.load(SeqCst)
    }

    /// Waits until no service works on anything (bounded); true if idle.
    pub async fn wait_idle(&self, max: Duration) -> bool {
        let end = tokio::time::Instant::now() + max;
        while tokio::time::Instant::now() < end {
            if self.busy() == 0 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.busy() == 0
    }

    /// Stops accepting connections.
    pub fn stop(&self) {
        for s in &self.servers {
            s.stop();
        }
    }
}
