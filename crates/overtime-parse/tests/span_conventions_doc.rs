//! `docs/span-conventions.md` shows the attribute → column table of the
//! code (`ATTRIBUTE_MAPPINGS`), row for row and in the same order.

use overtime_parse::spans::ATTRIBUTE_MAPPINGS;

fn doc_rows() -> Vec<(String, String, String)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/span-conventions.md"
    );
    let text = std::fs::read_to_string(path).expect("docs/span-conventions.md");
    let start = text.find("<!-- mapping:start -->").expect("start marker");
    let end = text.find("<!-- mapping:end -->").expect("end marker");
    text[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<String> = l
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().trim_matches('`').to_string())
                .collect();
            assert_eq!(cells.len(), 3, "{l}");
            (cells[0].clone(), cells[1].clone(), cells[2].clone())
        })
        .collect()
}

#[test]
fn the_docs_table_is_the_codes_table() {
    let code: Vec<(String, String, String)> = ATTRIBUTE_MAPPINGS
        .iter()
        .map(|m| {
            (
                m.attribute.to_string(),
                m.column.to_string(),
                m.convention.to_string(),
            )
        })
        .collect();
    let docs = doc_rows();
    for (i, (c, d)) in code.iter().zip(&docs).enumerate() {
        assert_eq!(c, d, "row {} differs", i + 1);
    }
    assert_eq!(code.len(), docs.len(), "rows in the code vs in the docs");
}
