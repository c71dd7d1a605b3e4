//! A headless Chromium for the UI's browser tests: starts Debian's
//! `chromium`, finds its page target, and speaks the Chrome DevTools
//! Protocol over a WebSocket written here on `std` alone (RFC 6455 client
//! side: the upgrade, masked text frames out, text/continuation/ping/close
//! in). No driver download, no Node, no extra crate.
//!
//! Rules:
//! - A missing Chromium fails the test naming the package (`chromium`).
//! - Every wait on the page is bounded and, on timeout, shows what the page
//!   says.
//! - The browser gets a fresh profile in a temp dir and is closed (then
//!   killed if it lingers) when [`Browser`] drops.

use crate::program::find_program;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The system Chromium, or a failure that says how to get it.
pub fn chromium_path() -> PathBuf {
    find_program(&["chromium", "chromium-browser"], "chromium")
}

/// A headless Chromium and a CDP session on its first page.
pub struct Browser {
    child: Child,
    ws: WebSocket,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.call("Browser.close", serde_json::json!({}));
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Starts Chromium headless at 1366×768 and attaches to its page.
    pub fn launch() -> Browser {
        let exe = chromium_path();
        let profile = tempfile::tempdir().expect("a profile dir");
        let child = Command::new(&exe)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--remote-debugging-port=0",
                "--window-size=1366,768",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", exe.display()));
        // Chromium writes the port it chose into DevToolsActivePort.
        let port_file = profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(60);
        let port: u16 = loop {
            if let Some(p) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()))
            {
                break p;
            }
            assert!(
                Instant::now() < deadline,
                "Chromium did not open its DevTools port in 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let ws_url = loop {
            let list = http_get(port, "/json/list").unwrap_or_default();
            let targets: serde_json::Value = serde_json::from_str(&list).unwrap_or_default();
            let page = targets.as_array().and_then(|ts| {
                ts.iter()
                    .find(|t| t["type"] == "page")
                    .and_then(|t| t["webSocketDebuggerUrl"].as_str().map(String::from))
            });
            if let Some(u) = page {
                break u;
            }
            assert!(
                Instant::now() < deadline,
                "Chromium has no page target: {list}"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let path = ws_url
            .splitn(4, '/')
            .nth(3)
            .map(|p| format!("/{p}"))
            .expect("ws url path");
        let ws = WebSocket::connect(port, &path);
        let mut b = Browser {
            child,
            ws,
            next_id: 0,
            _profile: profile,
        };
        b.call("Page.enable", serde_json::json!({}));
        b.call(
            "Emulation.setDeviceMetricsOverride",
            serde_json::json!({"width": 1366, "height": 768, "deviceScaleFactor": 1, "mobile": false}),
        );
        b
    }

    /// Sends one command and waits for its answer (events are skipped).
    pub fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.try_call(method, params)
            .unwrap_or_else(|e| panic!("CDP {method} failed: {e}"))
    }

    /// [`Browser::call`], with the protocol's error as an `Err`.
    pub fn try_call(
        &mut self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        self.ws
            .send(&serde_json::json!({"id": id, "method": method, "params": params}).to_string());
        loop {
            let text = self
                .ws
                .recv()
                .unwrap_or_else(|e| panic!("CDP {method}: {e}"));
            let msg: serde_json::Value = serde_json::from_str(&text).expect("CDP sends JSON");
            if msg["id"] == id {
                if let Some(err) = msg.get("error") {
                    return Err(err.to_string());
                }
                return Ok(msg["result"].clone());
            }
        }
    }

    /// Evaluates `expr` in the page (awaiting a promise) and returns its
    /// value; a thrown exception fails the test with its text.
    pub fn eval(&mut self, expr: &str) -> serde_json::Value {
        self.try_eval(expr)
            .unwrap_or_else(|e| panic!("page script failed: {e}\n  in: {expr}"))
    }

    /// [`Browser::eval`], with a failure (an exception, or the page
    /// navigating away meanwhile) as an `Err`.
    pub fn try_eval(&mut self, expr: &str) -> Result<serde_json::Value, String> {
        let r = self.try_call(
            "Runtime.evaluate",
            serde_json::json!({"expression": expr, "awaitPromise": true, "returnByValue": true}),
        )?;
        if let Some(ex) = r.get("exceptionDetails") {
            return Err(ex.to_string());
        }
        Ok(r["result"]["value"].clone())
    }

    /// Navigates and waits for the load event.
    pub fn goto(&mut self, url: &str) {
        self.call("Page.navigate", serde_json::json!({"url": url}));
        self.wait_for("document.readyState === 'complete'", "the page to load");
    }

    /// Polls `cond` (a JS expression) until it is true, for up to 30 s.
    pub fn wait_for(&mut self, cond: &str, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // A navigation in between (a form post) is not an answer yet.
            if self.try_eval(&format!("!!({cond})")) == Ok(serde_json::Value::Bool(true)) {
                return;
            }
            if Instant::now() > deadline {
                let body = self.eval("document.body ? document.body.innerText.slice(0, 2000) : ''");
                panic!("timed out waiting for {what} ({cond}); the page says:\n{body}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// One key press as a user makes it (keyDown, char, keyUp).
    pub fn press(&mut self, key: &str) {
        let (code, vk, text) = match key {
            "Enter" => ("Enter", 13, "\r"),
            "Tab" => ("Tab", 9, ""),
            "Escape" => ("Escape", 27, ""),
            "ArrowDown" => ("ArrowDown", 40, ""),
            "ArrowUp" => ("ArrowUp", 38, ""),
            "/" => ("Slash", 191, "/"),
            "c" => ("KeyC", 67, "c"),
            other => panic!("press: add {other:?} to the key table"),
        };
        let mut down = serde_json::json!({"type": "keyDown", "key": key, "code": code,
            "windowsVirtualKeyCode": vk, "nativeVirtualKeyCode": vk});
        if !text.is_empty() {
            down["text"] = text.into();
            down["unmodifiedText"] = text.into();
        }
        self.call("Input.dispatchKeyEvent", down);
        self.call(
            "Input.dispatchKeyEvent",
            serde_json::json!({"type": "keyUp", "key": key, "code": code,
                "windowsVirtualKeyCode": vk, "nativeVirtualKeyCode": vk}),
        );
    }

    /// Types text into the focused element.
    pub fn type_text(&mut self, text: &str) {
        self.call("Input.insertText", serde_json::json!({"text": text}));
    }

    /// A PNG of the viewport (or of the whole page) saved at `path`.
    pub fn screenshot(&mut self, path: &Path, full_page: bool) {
        let r = self.call(
            "Page.captureScreenshot",
            serde_json::json!({"format": "png", "captureBeyondViewport": full_page}),
        );
        let png = base64_decode(r["data"].as_str().expect("screenshot data"));
        assert!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
        std::fs::write(path, png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        println!("screenshot: {}", path.display());
    }
}

/// `GET path` on 127.0.0.1:port, the body (DevTools keeps the connection
/// open, so the body is read by its `Content-Length`).
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut r = BufReader::new(s);
    let mut len = None;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse::<usize>().ok();
        }
    }
    let mut body = vec![0u8; len?];
    r.read_exact(&mut body).ok()?;
    String::from_utf8(body).ok()
}

/// The client end of a WebSocket (text messages only).
pub struct WebSocket {
    out: TcpStream,
    inp: BufReader<TcpStream>,
    mask_seed: u32,
}

impl WebSocket {
    fn connect(port: u16, path: &str) -> WebSocket {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to DevTools");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.set_nodelay(true).unwrap();
        let mut out = s.try_clone().unwrap();
        write!(
            out,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: b3ZlcnRpbWUtdWktdGVzdA==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .unwrap();
        let mut inp = BufReader::new(s);
        let mut status = String::new();
        inp.read_line(&mut status).unwrap();
        assert!(
            status.contains(" 101 "),
            "WebSocket upgrade refused: {status}"
        );
        loop {
            let mut line = String::new();
            inp.read_line(&mut line).unwrap();
            if line == "\r\n" || line.is_empty() {
                break;
            }
        }
        WebSocket {
            out,
            inp,
            mask_seed: 0x9e37_79b9,
        }
    }

    fn send(&mut self, text: &str) {
        let data = text.as_bytes();
        let mut frame = vec![0x81u8];
        match data.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n <= 0xffff => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        // Client frames must be masked; the key need not be secret here.
        self.mask_seed = self
            .mask_seed
            .wrapping_mul(1_664_525)
            .wrapping_add(1_013_904_223);
        let key = self.mask_seed.to_be_bytes();
        frame.extend_from_slice(&key);
        frame.extend(data.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        self.out.write_all(&frame).expect("send to DevTools");
    }

    fn write_control(&mut self, opcode: u8, payload: &[u8]) {
        let key = [1u8, 2, 3, 4];
        let mut frame = vec![0x80 | opcode, 0x80 | payload.len() as u8];
        frame.extend_from_slice(&key);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        let _ = self.out.write_all(&frame);
    }

    fn recv(&mut self) -> Result<String, String> {
        let mut message = Vec::new();
        loop {
            let mut h = [0u8; 2];
            self.inp
                .read_exact(&mut h)
                .map_err(|e| format!("reading a frame: {e}"))?;
            let (fin, opcode) = (h[0] & 0x80 != 0, h[0] & 0x0f);
            let mut len = u64::from(h[1] & 0x7f);
            if len == 126 {
                let mut b = [0u8; 2];
                self.inp.read_exact(&mut b).map_err(|e| e.to_string())?;
                len = u64::from(u16::from_be_bytes(b));
            } else if len == 127 {
                let mut b = [0u8; 8];
                self.inp.read_exact(&mut b).map_err(|e| e.to_string())?;
                len = u64::from_be_bytes(b);
            }
            let mut mask = [0u8; 4];
            if h[1] & 0x80 != 0 {
                self.inp.read_exact(&mut mask).map_err(|e| e.to_string())?;
            }
            let mut payload = vec![0u8; len as usize];
            self.inp
                .read_exact(&mut payload)
                .map_err(|e| e.to_string())?;
            if h[1] & 0x80 != 0 {
                payload
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, b)| *b ^= mask[i % 4]);
            }
            match opcode {
                0x0 | 0x1 => {
                    message.extend_from_slice(&payload);
                    if fin {
                        return String::from_utf8(message).map_err(|e| e.to_string());
                    }
                }
                0x8 => return Err("DevTools closed the connection".into()),
                0x9 => self.write_control(0xA, &payload),
                _ => {}
            }
        }
    }
}

/// Standard base64 (with padding), as CDP sends screenshots.
pub fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes().filter_map(val) {
        acc = (acc << 6) | c;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}
