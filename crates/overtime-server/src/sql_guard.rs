//! Scalar functions whose output size is set by an argument, not by their
//! input: `repeat`, `lpad`, `rpad`, `array_repeat`, `range`,
//! `generate_series`. DataFusion's memory pool does not see what a scalar
//! function allocates, so `SELECT repeat('x', 1000000000)` or
//! `range(1, 1000000000)` allocated gigabytes per call (16 GB of RSS in
//! the abuse test) and went on doing so after the query timed out. Each is
//! replaced, in the query session only, by a wrapper that computes the
//! size its output would have for the batch at hand and refuses the call
//! when that passes the SQL memory limit; otherwise it calls the original.

use arrow::array::{Array, ArrayRef, Int64Array};
use arrow::compute::kernels::length::length;
use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, exec_err};
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};
use datafusion::prelude::SessionContext;

/// How the output size of a function follows from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// `repeat(s, n)`: len(s) × n bytes.
    Repeat,
    /// `lpad/rpad(s, n[, fill])`: n characters (≤ 4 bytes each).
    Pad,
    /// `array_repeat(x, n)`: n copies of x.
    ArrayRepeat,
    /// `range/generate_series([start,] stop[, step])`: (stop-start)/step values.
    Series,
}

const GUARDED: &[(&str, Kind)] = &[
    ("repeat", Kind::Repeat),
    ("lpad", Kind::Pad),
    ("rpad", Kind::Pad),
    ("array_repeat", Kind::ArrayRepeat),
    ("range", Kind::Series),
    ("generate_series", Kind::Series),
];

/// Registers the guarded versions in `ctx`, each refusing an output of
/// more than `limit` bytes per batch.
pub(crate) fn install(ctx: &SessionContext, limit: usize) {
    for (name, kind) in GUARDED {
        if let Ok(inner) = ctx.udf(name) {
            ctx.register_udf(ScalarUDF::new_from_impl(Bounded {
                inner: (*inner).clone(),
                kind: *kind,
                limit,
            }));
        }
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Bounded {
    inner: ScalarUDF,
    kind: Kind,
    limit: usize,
}

fn ints(v: &ColumnarValue, rows: usize) -> Result<Int64Array> {
    let a = v.to_array(rows)?;
    let c = arrow::compute::cast(&a, &DataType::Int64)?;
    Ok(c.as_any()
        .downcast_ref::<Int64Array>()
        .expect("cast to Int64")
        .clone())
}

fn lengths(a: &ArrayRef) -> Result<Int64Array> {
    let l = arrow::compute::cast(&length(a)?, &DataType::Int64)?;
    Ok(l.as_any()
        .downcast_ref::<Int64Array>()
        .expect("cast to Int64")
        .clone())
}

impl Bounded {
    /// Bytes the call would produce for these arguments (saturating).
    fn output_bytes(&self, args: &ScalarFunctionArgs) -> Result<u128> {
        let rows = args.number_rows.max(1);
        let a = &args.args;
        let n_at = |i: usize| -> Result<Int64Array> {
            match a.get(i) {
                Some(v) => ints(v, rows),
                None => exec_err!("{}: missing argument {}", self.inner.name(), i + 1),
            }
        };
        let pos = |v: Option<i64>| v.unwrap_or(0).max(0) as u128;
        Ok(match self.kind {
            Kind::Repeat => {
                let s = a[0].to_array(rows)?;
                let (lens, n) = (lengths(&s)?, n_at(1)?);
                (0..rows)
                    .map(|i| {
                        pos(lens.is_valid(i).then(|| lens.value(i)))
                            * pos(n.is_valid(i).then(|| n.value(i)))
                    })
                    .sum()
            }
            Kind::Pad => {
                let n = n_at(1)?;
                (0..rows)
                    .map(|i| 4 * pos(n.is_valid(i).then(|| n.value(i))))
                    .sum()
            }
            Kind::ArrayRepeat => {
                let x = a[0].to_array(rows)?;
                let each = (x.get_array_memory_size() / rows).max(8) as u128;
                let n = n_at(1)?;
                (0..rows)
                    .map(|i| each * pos(n.is_valid(i).then(|| n.value(i))))
                    .sum()
            }
            Kind::Series => {
                if a.iter().any(|v| !v.data_type().is_integer()) {
                    return exec_err!(
                        "{} over non-integer values is not allowed in this SQL endpoint; use integers",
                        self.inner.name()
                    );
                }
                let (start, stop, step) = match a.len() {
                    1 => (None, n_at(0)?, None),
                    2 => (Some(n_at(0)?), n_at(1)?, None),
                    _ => (Some(n_at(0)?), n_at(1)?, Some(n_at(2)?)),
                };
                let get =
                    |x: &Int64Array, i: usize, d: i64| if x.is_valid(i) { x.value(i) } else { d };
                (0..rows)
                    .map(|i| {
                        let lo = start.as_ref().map_or(0, |s| get(s, i, 0)) as i128;
                        let hi = get(&stop, i, 0) as i128;
                        let st = step
                            .as_ref()
                            .map_or(1, |s| get(s, i, 1))
                            .unsigned_abs()
                            .max(1) as i128;
                        8 * ((hi - lo).unsigned_abs() / st as u128 + 1)
                    })
                    .sum()
            }
        })
    }
}

impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let bytes = self.output_bytes(&args)?;
        if bytes > self.limit as u128 {
            return exec_err!(
                "{} would produce {bytes} bytes for {} rows, more than the SQL memory limit of {} bytes",
                self.inner.name(),
                args.number_rows,
                self.limit
            );
        }
        self.inner.invoke_with_args(args)
    }
}
