//! The crate's error types: [`Error`] for loading, publishing and serving, and [`ApiError`],
//! an answer in OpenAI's error format.

use axum::http::StatusCode;
use serde_json::{Value, json};

/// What can go wrong publishing, loading or serving an adapter.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting or argument is invalid.
    #[error("configuration: {0}")]
    Config(String),
    /// The base model directory is unusable.
    #[error("base model {path}: {message}")]
    Base {
        /// The directory.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// An adapter was refused: corrupt, incomplete, or not made for this base model.
    #[error("adapter {version} refused: {message}")]
    Adapter {
        /// The version (or directory) refused.
        version: String,
        /// Why.
        message: String,
    },
    /// The registry holds no such version, or no version is promoted.
    #[error("registry: {0}")]
    Registry(String),
    /// Another writer took the same log position; re-read the log and decide again.
    #[error("registry: log position {0} was written by someone else meanwhile; retry")]
    Conflict(u64),
    /// The object store failed.
    #[error("object store: {0}")]
    Store(#[from] deltalake::ObjectStoreError),
    /// The lake location could not be used.
    #[error(transparent)]
    Lake(#[from] atdp_lake::Error),
    /// mistral.rs failed to load or run the model.
    #[error("engine: {0}")]
    Engine(String),
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A JSON document could not be read or written.
    #[error("{what}: {source}")]
    Json {
        /// Which document.
        what: String,
        /// The cause.
        source: serde_json::Error,
    },
}

impl Error {
    pub(crate) fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }

    pub(crate) fn json(what: impl Into<String>, source: serde_json::Error) -> Self {
        Error::Json {
            what: what.into(),
            source,
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error in OpenAI's format.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// `error.type`.
    pub kind: &'static str,
    /// `error.message`.
    pub message: String,
    /// `error.param`.
    pub param: Option<&'static str>,
    /// `error.code` (`model_not_found`), when OpenAI gives one.
    pub code: Option<&'static str>,
}

impl ApiError {
    pub(crate) fn invalid(message: impl Into<String>, param: Option<&'static str>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: message.into(),
            param,
            code: None,
        }
    }

    pub(crate) fn server(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({ "error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}
