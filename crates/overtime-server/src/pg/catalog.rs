//! What a PostgreSQL client looks up before it queries: `pg_catalog`
//! (from `datafusion-pg-catalog`: `pg_class`, `pg_attribute`,
//! `pg_namespace`, `pg_type`… and the functions psql, pgjdbc, pgcli and
//! Grafana call, such as `format_type`, `pg_table_is_visible`,
//! `quote_ident`), DataFusion's `information_schema`, and
//! `current_setting`.
//!
//! Design rules:
//! - **One catalog, every query.** Each query runs in a session of its
//!   own (the live verdicts as of that moment); the `pg_catalog` schema
//!   they all see is one object, built once, so the OIDs a client read in
//!   one query (a table's `pg_class.oid`) still name the same table in
//!   the next (DBeaver and pgjdbc join on them across queries).
//! - **It describes the tables a query sees.** The catalog reads the
//!   shape of a template session holding the same tables, in name order,
//!   so OIDs do not depend on hash order.

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::{CatalogProviderList, SchemaProvider};
use datafusion::datasource::TableType;
use datafusion::error::DataFusionError;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
use datafusion::prelude::SessionContext;
use datafusion_postgres::datafusion_pg_catalog::pg_catalog::{
    self as pgc, ArrowTable, PgCatalogSchemaProvider, PgCatalogStaticTables,
    catalog_info::CatalogInfo, context::EmptyContextProvider,
};
use std::sync::Arc;

/// The server version clients are told (`server_version`,
/// `current_setting('server_version_num')`): the PostgreSQL release whose
/// catalog `datafusion-pg-catalog` mirrors.
pub(crate) const SERVER_VERSION: &str = "16.6";
const SERVER_VERSION_NUM: &str = "160006";

/// The catalog every query's session gets ([`PgCatalog::install`]).
pub(crate) struct PgCatalog {
    schema: Arc<dyn SchemaProvider>,
    keywords: Arc<ArrowTable>,
    catalog_name: String,
}

impl PgCatalog {
    /// The catalog of `template`'s tables (a session with the tables
    /// every query sees; its rows are never read). `template` gets the
    /// catalog too, so `pg_catalog` lists itself as PostgreSQL's does.
    pub(crate) fn new(template: &SessionContext) -> Result<PgCatalog, DataFusionError> {
        let statics = Arc::new(PgCatalogStaticTables::try_new()?);
        let shape = Sorted(template.state().catalog_list().clone());
        let schema: Arc<dyn SchemaProvider> = Arc::new(PgCatalogSchemaProvider::try_new(
            shape,
            statics.clone(),
            EmptyContextProvider,
        )?);
        let catalog_name = template
            .state()
            .config()
            .options()
            .catalog
            .default_catalog
            .clone();
        let c = PgCatalog {
            schema,
            keywords: statics.pg_get_keywords.clone(),
            catalog_name,
        };
        c.install(template)?;
        Ok(c)
    }

    /// Registers `pg_catalog` and the PostgreSQL functions in `ctx`.
    pub(crate) fn install(&self, ctx: &SessionContext) -> Result<(), DataFusionError> {
        ctx.catalog(&self.catalog_name)
            .ok_or_else(|| {
                DataFusionError::Configuration(format!("no catalog {}", self.catalog_name))
            })?
            .register_schema("pg_catalog", self.schema.clone())?;
        use pgc::*;
        for udf in [
            create_current_database_udf(&self.catalog_name),
            create_current_schema_udf(),
            create_current_schemas_udf(),
            create_pg_get_userbyid_udf(),
            has_privilege_udf::create_has_privilege_udf("has_table_privilege"),
            has_privilege_udf::create_has_privilege_udf("has_schema_privilege"),
            has_privilege_udf::create_has_privilege_udf("has_database_privilege"),
            has_privilege_udf::create_has_privilege_udf("has_any_column_privilege"),
            create_pg_table_is_visible(),
            format_type::create_format_type_udf(),
            create_session_user_udf(),
            pg_get_expr_udf::create_pg_get_expr_udf(),
            create_pg_get_partkeydef_udf(),
            create_pg_relation_is_publishable_udf(),
            create_pg_get_statisticsobjdef_columns_udf(),
            create_pg_encoding_to_char_udf(),
            create_pg_backend_pid_udf(),
            create_pg_relation_size_udf(),
            create_pg_total_relation_size_udf(),
            create_pg_stat_get_numscans(),
            create_pg_get_constraintdef(),
            create_pg_get_partition_ancestors_udf(),
            quote_ident_udf::create_quote_ident_udf(),
            quote_ident_udf::create_parse_ident_udf(),
            array_bounds_udf::create_array_upper_udf(),
            array_bounds_udf::create_array_lower_udf(),
            current_setting_udf(),
        ] {
            ctx.register_udf(udf);
        }
        ctx.register_udtf("pg_get_keywords", self.keywords.clone());
        // Type names such as `regclass` and `oid` in casts.
        let state = ctx.state_ref();
        let existing = state.read().clone();
        *state.write() = SessionStateBuilder::new_from_existing(existing)
            .with_type_planner(Arc::new(oid_type_planner::PgOidTypePlanner))
            .build();
        generate_series_arg_coercion::CoerceIntArgsToBigInt::widen(ctx);
        Ok(())
    }
}

/// `current_setting(name)`: the few settings clients read (Grafana asks
/// for `server_version_num`); any other name is an error, as in
/// PostgreSQL.
fn current_setting_udf() -> datafusion::logical_expr::ScalarUDF {
    use datafusion::arrow::array::{Array, StringArray};
    let f = |args: &[ColumnarValue]| -> datafusion::error::Result<ColumnarValue> {
        let names = args[0].to_array(1)?;
        let names = datafusion::arrow::compute::cast(&names, &DataType::Utf8)?;
        let names = names
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("cast to Utf8");
        let mut out = Vec::with_capacity(names.len());
        for i in 0..names.len() {
            if names.is_null(i) {
                out.push(None);
                continue;
            }
            let v = match names.value(i).to_ascii_lowercase().as_str() {
                "server_version_num" => SERVER_VERSION_NUM,
                "server_version" => SERVER_VERSION,
                "search_path" => "public",
                "standard_conforming_strings" => "on",
                "timezone" => "UTC",
                "datestyle" => "ISO, MDY",
                "client_encoding" | "server_encoding" => "UTF8",
                "max_identifier_length" => "63",
                "transaction_read_only" | "default_transaction_read_only" => "on",
                "statement_timeout" => "0",
                other => {
                    return Err(DataFusionError::Execution(format!(
                        "unrecognized configuration parameter \"{other}\""
                    )));
                }
            };
            out.push(Some(v));
        }
        Ok(ColumnarValue::Array(Arc::new(StringArray::from(out))))
    };
    create_udf(
        "current_setting",
        vec![DataType::Utf8],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(f),
    )
}

/// The template's catalogs, schemas and tables, each list in name order.
#[derive(Debug, Clone)]
struct Sorted(Arc<dyn CatalogProviderList>);

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[async_trait]
impl CatalogInfo for Sorted {
    async fn catalog_names(&self) -> Result<Vec<String>, DataFusionError> {
        Ok(sorted(CatalogProviderList::catalog_names(self.0.as_ref())))
    }

    async fn schema_names(&self, catalog: &str) -> Result<Option<Vec<String>>, DataFusionError> {
        Ok(self.0.catalog(catalog).map(|c| sorted(c.schema_names())))
    }

    async fn table_names(
        &self,
        catalog: &str,
        schema: &str,
    ) -> Result<Option<Vec<String>>, DataFusionError> {
        Ok(self
            .0
            .catalog(catalog)
            .and_then(|c| c.schema(schema))
            .map(|s| sorted(s.table_names())))
    }

    async fn table_schema(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> Result<Option<SchemaRef>, DataFusionError> {
        CatalogInfo::table_schema(&self.0, catalog, schema, table).await
    }

    async fn table_type(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> Result<Option<TableType>, DataFusionError> {
        CatalogInfo::table_type(&self.0, catalog, schema, table).await
    }
}
