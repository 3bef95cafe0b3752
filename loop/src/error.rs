//! Errors of the closed loop.

/// An error of the loop.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Serving or the registry.
    #[error(transparent)]
    Deploy(#[from] atdp_deploy::Error),
    /// Training, the base model or the lake reader.
    #[error(transparent)]
    Trainer(#[from] atdp_trainer::Error),
    /// A model's or an adapter's files (its chat template, its tokenizer).
    #[error(transparent)]
    ModelFiles(#[from] atdp_model_files::Error),
    /// The proxy's configuration.
    #[error("proxy: {0}")]
    Proxy(String),
    /// Files, sockets, tasks.
    #[error("{0}")]
    Io(String),
    /// A step of the loop that did not give what it must.
    #[error("{0}")]
    Loop(String),
}

/// The loop's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs blocking `work` (the trainer, the lake reader) on a plain thread of its own: the
/// trainer refuses to block inside a runtime, `spawn_blocking` threads included.
pub async fn blocking<T: Send + 'static>(
    what: &str,
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(format!("atdp-{what}"))
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(|e| Error::Io(format!("cannot start a thread for {what}: {e}")))?;
    rx.await
        .map_err(|_| Error::Io(format!("{what} stopped without an answer (a panic?)")))?
}
