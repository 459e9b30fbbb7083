//! What an attempt's processes may reach over the network: the plan's
//! `network:` policy, for a task's agent and for each gate.
//!
//! The policy is data; the sandbox enforces it (a network namespace of the
//! attempt whose only way out is reprise's own forwarder and allow-list
//! proxy, or Landlock's TCP rules where namespaces are not available). An
//! agent CLI's "model" endpoints are known only where its environment is
//! (the driver resolves them), so the policy keeps `model` as a word.

use std::fmt;

/// What a task's agent (or a gate) may connect to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Network {
    /// Nothing beyond the attempt's own loopback: the default for `command`
    /// and `sim` agents and for every gate.
    None,
    /// The endpoints listed, and with `model` the agent's model provider's
    /// API endpoints too (its CLI's base URL where one is set, else the
    /// provider's own hosts; a rehearsal's model server).
    Allow {
        model: bool,
        endpoints: Vec<Endpoint>,
    },
    /// Everything the user's own processes can reach.
    All,
}

impl Network {
    /// `model` alone: the default for an agent CLI or an ACP agent.
    pub fn model() -> Self {
        Network::Allow {
            model: true,
            endpoints: Vec::new(),
        }
    }

    /// Whether the policy lets connections out at all.
    pub fn is_none(&self) -> bool {
        matches!(self, Network::None)
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Network::None => f.write_str("none"),
            Network::All => f.write_str("all"),
            Network::Allow { model, endpoints } => {
                let mut parts: Vec<String> = Vec::with_capacity(endpoints.len() + 1);
                if *model {
                    parts.push("model".to_owned());
                }
                parts.extend(endpoints.iter().map(Endpoint::to_string));
                f.write_str(&parts.join(", "))
            }
        }
    }
}

/// A host and a TCP port an attempt may connect to.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Endpoint {
    /// A host name (lower case), an IPv4 address, or an IPv6 address
    /// without its brackets.
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// Reads `host:port` (`[v6]:port` for an IPv6 address). The host is a
    /// DNS name of letters, digits, `-` and `.`, or an address; the port is
    /// 1 to 65535. Why it is refused, otherwise.
    pub fn parse(text: &str) -> Result<Self, &'static str> {
        let (host, port) = match text.strip_prefix('[') {
            Some(rest) => {
                let (host, port) = rest
                    .split_once("]:")
                    .ok_or("an IPv6 address is written [address]:port")?;
                host.parse::<std::net::Ipv6Addr>()
                    .map_err(|_| "the address in brackets is not an IPv6 address")?;
                (host.to_owned(), port)
            }
            None => {
                let (host, port) = text
                    .rsplit_once(':')
                    .ok_or("an endpoint is host:port, like api.example.com:443")?;
                if host.contains(':') {
                    return Err("an IPv6 address is written [address]:port");
                }
                if !is_host_name(host) {
                    return Err(
                        "the host is not a name of letters, digits, '-' and '.', nor an address",
                    );
                }
                (host.to_ascii_lowercase(), port)
            }
        };
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|port| *port != 0)
            .ok_or("the port is not a number from 1 to 65535")?;
        Ok(Endpoint { host, port })
    }

    /// Reads the host and port of an `http://` or `https://` URL (the
    /// scheme's port when it names none): where a CLI's base URL sends it.
    pub fn of_url(url: &str) -> Option<Self> {
        let (scheme, rest) = url.split_once("://")?;
        let default_port = match scheme.to_ascii_lowercase().as_str() {
            "http" => 80,
            "https" => 443,
            _ => return None,
        };
        let authority = rest.split(['/', '?', '#']).next()?;
        let authority = authority.rsplit('@').next()?;
        if authority.starts_with('[') {
            let with_port = if authority.contains("]:") {
                authority.to_owned()
            } else {
                format!("{authority}:{default_port}")
            };
            return Endpoint::parse(&with_port).ok();
        }
        match authority.split_once(':') {
            Some(_) => Endpoint::parse(authority).ok(),
            None => Endpoint::parse(&format!("{authority}:{default_port}")).ok(),
        }
    }

    /// Whether the host is this machine's loopback (`localhost`,
    /// 127.0.0.0/8, `::1`): reached by forwarding the same address into
    /// the attempt's own network, not through the proxy.
    pub fn is_loopback(&self) -> bool {
        if self.host == "localhost" {
            return true;
        }
        self.host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|address| address.is_loopback())
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A DNS name or an IPv4 address: labels of ASCII letters, digits and `-`,
/// none empty or starting or ending with `-`, at most 253 bytes in all.
fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::{Endpoint, Network};

    fn endpoint(host: &str, port: u16) -> Endpoint {
        Endpoint {
            host: host.to_owned(),
            port,
        }
    }

    #[test]
    fn endpoints_are_read_as_written_and_bad_ones_are_refused() {
        assert_eq!(
            Endpoint::parse("API.Example.com:443"),
            Ok(endpoint("api.example.com", 443))
        );
        assert_eq!(
            Endpoint::parse("127.0.0.1:5432"),
            Ok(endpoint("127.0.0.1", 5432))
        );
        assert_eq!(Endpoint::parse("[::1]:8080"), Ok(endpoint("::1", 8080)));
        for bad in [
            "example.com",
            "example.com:0",
            "example.com:65536",
            "example.com:https",
            ":443",
            "exa mple.com:443",
            "-bad.com:443",
            "a..b:443",
            "::1:80",
            "[not-v6]:80",
            "[::1]80",
            "host/path:80",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn a_base_url_names_its_host_and_port() {
        assert_eq!(
            Endpoint::of_url("http://127.0.0.1:41234/t/a"),
            Some(endpoint("127.0.0.1", 41234))
        );
        assert_eq!(
            Endpoint::of_url("https://api.anthropic.com"),
            Some(endpoint("api.anthropic.com", 443))
        );
        assert_eq!(
            Endpoint::of_url("http://user:pw@Proxy.local/v1"),
            Some(endpoint("proxy.local", 80))
        );
        assert_eq!(
            Endpoint::of_url("http://[::1]/x"),
            Some(endpoint("::1", 80))
        );
        assert_eq!(Endpoint::of_url("ftp://example.com"), None);
        assert_eq!(Endpoint::of_url("not a url"), None);
    }

    #[test]
    fn loopback_is_localhost_and_the_loopback_addresses_only() {
        assert!(endpoint("localhost", 1).is_loopback());
        assert!(endpoint("127.0.0.1", 1).is_loopback());
        assert!(endpoint("127.8.9.10", 1).is_loopback());
        assert!(endpoint("::1", 1).is_loopback());
        assert!(!endpoint("10.0.0.1", 1).is_loopback());
        assert!(!endpoint("localhost.example.com", 1).is_loopback());
    }

    #[test]
    fn a_policy_reads_back_as_a_plan_writes_it() {
        assert_eq!(Network::None.to_string(), "none");
        assert_eq!(Network::All.to_string(), "all");
        assert_eq!(Network::model().to_string(), "model");
        let listed = Network::Allow {
            model: true,
            endpoints: vec![endpoint("db.local", 5432), endpoint("::1", 80)],
        };
        assert_eq!(listed.to_string(), "model, db.local:5432, [::1]:80");
    }
}
