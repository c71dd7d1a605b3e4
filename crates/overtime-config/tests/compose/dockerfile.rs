//! The Dockerfile: its stages and instructions, and the collector image's
//! config against EXPOSE, VOLUME, HEALTHCHECK, CMD and .dockerignore.

use super::collectors::listen_port;
use super::yaml::{host_port, read, repo};
use overtime_config::Config;
use std::collections::BTreeSet;

/// The Dockerfile's stages: name → its lines (continuations joined).
pub fn dockerfile_stages() -> Vec<(String, Vec<String>)> {
    let text = read("Dockerfile");
    let mut lines = Vec::new();
    let mut cur = String::new();
    for l in text.lines() {
        let t = l.trim();
        if t.starts_with('#') || t.is_empty() {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            cur.push_str(head);
            cur.push(' ');
        } else {
            cur.push_str(t);
            lines.push(std::mem::take(&mut cur));
        }
    }
    let mut stages: Vec<(String, Vec<String>)> = Vec::new();
    for l in lines {
        if l.starts_with("FROM ") {
            let name = l
                .split_whitespace()
                .collect::<Vec<_>>()
                .windows(2)
                .find(|w| w[0].eq_ignore_ascii_case("AS"))
                .map(|w| w[1].to_string())
                .unwrap_or_default();
            stages.push((name, vec![l]));
        } else if let Some(s) = stages.last_mut() {
            s.1.push(l);
        }
    }
    stages
}

pub fn stage(name: &str) -> Vec<String> {
    dockerfile_stages()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no stage {name:?} in Dockerfile"))
        .1
}

/// The exec-form JSON array of an instruction (`CMD ["a", "b"]`).
pub fn exec_form(line: &str) -> Vec<String> {
    let start = line
        .find('[')
        .unwrap_or_else(|| panic!("{line:?}: not exec form"));
    line[start..]
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_string())
        .collect()
}

/// The last instruction `kw` of a stage, following `FROM <stage>` chains.
pub fn instruction(stage_name: &str, kw: &str) -> Option<String> {
    let stages = dockerfile_stages();
    let mut name = stage_name.to_string();
    loop {
        let (_, lines) = stages.iter().find(|(n, _)| *n == name)?;
        if let Some(l) = lines
            .iter()
            .rev()
            .find(|l| l.starts_with(&format!("{kw} ")))
        {
            return Some(l.clone());
        }
        let from = lines[0].split_whitespace().nth(1)?.to_string();
        if !stages.iter().any(|(n, _)| *n == from) {
            return None;
        }
        name = from;
    }
}

#[test]
fn the_image_config_matches_the_dockerfile() {
    let stages = dockerfile_stages();
    assert_eq!(
        stages.last().map(|s| s.0.as_str()),
        Some("collector"),
        "the default target is the collector"
    );
    let coll = stage("collector");
    let copy = coll
        .iter()
        .find(|l| l.starts_with("COPY ") && l.ends_with("/etc/overtime/overtime.toml"))
        .expect("COPY <config> /etc/overtime/overtime.toml");
    let src = copy.split_whitespace().nth(1).unwrap();
    let cfg = Config::load(&repo().join(src)).unwrap();
    let cmd = exec_form(&instruction("collector", "CMD").unwrap());
    assert_eq!(cmd, ["serve", "--config", "/etc/overtime/overtime.toml"]);
    assert_eq!(
        exec_form(&instruction("collector", "ENTRYPOINT").unwrap()),
        ["overtime"]
    );
    let expose: BTreeSet<u16> = instruction("collector", "EXPOSE")
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|p| p.parse().unwrap())
        .collect();
    let port = listen_port(&cfg);
    let mut listens = BTreeSet::from([port]);
    for l in [&cfg.otlp.http_listen, &cfg.otlp.grpc_listen] {
        listens.insert(host_port(l).1);
    }
    assert_eq!(expose, listens, "EXPOSE vs the image config's listeners");
    let hc = instruction("collector", "HEALTHCHECK").unwrap();
    assert!(
        hc.contains(&format!("http://127.0.0.1:{port}/healthz")),
        "{hc}"
    );
    let vol = instruction("collector", "VOLUME").unwrap();
    assert!(
        vol.contains(&format!("\"{}\"", cfg.store.data_dir.display())),
        "{vol} vs data_dir {}",
        cfg.store.data_dir.display()
    );
    let user = instruction("collector", "USER").expect("USER");
    assert!(!user.ends_with(" root") && !user.ends_with(" 0"), "{user}");
    // The build context keeps what the build needs.
    let ignore = read(".dockerignore");
    for needed in ["crates", "Cargo.toml", "Cargo.lock", "deploy", src] {
        assert!(
            !ignore.lines().any(|l| {
                let l = l.trim().trim_end_matches('/');
                !l.starts_with('#') && !l.is_empty() && needed.starts_with(l)
            }),
            ".dockerignore drops {needed}"
        );
    }
}
