//! `overtime serve`: the config read once and passed down; the store
//! opened (the WAL replayed); sources started (file tails, OTLP/HTTP,
//! OTLP/gRPC) into the diagnosing sink; the live diagnosis ticked; the API
//! served until Ctrl-C.

use crate::conf_timeouts::read_timeout_ms;
use crate::diagnose_cmd::layer_name_of;
use anyhow::{Context, Result};
use overtime_config::{Config, Secrets};
use overtime_diagnose::live::LiveDiagnoser;
use overtime_diagnose::{DiagnoseConfig, LayerConfig};
use overtime_ingest::file_tail::{spawn_file_tail, FileKind, FileSourceConfig};
use overtime_ingest::otlp::{serve_otlp_grpc, serve_otlp_http, OtlpStats};
use overtime_model::RecordSink;
use overtime_parse::nginx::LogFormat;
use overtime_server::pipeline::{self, DiagnosingSink};
use overtime_server::{router, AppState};
use overtime_store::{Store, StoreConfig};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// Resolves a `[[file]]` block into what the tail needs.
fn file_kind(f: &overtime_config::FileSource, layers: &mut Vec<LayerConfig>) -> Result<FileKind> {
    Ok(match f.kind.as_str() {
        "jsonl" => FileKind::Jsonl,
        "otlp-json" => FileKind::OtlpJson,
        _ => {
            let conf = match &f.nginx_conf {
                Some(p) => Some(
                    std::fs::read_to_string(p)
                        .with_context(|| format!("reading {}", p.display()))?,
                ),
                None => None,
            };
            let format = match (&f.format, &conf, &f.format_name) {
                (Some(body), _, _) => LogFormat::builtin(body)
                    .map(Ok)
                    .unwrap_or_else(|| LogFormat::compile(body))?,
                (None, Some(text), Some(name)) => LogFormat::from_nginx_conf(text, name)?,
                _ => anyhow::bail!("file {}: no log format", f.path.display()),
            };
            let layer = f.layer.clone().unwrap_or_else(|| layer_name_of(&f.path));
            let timeout = f
                .read_timeout_ms
                .or_else(|| conf.as_deref().and_then(read_timeout_ms));
            let index = match layers.iter().position(|l| l.name == layer) {
                Some(i) => i,
                None => {
                    layers.push(LayerConfig {
                        name: layer.clone(),
                        read_timeout_ms: timeout,
                    });
                    layers.len() - 1
                }
            };
            FileKind::Nginx {
                format,
                layer,
                layer_index: index as u32,
            }
        }
    })
}

pub fn run(config: Option<PathBuf>) -> Result<()> {
    let cfg = match &config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(serve(cfg))
}

async fn serve(cfg: Config) -> Result<()> {
    let secrets = Secrets::from_env(&cfg);
    let mut layers = Vec::new();
    let mut files = Vec::new();
    for f in &cfg.files {
        files.push(FileSourceConfig::new(
            f.path.clone(),
            file_kind(f, &mut layers)?,
        ));
    }
    let store = Store::open(StoreConfig {
        data_dir: cfg.store.data_dir.clone(),
        memtable_bytes: cfg.store.memtable_bytes,
        segment_seconds: cfg.store.segment_seconds,
        flush_interval_ms: cfg.store.flush_interval_ms,
        retention_age_s: cfg.store.retention_age_hours.map(|h| h * 3600),
        retention_bytes: cfg.store.retention_bytes,
        fsync: cfg.store.fsync,
    })
    .with_context(|| format!("opening the store in {}", cfg.store.data_dir.display()))?;
    let d = &cfg.diagnose;
    let dcfg = DiagnoseConfig {
        threshold_tokens: d.threshold_tokens,
        clock_skew_ms: d.clock_skew_ms,
        incident_quiet_ms: d.incident_quiet_ms,
        layers,
        default_budget_ms: d.default_budget_ms,
        ..Default::default()
    };
    let state = Arc::new(AppState {
        live: Mutex::new(LiveDiagnoser::new(
            dcfg.clone(),
            d.grace_ms,
            d.keep_ms,
            d.max_traces,
        )),
        store: Arc::new(store),
        diagnose: dcfg,
        sql: cfg.sql.clone(),
        token: secrets.api_token.clone(),
        ready: AtomicBool::new(false),
    });
    let since = pipeline::now_us() - d.keep_ms as i64 * 1000;
    pipeline::replay_recent(&state, since)
        .map_err(|e| anyhow::anyhow!("replaying the WAL: {e}"))?;
    state.ready.store(true, Ordering::Relaxed);

    let sink: Arc<dyn RecordSink> = Arc::new(DiagnosingSink {
        state: state.clone(),
    });
    let shutdown = CancellationToken::new();
    let tails: Vec<_> = files
        .into_iter()
        .map(|f| spawn_file_tail(f, sink.clone(), shutdown.clone()))
        .collect();
    let stats = Arc::new(OtlpStats::default());
    if !cfg.otlp.http_listen.is_empty() {
        let addr = cfg.otlp.http_listen.parse().context("otlp.http_listen")?;
        tokio::spawn(serve_otlp_http(
            addr,
            sink.clone(),
            stats.clone(),
            shutdown.clone(),
        ));
    }
    if !cfg.otlp.grpc_listen.is_empty() {
        let addr = cfg.otlp.grpc_listen.parse().context("otlp.grpc_listen")?;
        tokio::spawn(serve_otlp_grpc(
            addr,
            sink.clone(),
            stats.clone(),
            shutdown.clone(),
        ));
    }
    let ticker = {
        let state = state.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(std::time::Duration::from_millis(500));
            let mut last_retention = std::time::Instant::now();
            while !shutdown.is_cancelled() {
                every.tick().await;
                let s = state.clone();
                let _ = tokio::task::spawn_blocking(move || pipeline::tick(&s)).await;
                if last_retention.elapsed().as_secs() >= 3600 {
                    let s = state.clone();
                    let _ = tokio::task::spawn_blocking(move || {
                        s.store.enforce_retention(pipeline::now_us())
                    })
                    .await;
                    last_retention = std::time::Instant::now();
                }
            }
        })
    };
    let listener = tokio::net::TcpListener::bind(&cfg.server.listen)
        .await
        .with_context(|| format!("binding {}", cfg.server.listen))?;
    eprintln!(
        "overtime: serving on http://{} (OTLP http {} grpc {}), data in {}",
        listener.local_addr()?,
        if cfg.otlp.http_listen.is_empty() {
            "off"
        } else {
            &cfg.otlp.http_listen
        },
        if cfg.otlp.grpc_listen.is_empty() {
            "off"
        } else {
            &cfg.otlp.grpc_listen
        },
        cfg.store.data_dir.display()
    );
    let stop = shutdown.clone();
    axum::serve(listener, router(state.clone()))
        .with_graceful_shutdown(async move {
            let _ = tokio::signal::ctrl_c().await;
            stop.cancel();
        })
        .await
        .context("serving the API")?;
    shutdown.cancel();
    let _ = ticker.await;
    for t in tails {
        let _ = tokio::task::spawn_blocking(move || t.join()).await;
    }
    Ok(())
}
