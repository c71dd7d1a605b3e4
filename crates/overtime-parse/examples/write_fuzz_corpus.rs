//! Writes every fuzz target's seeds into `<dir>/corpus/<target>/` and its
//! dictionary into `<dir>/dicts/<target>.dict` (libFuzzer's format), where
//! the cargo-fuzz runs start from (docs/fuzzing.md):
//!
//! ```sh
//! cargo run -p overtime-parse --example write_fuzz_corpus -- fuzz
//! ```

use overtime_parse::fuzz::TARGETS;

fn main() {
    let Some(dir) = std::env::args_os().nth(1).map(std::path::PathBuf::from) else {
        eprintln!("usage: write_fuzz_corpus <fuzz dir>");
        std::process::exit(2);
    };
    for t in TARGETS {
        let corpus = dir.join("corpus").join(t.name);
        std::fs::create_dir_all(&corpus).unwrap();
        for (i, s) in overtime_parse::fuzz::seeds(t.name).iter().enumerate() {
            std::fs::write(corpus.join(format!("seed-{i:02}")), s).unwrap();
        }
        let dict: String = overtime_parse::fuzz::dictionary(t.name)
            .iter()
            .map(|tok| {
                let esc: String = tok
                    .iter()
                    .map(|&b| match b {
                        b'"' | b'\\' => format!("\\{}", b as char),
                        0x20..=0x7e => (b as char).to_string(),
                        _ => format!("\\x{b:02X}"),
                    })
                    .collect();
                format!("\"{esc}\"\n")
            })
            .collect();
        std::fs::create_dir_all(dir.join("dicts")).unwrap();
        std::fs::write(dir.join("dicts").join(format!("{}.dict", t.name)), dict).unwrap();
    }
}
