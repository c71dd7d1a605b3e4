//! The built-in gateway (`--no-nginx`): a reverse proxy that behaves like
//! `proxy_pass` for what the access log shows — `proxy_read_timeout`
//! between two reads from the upstream (the response header included),
//! 504 when it fires before the header, a cut connection (logged 200 with
//! the bytes sent so far) when it fires mid-body, `$upstream_connect_time`
//! / `$upstream_header_time` / `$upstream_response_time` measured from the
//! connect, `$request_time` from the request's arrival, `X-Request-ID`
//! set to `$request_id` on the way up and down.

use super::access::{AccessLog, AccessRecord};
use crate::http::{self, Body, BoxError, Server};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};

/// How the gateway treats its upstream.
#[derive(Debug, Clone)]
pub(crate) struct ProxyConfig {
    /// 0: any free port.
    pub(crate) listen_port: u16,
    pub(crate) upstream_port: u16,
    pub(crate) read_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    /// Mints `$request_id`.
    pub(crate) seed: u64,
}

/// nginx's error page for `status`.
pub(crate) fn error_page(status: u16, reason: &str) -> String {
    format!(
        "<html>\r\n<head><title>{status} {reason}</title></head>\r\n<body>\r\n<center><h1>{status} {reason}</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
    )
}

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
];

struct Gw {
    cfg: ProxyConfig,
    log: Arc<AccessLog>,
    rng: Mutex<fastrand::Rng>,
}

/// Starts the gateway on 127.0.0.1.
pub(crate) async fn start(cfg: ProxyConfig, log: Arc<AccessLog>) -> std::io::Result<Server> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, cfg.listen_port));
    let gw = Arc::new(Gw {
        rng: Mutex::new(fastrand::Rng::with_seed(cfg.seed ^ 0x6761_7465_7761_7921)),
        cfg,
        log,
    });
    http::serve(addr, move |req, peer| {
        let gw = gw.clone();
        async move { gw.proxy(req, peer).await }
    })
    .await
}

/// What the upstream exchange gave, before the body is pumped.
struct Upstream {
    connect: Option<Duration>,
    header: Option<Duration>,
    status: Option<u16>,
}

impl Gw {
    fn request_id(&self) -> String {
        let mut r = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        format!("{:032x}", r.u128(..))
    }

    async fn proxy(self: Arc<Self>, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let start = Instant::now();
        let rid = self.request_id();
        let (parts, body) = req.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
        let mut rec = AccessRecord {
            remote_addr: peer.ip().to_string(),
            time: chrono::Local::now(),
            request: format!("{} {} {:?}", parts.method, path, parts.version),
            status: 0,
            body_bytes_sent: 0,
            request_time: Duration::ZERO,
            upstream_connect: None,
            upstream_header: None,
            upstream_response: None,
            upstream_status: None,
            upstream_addr: None,
            request_id: rid.clone(),
            traceparent: crate::service::header(&parts.headers, "traceparent"),
            max_wait: crate::service::header(&parts.headers, "x-max-wait"),
            llm_reason: None,
            llm_duration: None,
        };
        // location /v1/ and /v2/ go to the agent API; anything else: 404.
        let proxied = parts.uri.path().starts_with("/v1/") || parts.uri.path().starts_with("/v2/");
        let client_body = match http::collect(body).await {
            Ok(b) => b,
            Err(_) => return self.answer(rec, start, 400, "Bad Request"),
        };
        if !proxied {
            return self.answer(rec, start, 404, "Not Found");
        }
        rec.upstream_addr = Some(format!("127.0.0.1:{}", self.cfg.upstream_port));
        let mut up = Upstream {
            connect: None,
            header: None,
            status: None,
        };
        let c0 = Instant::now();
        let stream = match timeout(
            self.cfg.connect_timeout,
            TcpStream::connect(("127.0.0.1", self.cfg.upstream_port)),
        )
        .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(_)) => return self.fail(rec, up, start, c0, 502, "Bad Gateway"),
            Err(_) => return self.fail(rec, up, start, c0, 504, "Gateway Time-out"),
        };
        up.connect = Some(c0.elapsed());
        let Ok(mut sender) = http::handshake(stream).await else {
            return self.fail(rec, up, start, c0, 502, "Bad Gateway");
        };
        let mut upreq = Request::builder()
            .method(parts.method.clone())
            .uri(path.as_str())
            .header("host", "agent_api")
            .header("x-request-id", rid.as_str())
            .header("connection", "close");
        for (k, v) in &parts.headers {
            let name = k.as_str();
            if name != "host" && name != "x-request-id" && !HOP_BY_HOP.contains(&name) {
                upreq = upreq.header(k, v);
            }
        }
        let Ok(upreq) = upreq.body(Full::new(client_body)) else {
            return self.fail(rec, up, start, c0, 502, "Bad Gateway");
        };
        let resp = match timeout(self.cfg.read_timeout, sender.send_request(upreq)).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => return self.fail(rec, up, start, c0, 502, "Bad Gateway"),
            // upstream timed out while reading response header
            Err(_) => return self.fail(rec, up, start, c0, 504, "Gateway Time-out"),
        };
        up.header = Some(c0.elapsed());
        up.status = Some(resp.status().as_u16());
        rec.llm_reason = crate::service::header(resp.headers(), "x-llm-reason");
        rec.llm_duration = crate::service::header(resp.headers(), "x-llm-duration");
        let (rparts, mut ubody) = resp.into_parts();
        let mut out = Response::builder()
            .status(rparts.status)
            .header("x-request-id", rid.as_str());
        for (k, v) in &rparts.headers {
            if !HOP_BY_HOP.contains(&k.as_str()) {
                out = out.header(k, v);
            }
        }
        let (tx, body) = http::channel();
        let read_timeout = self.cfg.read_timeout;
        let gw = self.clone();
        tokio::spawn(async move {
            let mut sent = 0u64;
            let mut client_gone = false;
            loop {
                match timeout(read_timeout, ubody.frame()).await {
                    Ok(Some(Ok(frame))) => {
                        if let Ok(data) = frame.into_data() {
                            sent += data.len() as u64;
                            if tx.send(Ok::<Bytes, BoxError>(data)).is_err() {
                                client_gone = true;
                                break;
                            }
                        }
                    }
                    Ok(None) => break,
                    // upstream prematurely closed connection
                    Ok(Some(Err(e))) => {
                        let _ = tx.send(Err(e.into()));
                        break;
                    }
                    // upstream timed out while reading upstream: nginx
                    // closes the client's connection mid-body.
                    Err(_) => {
                        let _ = tx.send(Err("upstream timed out".into()));
                        break;
                    }
                }
            }
            drop(tx);
            rec.status = if client_gone {
                499
            } else {
                up.status.unwrap_or(502)
            };
            rec.body_bytes_sent = sent;
            rec.upstream_connect = up.connect;
            rec.upstream_header = up.header;
            rec.upstream_status = up.status;
            rec.upstream_response = Some(c0.elapsed());
            rec.request_time = start.elapsed();
            rec.time = chrono::Local::now();
            gw.log.write(&rec);
        });
        out.body(body)
            .unwrap_or_else(|_| crate::service::plain(502, "bad upstream header"))
    }

    /// The upstream failed or timed out before a response header.
    fn fail(
        &self,
        mut rec: AccessRecord,
        up: Upstream,
        start: Instant,
        c0: Instant,
        status: u16,
        reason: &str,
    ) -> Response<Body> {
        rec.upstream_connect = up.connect;
        rec.upstream_header = None;
        rec.upstream_response = Some(c0.elapsed());
        rec.upstream_status = Some(status);
        self.answer(rec, start, status, reason)
    }

    /// An answer of the gateway's own (error page).
    fn answer(
        &self,
        mut rec: AccessRecord,
        start: Instant,
        status: u16,
        reason: &str,
    ) -> Response<Body> {
        let page = error_page(status, reason);
        rec.status = status;
        rec.body_bytes_sent = page.len() as u64;
        rec.request_time = start.elapsed();
        rec.time = chrono::Local::now();
        self.log.write(&rec);
        Response::builder()
            .status(status)
            .header("content-type", "text/html")
            .header("x-request-id", rec.request_id.as_str())
            .body(http::full(page))
            .unwrap_or_else(|_| crate::service::plain(status, reason))
    }
}
