//! What an attempt's process may reach over the network, from the driver's
//! side.
//!
//! A contained attempt runs in a network namespace of its own (see
//! `namespaces.rs`): nothing but its loopback, on which the supervisor
//! binds, before the program starts, one listener for each way out the
//! plan grants, and hands the listeners to the driver. The driver, outside
//! the namespace, serves them ([`crate::proxy`]):
//!
//! - an endpoint on this machine's loopback (a rehearsal's model server,
//!   `127.0.0.1:5432` when the plan lists it) is listened for at the very
//!   same address inside, and each connection forwarded to it, so a client
//!   configured with that address needs nothing else;
//! - every other endpoint is reached through an HTTP `CONNECT` proxy on
//!   the namespace's loopback, which the child is pointed at by the usual
//!   variables (`HTTPS_PROXY` and friends) and which connects only to the
//!   endpoints allowed, refusing the rest with a 403.
//!
//! `model` means the agent's model provider: the base URL its CLI is given
//! (in the child's environment, or Codex's `-c ...base_url=` arguments), or
//! where none is, the provider's own API hosts. It is resolved here, where
//! the child's whole environment is known, and only from what the plan,
//! the user and reprise set: never from a file the agent can write (its
//! config home), or an agent could grant itself any address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reprise_core::plan::Endpoint;
use serde::{Deserialize, Serialize};

/// The walls of an attempt's process beyond the file system.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Walls {
    /// Whether the process gets namespaces of its own: a private view of
    /// processes (its own PID namespace and `/proc`) and, unless `network`
    /// is `None`, a network of its own. Without them, what `network`
    /// allows is held by Landlock's TCP rules, by port only.
    pub namespaces: bool,
    /// What the process may connect to; `None` is anything (`all`).
    pub network: Option<Reach>,
}

/// The endpoints a policy grants before `model` is resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Reach {
    /// The agent's model provider's endpoints too.
    pub model: bool,
    /// The endpoints the plan lists (and, with `model`, a rehearsal's model
    /// server).
    pub endpoints: Vec<Endpoint>,
}

impl Reach {
    /// Nothing at all.
    pub fn nothing() -> Self {
        Self::default()
    }
}

/// Whose API `model` means for a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Provider {
    Anthropic,
    OpenAi,
    Google,
    /// Any of them: an ACP agent, a `command` agent, a gate.
    #[default]
    Any,
}

impl Provider {
    /// The provider of the agent CLI named `cli`.
    pub(crate) fn of_cli(cli: &str) -> Self {
        match cli {
            "claude" => Provider::Anthropic,
            "codex" => Provider::OpenAi,
            "gemini" => Provider::Google,
            _ => Provider::Any,
        }
    }

    /// The variables whose URL sends the provider's client elsewhere.
    fn base_url_variables(self) -> &'static [&'static str] {
        match self {
            Provider::Anthropic => ANTHROPIC_VARIABLES,
            Provider::OpenAi => OPENAI_VARIABLES,
            Provider::Google => GOOGLE_VARIABLES,
            Provider::Any => &[],
        }
    }

    /// The provider's own API hosts, used when no base URL is set.
    fn hosts(self) -> &'static [&'static str] {
        match self {
            Provider::Anthropic => ANTHROPIC_HOSTS,
            Provider::OpenAi => OPENAI_HOSTS,
            Provider::Google => GOOGLE_HOSTS,
            Provider::Any => &[],
        }
    }

    fn each(self) -> &'static [Provider] {
        match self {
            Provider::Anthropic => &[Provider::Anthropic],
            Provider::OpenAi => &[Provider::OpenAi],
            Provider::Google => &[Provider::Google],
            Provider::Any => &[Provider::Anthropic, Provider::OpenAi, Provider::Google],
        }
    }
}

const ANTHROPIC_VARIABLES: &[&str] = &[
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_BEDROCK_BASE_URL",
    "ANTHROPIC_VERTEX_BASE_URL",
];
const OPENAI_VARIABLES: &[&str] = &["OPENAI_BASE_URL"];
const GOOGLE_VARIABLES: &[&str] = &["GOOGLE_GEMINI_BASE_URL", "GOOGLE_VERTEX_BASE_URL"];
const ANTHROPIC_HOSTS: &[&str] = &["api.anthropic.com:443"];
/// Codex's API, and ChatGPT's for a Codex signed in with a ChatGPT plan.
const OPENAI_HOSTS: &[&str] = &[
    "api.openai.com:443",
    "chatgpt.com:443",
    "auth.openai.com:443",
];
/// Gemini's API, Code Assist's (a Google sign-in) and the sign-in itself.
const GOOGLE_HOSTS: &[&str] = &[
    "generativelanguage.googleapis.com:443",
    "cloudcode-pa.googleapis.com:443",
    "oauth2.googleapis.com:443",
];

/// The endpoints `reach` comes to for a process of `provider` whose
/// environment is `env` (later entries win) and arguments `args`, sorted
/// and without repeats.
pub(crate) fn allowed(
    reach: &Reach,
    provider: Provider,
    env: &[(String, String)],
    args: &[String],
) -> Vec<Endpoint> {
    let mut allowed = reach.endpoints.clone();
    if reach.model {
        for &one in provider.each() {
            let lookup = |name: &str| {
                env.iter()
                    .rev()
                    .find(|(key, _)| key == name)
                    .map(|(_, value)| value.as_str())
            };
            let mut given: Vec<Endpoint> = one
                .base_url_variables()
                .iter()
                .filter_map(|name| lookup(name))
                .filter_map(Endpoint::of_url)
                .collect();
            if one == Provider::OpenAi {
                given.extend(codex_base_urls(args));
            }
            if given.is_empty() {
                given.extend(
                    one.hosts()
                        .iter()
                        .filter_map(|host| Endpoint::parse(host).ok()),
                );
            }
            allowed.extend(given);
        }
    }
    allowed.sort();
    allowed.dedup();
    allowed
}

/// The base URLs of Codex's `-c KEY=VALUE` (`--config`) arguments whose key
/// ends in `base_url` (a model provider's), the value TOML-quoted or not.
fn codex_base_urls(args: &[String]) -> Vec<Endpoint> {
    let mut settings = Vec::new();
    let mut next_is_setting = false;
    for arg in args {
        if next_is_setting {
            settings.push(arg.as_str());
            next_is_setting = false;
            continue;
        }
        match arg.as_str() {
            "-c" | "--config" => next_is_setting = true,
            _ => {
                if let Some(setting) = arg.strip_prefix("--config=") {
                    settings.push(setting);
                }
            }
        }
    }
    settings
        .into_iter()
        .filter_map(|setting| setting.split_once('='))
        .filter(|(key, _)| key.trim().ends_with("base_url"))
        .filter_map(|(_, value)| Endpoint::of_url(value.trim().trim_matches(['"', '\''])))
        .collect()
}

/// Where the proxy listens inside the namespace when no forward takes the
/// port (the next free one otherwise).
const PROXY_PORT: u16 = 3128;

/// How the allowed endpoints reach a namespace: the addresses to listen on
/// inside, each with what the driver does with its connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Routes {
    pub(crate) routes: Vec<(SocketAddr, Route)>,
}

/// What the driver does with a connection accepted inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// Forwards it to the same address outside.
    Forward(SocketAddr),
    /// Reads an HTTP `CONNECT`, and connects it only to one of these.
    Connect(Vec<Endpoint>),
}

impl Routes {
    /// The routes for `allowed`: each loopback endpoint forwarded at its
    /// own address (`localhost` at both 127.0.0.1 and ::1), and a proxy for
    /// the others when there are any.
    pub(crate) fn for_endpoints(allowed: &[Endpoint]) -> Self {
        let mut forwards: Vec<SocketAddr> = Vec::new();
        let mut remote: Vec<Endpoint> = Vec::new();
        for endpoint in allowed {
            if !endpoint.is_loopback() {
                remote.push(endpoint.clone());
                continue;
            }
            let addresses: Vec<IpAddr> = match endpoint.host.parse::<IpAddr>() {
                Ok(address) => vec![address],
                Err(_) => vec![Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()],
            };
            for address in addresses {
                let at = SocketAddr::new(address, endpoint.port);
                if !forwards.contains(&at) {
                    forwards.push(at);
                }
            }
        }
        let mut routes: Vec<(SocketAddr, Route)> = forwards
            .iter()
            .map(|at| (*at, Route::Forward(*at)))
            .collect();
        if !remote.is_empty() {
            let taken = |port: u16| forwards.iter().any(|at| at.port() == port);
            let port = (PROXY_PORT..=u16::MAX)
                .find(|port| !taken(*port))
                .unwrap_or(PROXY_PORT);
            routes.push((
                SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port),
                Route::Connect(remote),
            ));
        }
        Routes { routes }
    }

    /// The addresses the supervisor listens on inside, in order.
    pub(crate) fn listeners(&self) -> Vec<SocketAddr> {
        self.routes.iter().map(|(at, _)| *at).collect()
    }

    /// The variables that point the child at the proxy, when there is one:
    /// `HTTPS_PROXY` and the rest in both cases, and `NO_PROXY` for the
    /// loopback, which the forwards serve directly.
    pub(crate) fn proxy_env(&self) -> Vec<(String, String)> {
        let Some((at, _)) = self
            .routes
            .iter()
            .find(|(_, route)| matches!(route, Route::Connect(_)))
        else {
            return Vec::new();
        };
        let url = format!("http://{at}");
        let mut env: Vec<(String, String)> = [
            "HTTPS_PROXY",
            "https_proxy",
            "HTTP_PROXY",
            "http_proxy",
            "ALL_PROXY",
            "all_proxy",
        ]
        .iter()
        .map(|name| ((*name).to_owned(), url.clone()))
        .collect();
        let no_proxy = "localhost,127.0.0.1,::1".to_owned();
        env.push(("NO_PROXY".to_owned(), no_proxy.clone()));
        env.push(("no_proxy".to_owned(), no_proxy));
        env
    }
}

/// The TCP ports `allowed` names: all Landlock can tell apart where there
/// is no namespace (it holds connections by port, not by host).
pub(crate) fn tcp_ports(allowed: &[Endpoint]) -> Vec<u16> {
    let mut ports: Vec<u16> = allowed.iter().map(|endpoint| endpoint.port).collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

#[cfg(test)]
mod tests {
    use super::{Provider, Reach, Route, Routes, allowed, tcp_ports};
    use reprise_core::plan::Endpoint;

    fn endpoint(text: &str) -> Endpoint {
        Endpoint::parse(text).expect("an endpoint")
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect()
    }

    #[test]
    fn model_is_the_base_url_given_else_the_providers_own_hosts() {
        let model = Reach {
            model: true,
            endpoints: Vec::new(),
        };
        let given = env(&[("ANTHROPIC_BASE_URL", "http://127.0.0.1:4100/t/a")]);
        assert_eq!(
            allowed(&model, Provider::Anthropic, &given, &[]),
            vec![endpoint("127.0.0.1:4100")]
        );
        assert_eq!(
            allowed(&model, Provider::Anthropic, &[], &[]),
            vec![endpoint("api.anthropic.com:443")]
        );
        // The last value of a variable is the child's.
        let twice = env(&[
            ("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:1/"),
            ("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:2/"),
        ]);
        assert_eq!(
            allowed(&model, Provider::Google, &twice, &[]),
            vec![endpoint("127.0.0.1:2")]
        );
        // Codex's provider from its -c arguments.
        let args: Vec<String> = [
            "exec",
            "-c",
            "model_providers.fake.base_url=\"http://127.0.0.1:4200/v1\"",
            "--config=model=gpt",
        ]
        .iter()
        .map(|arg| (*arg).to_owned())
        .collect();
        assert_eq!(
            allowed(&model, Provider::OpenAi, &[], &args),
            vec![endpoint("127.0.0.1:4200")]
        );
        // A command or ACP agent: each provider's.
        let any = allowed(&model, Provider::Any, &given, &[]);
        assert!(any.contains(&endpoint("127.0.0.1:4100")));
        assert!(any.contains(&endpoint("api.openai.com:443")));
        assert!(any.contains(&endpoint("generativelanguage.googleapis.com:443")));
        assert!(!any.contains(&endpoint("api.anthropic.com:443")));
    }

    #[test]
    fn without_model_only_the_listed_endpoints_are_allowed() {
        let listed = Reach {
            model: false,
            endpoints: vec![endpoint("db.local:5432"), endpoint("db.local:5432")],
        };
        let given = env(&[("ANTHROPIC_BASE_URL", "http://127.0.0.1:4100")]);
        assert_eq!(
            allowed(&listed, Provider::Anthropic, &given, &[]),
            vec![endpoint("db.local:5432")]
        );
        assert!(allowed(&Reach::nothing(), Provider::Any, &given, &[]).is_empty());
    }

    #[test]
    fn loopback_is_forwarded_at_its_address_and_the_rest_goes_through_the_proxy() {
        let routes = Routes::for_endpoints(&[
            endpoint("127.0.0.1:3128"),
            endpoint("localhost:8080"),
            endpoint("api.anthropic.com:443"),
        ]);
        let listeners: Vec<String> = routes.listeners().iter().map(ToString::to_string).collect();
        assert_eq!(
            listeners,
            [
                "127.0.0.1:3128",
                "127.0.0.1:8080",
                "[::1]:8080",
                "127.0.0.1:3129"
            ]
        );
        assert_eq!(
            routes.routes[0].1,
            Route::Forward("127.0.0.1:3128".parse().expect("an address"))
        );
        assert_eq!(
            routes.routes[3].1,
            Route::Connect(vec![endpoint("api.anthropic.com:443")])
        );
        let proxy = routes.proxy_env();
        assert!(proxy.contains(&("HTTPS_PROXY".to_owned(), "http://127.0.0.1:3129".to_owned())));
        assert!(
            proxy
                .iter()
                .any(|(key, value)| key == "NO_PROXY" && value.contains("127.0.0.1"))
        );
        // Only loopback: no proxy, and nothing to point the child at.
        let local = Routes::for_endpoints(&[endpoint("127.0.0.1:9")]);
        assert_eq!(local.routes.len(), 1);
        assert!(local.proxy_env().is_empty());
        assert!(Routes::for_endpoints(&[]).routes.is_empty());
    }

    #[test]
    fn landlock_holds_the_ports_alone() {
        assert_eq!(
            tcp_ports(&[
                endpoint("a.com:443"),
                endpoint("b.com:443"),
                endpoint("127.0.0.1:80")
            ]),
            vec![80, 443]
        );
    }
}
