//! The walls beyond the file system (issue 43): a contained agent or gate
//! connects only where its plan's `network:` lets it, and sees no process
//! but its own. Each attack runs through the binary, as a hostile agent
//! would; each test also runs it where the walls cannot be built (debug
//! builds pretend so on `REPRISE_TEST_NO_NAMESPACES`), to show what the
//! attack gets without them.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;

use super::*;

/// A service of this machine's, as PostgreSQL or Redis would be: listens on
/// every address, greets each connection with one line and counts them.
struct Service {
    port: u16,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    serving: Option<JoinHandle<()>>,
}

impl Service {
    fn start(greeting: &'static str) -> Self {
        let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (counted, stopped) = (Arc::clone(&accepted), Arc::clone(&stop));
        let serving = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        counted.fetch_add(1, Ordering::SeqCst);
                        let _ = stream.write_all(format!("{greeting}\n").as_bytes());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Self {
            port,
            accepted,
            stop,
            serving: Some(serving),
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(serving) = self.serving.take() {
            let _ = serving.join();
        }
    }
}

/// This machine's address on its network (not the loopback): what an
/// endpoint off the machine looks like to the sandbox.
fn outside_address() -> Ipv4Addr {
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
    socket
        .connect(SocketAddr::from(([192, 0, 2, 255], 9)))
        .or_else(|_| socket.connect(SocketAddr::from(([10, 255, 255, 255], 9))))
        .expect("this machine has a network address besides its loopback");
    match socket.local_addr().unwrap().ip() {
        std::net::IpAddr::V4(address) if !address.is_loopback() => address,
        other => panic!("this machine's address is {other}, not one off the loopback"),
    }
}

/// The probe an agent or gate runs: each argument `direct=HOST:PORT` (a
/// plain connection) or `tunnel=HOST:PORT` (an HTTP CONNECT through the
/// proxy `HTTPS_PROXY` names), each answer in `FILE` as JSON.
const PROBE: &str = r#"
import json, os, socket, sys
def direct(target):
    host, port = target.rsplit(":", 1)
    try:
        s = socket.create_connection((host, int(port)), 3)
        return "connected: " + s.recv(64).decode().strip()
    except Exception as error:
        return "refused: %s" % error
def tunnel(target):
    proxy = os.environ.get("HTTPS_PROXY")
    if not proxy:
        return "no proxy"
    host, port = proxy.rsplit("/", 1)[-1].rsplit(":", 1)
    s = socket.create_connection((host, int(port)), 3)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(1024)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n")[0].decode()
    if " 200 " not in status:
        return "proxy said: " + status
    while b"\n" not in rest:
        chunk = s.recv(64)
        if not chunk:
            break
        rest += chunk
    return "tunnelled: " + rest.decode().strip()
answers = {}
for arg in sys.argv[2:]:
    kind, target = arg.split("=", 1)
    answers[arg] = direct(target) if kind == "direct" else tunnel(target)
json.dump(answers, open(sys.argv[1], "w"))
"#;

/// A plan command (a YAML flow list) that runs the probe into `file`.
fn probe(file: &str, targets: &[String]) -> String {
    let mut argv = vec![
        "python3".to_owned(),
        "-c".to_owned(),
        PROBE.to_owned(),
        file.to_owned(),
    ];
    argv.extend(targets.iter().cloned());
    serde_json::to_string(&argv).unwrap()
}

/// A gate's `run:` that runs the probe into `file` and passes.
fn probe_gate(file: &str, targets: &[String]) -> String {
    let quoted: Vec<String> = targets.iter().map(|target| format!("'{target}'")).collect();
    format!("python3 -c \"$PROBE\" {file} {} ; true", quoted.join(" "))
}

fn answers(env: &Env, task: &str, file: &str) -> Value {
    let path = worktree_of(env, task).join(file);
    serde_json::from_str(
        &fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display())),
    )
    .unwrap()
}

fn said<'a>(answers: &'a Value, kind: &str, target: &str) -> &'a str {
    answers[format!("{kind}={target}")]
        .as_str()
        .unwrap_or_else(|| panic!("no answer for {kind}={target}: {answers}"))
}

/// The attack: a contained agent connects to the machine's services (a
/// database on the loopback, another on the machine's network address) and
/// through the proxy. By default (a `command` agent: `network: none`) it
/// reaches nothing; listed endpoints it reaches, the loopback one directly
/// and the other only through the allow-list proxy, which refuses the
/// rest; `network: all` reaches everything; a gate reaches nothing unless
/// its own `network:` says.
#[test]
fn a_contained_agent_and_its_gates_connect_only_where_the_plan_lets_them() {
    let database = Service::start("database");
    let other = Service::start("other");
    let outside = outside_address();
    let (db, db_out) = (
        format!("127.0.0.1:{}", database.port),
        format!("{outside}:{}", database.port),
    );
    let (other_local, other_out) = (
        format!("127.0.0.1:{}", other.port),
        format!("{outside}:{}", other.port),
    );
    let everything = [
        format!("direct={db}"),
        format!("direct={db_out}"),
        format!("direct={other_local}"),
        format!("direct={other_out}"),
        format!("tunnel={db_out}"),
        format!("tunnel={other_out}"),
    ];
    let mut env = Env::git();
    env.vars.push(("PROBE".into(), PROBE.into()));
    env.ignore(&["closed.json", "granted.json"]);
    assert_success(&env.run(&["init"]));
    env.plan(&format!(
        r#"
version: 1
name: walls
seats: 3
defaults: {{ agent: command, timeout: 2m, max_retries: 0 }}
tasks:
  - id: default
    prompt: "reach the database"
    command: {default}
    pass_env: [PROBE]
    gates:
      - {{ name: closed, run: {closed:?} }}
      - {{ name: granted, run: {granted:?}, network: ["{db}"] }}
  - id: listed
    prompt: "reach the database"
    network: ["{db}", "{other_out}"]
    command: {listed}
  - id: open
    prompt: "reach the database"
    network: all
    command: {open}
"#,
        default = probe("reached.json", &everything),
        listed = probe("reached.json", &everything),
        open = probe("reached.json", &everything),
        closed = probe_gate("closed.json", &[format!("direct={db}")]),
        granted = probe_gate(
            "granted.json",
            &[format!("direct={db}"), format!("direct={other_local}")]
        ),
    ));
    let output = env.run(&["run", "plan.yaml", "--keep-worktrees", "--json"]);
    assert_success(&output);

    let closed = answers(&env, "default", "reached.json");
    for answer in everything.iter().map(|arg| arg.split_once('=').unwrap()) {
        let said = said(&closed, answer.0, answer.1);
        assert!(
            said.starts_with("refused") || said == "no proxy",
            "{answer:?}: {said}"
        );
    }
    let listed = answers(&env, "listed", "reached.json");
    assert_eq!(said(&listed, "direct", &db), "connected: database");
    assert!(said(&listed, "direct", &other_local).starts_with("refused"));
    // Off the loopback, only through the proxy, and only what is listed.
    assert!(said(&listed, "direct", &other_out).starts_with("refused"));
    assert_eq!(said(&listed, "tunnel", &other_out), "tunnelled: other");
    assert_eq!(
        said(&listed, "tunnel", &db_out),
        "proxy said: HTTP/1.1 403 Forbidden"
    );
    let open = answers(&env, "open", "reached.json");
    assert_eq!(said(&open, "direct", &db), "connected: database");
    assert_eq!(said(&open, "direct", &other_local), "connected: other");
    assert_eq!(said(&open, "direct", &other_out), "connected: other");

    let gate_closed = answers(&env, "default", "closed.json");
    assert!(said(&gate_closed, "direct", &db).starts_with("refused"));
    let gate_granted = answers(&env, "default", "granted.json");
    assert_eq!(said(&gate_granted, "direct", &db), "connected: database");
    assert!(said(&gate_granted, "direct", &other_local).starts_with("refused"));

    // What reached the database: the listed agent, the open one (twice:
    // loopback and network address) and the granted gate. Nothing else.
    assert_eq!(database.accepted(), 4);
    // The other service: the listed agent's tunnel, and the open agent.
    assert_eq!(other.accepted(), 3);
}

/// Where namespaces cannot be made, Landlock's TCP rules hold the network
/// by port: a `none` agent reaches no port, a listed one only its port (on
/// any host: the weaker wall, and what `run` warns of).
#[test]
fn without_namespaces_landlock_holds_the_network_by_port() {
    let database = Service::start("database");
    let other = Service::start("other");
    let db = format!("127.0.0.1:{}", database.port);
    let other_local = format!("127.0.0.1:{}", other.port);
    let targets = [format!("direct={db}"), format!("direct={other_local}")];
    let mut env = Env::git();
    env.vars
        .push(("REPRISE_TEST_NO_NAMESPACES".into(), "1".into()));
    assert_success(&env.run(&["init"]));
    env.plan(&format!(
        r#"
version: 1
name: ports
seats: 2
defaults: {{ agent: command, timeout: 2m, max_retries: 0 }}
tasks:
  - id: closed
    prompt: "reach the database"
    command: {closed}
  - id: listed
    prompt: "reach the database"
    network: ["{db}"]
    command: {listed}
"#,
        closed = probe("reached.json", &targets),
        listed = probe("reached.json", &targets),
    ));
    let output = env.run(&["run", "plan.yaml", "--keep-worktrees"]);
    assert_success(&output);
    let printed = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        printed
            .matches("warning: this machine gives attempts no namespaces of their own")
            .count(),
        1,
        "{printed}"
    );
    assert!(
        printed.contains("held by port only (Landlock)"),
        "{printed}"
    );
    let closed = answers(&env, "closed", "reached.json");
    for target in [&db, &other_local] {
        let said = said(&closed, "direct", target);
        assert!(said.contains("Permission denied"), "{target}: {said}");
    }
    let listed = answers(&env, "listed", "reached.json");
    assert_eq!(said(&listed, "direct", &db), "connected: database");
    assert!(said(&listed, "direct", &other_local).contains("Permission denied"));
    assert_eq!(database.accepted(), 1);
    assert_eq!(other.accepted(), 0);
}

/// `containment: required` refuses, before anything is written, a machine
/// that gives attempts no namespaces of their own.
#[test]
fn containment_required_refuses_a_machine_without_namespaces() {
    let mut env = Env::git();
    env.vars
        .push(("REPRISE_TEST_NO_NAMESPACES".into(), "1".into()));
    assert_success(&env.run(&["init"]));
    env.plan(
        r#"
version: 1
name: required
defaults: { agent: command, containment: required }
tasks:
  - id: a
    prompt: "p"
    command: ["touch", "ran.txt"]
"#,
    );
    let before = fs::read_dir(env.project().join(".reprise"))
        .unwrap()
        .count();
    let output = env.run(&["run", "plan.yaml"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(message.contains("task a has containment: required but this machine gives attempts no namespaces of their own"), "{message}");
    assert!(message.contains("set containment: strict"), "{message}");
    assert_eq!(
        fs::read_dir(env.project().join(".reprise"))
            .unwrap()
            .count(),
        before
    );
    assert!(!env.project().join("ran.txt").exists());
}

/// What a contained process sees of the machine's other processes, in
/// `FILE`: every visible pid, whether any environment or command line it
/// can read holds the mark (given reversed, so that its own command line
/// does not), and the control sockets `/proc/net/unix` lists.
const LOOK_AROUND: &str = r#"
import json, os, sys
mark = sys.argv[2][::-1].encode()
pids = [name for name in os.listdir("/proc") if name.isdigit()]
found = []
for pid in pids:
    for part in ("environ", "cmdline"):
        try:
            if mark in open("/proc/%s/%s" % (pid, part), "rb").read():
                found.append("%s/%s" % (pid, part))
        except OSError:
            pass
sockets = [line.split()[-1] for line in open("/proc/net/unix").read().splitlines()[1:] if line.split()[-1].endswith("control.sock")]
json.dump({"pids": pids, "found": found, "sockets": sockets}, open(sys.argv[1], "w"))
"#;

/// The attack: an agent and a gate look through `/proc` for what reprise
/// (and any process of the user's) holds: a secret in reprise's own
/// environment and on its command line (a worker's database URL would be
/// there), and every run's control socket. Contained, they see only their
/// own processes; without namespaces, the same look finds both.
#[test]
fn a_contained_agent_and_gate_see_no_process_but_their_own() {
    for namespaces in [true, false] {
        let mark = format!("secret-{}-{namespaces}", std::process::id());
        let mut env = Env::git();
        env.vars.push(("HOSTILE_SECRET".into(), mark.clone()));
        if !namespaces {
            env.vars
                .push(("REPRISE_TEST_NO_NAMESPACES".into(), "1".into()));
        }
        env.ignore(&["gate-saw.json"]);
        assert_success(&env.run(&["init"]));
        let reversed: String = mark.chars().rev().collect();
        let look = |file: &str| {
            serde_json::to_string(&["python3", "-c", LOOK_AROUND, file, &reversed]).unwrap()
        };
        // The plan's path puts the secret on reprise's command line.
        let dir = env.project().join(&mark);
        fs::create_dir(&dir).unwrap();
        fs::write(
            dir.join("plan.yaml"),
            format!(
                r#"
version: 1
name: look
defaults: {{ agent: command, timeout: 2m, max_retries: 0 }}
tasks:
  - id: look
    prompt: "look around"
    command: {agent}
    gates:
      - {{ name: look, run: {gate:?} }}
"#,
                agent = look("agent-saw.json"),
                gate = format!("python3 -c '{LOOK_AROUND}' gate-saw.json {reversed}"),
            ),
        )
        .unwrap();
        let plan = dir.join("plan.yaml");
        let output = env.run(&["run", plan.to_str().unwrap(), "--keep-worktrees", "--json"]);
        assert_success(&output);
        for file in ["agent-saw.json", "gate-saw.json"] {
            let saw = answers(&env, "look", file);
            let found = saw["found"].as_array().unwrap();
            let sockets = saw["sockets"].as_array().unwrap();
            let pids = saw["pids"].as_array().unwrap();
            if namespaces {
                assert!(found.is_empty(), "{file}: {saw}");
                assert!(sockets.is_empty(), "{file}: {saw}");
                // The program is the first process of its own namespace.
                assert!(pids.contains(&Value::from("1")), "{file}: {saw}");
                assert!(pids.len() <= 3, "{file}: {saw}");
            } else {
                // What the walls take away: reprise's command line is
                // readable, and its control socket listed.
                assert!(!found.is_empty(), "{file}: {saw}");
                assert!(!sockets.is_empty(), "{file}: {saw}");
            }
        }
    }
}
