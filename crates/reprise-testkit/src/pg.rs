//! PostgreSQL for tests: a database of its own per test on the machine's
//! server, a server of a test's own (for restarting it), and a TCP proxy
//! between a client and the server that a test can cut (a partition).
//!
//! The machine's server is `REPRISE_TEST_PG_URL` when set, else
//! `postgres://postgres@127.0.0.1:5432/postgres` (trust authentication, as
//! `scripts/test` sets it up on a machine without one).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use sqlx::Connection;
use sqlx::postgres::PgConnection;

/// The server tests use when `REPRISE_TEST_PG_URL` is not set.
pub const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The server tests make their databases on.
pub fn server_url() -> String {
    std::env::var("REPRISE_TEST_PG_URL")
        .ok()
        .filter(|url| !url.is_empty())
        .unwrap_or_else(|| DEFAULT_PG_URL.to_owned())
}

/// A database made for one test (`reprise_t_<random>`), dropped with it.
#[derive(Debug)]
pub struct TestDatabase {
    /// The URL of the test's database.
    pub url: String,
    pub name: String,
    admin_url: String,
}

impl TestDatabase {
    /// A new database on the machine's server.
    pub fn create() -> Result<Self> {
        Self::create_on(&server_url())
    }

    /// A new database on the server `admin_url` reaches.
    pub fn create_on(admin_url: &str) -> Result<Self> {
        let name = format!("reprise_t_{}", unique_suffix());
        execute(admin_url, &format!("create database {name}"))
            .with_context(|| format!("cannot create test database {name} on {admin_url}: is PostgreSQL running there (scripts/test starts one)?"))?;
        Ok(Self {
            url: with_database(admin_url, &name),
            name,
            admin_url: admin_url.to_owned(),
        })
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let _ = execute(
            &self.admin_url,
            &format!("drop database if exists {} with (force)", self.name),
        );
    }
}

/// Runs one statement on its own connection.
pub fn execute(url: &str, statement: &str) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let statement = statement.to_owned();
    runtime.block_on(async move {
        let mut connection = PgConnection::connect(url).await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
            .execute(&mut connection)
            .await?;
        connection.close().await?;
        anyhow::Ok(())
    })
}

/// The first column of every row `query` returns, as text (`query` must
/// select text), on its own connection.
pub fn query_column(url: &str, query: &str) -> Result<Vec<String>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let query = query.to_owned();
    runtime.block_on(async move {
        let mut connection = PgConnection::connect(url).await?;
        let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(query))
            .fetch_all(&mut connection)
            .await?;
        connection.close().await?;
        anyhow::Ok(rows.into_iter().map(|(value,)| value).collect())
    })
}

/// `url` naming database `name` instead of its own.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let authority_start = base.find("://").map_or(0, |at| at + 3);
    let host_part = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    format!("{host_part}/{name}{query}")
}

/// The server address `url` names (`host:port`, port 5432 by default).
pub fn address(url: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    let (host, port) = host_port(url);
    (host, port.unwrap_or(5432))
        .to_socket_addrs()?
        .next()
        .with_context(|| format!("{url} names no address"))
}

/// `url` pointed at `addr` instead of its own host and port.
pub fn rehost(url: &str, addr: SocketAddr) -> String {
    let authority_start = url.find("://").map_or(0, |at| at + 3);
    let rest = &url[authority_start..];
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let user = rest[..end].rfind('@').map_or("", |at| &rest[..=at]);
    format!("{}{user}{addr}{}", &url[..authority_start], &rest[end..])
}

fn host_port(url: &str) -> (&str, Option<u16>) {
    let authority_start = url.find("://").map_or(0, |at| at + 3);
    let rest = &url[authority_start..];
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host_port = authority
        .rfind('@')
        .map_or(authority, |at| &authority[at + 1..]);
    match host_port.rsplit_once(':') {
        Some((host, port)) => (host, port.parse().ok()),
        None => (host_port, None),
    }
}

fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    let count = COUNTER.fetch_add(1, Ordering::SeqCst);
    format!(
        "{:x}{:x}{count:x}",
        std::process::id(),
        nanos & 0xffff_ffff_ffff
    )
}

/// A PostgreSQL server of a test's own: a cluster made by `initdb` in a
/// temporary directory, listening on a free loopback port, run as a
/// non-root user (the server refuses root), so the test can stop and start
/// it.
#[derive(Debug)]
pub struct PgServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// Who runs the server when the test runs as root.
    run_as: Option<String>,
}

impl PgServer {
    /// Makes the cluster and starts the server.
    pub fn start() -> Result<Self> {
        let bin = pg_bin_dir()?;
        let run_as = is_root().then(|| "postgres".to_owned());
        if let Some(user) = &run_as {
            ensure_user(user)?;
        }
        let dir = tempfile::Builder::new()
            .prefix("reprise-pg-")
            .tempdir()
            .context("cannot make the test server's directory")?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))?;
        let server = Self {
            dir,
            bin,
            port: free_port()?,
            run_as,
        };
        let data = server.data_dir();
        server.run(
            "initdb",
            &[
                "-D",
                path_str(&data)?,
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        )?;
        server.start_again()?;
        Ok(server)
    }

    /// The URL of database `name` on this server.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Starts the (stopped) server and waits until it accepts connections.
    pub fn start_again(&self) -> Result<()> {
        let data = self.data_dir();
        let log = self.dir.path().join("server.log");
        let options = format!(
            "-p {} -h 127.0.0.1 -k {}",
            self.port,
            path_str(self.dir.path())?
        );
        self.run(
            "pg_ctl",
            &[
                "-D",
                path_str(&data)?,
                "-l",
                path_str(&log)?,
                "-o",
                &options,
                "-w",
                "start",
            ],
        )
    }

    /// Stops the server: `fast` ends sessions and checkpoints.
    pub fn stop(&self) -> Result<()> {
        let data = self.data_dir();
        self.run(
            "pg_ctl",
            &["-D", path_str(&data)?, "-m", "fast", "-w", "stop"],
        )
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<()> {
        let program = self.bin.join(program);
        let mut command = match &self.run_as {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(&program);
                command
            }
            None => Command::new(&program),
        };
        let output = command
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .with_context(|| format!("cannot run {}", program.display()))?;
        if !output.status.success() {
            bail!(
                "{} {args:?} failed: {}{}",
                program.display(),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if let Ok(data) = path_str(&self.data_dir()) {
            let _ = self.run("pg_ctl", &["-D", data, "-m", "immediate", "-w", "stop"]);
        }
    }
}

/// Where `initdb` and `pg_ctl` are: `REPRISE_TEST_PG_BIN`, else beside
/// `initdb` on PATH, else Debian's `/usr/lib/postgresql/<newest>/bin`.
fn pg_bin_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("REPRISE_TEST_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let on_path = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).find(|dir| dir.join("initdb").is_file()));
    if let Some(dir) = on_path {
        return Ok(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("initdb").is_file())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).context(
        "initdb is not on PATH nor under /usr/lib/postgresql: install Debian's postgresql package",
    )
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| output.stdout.trim_ascii() == b"0")
}

/// Creates system user `user` when it does not exist.
fn ensure_user(user: &str) -> Result<()> {
    let exists = Command::new("id")
        .arg(user)
        .output()
        .is_ok_and(|output| output.status.success());
    if !exists {
        let status = Command::new("useradd")
            .args(["--system", "--no-create-home", user])
            .status()
            .context("cannot run useradd")?;
        if !status.success() {
            bail!("useradd {user} failed: create a non-root user {user} to run the test server");
        }
    }
    Ok(())
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn path_str(path: &Path) -> Result<&str> {
    path.to_str()
        .with_context(|| format!("path {} is not UTF-8", path.display()))
}

/// A TCP proxy on loopback in front of `upstream`. `cut` closes every
/// connection through it and refuses new ones until `restore`: to the
/// client, the server is unreachable; to the server, the client is gone.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    closed: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
}

impl TcpProxy {
    pub fn start(upstream: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let proxy = Self {
            addr: listener.local_addr()?,
            cut: Arc::new(AtomicBool::new(false)),
            closed: Arc::new(AtomicBool::new(false)),
            streams: Arc::new(Mutex::new(Vec::new())),
        };
        let (cut, closed, streams) = (
            proxy.cut.clone(),
            proxy.closed.clone(),
            proxy.streams.clone(),
        );
        thread::spawn(move || {
            for client in listener.incoming() {
                if closed.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                if cut.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let _ = connect_through(client, upstream, &streams);
            }
        });
        Ok(proxy)
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes every connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        let streams = std::mem::take(&mut *lock(&self.streams));
        for stream in streams {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.cut();
        self.closed.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

fn connect_through(
    client: TcpStream,
    upstream: SocketAddr,
    streams: &Mutex<Vec<TcpStream>>,
) -> Result<()> {
    let server = TcpStream::connect_timeout(&upstream, Duration::from_secs(5))?;
    {
        let mut streams = lock(streams);
        streams.push(client.try_clone()?);
        streams.push(server.try_clone()?);
    }
    pump(client.try_clone()?, server.try_clone()?);
    pump(server, client);
    Ok(())
}

/// Copies `from` to `to` on a thread until either side closes.
fn pump(mut from: TcpStream, mut to: TcpStream) {
    thread::spawn(move || {
        let mut buffer = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(read) => {
                    if to.write_all(&buffer[..read]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    });
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_pointed_at_another_database() {
        assert_eq!(
            with_database("postgres://u@h:5432/postgres", "x"),
            "postgres://u@h:5432/x"
        );
        assert_eq!(
            with_database("postgres://u@h:5432/postgres?sslmode=disable", "x"),
            "postgres://u@h:5432/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
        let addr: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        assert_eq!(
            rehost("postgres://u@h:5432/db?x=1", addr),
            "postgres://u@127.0.0.1:7000/db?x=1"
        );
        assert_eq!(
            rehost("postgres://h/db", addr),
            "postgres://127.0.0.1:7000/db"
        );
        assert_eq!(host_port("postgres://u@h:5433/db"), ("h", Some(5433)));
        assert_eq!(host_port("postgres://h/db"), ("h", None));
    }
}
