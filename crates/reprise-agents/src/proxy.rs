//! The driver's end of an attempt's network namespace: it serves the
//! listeners the supervisor bound inside (`crate::network` says which and
//! why), from outside, where the real network is.
//!
//! One thread waits on every listener and on a wake-up pipe; each accepted
//! connection gets a thread that connects it onwards (a forward to its
//! fixed address, or a `CONNECT` checked against the allow-list) and copies
//! bytes both ways. Dropping the [`Proxy`] stops the waiting thread and
//! shuts every open connection down, so nothing outlives the attempt.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use reprise_core::plan::Endpoint;
use rustix::event::{PollFd, PollFlags, poll};

use crate::network::Route;

/// Connections open at once through one attempt's proxy; more wait in the
/// listeners' backlog until one closes.
const MAX_CONNECTIONS: usize = 256;
/// How long a connection onwards may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client has to send its whole `CONNECT` request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest `CONNECT` request head read.
const MAX_REQUEST_BYTES: usize = 8 * 1024;

/// The server of one attempt's listeners; stopped when dropped.
#[derive(Debug)]
pub(crate) struct Proxy {
    shared: Arc<Shared>,
    wake: Option<OwnedFd>,
    waiting: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    stopping: AtomicBool,
    next: AtomicU64,
    /// Both ends of every open connection, to shut them down on stop.
    open: Mutex<HashMap<u64, Vec<TcpStream>>>,
}

impl Shared {
    fn register(&self, id: u64, stream: &TcpStream) -> bool {
        if self.stopping.load(Ordering::SeqCst) {
            return false;
        }
        let Ok(copy) = stream.try_clone() else {
            return false;
        };
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.entry(id).or_default().push(copy);
        true
    }

    fn forget(&self, id: u64) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.remove(&id);
    }

    fn count(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Proxy {
    /// Serves `listeners` (each bound inside the namespace) by their routes
    /// until dropped.
    pub(crate) fn start(listeners: Vec<(OwnedFd, Route)>) -> io::Result<Self> {
        let (woken, wake) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let listeners: Vec<(TcpListener, Arc<Route>)> = listeners
            .into_iter()
            .map(|(fd, route)| {
                let listener = TcpListener::from(fd);
                listener.set_nonblocking(true)?;
                Ok((listener, Arc::new(route)))
            })
            .collect::<io::Result<_>>()?;
        let shared = Arc::new(Shared::default());
        let serving = Arc::clone(&shared);
        let waiting = thread::Builder::new()
            .name("reprise-proxy".to_owned())
            .spawn(move || serve(&listeners, &woken, &serving))?;
        Ok(Self {
            shared,
            wake: Some(wake),
            waiting: Some(waiting),
        })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Closing the pipe's write end wakes the waiting thread.
        drop(self.wake.take());
        if let Some(waiting) = self.waiting.take() {
            let _ = waiting.join();
        }
        let open = std::mem::take(
            &mut *self
                .shared
                .open
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for stream in open.into_values().flatten() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

/// Waits on every listener until `woken` is (its write end closed).
fn serve(listeners: &[(TcpListener, Arc<Route>)], woken: &OwnedFd, shared: &Arc<Shared>) {
    loop {
        let mut fds: Vec<PollFd<'_>> = listeners
            .iter()
            .map(|(listener, _)| PollFd::new(listener, PollFlags::IN))
            .collect();
        fds.push(PollFd::new(woken, PollFlags::IN));
        if poll(&mut fds, None).is_err() {
            continue;
        }
        let ready: Vec<bool> = fds.iter().map(|fd| !fd.revents().is_empty()).collect();
        drop(fds);
        if ready.last().copied().unwrap_or(true) || shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        for ((listener, route), ready) in listeners.iter().zip(ready) {
            if !ready {
                continue;
            }
            while let Ok((inside, _)) = listener.accept() {
                if shared.count() >= MAX_CONNECTIONS {
                    // Refused at once: the client sees a reset, not a hang.
                    drop(inside);
                    continue;
                }
                let id = shared.next.fetch_add(1, Ordering::SeqCst);
                let route = Arc::clone(route);
                let shared = Arc::clone(shared);
                let _ = thread::Builder::new()
                    .name("reprise-proxy-conn".to_owned())
                    .spawn(move || {
                        let _ = connect(id, inside, &route, &shared);
                        shared.forget(id);
                    });
            }
        }
    }
}

/// Connects `inside` onwards by its route, then copies both ways until
/// both sides are done.
fn connect(id: u64, inside: TcpStream, route: &Route, shared: &Shared) -> io::Result<()> {
    inside.set_nonblocking(false)?;
    if !shared.register(id, &inside) {
        return Ok(());
    }
    let (outside, early) = match route {
        Route::Forward(target) => (
            TcpStream::connect_timeout(target, CONNECT_TIMEOUT)?,
            Vec::new(),
        ),
        Route::Connect(allowed) => match tunnel(&inside, allowed)? {
            Some(opened) => opened,
            None => return Ok(()),
        },
    };
    if !shared.register(id, &outside) {
        return Ok(());
    }
    if !early.is_empty() {
        (&outside).write_all(&early)?;
    }
    copy_both_ways(inside, outside);
    Ok(())
}

/// Reads a `CONNECT host:port` request from `client` and, when the
/// endpoint is allowed, connects to it and says so: the connection and
/// any bytes the client sent after its request. `None` once the client
/// has been answered with a refusal.
fn tunnel(client: &TcpStream, allowed: &[Endpoint]) -> io::Result<Option<(TcpStream, Vec<u8>)>> {
    client.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    let mut head = Vec::with_capacity(1024);
    let mut buffer = [0u8; 1024];
    let end = loop {
        if let Some(end) = find(&head, b"\r\n\r\n") {
            break end + 4;
        }
        if head.len() >= MAX_REQUEST_BYTES {
            refuse(
                client,
                "431 Request Header Fields Too Large",
                "the request is too long",
            )?;
            return Ok(None);
        }
        let read = (&*client).read(&mut buffer)?;
        if read == 0 {
            return Ok(None);
        }
        head.extend_from_slice(&buffer[..read]);
    };
    client.set_read_timeout(None)?;
    let early = head.split_off(end);
    let line = head
        .split(|byte| *byte == b'\n')
        .next()
        .map(|line| String::from_utf8_lossy(line).trim_end().to_owned())
        .unwrap_or_default();
    let mut words = line.split(' ');
    let (Some(method), Some(authority)) = (words.next(), words.next()) else {
        refuse(client, "400 Bad Request", "not an HTTP request")?;
        return Ok(None);
    };
    if method != "CONNECT" {
        refuse(
            client,
            "405 Method Not Allowed",
            "this proxy only tunnels (CONNECT host:port)",
        )?;
        return Ok(None);
    }
    let Some(target) = Endpoint::parse(authority)
        .ok()
        .filter(|target| allowed.contains(target))
    else {
        refuse(
            client,
            "403 Forbidden",
            &format!("{authority} is not in this task's network policy (the plan's network:)"),
        )?;
        return Ok(None);
    };
    let Some(outside) = open(&target) else {
        refuse(
            client,
            "502 Bad Gateway",
            &format!("cannot connect to {target}"),
        )?;
        return Ok(None);
    };
    (&*client).write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?;
    Ok(Some((outside, early)))
}

/// A connection to `target`, trying each of its addresses.
fn open(target: &Endpoint) -> Option<TcpStream> {
    let addresses: Vec<SocketAddr> = (target.host.as_str(), target.port)
        .to_socket_addrs()
        .ok()?
        .collect();
    addresses
        .iter()
        .find_map(|address| TcpStream::connect_timeout(address, CONNECT_TIMEOUT).ok())
}

fn refuse(client: &TcpStream, status: &str, why: &str) -> io::Result<()> {
    let body = format!("reprise: {why}\n");
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    (&*client).write_all(response.as_bytes())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Copies `a` to `b` and `b` to `a`, each on its own thread, closing each
/// direction's writing side when its reading side ends.
fn copy_both_ways(a: TcpStream, b: TcpStream) {
    let (Ok(a_reader), Ok(b_writer)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let forward = thread::Builder::new()
        .name("reprise-proxy-copy".to_owned())
        .spawn(move || one_way(a_reader, b_writer));
    one_way(b, a);
    if let Ok(forward) = forward {
        let _ = forward.join();
    }
}

fn one_way(mut from: TcpStream, mut to: TcpStream) {
    let _ = io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.as_fd();
}

#[cfg(test)]
mod tests {
    use super::Proxy;
    use crate::network::Route;
    use reprise_core::plan::Endpoint;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::OwnedFd;

    /// A server that answers each connection with "hello " and what it read.
    fn echo_server() -> (TcpListener, std::net::SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let at = listener.local_addr().expect("address");
        (listener, at)
    }

    fn answer_one(listener: &TcpListener) {
        let (mut stream, _) = listener.accept().expect("accept");
        let mut word = [0u8; 4];
        stream.read_exact(&mut word).expect("read");
        stream.write_all(b"hello ").expect("write");
        stream.write_all(&word).expect("write");
    }

    /// A listener standing for one bound inside a namespace.
    fn inside() -> (OwnedFd, std::net::SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let at = listener.local_addr().expect("address");
        (OwnedFd::from(listener), at)
    }

    #[test]
    fn a_forward_reaches_its_target_and_a_connect_only_what_is_allowed() {
        let (server, target) = echo_server();
        let (forward_fd, forward_at) = inside();
        let (proxy_fd, proxy_at) = inside();
        let allowed = vec![Endpoint::parse(&target.to_string()).expect("endpoint")];
        let proxy = Proxy::start(vec![
            (forward_fd, Route::Forward(target)),
            (proxy_fd, Route::Connect(allowed)),
        ])
        .expect("the proxy starts");

        let mut client = TcpStream::connect(forward_at).expect("connect");
        client.write_all(b"ping").expect("write");
        answer_one(&server);
        let mut reply = String::new();
        client.read_to_string(&mut reply).expect("read");
        assert_eq!(reply, "hello ping");

        let mut tunnel = TcpStream::connect(proxy_at).expect("connect");
        write!(
            tunnel,
            "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\nping"
        )
        .expect("write");
        answer_one(&server);
        let mut reply = String::new();
        tunnel.read_to_string(&mut reply).expect("read");
        assert_eq!(
            reply,
            "HTTP/1.1 200 Connection established\r\n\r\nhello ping"
        );

        let mut refused = TcpStream::connect(proxy_at).expect("connect");
        write!(refused, "CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n").expect("write");
        let mut reply = String::new();
        refused.read_to_string(&mut reply).expect("read");
        assert!(reply.starts_with("HTTP/1.1 403 Forbidden"), "{reply}");
        assert!(reply.contains("127.0.0.1:1 is not in this task's network policy"));

        let mut plain = TcpStream::connect(proxy_at).expect("connect");
        write!(plain, "GET http://{target}/ HTTP/1.1\r\n\r\n").expect("write");
        let mut reply = String::new();
        plain.read_to_string(&mut reply).expect("read");
        assert!(reply.starts_with("HTTP/1.1 405"), "{reply}");
        drop(proxy);
    }

    #[test]
    fn dropping_the_proxy_closes_what_is_open_and_stops_listening() {
        let (server, target) = echo_server();
        let (forward_fd, forward_at) = inside();
        let proxy = Proxy::start(vec![(forward_fd, Route::Forward(target))]).expect("start");
        let mut client = TcpStream::connect(forward_at).expect("connect");
        client.write_all(b"ping").expect("write");
        let (held, _) = server.accept().expect("accept");
        drop(proxy);
        // The open connection is shut down: the client reads its end.
        let mut rest = Vec::new();
        let _ = client.read_to_end(&mut rest);
        assert!(rest.is_empty());
        drop(held);
        // Nothing listens any more.
        assert!(TcpStream::connect(forward_at).is_err());
    }
}
