//! A real nginx in front of the platform (the generated conf, the
//! `overtime` log format, `proxy_read_timeout` scaled): its access lines
//! read back with overtime's parser agree with what the clients saw. Needs
//! nginx (Debian: `apt-get install -y nginx`; scripts/test installs it).

use crate::common;

use overtime_simulate::find_nginx;

fn require_nginx() {
    assert!(
        find_nginx(None).is_some(),
        "nginx is not installed: apt-get install -y --no-install-recommends nginx"
    );
}

#[test]
fn nginx_logs_504s_with_its_own_timings() {
    require_nginx();
    let r = common::run("tool_no_timeout", 50.0, 8, &["--nginx-please"]);
    assert_eq!(r.summary.gateway, "nginx");
    assert_eq!(
        r.outcomes().get("gateway_timeout"),
        Some(&6),
        "{:?}",
        r.outcomes()
    );
    for g in &r.gateway {
        let rid = g.request_id.as_deref().unwrap();
        assert!(
            rid.len() == 32 && rid.bytes().all(|b| b.is_ascii_hexdigit()),
            "$request_id: {rid}"
        );
        assert_eq!(g.upstream_addr.len(), 1);
    }
}

/// How far under a timeout nginx's cached clock can put `$request_time`.
const NGINX_CLOCK_SLACK_MS: f64 = 50.0;

#[test]
fn nginx_cuts_a_silent_stream_and_logs_200() {
    require_nginx();
    let r = common::run("stream_idle_gap", 50.0, 4, &["--nginx-please"]);
    assert_eq!(r.summary.gateway, "nginx");
    let cut = r.failed();
    assert_eq!(cut.len(), 3, "{:?}", r.outcomes());
    for t in cut {
        let g = r.line(t["request_id"].as_str().unwrap());
        assert_eq!(g.status, Some(200));
        // Cut by proxy_read_timeout: nginx measures both ends on its cached
        // clock (updated once per event-loop turn), so on a loaded machine
        // $request_time can read a few ms under the timeout it fired.
        let (took, limit) = (g.request_time_ms.unwrap(), r.summary.read_timeout_ms);
        assert!(
            took >= limit - NGINX_CLOCK_SLACK_MS,
            "request_time {took} ms, proxy_read_timeout {limit} ms"
        );
    }
}
