//! Several `overtime serve` collectors working as one, every part real and
//! started here: an S3-compatible server (s3rver) holding the Parquet of
//! all of them (`[store] url = "s3://…"`), a tansu Kafka broker whose
//! topics they read in one consumer group, a real Alertmanager they page
//! and the Jira stand-in (overtime-jira's tests' own, which refuses what
//! Jira refuses) they ticket, each collector listing all of them as
//! `[cluster] peers`.
//!
//! Incident C (`tests/fixtures/incidents/c_dns_retry`, played as the
//! last two minutes' traffic) is produced into the topics keyed by trace id, so each collector
//! diagnoses the traces of its partitions. What a user checks then holds
//! on every collector: SQL counts every line and span, every failing trace
//! of the truth has its verdict, and `/api/incidents` shows the one
//! incident with all its failures; one ticket reaches Jira and one page
//! Alertmanager, sent by the fingerprint's owner.
//!
//! What a kill -9 of the owner mid-incident does: `crash.rs`.
//!
//! Needs tansu (`scripts/tansu`), node and npm (s3rver) and Debian's
//! `prometheus-alertmanager`; a missing one fails the test naming it.

use crate::support::{Serve, fixture, serve_command, sql_count};
use overtime_test_support::monitoring::Alertmanager;
use overtime_test_support::net::{get, wait_until};
use overtime_test_support::ports::{Started, on_fresh_ports, on_same_ports};
use overtime_test_support::s3rver::S3rver;
use overtime_test_support::tansu::Tansu;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

mod crash;
mod traffic;
use traffic::{
    EDGE, INCIDENT, SPANS, count, incident_traffic, produce, producer, truth_failing,
    truth_fingerprint,
};

// The Jira stand-in of overtime-jira's tests (it refuses what Jira
// refuses), compiled into this binary too rather than copied.
#[path = "../../../overtime-jira/tests/support/mod.rs"]
#[allow(clippy::all, unused)]
mod jira_standin;

const PARTITIONS: u32 = 3;
const GRACE_MS: u64 = 2_000;
const JIRA_TOKEN_ENV: &str = "CLUSTER_JIRA_TOKEN";
/// The generous bound of every wait: only a hang reaches it.
const WAIT_S: u64 = 120;

/// One `overtime serve` of the group: its id, port and config.
struct Collector {
    id: String,
    port: u16,
    config: PathBuf,
    serve: Option<Serve>,
}

impl Collector {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// Every real part and the collectors.
struct Rig {
    dir: tempfile::TempDir,
    s3: S3rver,
    broker: Tansu,
    am: Alertmanager,
    jira: jira_standin::Standin,
    collectors: Vec<Collector>,
    // Last: the stand-in's tasks run on it.
    _rt: tokio::runtime::Runtime,
}

impl Rig {
    fn start(n: usize) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let s3 = S3rver::start(dir.path(), &["overtime"]);
        let broker = Tansu::start("memory://tansu/", &[], &dir.path().join("tansu.log"));
        broker.create_topic(EDGE, PARTITIONS);
        broker.create_topic(SPANS, PARTITIONS);
        let am = Alertmanager::start();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let jira = rt.block_on(jira_standin::Standin::start(jira_standin::Flavor::Cloud, 3));
        let mut rig = Rig {
            dir,
            s3,
            broker,
            am,
            jira,
            collectors: Vec::new(),
            _rt: rt,
        };
        // Each collector's peers must know its address before it starts,
        // so the collectors are told their ports (port 0 cannot do); if one
        // finds its port taken, all start again on fresh ones.
        on_fresh_ports("the collectors", n, |ports| {
            rig.collectors = ports
                .iter()
                .enumerate()
                .map(|(i, &port)| rig.collector(i, port, ports))
                .collect();
            for i in 0..n {
                if let Started::PortTaken(why) = rig.try_start_collector(i) {
                    for c in &mut rig.collectors {
                        c.serve = None; // killed
                    }
                    return Started::PortTaken(why);
                }
            }
            Started::Up(())
        });
        rig
    }

    /// Collector `i` of a group on `ports`: its config written.
    fn collector(&self, i: usize, port: u16, ports: &[u16]) -> Collector {
        let peers: Vec<String> = ports
            .iter()
            .map(|p| format!("\"http://127.0.0.1:{p}\""))
            .collect();
        let log_format = std::fs::read_to_string(fixture(INCIDENT, "log_format.txt")).unwrap();
        let id = format!("collector-{}", i + 1);
        let home = self.dir.path().join(&id);
        std::fs::create_dir_all(&home).unwrap();
        let config = home.join("overtime.toml");
        // A short grace, so verdicts and the ticket come within
        // seconds; an hour's quiet period, so the incident stays
        // open however long a slow machine stretches the waits.
        std::fs::write(
            &config,
            format!(
                "[server]\nlisten = \"127.0.0.1:{port}\"\n\
                 [store]\ndata_dir = {data:?}\nurl = \"s3://overtime/cluster\"\n\
                 collector_id = \"{id}\"\nflush_interval_ms = 1000\n\
                 [otlp]\nhttp_listen = \"\"\ngrpc_listen = \"\"\n\
                 [diagnose]\ngrace_ms = {GRACE_MS}\nfailure_grace_ms = 1000\n\
                 incident_quiet_ms = 3600000\n\
                 [cluster]\npeers = [{peers}]\npeer_timeout_ms = 2000\n\
                 [alerts]\nalertmanager_urls = [\"{am}\"]\nresend_interval_ms = 1000\n\
                 external_url = \"http://127.0.0.1:{port}\"\n\
                 [jira]\nenabled = true\nbase_url = \"{jira}\"\nproject_key = \"{project}\"\n\
                 email = \"{email}\"\ntoken_env = \"{JIRA_TOKEN_ENV}\"\nsearch_settle_secs = 1\n\
                 [jira.retry]\nbase_backoff_ms = 100\nmax_backoff_secs = 1\n\n\
                 [[kafka]]\nbrokers = \"{broker}\"\ngroup_id = \"cluster\"\n\
                 max_prefetch_kbytes = 1024\n\
                 librdkafka_options = {{ \"session.timeout.ms\" = \"10000\", \"heartbeat.interval.ms\" = \"1000\" }}\n\
                 [[kafka.topics]]\ntopic = \"{EDGE}\"\nformat = \"nginx\"\nlog_format = {log_format:?}\nlayer = \"access\"\n\
                 [[kafka.topics]]\ntopic = \"{SPANS}\"\nformat = \"jsonl\"\n",
                data = home.join("data").display().to_string(),
                peers = peers.join(", "),
                am = self.am.url,
                jira = self.jira.url(),
                project = jira_standin::PROJECT,
                email = jira_standin::EMAIL,
                broker = self.broker.addr,
            ),
        )
        .unwrap();
        Collector {
            id,
            port,
            config,
            serve: None,
        }
    }

    /// Starts collector `i` on its port; [`Started::PortTaken`] when that
    /// port is in use.
    fn try_start_collector(&mut self, i: usize) -> Started<()> {
        let c = &self.collectors[i];
        let err = self.dir.path().join(format!("{}.err", c.id));
        let mut cmd = serve_command(&c.config);
        cmd.envs(self.s3.env())
            .env(JIRA_TOKEN_ENV, jira_standin::TOKEN)
            .stderr(std::fs::File::create(&err).unwrap());
        match Serve::try_start_command(cmd, &err) {
            Started::Up(serve) => {
                assert_eq!(serve.port, c.port, "{} listens where its peers look", c.id);
                self.collectors[i].serve = Some(serve);
                Started::Up(())
            }
            Started::PortTaken(why) => Started::PortTaken(why),
        }
    }

    /// Starts collector `i` again, on the port its peers know; waits while
    /// that port is still in use.
    fn start_collector(&mut self, i: usize) {
        let what = self.collectors[i].id.clone();
        let port = self.collectors[i].port;
        on_same_ports(&what, &[port], |_| self.try_start_collector(i));
    }

    /// The collectors running now.
    fn alive(&self) -> impl Iterator<Item = &Collector> {
        self.collectors.iter().filter(|c| c.serve.is_some())
    }

    /// What each collector wrote to stderr, for a failure's message.
    fn logs(&self) -> String {
        let mut s = String::new();
        for c in &self.collectors {
            let p = self.dir.path().join(format!("{}.err", c.id));
            let text = std::fs::read_to_string(p).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            s += &format!("\n--- {} (last lines) ---\n", c.id);
            for l in tail.into_iter().rev() {
                s += l;
                s.push('\n');
            }
        }
        s
    }

    fn incidents(&self, c: &Collector) -> Vec<Value> {
        let (status, body) = get(c.port, "/api/incidents").expect("incidents answer");
        assert_eq!(status, 200, "{}: {body}", c.id);
        let v: Value = serde_json::from_str(&body).unwrap();
        v["incidents"].as_array().cloned().unwrap_or_default()
    }

    /// The pages for `fingerprint` Alertmanager lists.
    fn pages(&self, fingerprint: &str) -> Vec<Value> {
        self.am
            .named(overtime_slo::alert_names::INCIDENT)
            .into_iter()
            .filter(|a| a["labels"]["fingerprint"] == fingerprint)
            .collect()
    }

    /// Waits until every running collector holds `lines` gateway lines
    /// and `spans` spans (its own, its peers' and the bucket's).
    fn wait_for_counts(&self, lines: u64, spans: u64, what: &str) {
        let last = std::cell::RefCell::new(String::new());
        wait_until(
            WAIT_S,
            what,
            || {
                let mut seen = String::new();
                let mut ok = true;
                for c in self.alive() {
                    let g = sql_count(c.port, None, "SELECT count(*) AS n FROM gateway_requests");
                    let s = sql_count(c.port, None, "SELECT count(*) AS n FROM spans");
                    seen += &format!("{}: {g} lines, {s} spans; ", c.id);
                    ok &= g == lines && s == spans;
                }
                *last.borrow_mut() = seen;
                ok
            },
            || {
                format!(
                    "want {lines} lines, {spans} spans; {}{}",
                    last.borrow(),
                    self.logs()
                )
            },
        );
    }

    /// Waits until every running collector finds every failing trace of
    /// the truth with its verdict's cause.
    fn wait_for_verdicts(&self, failing: &BTreeMap<String, String>) {
        let last = std::cell::RefCell::new(Vec::<String>::new());
        wait_until(
            WAIT_S,
            "every failing trace's verdict from every collector",
            || {
                let mut missing = Vec::new();
                for c in self.alive() {
                    for (id, kind) in failing {
                        let got = get(c.port, &format!("/api/traces/{id}"));
                        let found = got.as_ref().is_some_and(|(st, body)| {
                            *st == 200
                                && serde_json::from_str::<Value>(body)
                                    .is_ok_and(|v| v["root_cause"]["kind"] == kind.as_str())
                        });
                        if !found {
                            missing.push(format!(
                                "{} {id}: {}",
                                c.id,
                                got.map_or("no answer".into(), |(st, b)| {
                                    let v: Value = serde_json::from_str(&b).unwrap_or_default();
                                    format!(
                                        "{st} {} {} {}",
                                        v["outcome"],
                                        v["root_cause"]["kind"],
                                        v["root_cause"]["component"]
                                    )
                                })
                            ));
                        }
                    }
                }
                let done = missing.is_empty();
                *last.borrow_mut() = missing;
                done
            },
            || format!("{:#?}", last.borrow().iter().take(10).collect::<Vec<_>>()),
        );
    }

    /// Waits until every running collector lists exactly one incident,
    /// the same one, of `fingerprint` with `count` failing traces; its id.
    fn wait_for_one_incident(&self, fingerprint: &str, count: usize) -> String {
        let last = std::cell::RefCell::new(BTreeMap::<String, Vec<Value>>::new());
        wait_until(
            WAIT_S,
            "one incident with every failure on every collector",
            || {
                let seen: BTreeMap<String, Vec<Value>> = self
                    .alive()
                    .map(|c| (c.id.clone(), self.incidents(c)))
                    .collect();
                let ids: BTreeSet<String> = seen
                    .values()
                    .flatten()
                    .map(|i| i["id"].as_str().unwrap_or("").to_string())
                    .collect();
                let ok = ids.len() == 1
                    && seen.values().all(|l| {
                        l.len() == 1
                            && l[0]["fingerprint"] == fingerprint
                            && l[0]["trace_count"] == count
                            && l[0]["status"] == "open"
                    });
                *last.borrow_mut() = seen;
                ok
            },
            || {
                let seen = last.borrow();
                let brief: BTreeMap<&String, Vec<String>> = seen
                    .iter()
                    .map(|(c, l)| {
                        (
                            c,
                            l.iter()
                                .map(|i| {
                                    format!(
                                        "{} {} traces={} {}",
                                        i["id"], i["fingerprint"], i["trace_count"], i["status"]
                                    )
                                })
                                .collect(),
                        )
                    })
                    .collect();
                // Which collector judged each failing trace live, and how:
                // where the views part, a trace two collectors judged.
                let held: BTreeMap<String, Vec<String>> = truth_failing()
                    .keys()
                    .map(|id| {
                        let by = self
                            .alive()
                            .filter_map(|c| {
                                let (st, body) = get(c.port, &format!("/api/traces/{id}?local=1"))?;
                                let v: Value = serde_json::from_str(&body).ok()?;
                                (st == 200).then(|| {
                                    format!(
                                        "{} {} rev {} ({} timeline entries)",
                                        c.id,
                                        v["root_cause"]["kind"],
                                        v["revision"],
                                        v["timeline"].as_array().map_or(0, Vec::len)
                                    )
                                })
                            })
                            .collect();
                        (id.clone(), by)
                    })
                    .collect();
                format!("{brief:#?}\nlive verdicts of the failing traces: {held:#?}")
            },
        );
        let first = self.alive().next().unwrap();
        self.incidents(first)[0]["id"].as_str().unwrap().to_string()
    }

    /// Jira's issues now (the stand-in's, and what it refused).
    fn tickets(&self) -> (Vec<jira_standin::Issue>, Vec<String>) {
        (self.jira.issues(), self.jira.rejections())
    }

    /// Waits until Alertmanager lists the page of `fingerprint`, then
    /// watches it over several resend intervals: exactly one, always sent
    /// by `owner` (its report link names the sender).
    fn check_one_page_from(&self, fingerprint: &str, owner: &Collector) {
        wait_until(
            WAIT_S,
            "the incident's page in Alertmanager",
            || !self.pages(fingerprint).is_empty(),
            || format!("alertmanager lists {:#?}{}", self.am.alerts(), self.logs()),
        );
        let deadline = Instant::now() + Duration::from_secs(6);
        while Instant::now() < deadline {
            let pages = self.pages(fingerprint);
            assert_eq!(pages.len(), 1, "one page per fingerprint: {pages:#?}");
            let link = pages[0]["annotations"]["report_url"].as_str().unwrap_or("");
            assert!(
                link.starts_with(&owner.url()),
                "the page comes from the owner {} ({}): {link}",
                owner.id,
                owner.url()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

#[test]
fn three_collectors_in_one_group_answer_for_all_traffic_and_notify_once() {
    let started = Instant::now();
    let rig = Rig::start(3);
    let traffic = incident_traffic();
    let failing = truth_failing();
    let fingerprint = truth_fingerprint();
    let (p, deliveries) = producer(&rig.broker.addr);
    produce(&p, &traffic, 0, Duration::ZERO);
    assert!(deliveries.failed.lock().unwrap().is_empty());
    assert_eq!(deliveries.ok.load(Relaxed), traffic.len() as u64);

    // SQL on any collector counts every record, whichever collector read it.
    rig.wait_for_counts(
        count(&traffic, EDGE),
        count(&traffic, SPANS),
        "every line and span counted by every collector",
    );
    rig.wait_for_verdicts(&failing);
    // The traffic really was split: each failing trace gets its live
    // verdict from one collector, and not all from the same one.
    let judged = || -> Vec<usize> {
        rig.alive()
            .map(|c| {
                failing
                    .keys()
                    .filter(|id| {
                        matches!(
                            get(c.port, &format!("/api/traces/{id}?local=1")),
                            Some((200, _))
                        )
                    })
                    .count()
            })
            .collect()
    };
    wait_until(
        WAIT_S,
        "each failing trace judged live by one collector",
        || judged().iter().sum::<usize>() == failing.len(),
        || format!("{:?}", judged()),
    );
    let judged = judged();
    assert!(
        judged.iter().filter(|n| **n > 0).count() >= 2,
        "the group split the failing traces: {judged:?}"
    );
    let incident = rig.wait_for_one_incident(&fingerprint, failing.len());

    // One ticket, filed once the grace period is over, whoever owns it.
    wait_until(
        WAIT_S,
        "a Jira ticket for the incident",
        || !rig.jira.issues().is_empty(),
        || rig.logs(),
    );
    // Every collector has seen the incident for more than the grace
    // period: a non-owner that tickets would have by now.
    std::thread::sleep(Duration::from_millis(3 * GRACE_MS + 3_000));
    let (issues, rejected) = rig.tickets();
    assert!(rejected.is_empty(), "Jira refused: {rejected:#?}");
    assert_eq!(
        issues.len(),
        1,
        "one ticket for incident {incident}: {:#?}",
        issues
            .iter()
            .map(|i| (&i.key, &i.summary, &i.labels))
            .collect::<Vec<_>>()
    );
    assert_eq!(rig.jira.count("POST", "/rest/api/3/issue"), 1);
    let ids: Vec<&str> = rig.collectors.iter().map(|c| c.id.as_str()).collect();
    let owner_id = overtime_server::fingerprint_owner(&fingerprint, ids).unwrap();
    let owner = rig.collectors.iter().find(|c| c.id == owner_id).unwrap();
    rig.check_one_page_from(&fingerprint, owner);
    eprintln!(
        "cluster_collectors: 3 collectors, {} records, {} failing traces found from each, \
         judged {judged:?} by each, incident {incident} owned by {owner_id}: 1 ticket, 1 page, \
         in {:.0?}",
        traffic.len(),
        failing.len(),
        started.elapsed()
    );
}
