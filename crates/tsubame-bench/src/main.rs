//! `tsubame-bench` (run as `tsubame bench`): an HTTP/1.1 load generator.
//! See README.md, "tsubame bench", for the flags and the targets format.

mod args;
mod client;
mod error;
mod format;
mod html;
mod report;
mod request;
mod run;
mod stats;
mod targets;
mod url;

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use args::{Command, Config};
use error::{io_message, Error};
use url::{Address, Endpoint, Url};

fn main() -> ExitCode {
    let mut argv = std::env::args();
    let prog = program_name(argv.next().as_deref());
    let args: Vec<String> = argv.collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let result = match args::parse(&args, cores) {
        Ok(Command::Help) => {
            print!("{}", args::usage(&prog));
            return ExitCode::SUCCESS;
        }
        Ok(Command::Version) => {
            println!("{prog} {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Ok(Command::Run(config)) => bench(&config),
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{prog}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `tsubame bench` when started by the Ruby CLI (which sets argv[0]),
/// else the file name.
fn program_name(argv0: Option<&str>) -> String {
    match argv0 {
        Some(name) if name.contains(' ') => name.to_string(),
        Some(name) => Path::new(name)
            .file_name()
            .map_or_else(|| "tsubame-bench".to_string(), |n| n.to_string_lossy().into_owned()),
        None => "tsubame-bench".to_string(),
    }
}

fn bench(config: &Config) -> Result<(), Error> {
    let html_file = match &config.html {
        Some(path) => Some(File::create(path).map_err(|source| Error::File {
            path: path.display().to_string(),
            action: "write",
            source,
        })?),
        None => None,
    };
    let address = preflight(&config.url, config.timeout)?;
    let requests = config
        .specs
        .iter()
        .map(|spec| request::prepare(spec, &config.url.authority, &config.headers, config.keepalive))
        .collect();
    let weights: Vec<u32> = config.specs.iter().map(|s| s.weight).collect();
    let plan = run::Plan {
        address,
        requests,
        schedule: request::schedule(&weights)?,
        connections: config.connections,
        threads: config.threads,
        rate: config.rate,
        duration: config.duration,
        limit: config.requests,
        timeout: config.timeout,
        keepalive: config.keepalive,
        preconnect: config.preconnect,
        progress: !config.quiet && run::stderr_is_terminal(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    watch_interrupt(Arc::clone(&stop));
    let outcome = run::run(plan, stop)?;
    let summary = report::Summary::new(config, &outcome);
    let out = if config.json {
        report::json(&summary) + "\n"
    } else {
        report::text(&summary)
    };
    let mut stdout = std::io::stdout().lock();
    // A closed stdout (`| head`) is not worth an error.
    let _ = stdout.write_all(out.as_bytes()).and_then(|()| stdout.flush());
    if let (Some(mut file), Some(path)) = (html_file, &config.html) {
        file.write_all(html::page(&summary).as_bytes())
            .map_err(|source| Error::File {
                path: path.display().to_string(),
                action: "write",
                source,
            })?;
    }
    Ok(())
}

/// Resolves the URL and opens one connection, so a wrong URL is one clear
/// error instead of a report full of failures.
fn preflight(url: &Url, timeout: Duration) -> Result<Address, Error> {
    let unreachable = |reason: String| Error::Unreachable {
        url: url.text.clone(),
        reason,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| unreachable(io_message(&e)))?;
    runtime.block_on(async {
        let attempt = async {
            match &url.endpoint {
                Endpoint::Unix { path } => {
                    tokio::net::UnixStream::connect(path)
                        .await
                        .map_err(|e| io_message(&e).to_lowercase())?;
                    Ok(Address::Unix(path.clone()))
                }
                Endpoint::Tcp { host, port } => {
                    let addrs: Vec<_> = tokio::net::lookup_host((host.as_str(), *port))
                        .await
                        .map_err(|e| format!("cannot resolve {host}: {}", io_message(&e)))?
                        .collect();
                    let mut last = format!("no address for {host}");
                    for addr in addrs {
                        match tokio::net::TcpStream::connect(addr).await {
                            Ok(_) => return Ok(Address::Tcp(addr)),
                            Err(e) => last = io_message(&e).to_lowercase(),
                        }
                    }
                    Err(last)
                }
            }
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(result) => result.map_err(unreachable),
            Err(_) => Err(unreachable(format!("no connection within {:?}", timeout))),
        }
    })
}

/// The first Ctrl-C stops the run and prints what was measured; a second
/// one exits at once.
fn watch_interrupt(stop: Arc<AtomicBool>) {
    let spawned = std::thread::Builder::new().name("bench-signals".into()).spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
            return;
        };
        runtime.block_on(async {
            if tokio::signal::ctrl_c().await.is_ok() {
                stop.store(true, Ordering::Relaxed);
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        });
    });
    // Without the watcher Ctrl-C simply ends the process, as usual.
    drop(spawned);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_names() {
        assert_eq!(program_name(Some("tsubame bench")), "tsubame bench");
        assert_eq!(program_name(Some("/x/target/release/tsubame-bench")), "tsubame-bench");
        assert_eq!(program_name(None), "tsubame-bench");
    }
}
