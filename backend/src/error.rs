//! The crate's error type: every failure is a value that names its cause.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// MLX's own message, without mlx-rs's Rust source location (which names no cause).
    #[error("MLX: {}", mlx_text(.0))]
    Mlx(#[from] mlx_rs::error::Exception),
    #[error("MLX I/O: {}", mlx_io_text(.0))]
    MlxIo(#[from] mlx_rs::error::IoError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: invalid JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("model config: {0}")]
    Config(String),
    #[error("unsupported model_type `{0}` (supported: {1})")]
    UnsupportedModel(String, String),
    #[error("weights: {0}")]
    Weights(String),
    #[error("LoRA adapter: {0}")]
    Adapter(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("model source: {0}")]
    Source(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("no model is loaded: call LoadModel first")]
    NotLoaded,
    #[error("{0}")]
    Internal(String),
    /// Forming or using the MLX group failed (`distributed::GroupError`, as text: the error
    /// type knows no module above it).
    #[error("{0}")]
    Group(String),
    /// The cluster is misconfigured or a worker refused or failed a command.
    #[error("distributed: {0}")]
    Distributed(String),
    /// A rank disconnected or stopped answering; the cluster must be formed again.
    #[error("distributed: {0}")]
    RankLost(String),
    #[error("I/O: {0}")]
    Net(#[from] std::io::Error),
    /// The request queue is full, or a request waited too long for a batch row.
    #[error("overloaded: {0}")]
    Overloaded(String),
    /// The request was ended by another call: Free, or a LoadModel that replaced the model.
    #[error("aborted: {0}")]
    Aborted(String),
    /// The process is stopping (SIGTERM, SIGINT, or its parent went away).
    #[error("the backend is shutting down")]
    ShuttingDown,
}

impl Error {
    /// The same failure, for each request of a batch that failed as a whole.
    pub fn for_each_request(&self) -> Error {
        match self {
            Error::RankLost(m) => Error::RankLost(m.clone()),
            Error::Distributed(m) => Error::Distributed(m.clone()),
            Error::NotLoaded => Error::NotLoaded,
            Error::Overloaded(m) => Error::Overloaded(m.clone()),
            Error::ShuttingDown => Error::ShuttingDown,
            Error::Aborted(m) => Error::Aborted(m.clone()),
            other => Error::Internal(other.to_string()),
        }
    }

    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}

/// Reads and parses a JSON file, naming the file in any error.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    serde_json::from_str(&text).map_err(|source| Error::Json {
        path: path.to_owned(),
        source,
    })
}

/// What an MLX exception says: MLX's message alone. mlx-rs's `Display` adds where the Rust
/// wrapper built the error (`/rustc/…/function.rs:250:5`) and mlx-c ends its text with its
/// own source line (` at …/mlx/c/io.cpp:76`); neither tells a client anything.
pub fn mlx_text(e: &mlx_rs::error::Exception) -> String {
    tracing::debug!(location = %e.location(), what = %e.what(), "MLX exception");
    without_source_line(e.what().trim()).to_string()
}

/// `text` without a trailing ` at <file>:<line>`.
fn without_source_line(text: &str) -> &str {
    let Some((message, place)) = text.rsplit_once(" at ") else {
        return text;
    };
    let line_number = place.rsplit_once(':').is_some_and(|(file, n)| {
        file.contains('.') && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    });
    match line_number && !place.contains(' ') && !message.is_empty() {
        true => message.trim_end(),
        false => text,
    }
}

/// An MLX I/O error's text, its exception (if any) without the location.
fn mlx_io_text(e: &mlx_rs::error::IoError) -> String {
    match e {
        mlx_rs::error::IoError::Exception(x) => mlx_text(x),
        other => other.to_string(),
    }
}

/// The most of a user's value an error message quotes.
const QUOTE_LIMIT: usize = 200;

/// `value` for an error message: cut to 200 characters (at a character boundary), saying how
/// long it was, so a hostile value cannot flood logs and replies.
pub fn quote(value: &str) -> String {
    match value.char_indices().nth(QUOTE_LIMIT) {
        None => value.to_string(),
        Some((cut, _)) => format!("{}… ({} bytes)", &value[..cut], value.len()),
    }
}

/// The most text a status message sent to a client carries.
pub const MESSAGE_LIMIT: usize = 1024;

/// `text` cut to [`MESSAGE_LIMIT`] bytes at a character boundary, ending "… (N bytes)": the
/// last-resort bound at the gRPC edge, for any text a value reached unquoted.
pub fn bounded(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= MESSAGE_LIMIT {
        return std::borrow::Cow::Borrowed(text);
    }
    let tail = format!("… ({} bytes)", text.len());
    let mut cut = MESSAGE_LIMIT - tail.len();
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    std::borrow::Cow::Owned(format!("{}{tail}", &text[..cut]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_texts_fit_the_limit() {
        assert_eq!(bounded("short"), "short");
        for text in [
            "x".repeat(5000),
            "é".repeat(3000),
            "€".repeat(MESSAGE_LIMIT),
        ] {
            let b = bounded(&text);
            assert!(b.len() <= MESSAGE_LIMIT, "{}", b.len());
            assert!(b.ends_with(&format!("… ({} bytes)", text.len())), "{b}");
        }
        let exact = "y".repeat(MESSAGE_LIMIT);
        assert_eq!(bounded(&exact), exact.as_str());
    }

    #[test]
    fn mlx_errors_carry_no_rust_location() {
        let e = Error::from(mlx_rs::error::Exception::custom("[reshape] Cannot reshape"));
        let text = e.to_string();
        assert_eq!(text, "MLX: [reshape] Cannot reshape", "{text}");
        let e = Error::from(mlx_rs::error::Exception::custom(
            "[read] Unable to read 1 bytes from file. at /src/mlx-c/mlx/c/io.cpp:76",
        ));
        assert_eq!(
            e.to_string(),
            "MLX: [read] Unable to read 1 bytes from file."
        );
        assert_eq!(without_source_line("look at me"), "look at me");
    }

    #[test]
    fn quote_cuts_long_values_at_a_char_boundary() {
        assert_eq!(quote("short"), "short");
        let long = "é".repeat(1000);
        let q = quote(&long);
        assert!(q.starts_with(&"é".repeat(200)), "{q}");
        assert!(q.ends_with("… (2000 bytes)"), "{q}");
    }
}
