//! The crate's one error type: each message is one line that says what to do.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{tool} not found: {install} (searched {searched})")]
    ToolNotFound {
        tool: &'static str,
        install: &'static str,
        searched: String,
    },
    #[error("{0}")]
    BadArgument(String),
    #[error("could not run {program}: {message}")]
    Spawn { program: String, message: String },
    #[error("{0}")]
    Io(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
