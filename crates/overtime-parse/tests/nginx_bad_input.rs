//! Bad input never costs a good line and never panics (docs/inputs.md#bad-input): random
//! bytes, truncated lines, a format that does not match, mutated lines and
//! random formats, all with a deterministic PRNG so a failure reproduces.

use crate::common;
use common::random_line;
use overtime_model::{GatewayRecord, RejectedRecord, gateway_records, rejected_records};
use overtime_parse::fuzz::Rng;
use overtime_parse::nginx::{GatewayParser, LogFormat};
use std::collections::BTreeSet;

const REASONS: &[&str] = &["format_mismatch", "bad_time", "bad_number", "not_utf8"];

fn run(format: LogFormat, text: &[u8]) -> (Vec<GatewayRecord>, Vec<RejectedRecord>) {
    let mut p = GatewayParser::new(format, "fuzz", 0);
    p.push_bytes(text, 1);
    let (g, r) = p.finish();
    (gateway_records(&g).unwrap(), rejected_records(&r).unwrap())
}

fn blank(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.iter().all(u8::is_ascii_whitespace)
}

/// A valid `overtime` line with random values; returns it and its status.
fn good_line(rng: &mut Rng) -> (String, u16) {
    let status = rng.pick(&[200u16, 200, 200, 504, 502, 499]);
    let tries = 1 + rng.below(3);
    let ms = |rng: &mut Rng| format!("{}.{:03}", rng.below(90), rng.below(1000));
    let list = |rng: &mut Rng, f: &dyn Fn(&mut Rng) -> String| {
        (0..tries)
            .map(|i| {
                let sep = if i == 0 {
                    ""
                } else if rng.below(4) == 0 {
                    " : "
                } else {
                    ", "
                };
                let v = if rng.below(5) == 0 {
                    "-".to_string()
                } else {
                    f(rng)
                };
                format!("{sep}{v}")
            })
            .collect::<String>()
    };
    let uct = list(rng, &ms);
    let uht = list(rng, &ms);
    let urt = list(rng, &ms);
    let us = list(rng, &|r| r.pick(&["200", "502", "504"]).to_string());
    let ua = list(rng, &|r| {
        format!("10.0.{}.{}:8000", r.below(255), r.below(255))
    });
    let addr = if rng.below(2) == 0 {
        "2001:db8::1".to_string()
    } else {
        format!("192.0.2.{}", rng.below(255))
    };
    let tid: String = (0..32)
        .map(|_| rng.pick(&['0', '7', 'a', 'f']))
        .collect::<String>()
        .replacen('0', "1", 1);
    let line = format!(
        "{addr} [2026-11-29T10:{:02}:{:02}+00:00] \"POST /v1/chat?u=a\\x22b HTTP/1.1\" {status} {} rt={} \
         uct=\"{uct}\" uht=\"{uht}\" urt=\"{urt}\" us=\"{us}\" ua=\"{ua}\" rid=1{tid}0 \
         tp=\"00-{tid}-00f067aa0ba902b7-01\" mw=\"{}s\" llm=\"decode_loop=2.1s\" llmd=\"{}\"",
        rng.below(60),
        rng.below(60),
        rng.below(10_000),
        ms(rng),
        rng.below(300),
        ms(rng),
    );
    (line, status)
}

fn random_bytes(rng: &mut Rng) -> Vec<u8> {
    let len = rng.below(400);
    random_line(rng, len)
}

#[test]
fn random_bytes_are_all_rejected_with_line_numbers() {
    let mut rng = Rng::new(0x5eed_0001);
    let mut text = Vec::new();
    let mut expect = BTreeSet::new();
    for n in 1..=5000u64 {
        let l = random_bytes(&mut rng);
        if !blank(&l) {
            expect.insert(n);
        }
        text.extend_from_slice(&l);
        text.push(b'\n');
    }
    for fmt in ["overtime", "combined"] {
        let (rows, rej) = run(LogFormat::builtin(fmt).unwrap(), &text);
        assert!(
            rows.is_empty(),
            "{fmt}: random bytes parsed as {:?}",
            rows.first()
        );
        let got: BTreeSet<u64> = rej.iter().map(|r| r.line).collect();
        assert_eq!(got, expect, "{fmt}: every non-blank line rejected once");
        assert_eq!(rej.len(), expect.len());
        assert!(
            rej.iter()
                .all(|r| REASONS.contains(&r.reason.as_str()) && !r.detail.is_empty())
        );
        assert!(rej.iter().any(|r| r.reason == "not_utf8"));
    }
}

#[test]
fn every_truncation_of_a_good_line_is_rejected() {
    let mut rng = Rng::new(7);
    let fmt = LogFormat::builtin("overtime").unwrap();
    for _ in 0..20 {
        let (line, _) = good_line(&mut rng);
        let (rows, _) = run(fmt.clone(), line.as_bytes());
        assert_eq!(rows.len(), 1, "the whole line is good: {line}");
        let mut text = String::new();
        for cut in 1..line.len() {
            text.push_str(&line[..cut]);
            text.push('\n');
        }
        let (rows, rej) = run(fmt.clone(), text.as_bytes());
        assert!(
            rows.is_empty(),
            "a truncated line was accepted: {:?}",
            rows.first().map(|r| r.line)
        );
        assert_eq!(
            rej.len(),
            line.len() - 1 - line[..].chars().take_while(|c| c.is_whitespace()).count()
        );
        assert!(rej.iter().all(|r| r.reason == "format_mismatch"));
    }
}

#[test]
fn a_format_that_does_not_match_rejects_everything_and_says_why() {
    let combined =
        "203.0.113.9 - - [29/Nov/2026:10:00:00 +0000] \"GET / HTTP/1.1\" 200 12 \"-\" \"curl/8\"\n";
    let (rows, rej) = run(
        LogFormat::builtin("overtime").unwrap(),
        combined.repeat(100).as_bytes(),
    );
    assert!(rows.is_empty());
    assert_eq!(rej.len(), 100);
    assert!(rej.iter().all(|r| r.reason == "format_mismatch"));
    assert!(
        rej[0]
            .detail
            .contains("expected \" rt=\" after $body_bytes_sent"),
        "{}",
        rej[0].detail
    );
    assert_eq!(rej[99].line, 100);
    assert_eq!(rej[0].raw, combined.trim_end());
}

#[test]
fn mixture_keeps_every_good_line_and_rejects_every_bad_one() {
    let mut rng = Rng::new(0xdead_beef);
    let mut text = Vec::new();
    let mut good = Vec::new();
    let mut bad = BTreeSet::new();
    for n in 1..=20_000u64 {
        let (line, status) = good_line(&mut rng);
        let l: Vec<u8> = match rng.below(10) {
            0 => random_bytes(&mut rng),
            1 => line.as_bytes()[..rng.below(line.len())].to_vec(),
            2 => line
                .replacen(&format!(" {status} "), " 2O0 ", 1)
                .into_bytes(),
            3 => line.replace("rt=", "rt=x").into_bytes(),
            4 => line.replace("+00:00]", "+0x:00]").into_bytes(),
            _ => {
                good.push((n, status));
                line.into_bytes()
            }
        };
        if good.last().is_none_or(|&(g, _)| g != n) && !blank(&l) {
            bad.insert(n);
        }
        text.extend_from_slice(&l);
        text.extend_from_slice(if rng.below(3) == 0 { b"\r\n" } else { b"\n" });
    }
    let (rows, rej) = run(LogFormat::builtin("overtime").unwrap(), &text);
    let got: Vec<(u64, u16)> = rows.iter().map(|r| (r.line, r.status.unwrap())).collect();
    assert_eq!(got.len(), good.len(), "every good line is kept");
    assert_eq!(got, good);
    assert!(
        rows.iter()
            .all(|r| r.trace_id.is_some() && r.upstream_tries() >= 1 && r.time_us > 0)
    );
    let rej_lines: BTreeSet<u64> = rej.iter().map(|r| r.line).collect();
    assert_eq!(
        rej_lines, bad,
        "every bad line is in rejected with its number"
    );
    for reason in REASONS[..3].iter() {
        assert!(
            rej.iter().any(|r| r.reason == *reason),
            "no {reason} in the mix"
        );
    }
}

#[test]
fn mutated_lines_and_random_formats_never_panic_nor_lose_count() {
    let mut rng = Rng::new(42);
    let vars = [
        "$status",
        "$request_time",
        "$msec",
        "$time_local",
        "$time_iso8601",
        "$remote_addr",
        "$request",
        "$upstream_status",
        "$upstream_response_time",
        "$upstream_addr",
        "$http_traceparent",
        "$host",
        "$request_uri",
        "$http_x_tenant",
        "$bytes_sent",
        "$http_x_max_wait",
    ];
    let lits = [" ", " \"", "\" ", "[", "] ", "=", ",", ""];
    let values = [
        "200",
        "-",
        "0.001, 0.5 : 1",
        "1795946400.123",
        "29/Nov/2026:10:00:00 +0000",
        "a b",
        "\\x22",
        "\u{e9}",
        "::1",
    ];
    for _ in 0..300 {
        let mut body = String::from("'");
        let n = 1 + rng.below(6);
        for _ in 0..n {
            body.push_str(rng.pick(&lits[..]));
            body.push_str(rng.pick(&vars[..]));
        }
        body.push_str(rng.pick(&lits[..]));
        body.push('\'');
        let escape = rng.pick(&["", "escape=json ", "escape=none "]);
        let fmt = LogFormat::compile(&format!("{escape}{body}")).unwrap();
        let mut text = Vec::new();
        let mut nonblank = 0;
        for _ in 0..50 {
            // Render the format with random values, then maybe damage it.
            let mut line = String::new();
            for seg in fmt.segments() {
                match seg {
                    overtime_parse::nginx::Segment::Literal(l) => line.push_str(l),
                    overtime_parse::nginx::Segment::Variable(_) => {
                        line.push_str(rng.pick(&values[..]))
                    }
                }
            }
            let mut bytes = line.into_bytes();
            for _ in 0..rng.below(3) {
                if !bytes.is_empty() {
                    let i = rng.below(bytes.len());
                    bytes[i] = (rng.below(255) + 1) as u8;
                }
            }
            bytes.retain(|&b| b != b'\n');
            nonblank += u64::from(!blank(&bytes));
            text.extend_from_slice(&bytes);
            text.push(b'\n');
        }
        let mut p = GatewayParser::new(fmt, "fuzz", 0);
        assert_eq!(p.push_bytes(&text, 1), 50);
        assert_eq!(
            (p.rows() + p.rejected_rows()) as u64,
            nonblank,
            "format {escape}{body}"
        );
        let (g, r) = p.finish();
        assert_eq!(g.num_rows() + r.num_rows(), nonblank as usize);
    }
}
