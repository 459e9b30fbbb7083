//! Serves a scripted model scenario on loopback until killed.
//!
//! Usage: reprise-model-server --scenario FILE --log FILE
//! Prints `listening on http://127.0.0.1:PORT` to stderr once ready.

#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use reprise_testkit::model_server::{ModelServer, Scenario};

const USAGE: &str = "usage: reprise-model-server --scenario FILE --log FILE";

fn main() -> Result<()> {
    let mut scenario = None;
    let mut log = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let slot = match arg.as_str() {
            "--scenario" => &mut scenario,
            "--log" => &mut log,
            _ => bail!("unknown argument {arg:?}; {USAGE}"),
        };
        *slot = Some(PathBuf::from(args.next().context(USAGE)?));
    }
    let (Some(scenario), Some(log)) = (scenario, log) else {
        bail!(USAGE);
    };
    let scenario = Scenario::load(&scenario)?;
    let server = ModelServer::start(scenario, log.clone())
        .with_context(|| format!("cannot start the model server with log {}", log.display()))?;
    writeln!(std::io::stderr(), "listening on {}", server.base_url())?;
    loop {
        std::thread::park();
    }
}
