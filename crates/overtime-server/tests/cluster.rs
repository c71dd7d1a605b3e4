//! Two collectors sharing one bucket, each with the other (and itself) in
//! `[cluster] peers`, served on real sockets: what one collector holds
//! only in its memtable or its live verdicts is found from the other —
//! by SQL, trace lookup and trace search — each row once, whether or not
//! it was flushed; a peer that is down or silent is named in the answer,
//! which still comes.

use overtime_model::{RecordSink, Table};
use overtime_parse::nginx::{GatewayParser, LogFormat};
use overtime_parse::spans::{SpanFormat, parse_span_bytes};
use overtime_server::pipeline::DiagnosingSink;
use overtime_server::{AppState, router};
use overtime_server::{ClusterConfig, Peers};
use overtime_store::{Store, StoreConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(crate) fn fixture(f: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/incidents/c_dns_retry")
        .join(f)
}

/// Incident C's gateway lines and spans as batches.
pub(crate) fn incident_c() -> (
    arrow::record_batch::RecordBatch,
    arrow::record_batch::RecordBatch,
) {
    let body = std::fs::read_to_string(fixture("log_format.txt")).unwrap();
    let mut p = GatewayParser::new(LogFormat::compile(&body).unwrap(), "access", 0);
    p.push_bytes(&std::fs::read(fixture("access.log")).unwrap(), 1);
    let spans = parse_span_bytes(
        SpanFormat::Jsonl,
        &std::fs::read(fixture("spans.jsonl")).unwrap(),
        "spans.jsonl",
    );
    (p.finish().0, spans.to_batches().0)
}

struct Collector {
    state: Arc<AppState>,
    url: String,
    /// Its server: aborted, the collector is down (connections refused).
    server: tokio::task::JoinHandle<()>,
}

fn open_store(dir: &Path, bucket: &Path, id: &str) -> Store {
    Store::open(StoreConfig {
        data_dir: dir.to_path_buf(),
        url: Some(format!("file://{}", bucket.display())),
        collector_id: Some(id.into()),
        flush_interval_ms: 0,
        // The fixtures are older than the default retention.
        retention_age_hours: None,
        ..Default::default()
    })
    .unwrap()
}

/// A collector on a real socket whose peers are `peers` (filled in later
/// through the returned handle's URL list when it must include itself).
async fn start(store: Store, peers: Vec<String>, timeout_ms: u64) -> Collector {
    let id = store.collector_id().to_string();
    let cluster = ClusterConfig {
        peers,
        peer_timeout_ms: timeout_ms,

        ..Default::default()
    };
    let state = Arc::new(AppState {
        peers: Arc::new(Peers::new(&cluster, None, &id)),
        ..AppState::with_defaults(store)
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = router(state.clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Collector { state, url, server }
}

/// Two listeners bound up front, so each collector can name both.
async fn two_ports() -> (tokio::net::TcpListener, tokio::net::TcpListener) {
    (
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
}

async fn serve_on(l: tokio::net::TcpListener, store: Store, peers: Vec<String>) -> Collector {
    let id = store.collector_id().to_string();
    let cluster = ClusterConfig {
        peers,
        ..Default::default()
    };
    let state = Arc::new(AppState {
        peers: Arc::new(Peers::new(&cluster, None, &id)),
        ..AppState::with_defaults(store)
    });
    let url = format!("http://{}", l.local_addr().unwrap());
    let app = router(state.clone());
    let server = tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    Collector { state, url, server }
}

async fn get(url: &str) -> (u16, serde_json::Value) {
    let r = reqwest::get(url).await.unwrap();
    let status = r.status().as_u16();
    let body = r.bytes().await.unwrap();
    (status, serde_json::from_slice(&body).unwrap_or_default())
}

async fn sql(c: &Collector, q: &str) -> serde_json::Value {
    let r = reqwest::Client::new()
        .post(format!("{}/api/sql", c.url))
        .body(serde_json::json!({ "sql": q }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{q}");
    serde_json::from_slice(&r.bytes().await.unwrap()).unwrap()
}

async fn count(c: &Collector, table: &str) -> u64 {
    let v = sql(c, &format!("SELECT count(*) AS n FROM {table}")).await;
    v["rows"][0]["n"].as_u64().unwrap()
}

/// Incident C read by `c` alone, through its live diagnosis, and judged.
fn judge_incident_c(c: &Collector) {
    let (gw, spans) = incident_c();
    let sink = DiagnosingSink {
        state: c.state.clone(),
    };
    sink.write(Table::GatewayRequests, gw, None).unwrap();
    sink.write(Table::Spans, spans, None).unwrap();
    overtime_server::pipeline::tick(&c.state);
}

/// Two collectors on one bucket, each listing both URLs (itself too).
async fn pair() -> (Collector, Collector, [tempfile::TempDir; 3]) {
    let dirs = [
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    ];
    let (la, lb) = two_ports().await;
    let urls = vec![
        format!("http://{}", la.local_addr().unwrap()),
        format!("http://{}", lb.local_addr().unwrap()),
    ];
    let a = open_store(dirs[0].path(), dirs[2].path(), "collector-a");
    let b = open_store(dirs[1].path(), dirs[2].path(), "collector-b");
    let a = serve_on(la, a, urls.clone()).await;
    let b = serve_on(lb, b, urls).await;
    (a, b, dirs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_on_one_collector_counts_every_row_of_the_other_once_before_and_after_its_flush() {
    let (a, b, _dirs) = pair().await;
    let (gw, spans) = incident_c();
    let (n_gw, n_spans) = (gw.num_rows() as u64, spans.num_rows() as u64);
    a.state
        .store
        .write(Table::GatewayRequests, gw.clone(), None)
        .unwrap();
    a.state
        .store
        .write(Table::Spans, spans.clone(), None)
        .unwrap();

    // Only in a's memtable: b counts it through a's answer.
    assert_eq!(count(&b, "spans").await, n_spans);
    assert_eq!(count(&b, "gateway_requests").await, n_gw);
    let answer = sql(&b, "SELECT count(*) AS n FROM spans").await;
    assert_eq!(answer["peers"]["asked"], 1, "b recognised itself: {answer}");
    assert_eq!(answer["peers"]["unanswered"], serde_json::json!([]));

    // Flushed to the bucket: read from there, not also from a's memtable.
    a.state.store.flush().unwrap();
    assert_eq!(count(&b, "spans").await, n_spans);
    assert_eq!(count(&b, "gateway_requests").await, n_gw);

    // New rows on a, half flushed: still each once, from both sides.
    a.state.store.write(Table::Spans, spans, None).unwrap();
    assert_eq!(count(&b, "spans").await, 2 * n_spans);
    assert_eq!(count(&a, "spans").await, 2 * n_spans);
    // b's own rows count too, seen from a.
    b.state
        .store
        .write(Table::GatewayRequests, gw, None)
        .unwrap();
    assert_eq!(count(&a, "gateway_requests").await, 2 * n_gw);
    assert_eq!(count(&b, "gateway_requests").await, 2 * n_gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_only_the_other_collector_judged_is_found_and_searched_from_either() {
    let (a, b, _dirs) = pair().await;
    judge_incident_c(&a);

    let (_, on_a) = get(&format!("{}/api/traces?limit=1000&local=1", a.url)).await;
    let total = on_a["total"].as_u64().unwrap();
    assert!(total > 0, "incident C has failing traces: {on_a}");
    // b has none of its own, and lists a's.
    let (status, on_b) = get(&format!("{}/api/traces?limit=1000", b.url)).await;
    assert_eq!(status, 200);
    assert_eq!(on_b["total"].as_u64(), Some(total), "{on_b}");
    assert_eq!(on_b["traces"], on_a["traces"]);
    let (_, local_b) = get(&format!("{}/api/traces?local=1", b.url)).await;
    assert_eq!(local_b["total"], 0, "local=1 never asks the peers");

    // Looked up from b: a's live verdict, its revision and all.
    let first = &on_a["traces"][0];
    let id = first["trace_id"].as_str().unwrap();
    let (status, v) = get(&format!("{}/api/traces/{id}", b.url)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["trace_id"], id);
    assert_eq!(v["root_cause"]["kind"], first["kind"]);
    assert_eq!(v["revision"], first["revision"]);
    assert_eq!(v["peers"]["unanswered"], serde_json::json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_asks_only_the_collector_holding_the_trace_and_gets_its_last_word_while_it_is_down()
 {
    let dirs = [
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    ];
    // A third peer that accepts connections and never answers: a lookup
    // that asked every peer would wait for it and name it.
    let silent_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = format!("http://{}", silent_listener.local_addr().unwrap());
    let a = start(
        open_store(dirs[0].path(), dirs[2].path(), "collector-a"),
        vec![],
        300,
    )
    .await;
    let b = start(
        open_store(dirs[1].path(), dirs[2].path(), "collector-b"),
        vec![a.url.clone(), silent.clone()],
        300,
    )
    .await;
    judge_incident_c(&a);
    overtime_server::refresh_peers(&b.state).await;

    let (_, on_a) = get(&format!("{}/api/traces?limit=1000&local=1", a.url)).await;
    let listed = on_a["traces"].as_array().unwrap();
    assert!(!listed.is_empty(), "incident C has failing traces: {on_a}");
    // Looked up from b: a's verdict, as a listed it.
    let looked_up = |t: &serde_json::Value| {
        let id = t["trace_id"].as_str().unwrap().to_string();
        let (url, t) = (b.url.clone(), t.clone());
        async move {
            let (status, v) = get(&format!("{url}/api/traces/{id}")).await;
            assert_eq!(status, 200, "{v}");
            assert_eq!(v["root_cause"]["kind"], t["kind"], "{id}: {v}");
            assert_eq!(v["revision"], t["revision"], "{id}: {v}");
            (id, v)
        }
    };
    for t in listed {
        let (id, v) = looked_up(t).await;
        // Only a, which holds it, was asked: not the silent peer.
        assert_eq!(v["peers"]["asked"], 1, "{id}: {v}");
        assert_eq!(v["peers"]["unanswered"], serde_json::json!([]), "{id}: {v}");
    }

    // a goes down: its traces are still answered, with the verdict it
    // last told, and the answer says a did not respond.
    a.server.abort();
    let _ = a.server.await;
    for t in listed {
        let (id, v) = looked_up(t).await;
        let unanswered = v["peers"]["unanswered"].as_array().unwrap();
        assert_eq!(unanswered.len(), 1, "{id}: {v}");
        assert_eq!(unanswered[0]["peer"], a.url.as_str(), "{id}: {v}");
    }
    drop(silent_listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_the_other_collector_holds_unflushed_is_diagnosed_from_its_rows() {
    let (a, b, _dirs) = pair().await;
    let (gw, spans) = incident_c();
    // Written to a's store only: no live verdict anywhere.
    a.state
        .store
        .write(Table::GatewayRequests, gw, None)
        .unwrap();
    a.state.store.write(Table::Spans, spans, None).unwrap();
    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("truth.json")).unwrap()).unwrap();
    let (id, t) = truth["failing"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .expect("truth names a failing trace");
    let kind = t["kind"].as_str().unwrap();
    let (status, v) = get(&format!("{}/api/traces/{id}", b.url)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["root_cause"]["kind"], kind, "{v}");
    assert_eq!(v["root_cause"]["component"], t["component"], "{v}");
    // The UI's timeline of it too, from a's unflushed spans.
    let (status, events) = get(&format!("{}/api/traces/{id}/events", b.url)).await;
    assert_eq!(status, 200, "{events}");
    assert!(events["event_count"].as_u64().is_some(), "{events}");
    assert!(!events["spans"].as_object().unwrap().is_empty(), "{events}");
    // The same verdict once a has flushed it into the bucket.
    a.state.store.flush().unwrap();
    let (_, after) = get(&format!("{}/api/traces/{id}", b.url)).await;
    assert_eq!(after["root_cause"], v["root_cause"]);
    assert_eq!(after["timeline"], v["timeline"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_that_are_down_or_silent_are_named_and_the_answer_still_comes() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    // A port held closed: connections are refused, and no other process
    // can take it meanwhile.
    let closed = overtime_test_support::ports::ClosedPort::new();
    let down = closed.url();
    // Accepts connections (the kernel's backlog) and never answers.
    let silent_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = format!("http://{}", silent_listener.local_addr().unwrap());
    let store = open_store(dirs[0].path(), dirs[1].path(), "collector-b");
    let (gw, _) = incident_c();
    let n = gw.num_rows() as u64;
    store.write(Table::GatewayRequests, gw, None).unwrap();
    let b = start(store, vec![down.clone(), silent.clone()], 300).await;

    let answer = sql(&b, "SELECT count(*) AS n FROM gateway_requests").await;
    assert_eq!(answer["rows"][0]["n"].as_u64(), Some(n));
    assert_eq!(answer["peers"]["asked"], 2);
    let unanswered = answer["peers"]["unanswered"].as_array().unwrap();
    let why = |peer: &str| {
        unanswered
            .iter()
            .find(|u| u["peer"] == peer)
            .and_then(|u| u["error"].as_str())
            .unwrap_or_else(|| panic!("{peer} not named: {answer}"))
            .to_string()
    };
    assert!(why(&down).contains("unreachable"), "{answer}");
    assert!(why(&silent).contains("no answer within 300 ms"), "{answer}");

    // A lookup that finds nothing says where it could not look.
    let (status, v) = get(&format!("{}/api/traces/{}", b.url, "ab".repeat(16))).await;
    assert_eq!(status, 404);
    assert!(v["error"].as_str().unwrap().contains(&silent), "{v}");
    let (status, list) = get(&format!("{}/api/traces", b.url)).await;
    assert_eq!(status, 200);
    assert_eq!(list["peers"]["unanswered"].as_array().unwrap().len(), 2);
    drop(silent_listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_split_between_two_collectors_is_judged_from_all_its_rows_the_same_from_either() {
    let (a, b, _dirs) = pair().await;
    let (gw, spans) = incident_c();
    // As a crash or a rebalance leaves it: a holds the gateway lines and
    // every other span, b the rest of the spans; each judged its part.
    let (even, odd): (Vec<u32>, Vec<u32>) = (0..spans.num_rows() as u32).partition(|i| i % 2 == 0);
    let take = |rows: Vec<u32>| {
        arrow::compute::take_record_batch(&spans, &arrow::array::UInt32Array::from(rows)).unwrap()
    };
    let (sa, sb) = (
        DiagnosingSink {
            state: a.state.clone(),
        },
        DiagnosingSink {
            state: b.state.clone(),
        },
    );
    sa.write(Table::GatewayRequests, gw, None).unwrap();
    sa.write(Table::Spans, take(even), None).unwrap();
    sb.write(Table::Spans, take(odd), None).unwrap();
    overtime_server::pipeline::tick(&a.state);
    overtime_server::pipeline::tick(&b.state);

    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("truth.json")).unwrap()).unwrap();
    let failing = truth["failing"].as_object().unwrap();
    let mut split = 0;
    for (id, t) in failing {
        let (sa, va) = get(&format!("{}/api/traces/{id}", a.url)).await;
        let (sb, vb) = get(&format!("{}/api/traces/{id}", b.url)).await;
        assert_eq!((sa, sb), (200, 200), "{va}\n{vb}");
        let local = |c: &Collector| c.state.live.lock().unwrap().verdict(id).is_some();
        split += usize::from(local(&a) && local(&b));
        for v in [&va, &vb] {
            assert_eq!(v["root_cause"]["kind"], t["kind"], "{id}: {v}");
            assert_eq!(v["root_cause"]["component"], t["component"], "{id}: {v}");
            assert_eq!(v["outcome"], t["outcome"], "{id}: {v}");
        }
        assert_eq!(va["root_cause"], vb["root_cause"], "{id}");
        assert_eq!(va["timeline"], vb["timeline"], "{id}");
    }
    assert!(
        split > 0,
        "some failing traces are judged on both collectors"
    );

    // The listing agrees with the lookups, from either collector: each
    // trace once, with the verdict of all its rows.
    let url = |c: &Collector| format!("{}/api/traces?limit=10000", c.url);
    let ((_, la), (_, lb)) = (get(&url(&a)).await, get(&url(&b)).await);
    assert_eq!(la["traces"], lb["traces"]);
    assert_eq!(la["total"], lb["total"]);
    let listed = la["traces"].as_array().unwrap();
    let ids: std::collections::BTreeSet<&str> = listed
        .iter()
        .filter_map(|v| v["trace_id"].as_str())
        .collect();
    assert_eq!(ids.len(), listed.len(), "each trace listed once");
    for (id, t) in failing {
        let row = listed.iter().find(|v| v["trace_id"] == id.as_str());
        let row = row.unwrap_or_else(|| panic!("{id} not listed: {la}"));
        assert_eq!(row["kind"], t["kind"], "{id}: {row}");
    }
}
