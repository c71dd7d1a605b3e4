//! The `links` column of `spans`: List<Struct<trace_id: Utf8, span_id:
//! Utf8, trace_state: Utf8, attributes: Map<Utf8, Utf8>>>.

use crate::SpanLink;
use crate::arrow_util::{list_struct, map_pairs, opt_str};
use arrow::array::{
    Array, ArrayRef, ListBuilder, MapBuilder, StringBuilder, StructArray, StructBuilder,
};
use arrow::datatypes::{DataType, Field, Fields};
use std::sync::Arc;

type AttrBuilder = MapBuilder<StringBuilder, StringBuilder>;

fn attr_builder() -> AttrBuilder {
    MapBuilder::new(None, StringBuilder::new(), StringBuilder::new())
}

fn fields() -> Fields {
    let map_type = attr_builder().finish().data_type().clone();
    Fields::from(vec![
        Field::new("trace_id", DataType::Utf8, true),
        Field::new("span_id", DataType::Utf8, true),
        Field::new("trace_state", DataType::Utf8, true),
        Field::new("attributes", map_type, true),
    ])
}

/// The builder of the `links` column.
pub(crate) fn links_builder() -> ListBuilder<StructBuilder> {
    let st = StructBuilder::new(
        fields(),
        vec![
            Box::new(StringBuilder::new()),
            Box::new(StringBuilder::new()),
            Box::new(StringBuilder::new()),
            Box::new(attr_builder()),
        ],
    );
    ListBuilder::new(st).with_field(Arc::new(Field::new(
        "item",
        DataType::Struct(fields()),
        true,
    )))
}

/// Appends one row's links.
pub(crate) fn append_links(b: &mut ListBuilder<StructBuilder>, links: &[SpanLink]) {
    let st = b.values();
    for l in links {
        st.field_builder::<StringBuilder>(0)
            .expect("trace_id")
            .append_value(&l.trace_id);
        st.field_builder::<StringBuilder>(1)
            .expect("span_id")
            .append_value(&l.span_id);
        st.field_builder::<StringBuilder>(2)
            .expect("trace_state")
            .append_option(l.trace_state.as_deref());
        let m = st.field_builder::<AttrBuilder>(3).expect("attributes");
        for (k, v) in &l.attributes {
            m.keys().append_value(k);
            m.values().append_value(v);
        }
        m.append(true).expect("pairs");
        st.append(true);
    }
    b.append(true);
}

/// The links of row `i` (none when the column is absent: a batch written
/// before links were kept).
pub(crate) fn read_links(col: Option<&ArrayRef>, i: usize) -> Vec<SpanLink> {
    let Some(s) = col.and_then(|c| list_struct(c, i)) else {
        return Vec::new();
    };
    let s: StructArray = s;
    let (t, sp, ts, at) = (
        s.column(0).clone(),
        s.column(1).clone(),
        s.column(2).clone(),
        s.column(3).clone(),
    );
    (0..s.len())
        .map(|j| SpanLink {
            trace_id: opt_str(&t, j).unwrap_or_default(),
            span_id: opt_str(&sp, j).unwrap_or_default(),
            trace_state: opt_str(&ts, j),
            attributes: map_pairs(&at, j),
        })
        .collect()
}
