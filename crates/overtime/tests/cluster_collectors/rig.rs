//! The real parts of a cluster test and the collectors on them: s3rver
//! (the bucket), tansu (the broker and its topics), Alertmanager, the Jira
//! stand-in; `n` collectors in one consumer group listing each other as
//! peers; and, to compare them with, a lone collector in a group of its
//! own reading the same topics into a prefix of its own ("one collector
//! given all the traffic").

use crate::support::{Serve, serve_command};
use overtime_test_support::monitoring::Alertmanager;
use overtime_test_support::net::get;
use overtime_test_support::ports::{Started, on_fresh_ports, on_same_ports};
use overtime_test_support::s3rver::S3rver;
use overtime_test_support::tansu::Tansu;
use serde_json::Value;
use std::path::PathBuf;

use super::jira_standin;
use super::traffic::SPANS;

pub(super) const PARTITIONS: u32 = 3;
pub(super) const GRACE_MS: u64 = 2_000;
const JIRA_TOKEN_ENV: &str = "CLUSTER_JIRA_TOKEN";
/// The generous bound of every wait: only a hang reaches it.
pub(super) const WAIT_S: u64 = 120;

/// One `overtime serve`: its id, port and config.
pub(super) struct Collector {
    pub(super) id: String,
    pub(super) port: u16,
    config: PathBuf,
    pub(super) serve: Option<Serve>,
}

impl Collector {
    pub(super) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// What a rig runs.
pub(super) struct Spec {
    /// Collectors in the group.
    pub(super) collectors: usize,
    /// The gateway topics and the `log_format` of each (each its own layer).
    pub(super) edges: Vec<(&'static str, String)>,
    /// Also a lone collector reading every topic in a group of its own.
    pub(super) single: bool,
    /// `[kafka] librdkafka_options`'s session timeout (ms): how long the
    /// group waits for a member killed without leaving.
    pub(super) session_timeout_ms: u64,
}

/// Every real part and the collectors.
pub(super) struct Rig {
    pub(super) dir: tempfile::TempDir,
    pub(super) s3: S3rver,
    pub(super) broker: Tansu,
    pub(super) am: Alertmanager,
    pub(super) jira: jira_standin::Standin,
    pub(super) collectors: Vec<Collector>,
    /// The lone collector, when the spec asked for it.
    pub(super) single: Option<Collector>,
    spec_edges: Vec<(&'static str, String)>,
    session_timeout_ms: u64,
    // Last: the stand-in's tasks run on it.
    _rt: tokio::runtime::Runtime,
}

impl Rig {
    /// `n` collectors reading incident C's topics (the first tests').
    pub(super) fn start(n: usize) -> Rig {
        let log_format = std::fs::read_to_string(crate::support::fixture(
            super::traffic::INCIDENT,
            "log_format.txt",
        ))
        .unwrap();
        Rig::start_spec(Spec {
            collectors: n,
            edges: vec![(super::traffic::EDGE, log_format)],
            single: false,
            session_timeout_ms: 10_000,
        })
    }

    pub(super) fn start_spec(spec: Spec) -> Rig {
        let n = spec.collectors;
        let dir = tempfile::tempdir().unwrap();
        let s3 = S3rver::start(dir.path(), &["overtime"]);
        let broker = Tansu::start("memory://tansu/", &[], &dir.path().join("tansu.log"));
        for (topic, _) in &spec.edges {
            broker.create_topic(topic, PARTITIONS);
        }
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
            single: None,
            spec_edges: spec.edges,
            session_timeout_ms: spec.session_timeout_ms,
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
        if spec.single {
            // Alone: it binds port 0 and says where in its ready file.
            let mut c = rig.collector(n, 0, &[]);
            c.id = "single".into();
            let mut cmd = serve_command(&c.config);
            cmd.envs(rig.s3.env());
            let serve = Serve::start_command(cmd);
            c.port = serve.port;
            c.serve = Some(serve);
            rig.single = Some(c);
        }
        rig
    }

    /// Collector `i` of a group on `ports` (none: the lone collector,
    /// on port 0, no peers, no notifications): its config written.
    fn collector(&self, i: usize, port: u16, ports: &[u16]) -> Collector {
        let lone = ports.is_empty();
        let id = if lone {
            "single".to_string()
        } else {
            format!("collector-{}", i + 1)
        };
        let home = self.dir.path().join(&id);
        std::fs::create_dir_all(&home).unwrap();
        let config = home.join("overtime.toml");
        let peers: Vec<String> = ports
            .iter()
            .map(|p| format!("\"http://127.0.0.1:{p}\""))
            .collect();
        let (prefix, group) = if lone {
            ("single", "single")
        } else {
            ("cluster", "cluster")
        };
        // A short grace, so verdicts and the ticket come within
        // seconds; an hour's quiet period, so the incident stays
        // open however long a slow machine stretches the waits.
        let mut toml = format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n\
             [store]\ndata_dir = {data:?}\nurl = \"s3://overtime/{prefix}\"\n\
             collector_id = \"{id}\"\nflush_interval_ms = 1000\n\
             [otlp]\nhttp_listen = \"\"\ngrpc_listen = \"\"\n\
             [diagnose]\ngrace_ms = {GRACE_MS}\nfailure_grace_ms = 1000\n\
             incident_quiet_ms = 3600000\n",
            data = home.join("data").display().to_string(),
        );
        if !lone {
            toml += &format!(
                "[cluster]\npeers = [{peers}]\npeer_timeout_ms = 2000\ntakeover_ms = {takeover}\n\
                 [alerts]\nalertmanager_urls = [\"{am}\"]\nresend_interval_ms = 1000\n\
                 external_url = \"http://127.0.0.1:{port}\"\n\
                 [jira]\nenabled = true\nbase_url = \"{jira}\"\nproject_key = \"{project}\"\n\
                 email = \"{email}\"\ntoken_env = \"{JIRA_TOKEN_ENV}\"\nsearch_settle_secs = 1\n\
                 [jira.retry]\nbase_backoff_ms = 100\nmax_backoff_secs = 1\n\n",
                peers = peers.join(", "),
                // The session timeout and a rebalance: how long a dead
                // collector's partitions wait for a new owner.
                takeover = self.session_timeout_ms + 10_000,
                am = self.am.url,
                jira = self.jira.url(),
                project = jira_standin::PROJECT,
                email = jira_standin::EMAIL,
            );
        }
        toml += &format!(
            "[[kafka]]\nbrokers = \"{broker}\"\ngroup_id = \"{group}\"\n\
             max_prefetch_kbytes = 1024\n\
             librdkafka_options = {{ \"session.timeout.ms\" = \"{session}\", \"heartbeat.interval.ms\" = \"1000\" }}\n",
            broker = self.broker.addr,
            session = self.session_timeout_ms,
        );
        // Each gateway its own layer, as docs/kafka.md has a user name the
        // layer of each fleet: two gateways with different read timeouts
        // under one name would give that name one inferred timeout from
        // both fleets' 504s, changing as they arrive.
        for (topic, log_format) in &self.spec_edges {
            toml += &format!(
                "[[kafka.topics]]\ntopic = \"{topic}\"\nformat = \"nginx\"\n\
                 log_format = {log_format:?}\nlayer = \"{topic}\"\n"
            );
        }
        toml += &format!("[[kafka.topics]]\ntopic = \"{SPANS}\"\nformat = \"jsonl\"\n");
        std::fs::write(&config, toml).unwrap();
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
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&err)
                    .unwrap(),
            );
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
    pub(super) fn start_collector(&mut self, i: usize) {
        let what = self.collectors[i].id.clone();
        let port = self.collectors[i].port;
        on_same_ports(&what, &[port], |_| self.try_start_collector(i));
    }

    /// The collectors of the group running now.
    pub(super) fn alive(&self) -> impl Iterator<Item = &Collector> {
        self.collectors.iter().filter(|c| c.serve.is_some())
    }

    /// What each collector wrote to stderr, for a failure's message.
    pub(super) fn logs(&self) -> String {
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

    pub(super) fn incidents(&self, c: &Collector) -> Vec<Value> {
        let (status, body) = get(c.port, "/api/incidents").expect("incidents answer");
        assert_eq!(status, 200, "{}: {body}", c.id);
        let v: Value = serde_json::from_str(&body).unwrap();
        v["incidents"].as_array().cloned().unwrap_or_default()
    }

    /// The pages for `fingerprint` Alertmanager lists.
    pub(super) fn pages(&self, fingerprint: &str) -> Vec<Value> {
        self.am
            .named(overtime_slo::alert_names::INCIDENT)
            .into_iter()
            .filter(|a| a["labels"]["fingerprint"] == fingerprint)
            .collect()
    }

    /// Jira's issues now (the stand-in's, and what it refused).
    pub(super) fn tickets(&self) -> (Vec<jira_standin::Issue>, Vec<String>) {
        (self.jira.issues(), self.jira.rejections())
    }
}
