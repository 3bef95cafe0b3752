//! The crate's error type.

use std::path::PathBuf;

/// Everything that can be wrong with a model's or an adapter's files.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory could not be read or written.
    #[error("I/O error on {path}: {source}; check that it exists and its permissions")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A JSON file is not valid JSON or does not have the expected structure.
    #[error("{path} is not valid: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// A field of a model's `config.json` is missing or has a value that cannot be used.
    #[error("model config {path}: field `{field}`: {message}")]
    Config {
        /// The `config.json` (or `<inline>` when parsed from a string).
        path: PathBuf,
        /// The field at fault, as spelled in `config.json`.
        field: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// A model or adapter directory lacks a file it needs.
    #[error("{path} not found: {message}")]
    MissingFile {
        /// The file that was looked for.
        path: PathBuf,
        /// What the file is for and what to do.
        message: String,
    },
    /// A tensor an adapter needs is not in its weights file.
    #[error("tensor `{name}` not found in {location}; the weights do not match config.json")]
    MissingTensor {
        /// The tensor name, as in the safetensors file.
        name: String,
        /// The file(s) searched.
        location: String,
    },
    /// A tensor does not have the shape the config implies.
    #[error(
        "tensor `{name}` in {location} has shape {found:?}, expected {expected:?} from the config; the weights do not match config.json"
    )]
    Shape {
        /// The tensor name.
        name: String,
        /// The file it came from.
        location: String,
        /// The shape the config implies.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A safetensors file cannot be parsed.
    #[error("safetensors file {path}: {message}")]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// A PEFT adapter directory cannot be used with this model.
    #[error("adapter {path}: {message}")]
    Adapter {
        /// The adapter directory or file.
        path: PathBuf,
        /// What is wrong and what to do.
        message: String,
    },
    /// A LoRA setting is invalid.
    #[error("invalid {what}: {message}")]
    Invalid {
        /// The setting.
        what: &'static str,
        /// What is wrong and what to do.
        message: String,
    },
    /// The tokenizer could not be loaded or used.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template could not be loaded or rendered.
    #[error("chat template: {0}")]
    Template(String),
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn json(path: impl Into<PathBuf>, source: serde_json::Error) -> Self {
        Error::Json {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn invalid(what: &'static str, message: impl Into<String>) -> Self {
        Error::Invalid {
            what,
            message: message.into(),
        }
    }

    pub(crate) fn adapter(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Adapter {
            path: path.into(),
            message: message.into(),
        }
    }
}
