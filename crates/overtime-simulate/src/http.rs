//! Plain HTTP/1.1 over 127.0.0.1 with hyper: a server loop, streaming
//! bodies, and the client pieces (connect, handshake, collect) the
//! services, the built-in gateway and the load generator share.

use bytes::Bytes;
use http_body::Frame;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Any error, boxed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Every response body the simulator writes.
pub type Body = BoxBody<Bytes, BoxError>;
/// The writing end of a streamed body: `Ok` sends a chunk, `Err` aborts
/// the connection (no terminating chunk: the client sees a cut stream).
pub type ChunkSender = mpsc::UnboundedSender<Result<Bytes, BoxError>>;

/// The largest body read into memory.
pub const MAX_BODY: usize = 8 << 20;

/// A complete body.
pub fn full(data: impl Into<Bytes>) -> Body {
    Full::new(data.into())
        .map_err(|n: Infallible| match n {})
        .boxed()
}

/// A body fed chunk by chunk from the returned sender; it ends when the
/// sender is dropped.
pub fn channel() -> (ChunkSender, Body) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, ChannelBody { rx }.boxed())
}

struct ChannelBody {
    rx: mpsc::UnboundedReceiver<Result<Bytes, BoxError>>,
}

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Ok(b))) => Poll::Ready(Some(Ok(Frame::data(b)))),
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A listening server; aborted (no new connections) on [`Server::stop`] or drop.
#[derive(Debug)]
pub struct Server {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Server {
    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Stops accepting connections.
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves HTTP/1.1 on `addr` (port 0: any free port), one task per
/// connection, `handler` per request.
pub async fn serve<H, F>(addr: SocketAddr, handler: H) -> std::io::Result<Server>
where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let handler = Arc::new(handler);
    let task = tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(x) => x,
                Err(_) => {
                    // Out of descriptors or similar: back off, keep serving.
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let handler = handler.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let f = handler(req, peer);
                    async move { Ok::<_, Infallible>(f.await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(Server { addr, task })
}

/// An HTTP/1.1 connection over `stream`, driven in its own task.
pub async fn handshake(stream: TcpStream) -> Result<SendRequest<Full<Bytes>>, BoxError> {
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// Reads a whole body, refusing more than [`MAX_BODY`] bytes.
pub async fn collect(mut body: Incoming) -> Result<Bytes, BoxError> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            if out.len() + data.len() > MAX_BODY {
                return Err(format!("body over {MAX_BODY} bytes").into());
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(out))
}

/// Sends one request to an `http://host:port/...` URI on a fresh
/// connection and reads the whole answer (the OTLP exporter's client).
pub async fn send_bytes(req: Request<Bytes>) -> Result<Response<Bytes>, BoxError> {
    let uri = req.uri().clone();
    if uri.scheme_str().is_some_and(|s| s != "http") {
        return Err(format!("{uri}: only http:// endpoints are supported").into());
    }
    let host = uri.host().ok_or_else(|| format!("{uri}: no host"))?;
    let port = uri.port_u16().unwrap_or(80);
    let stream = TcpStream::connect((host.trim_matches(['[', ']']), port)).await?;
    let mut sender = handshake(stream).await?;
    let (mut parts, body) = req.into_parts();
    if !parts.headers.contains_key(http::header::HOST) {
        let value = match uri.port_u16() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        };
        parts.headers.insert(http::header::HOST, value.parse()?);
    }
    parts.uri = uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .parse()?;
    let resp = sender
        .send_request(Request::from_parts(parts, Full::new(body)))
        .await?;
    let (parts, body) = resp.into_parts();
    let body = collect(body).await?;
    Ok(Response::from_parts(parts, body))
}
