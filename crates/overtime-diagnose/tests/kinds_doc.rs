//! docs/diagnosis.md's table of root-cause rules is the rules' own: the
//! same names in the same order, with the labels and descriptions the code
//! gives them (and serves at `GET /api/kinds`).

use std::path::PathBuf;

/// The rows of the table under "## Root-cause kinds": its cells, trimmed.
fn doc_rows() -> Vec<Vec<String>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/diagnosis.md");
    let text = std::fs::read_to_string(&path).expect("docs/diagnosis.md");
    let section = text
        .split("\n## Root-cause kinds\n")
        .nth(1)
        .expect("a section \"Root-cause kinds\"");
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the header and its rule
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn the_documented_rules_are_the_rules_in_their_order_with_their_words() {
    let rows = doc_rows();
    let kinds = overtime_diagnose::root_cause_kinds();
    let documented: Vec<&str> = rows.iter().map(|r| r[0].trim_matches('`')).collect();
    let coded: Vec<&str> = kinds.iter().map(|k| k.name).collect();
    assert_eq!(
        documented, coded,
        "docs/diagnosis.md lists the rules in another order"
    );
    for (row, k) in rows.iter().zip(&kinds) {
        assert_eq!(row.len(), 4, "a row of four cells: {row:?}");
        assert_eq!(row[1], k.label, "the label of {}", k.name);
        assert_eq!(row[2], k.description, "what {} checks", k.name);
    }
}
