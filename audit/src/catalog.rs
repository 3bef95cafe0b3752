//! The lake's tables in DataFusion: `atdp_lake::Catalog`, with the rows helper mapped to
//! this crate's errors, and the distinct values of a column.

pub use atdp_lake::{Catalog, rows as lake_rows};

use std::collections::BTreeSet;

use arrow::array::{Array, AsArray, RecordBatch};
use deltalake::datafusion::prelude::{DataFrame, col};

use crate::error::{Error, Result};

/// Runs `frame` and converts its batches to records (`atdp_schema::steps_from_batch`, …).
pub(crate) async fn rows<T>(
    frame: deltalake::datafusion::error::Result<DataFrame>,
    convert: fn(&RecordBatch) -> std::result::Result<Vec<T>, atdp_schema::ConversionError>,
) -> Result<Vec<T>> {
    Ok(lake_rows(frame, convert).await?)
}

/// The distinct values of string column `name` in `frame`.
pub(crate) async fn distinct(frame: DataFrame, name: &str) -> Result<BTreeSet<String>> {
    let batches = frame
        .select(vec![col(name)])
        .and_then(DataFrame::distinct)
        .map_err(Error::query)?
        .collect()
        .await
        .map_err(Error::query)?;
    let mut out = BTreeSet::new();
    for batch in batches {
        let column = arrow::compute::cast(batch.column(0), &arrow::datatypes::DataType::Utf8)
            .map_err(|e| Error::Query(e.to_string()))?;
        let column = column.as_string::<i32>();
        out.extend(
            (0..column.len())
                .filter(|&i| column.is_valid(i))
                .map(|i| column.value(i).to_owned()),
        );
    }
    Ok(out)
}
