//! The lake's tables in DataFusion: `atdp_schema::Catalog`, with the rows helper mapped to
//! this crate's errors.

pub use atdp_schema::{Catalog, rows as lake_rows};

use arrow::array::RecordBatch;
use deltalake::datafusion::prelude::DataFrame;

use crate::error::Result;

/// Runs `frame` and converts its batches to records (`atdp_schema::steps_from_batch`, …).
pub(crate) async fn rows<T>(
    frame: deltalake::datafusion::error::Result<DataFrame>,
    convert: fn(&RecordBatch) -> atdp_schema::Result<Vec<T>>,
) -> Result<Vec<T>> {
    Ok(lake_rows(frame, convert).await?)
}
