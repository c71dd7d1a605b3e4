//! Just enough of the PostgreSQL frontend protocol (v3) to act as a
//! hostile client byte by byte: a startup message, a password, a simple
//! query, a CancelRequest, and reading the backend's messages back. Real
//! clients are tested with the real client programs (../postgres.rs).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

/// A backend message: its type byte and body.
pub type Msg = (u8, Vec<u8>);

pub fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the PostgreSQL port");
    // A bound on every read: a server that never answers fails the test
    // instead of hanging it.
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s
}

fn cstr(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(s.as_bytes());
    buf.push(0);
}

/// The startup message (protocol 3.0) for `user` on database `overtime`.
pub fn startup_bytes(user: &str) -> Vec<u8> {
    let mut body = 196608i32.to_be_bytes().to_vec();
    for (k, v) in [("user", user), ("database", "overtime")] {
        cstr(&mut body, k);
        cstr(&mut body, v);
    }
    body.push(0);
    let mut m = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    m.extend(body);
    m
}

/// A typed frontend message.
pub fn typed(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend(((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

pub fn query_bytes(sql: &str) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, sql);
    typed(b'Q', &b)
}

pub fn password_bytes(pw: &str) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, pw);
    typed(b'p', &b)
}

/// The next backend message; `None` when the server closed the connection.
pub fn read_msg(s: &mut TcpStream) -> Option<Msg> {
    let mut head = [0u8; 5];
    s.read_exact(&mut head).ok()?;
    let len = i32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
    let mut body = vec![0u8; len.saturating_sub(4)];
    s.read_exact(&mut body).ok()?;
    Some((head[0], body))
}

/// Messages up to and including ReadyForQuery ('Z'), or until the
/// server closes the connection.
pub fn until_ready(s: &mut TcpStream) -> Vec<Msg> {
    let mut out = Vec::new();
    while let Some(m) = read_msg(s) {
        let done = m.0 == b'Z';
        out.push(m);
        if done {
            break;
        }
    }
    out
}

/// A field of an ErrorResponse ('C': the SQLSTATE, 'M': the message).
pub fn field(body: &[u8], code: u8) -> Option<String> {
    let mut i = 0;
    while i < body.len() && body[i] != 0 {
        let end = body[i + 1..].iter().position(|b| *b == 0)? + i + 1;
        if body[i] == code {
            return Some(String::from_utf8_lossy(&body[i + 1..end]).into_owned());
        }
        i = end + 1;
    }
    None
}

/// The first ErrorResponse's (SQLSTATE, message) among `msgs`.
pub fn error_of(msgs: &[Msg]) -> Option<(String, String)> {
    let (_, b) = msgs.iter().find(|(k, _)| *k == b'E')?;
    Some((field(b, b'C')?, field(b, b'M')?))
}

/// A signed-in connection and its cancel key (pid, secret), or the
/// messages that refused it.
pub fn sign_in(port: u16, password: &str) -> Result<(TcpStream, i32, i32), Vec<Msg>> {
    let mut s = connect(port);
    s.write_all(&startup_bytes("overtime")).unwrap();
    let first = read_msg(&mut s).ok_or_else(Vec::new)?;
    assert_eq!(first.0, b'R', "an authentication request first: {first:?}");
    assert_eq!(
        &first.1[..4],
        &3i32.to_be_bytes(),
        "cleartext password asked"
    );
    s.write_all(&password_bytes(password)).unwrap();
    let msgs = until_ready(&mut s);
    if msgs.iter().any(|(k, _)| *k == b'E') {
        return Err(msgs);
    }
    let (_, key) = msgs
        .iter()
        .find(|(k, _)| *k == b'K')
        .expect("BackendKeyData after sign-in");
    let pid = i32::from_be_bytes(key[0..4].try_into().unwrap());
    let secret = i32::from_be_bytes(key[4..8].try_into().unwrap());
    Ok((s, pid, secret))
}

/// Runs `sql` as a simple query: every message up to ReadyForQuery.
pub fn simple(s: &mut TcpStream, sql: &str) -> Vec<Msg> {
    s.write_all(&query_bytes(sql)).unwrap();
    until_ready(s)
}

/// The DataRow count of a simple query's answer.
pub fn rows(msgs: &[Msg]) -> usize {
    msgs.iter().filter(|(k, _)| *k == b'D').count()
}

/// A CancelRequest for (pid, secret) on a connection of its own.
pub fn cancel(port: u16, pid: i32, secret: i32) {
    let mut s = connect(port);
    let mut m = 16i32.to_be_bytes().to_vec();
    m.extend(80877102i32.to_be_bytes());
    m.extend(pid.to_be_bytes());
    m.extend(secret.to_be_bytes());
    s.write_all(&m).unwrap();
    let _ = s.shutdown(Shutdown::Write);
    // The server answers nothing and closes.
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
}

/// Whether the server closed `s` (reads end) rather than answering.
pub fn closed_by_server(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            // An ErrorResponse before the close is fine; keep reading.
            Ok(_) => continue,
            Err(e) => {
                return matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                );
            }
        }
    }
}
