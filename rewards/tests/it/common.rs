//! A synthetic lake of a few hundred steps in a temporary directory, and helpers to write a
//! spec and run it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use atdp_lake::synth::{SynthConfig, generate};
use atdp_lake::{Catalog, Lake, LakeWriter, WriterConfig};
use atdp_rewards::{RewardFn, RunReport, Selection};
use atdp_schema::Table;

pub const STEPS: usize = 200;

pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub lake_url: String,
    pub lake: Lake,
    runs: AtomicU32,
}

impl Fixture {
    /// A lake of `STEPS` steps over 3 tenants and 3 days.
    pub async fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let lake_url = dir.path().join("lake").display().to_string();
        let mut config = WriterConfig::new(lake_url.clone(), dir.path().join("wal-synth"));
        config.fsync = false;
        let writer = LakeWriter::open(config).await.unwrap();
        generate(
            &SynthConfig {
                steps: STEPS,
                ..SynthConfig::default()
            },
            |record| writer.append(record).map(|_| ()),
        )
        .unwrap();
        writer.flush().await.unwrap();
        assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
        Fixture::at(dir, lake_url)
    }

    /// A fixture over the lake already written at `lake_url`, with its folder `dir`.
    pub fn at(dir: tempfile::TempDir, lake_url: String) -> Fixture {
        let lake = Lake::new(&lake_url, Default::default()).unwrap();
        Fixture {
            dir,
            lake_url,
            lake,
            runs: AtomicU32::new(0),
        }
    }

    pub async fn catalog(&self) -> Catalog {
        Catalog::open(&self.lake, &BTreeMap::new()).await.unwrap()
    }

    /// Writes `text` as `<name>.toml` in the fixture's folder and loads it.
    pub fn spec(&self, name: &str, text: &str) -> RewardFn {
        let path = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        RewardFn::load(&path).unwrap()
    }

    /// Writes a file next to the specs.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Runs `function` with a fresh catalog and its own write-ahead log.
    pub async fn run(
        &self,
        function: &RewardFn,
        selection: &Selection,
    ) -> atdp_rewards::Result<RunReport> {
        let n = self.runs.fetch_add(1, Ordering::Relaxed);
        let mut config = WriterConfig::new(
            self.lake_url.clone(),
            self.dir.path().join(format!("wal-run-{n}")),
        );
        config.fsync = false;
        let writer = LakeWriter::open(config).await.unwrap();
        let catalog = self.catalog().await;
        let report = atdp_rewards::run(&catalog, function, selection, &writer, &mut |_| {}).await;
        assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
        report
    }

    /// The rewards table's version.
    pub async fn rewards_version(&self) -> Option<u64> {
        self.catalog().await.versions()[&Table::Rewards]
    }

    /// One number from a SQL query.
    pub async fn number(&self, sql: &str) -> f64 {
        let batches = self.catalog().await.sql(sql).await.unwrap();
        let column =
            arrow::compute::cast(batches[0].column(0), &arrow::datatypes::DataType::Float64)
                .unwrap();
        use arrow::array::AsArray;
        column
            .as_primitive::<arrow::datatypes::Float64Type>()
            .value(0)
    }

    /// Rows of `rewards` written by a version.
    pub async fn rows_of(&self, function: &RewardFn) -> f64 {
        self.number(&format!(
            "SELECT count(*) FROM rewards WHERE reward_fn_version = '{}' AND source = '{}'",
            function.version, function.source
        ))
        .await
    }
}

pub use atdp_testkit::python;
