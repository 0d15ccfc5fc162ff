//! `dlm id next NAME [--count N]`: unique, increasing ids (seed 001), one
//! library call (`client.ids(NAME).next_batch(N)`: one `INCRBY N`).

use clap::{Args, Subcommand};
use serde::Serialize;

use crate::error::{CliError, EXIT_OK};
use crate::global::Global;
use crate::global::parse::parse_name;
use crate::global::target::connect;
use crate::output;

/// `dlm id ...`
#[derive(Debug, Subcommand)]
pub enum IdCommand {
    /// Print N new ids of the generator NAME, one per line, increasing:
    /// unique across every process and host using NAME, and consecutive
    /// (one INCRBY N). Key: dlm:ids:{NAME}. With AOF (appendfsync always)
    /// an id is never handed out twice, across restarts too.
    Next(NextArgs),
}

/// `dlm id next`
#[derive(Debug, Clone, Args)]
pub struct NextArgs {
    /// The generator's name (1 to 1024 bytes).
    #[arg(value_name = "NAME", value_parser = parse_name)]
    pub name: String,
    /// How many ids (1 to 1000000).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub count: u64,
}

#[derive(Serialize)]
struct IdLine<'a> {
    name: &'a str,
    id: u64,
}

/// `dlm id next`: the ids, one per line (JSON lines with `--json`).
pub async fn next(global: &Global, args: &NextArgs) -> Result<u8, CliError> {
    let client = connect(global, global.url()).await?;
    let ids = client.ids(args.name.clone()).next_batch(args.count).await?;
    if global.json {
        for id in ids {
            let line = IdLine {
                name: &args.name,
                id,
            };
            output::emit(true, &line, String::new)?;
        }
    } else {
        let mut text = String::with_capacity(ids.len() * 8);
        for id in ids {
            text.push_str(&id.to_string());
            text.push('\n');
        }
        text.pop();
        output::line_out(&text)?;
    }
    Ok(EXIT_OK)
}
