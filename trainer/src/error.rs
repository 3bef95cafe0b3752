//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong loading a model, building or saving an adapter, or running
/// the forward pass.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The built-in word lists of surrogate values cannot be read (a broken build).
    #[error(
        "the built-in surrogate word lists (python/src/atdp/surrogates.json) are not valid: {0}"
    )]
    Surrogates(String),
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
    /// A field of a model's `config.json` is missing or has a value this crate cannot use.
    #[error("model config {path}: field `{field}`: {message}")]
    Config {
        /// The `config.json` (or `<inline>` when parsed from a string).
        path: PathBuf,
        /// The field at fault, as spelled in `config.json`.
        field: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// A model directory lacks a file the model needs.
    #[error("{path} not found: {message}")]
    MissingFile {
        /// The file that was looked for.
        path: PathBuf,
        /// What the file is for and what to do.
        message: String,
    },
    /// A tensor the model needs is not in the weight files.
    #[error("tensor `{name}` not found in {location}; the weights do not match config.json")]
    MissingTensor {
        /// The tensor name, as in the safetensors file.
        name: String,
        /// The file(s) searched.
        location: String,
    },
    /// A tensor in the weight files does not have the shape the config implies.
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
    /// A safetensors file cannot be parsed or holds a tensor of an unusable type.
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
    /// A LoRA setting or a forward-pass argument is invalid.
    #[error("invalid {what}: {message}")]
    Invalid {
        /// The setting or argument.
        what: &'static str,
        /// What is wrong and what to do.
        message: String,
    },
    /// The tokenizer could not be built or loaded.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The lake could not be read.
    #[error("lake: {0}")]
    Lake(#[from] atdp_lake::Error),
    /// The chat template could not be loaded or rendered.
    #[error("chat template: {0}")]
    Template(String),
    /// A reward in the selected data cannot be used.
    #[error("reward {reward_id} ({name}): {message}")]
    Reward {
        /// The reward row's id.
        reward_id: String,
        /// The reward's name.
        name: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// The selection holds nothing to train on.
    #[error("empty selection: {0}; no adapter was written")]
    EmptySelection(String),
    /// The run configuration is invalid.
    #[error("run config {path}: {message}")]
    RunConfig {
        /// The `train.toml` (or `<flags>`).
        path: PathBuf,
        /// What is wrong and what to do.
        message: String,
    },
    /// A reward function changed since the previous run in the output directory.
    #[error(
        "reward `{name}`: reward_fn_version {previous} in the previous run's manifest, {current} in the selected data; the reward function changed, so the runs are not comparable. Pass --accept-reward-change (accept_reward_change = true) to train anyway, or use a new output directory"
    )]
    RewardChanged {
        /// The reward name.
        name: String,
        /// The version(s) in the previous manifest.
        previous: String,
        /// The version(s) in the data now.
        current: String,
    },
    /// A tensor operation failed (out of memory, a device error, or a shape bug).
    #[error("tensor operation failed: {0}")]
    Candle(#[from] candle_core::Error),
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A model's or an adapter's files at fault, as the same variant of this crate's error.
impl From<atdp_model_files::Error> for Error {
    fn from(e: atdp_model_files::Error) -> Self {
        use atdp_model_files::Error as Files;
        match e {
            Files::Io { path, source } => Error::Io { path, source },
            Files::Json { path, source } => Error::Json { path, source },
            Files::Config {
                path,
                field,
                message,
            } => Error::Config {
                path,
                field,
                message,
            },
            Files::MissingFile { path, message } => Error::MissingFile { path, message },
            Files::MissingTensor { name, location } => Error::MissingTensor { name, location },
            Files::Shape {
                name,
                location,
                expected,
                found,
            } => Error::Shape {
                name,
                location,
                expected,
                found,
            },
            Files::Safetensors { path, message } => Error::Safetensors { path, message },
            Files::Adapter { path, message } => Error::Adapter { path, message },
            Files::Invalid { what, message } => Error::Invalid { what, message },
            Files::Tokenizer(message) => Error::Tokenizer(message),
            Files::Template(message) => Error::Template(message),
        }
    }
}

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
