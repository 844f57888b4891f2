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

impl Error {
    /// Its exit code: a flag, a file or a tool the command names that is not there is bad
    /// usage; a tool that ran and failed is a problem found.
    pub fn exit(&self) -> common::exit::Exit {
        use common::exit::Exit;
        match self {
            Error::ToolNotFound { .. } | Error::BadArgument(_) => Exit::Usage,
            Error::Spawn { .. } | Error::Io(_) => Exit::Problem,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
