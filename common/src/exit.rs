//! The exit codes of every binary of the project, one scheme, so that a program running another
//! (compare its variants, the tuner a training program, a script the binaries) reads what
//! happened from the code alone:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done: everything ran, verified and passed its gate |
//! | 1 | a problem found: a wrong answer, a regression, an error while running |
//! | 2 | bad usage: a flag or value refused before anything ran (clap's own code) |
//! | 3 | no GPU or driver to run on (or a CUDA library missing) |

use std::process::ExitCode;

use crate::error::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Done,
    Problem,
    Usage,
    NoGpu,
}

impl Exit {
    pub const fn code(self) -> u8 {
        match self {
            Exit::Done => 0,
            Exit::Problem => 1,
            Exit::Usage => 2,
            Exit::NoGpu => 3,
        }
    }

    /// What a process's exit code says (None for a code outside the scheme).
    pub fn from_code(code: i32) -> Option<Exit> {
        [Exit::Done, Exit::Problem, Exit::Usage, Exit::NoGpu]
            .into_iter()
            .find(|e| e.code() as i32 == code)
    }

    /// The code for a failed run: no GPU or driver, bad usage (a [usage] error, a clap error, a
    /// GPU ordinal that does not exist), or a problem.
    pub fn of_error(error: &anyhow::Error) -> Exit {
        if let Some(coded) = error.downcast_ref::<Coded>() {
            return coded.exit;
        }
        if error.downcast_ref::<clap::Error>().is_some() {
            return Exit::Usage;
        }
        match error.downcast_ref::<Error>() {
            Some(Error::NoDriver | Error::NoDevice(_) | Error::MissingLibrary(..)) => Exit::NoGpu,
            Some(Error::BadDevice { .. }) => Exit::Usage,
            _ => Exit::Problem,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

/// An error that carries its own exit code: bad usage found after the flags parsed (sizes that
/// make no plan, a list naming nothing), or a missing GPU learnt second hand (from a child
/// process's exit code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coded {
    pub exit: Exit,
    pub message: String,
}

impl std::fmt::Display for Coded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Coded {}

/// Bad usage, as anyhow's error: `check().map_err(usage)?`.
pub fn usage(message: impl std::fmt::Display) -> anyhow::Error {
    Coded {
        exit: Exit::Usage,
        message: message.to_string(),
    }
    .into()
}

/// No GPU or driver, as anyhow's error, for a message that is not [Error]'s own.
pub fn no_gpu(message: impl std::fmt::Display) -> anyhow::Error {
    Coded {
        exit: Exit::NoGpu,
        message: message.to_string(),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for e in [Exit::Done, Exit::Problem, Exit::Usage, Exit::NoGpu] {
            assert_eq!(Exit::from_code(e.code() as i32), Some(e));
        }
        assert_eq!(Exit::from_code(101), None, "a panic is outside the scheme");
    }

    #[test]
    fn errors_map_to_their_code() {
        let of = |e: anyhow::Error| Exit::of_error(&e);
        assert_eq!(of(Error::NoDriver.into()), Exit::NoGpu);
        assert_eq!(of(Error::NoDevice(String::new()).into()), Exit::NoGpu);
        assert_eq!(
            of(Error::MissingLibrary("libnvrtc", "NVRTC").into()),
            Exit::NoGpu
        );
        assert_eq!(
            of(Error::BadDevice {
                requested: 3,
                count: 1
            }
            .into()),
            Exit::Usage
        );
        assert_eq!(of(usage("--chunk is larger than the array")), Exit::Usage);
        let clap_error = clap::Command::new("x")
            .try_get_matches_from(["x", "--nope"])
            .unwrap_err();
        assert_eq!(of(clap_error.into()), Exit::Usage);
        assert_eq!(of(no_gpu("a child found no GPU")), Exit::NoGpu);
        assert_eq!(of(anyhow::anyhow!("anything else")), Exit::Problem);
        assert_eq!(of(Error::invalid("x").into()), Exit::Problem);
        // Context on top keeps the code.
        assert_eq!(
            of(anyhow::Error::new(Error::NoDriver).context("opening the GPU")),
            Exit::NoGpu
        );
    }
}
