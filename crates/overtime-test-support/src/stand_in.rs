//! What every local stand-in of a vendor's HTTP API shares (Jira, Slack,
//! PagerDuty: the crates' own `tests/support`): serving on a loopback
//! listener or on a socket bound beforehand (the vendor coming back at the
//! address its clients already use), stopping, the request log, injected
//! faults (5xx, 429 with `Retry-After`), and the outbox files a channel
//! leaves while the vendor is down. What a vendor's API accepts stays in
//! that vendor's stand-in.

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::Response;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// One request a stand-in answered.
#[derive(Debug, Clone)]
pub struct Logged {
    /// Its method.
    pub method: String,
    /// Its path.
    pub path: String,
    /// The status answered.
    pub status: u16,
    /// When it arrived.
    pub at: Instant,
}

/// What the next request gets instead of a normal answer.
#[derive(Debug, Clone)]
pub enum Fault {
    /// This status, no body.
    Status(u16),
    /// 429 with this `Retry-After`.
    RateLimit {
        /// Seconds to wait, as the header says.
        retry_after_secs: u64,
    },
}

/// A stand-in's HTTP server: every request goes to one handler with the
/// stand-in's state.
pub struct Served {
    /// Where it listens.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    /// Serves `handle` on `l` (call inside a Tokio runtime).
    pub fn serve<S, F, Fut>(l: tokio::net::TcpListener, state: Arc<S>, handle: F) -> Served
    where
        S: Send + Sync + 'static,
        F: Fn(Arc<S>, Method, Uri, HeaderMap, Bytes) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response> + Send + 'static,
    {
        let addr = l.local_addr().expect("a bound listener");
        let app = Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let (st, handle) = (state.clone(), handle.clone());
                async move { handle(st, method, uri, headers, body).await }
            },
        );
        let task = tokio::spawn(async move {
            axum::serve(l, app).await.expect("the stand-in serves");
        });
        Served { addr, task }
    }

    /// Serves on a socket bound beforehand ([`down_port`]).
    pub fn serve_on<S, F, Fut>(socket: tokio::net::TcpSocket, state: Arc<S>, handle: F) -> Served
    where
        S: Send + Sync + 'static,
        F: Fn(Arc<S>, Method, Uri, HeaderMap, Bytes) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response> + Send + 'static,
    {
        Served::serve(socket.listen(1024).expect("listens"), state, handle)
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops answering (the vendor goes down).
    pub fn stop(&self) {
        self.task.abort();
    }
}

/// A listener on a free loopback port.
pub async fn listener() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port")
}

/// A loopback port held but not listened on: a connection to it is
/// refused until a stand-in listens on it ([`Served::serve_on`]), and no
/// other test can take it meanwhile.
pub fn down_port() -> (SocketAddr, tokio::net::TcpSocket) {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("a loopback port");
    (socket.local_addr().expect("bound"), socket)
}

/// The state, even after a test's panic poisoned the lock.
pub fn lock<S>(s: &Mutex<S>) -> MutexGuard<'_, S> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// Notices waiting in a channel's outbox folder (its `*.json` files).
pub fn pending_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .expect("the outbox folder")
        .filter(|e| {
            let n = e.as_ref().expect("an entry").file_name();
            let n = n.to_string_lossy();
            n.ends_with(".json") && !n.starts_with('.')
        })
        .count()
}
