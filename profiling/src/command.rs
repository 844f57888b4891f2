//! A command to run: program and arguments, printed exactly as a shell would take it back.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl ToolCommand {
    pub fn new(program: impl Into<PathBuf>) -> Self {
        ToolCommand {
            program: program.into(),
            args: Vec::new(),
        }
    }

    pub fn arg(&mut self, a: impl Into<String>) -> &mut Self {
        self.args.push(a.into());
        self
    }

    /// The command line, quoted for a POSIX shell: copy, paste, same command.
    pub fn display(&self) -> String {
        std::iter::once(shell_quote(&self.program.to_string_lossy()))
            .chain(self.args.iter().map(|a| shell_quote(a)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Run it with the terminal's stdin, stdout and stderr.
    pub fn run(&self) -> Result<ExitStatus> {
        Command::new(&self.program)
            .args(&self.args)
            .status()
            .map_err(|e| Error::Spawn {
                program: self.program.display().to_string(),
                message: e.to_string(),
            })
    }

    /// Run it and capture stdout (stderr passes through).
    pub fn output(&self) -> Result<(ExitStatus, String)> {
        let out = Command::new(&self.program)
            .args(&self.args)
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(|e| Error::Spawn {
                program: self.program.display().to_string(),
                message: e.to_string(),
            })?;
        Ok((
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ))
    }
}

/// Quote one word for a POSIX shell: left bare when it only holds safe characters, otherwise
/// in single quotes (a single quote inside becomes '\'').
pub fn shell_quote(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Resolve the profiled program: a path must exist; a bare name is looked up on PATH.
pub fn resolve_program(program: &str, path_var: Option<&OsStr>) -> Result<PathBuf> {
    if program.is_empty() {
        return Err(Error::BadArgument(
            "no program to profile: give it after --, e.g. `-- target/release/ch1-intensity --elements 64M`"
                .into(),
        ));
    }
    if program.contains('/') {
        let p = Path::new(program);
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(Error::BadArgument(format!(
                "program '{program}' does not exist: build it first (cargo build --release)"
            )))
        };
    }
    crate::discover::on_path(program, path_var).ok_or_else(|| {
        Error::BadArgument(format!(
            "program '{program}' is not on PATH: give its path, e.g. target/release/{program}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_round_trips_through_a_shell_reading() {
        assert_eq!(shell_quote("--n"), "--n");
        assert_eq!(shell_quote("64M"), "64M");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
        assert_eq!(shell_quote("regex:fused.*"), "'regex:fused.*'");
    }

    #[test]
    fn display_quotes_every_word() {
        let mut c = ToolCommand::new("/opt/my tools/ncu");
        c.arg("--nvtx-include").arg("ch1-intensity:fused/");
        c.arg("--out").arg("x y");
        assert_eq!(
            c.display(),
            "'/opt/my tools/ncu' --nvtx-include ch1-intensity:fused/ --out 'x y'"
        );
    }

    #[test]
    fn missing_programs_are_bad_arguments() {
        let e = resolve_program("./no/such/binary", None).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        let e = resolve_program("no-such-binary-anywhere", Some(OsStr::new(""))).unwrap_err();
        assert!(e.to_string().contains("not on PATH"), "{e}");
        assert!(resolve_program("", None).is_err());
    }
}
