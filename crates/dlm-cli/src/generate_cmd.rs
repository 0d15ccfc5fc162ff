//! `dlm completions SHELL` and `dlm man`: the shell completion script and
//! the man page, both generated from the command tree that `cli` assembles
//! and passes in (a command module does not import `cli`).

use std::io::Write;

use clap::Args;
use clap_complete::Shell;

use crate::error::CliError;

/// `dlm completions SHELL`
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for (bash, zsh, fish, elvish, powershell).
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Print the completion script of `shell` for the command tree `cmd`.
pub fn completions(mut cmd: clap::Command, args: &CompletionsArgs) -> Result<u8, CliError> {
    let name = cmd.get_name().to_string();
    // Rendered in memory first: clap_complete panics on a failed write, and
    // a closed pipe (`dlm completions bash | head`) is not worth a panic.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, name, &mut script);
    print_bytes(&script)
}

/// Print the man page (roff) of the command tree `cmd`.
pub fn man(cmd: clap::Command) -> Result<u8, CliError> {
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut page)
        .map_err(CliError::io("rendering the man page"))?;
    print_bytes(&page)
}

fn print_bytes(bytes: &[u8]) -> Result<u8, CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(CliError::io("writing to stdout"))?;
    Ok(0)
}
