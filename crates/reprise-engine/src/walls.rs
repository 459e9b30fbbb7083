//! The walls of an attempt beyond the file system, from the plan: what a
//! task's network policy grants, in the terms the sandbox enforces.

use reprise_agents::Reach;
use reprise_core::plan::{Endpoint, Network};

/// What `network` lets a process connect to (`None`: anything), and
/// `model_server` besides: a rehearsal's model server stands in for every
/// provider, so the agents it is pointed at reach it whatever their policy
/// (a `command` agent's `none` included; it serves nothing else).
pub(crate) fn reach_of(network: &Network, model_server: &[Endpoint]) -> Option<Reach> {
    let (model, mut endpoints) = match network {
        Network::All => return None,
        Network::None => (false, Vec::new()),
        Network::Allow { model, endpoints } => (*model, endpoints.clone()),
    };
    endpoints.extend(model_server.iter().cloned());
    Some(Reach { model, endpoints })
}

#[cfg(test)]
mod tests {
    use super::reach_of;
    use reprise_core::plan::{Endpoint, Network};

    #[test]
    fn a_rehearsal_s_server_is_granted_whatever_the_policy() {
        let server = [Endpoint::parse("127.0.0.1:4000").expect("endpoint")];
        assert_eq!(reach_of(&Network::All, &server), None);
        let none = reach_of(&Network::None, &[]).expect("a wall");
        assert!(!none.model && none.endpoints.is_empty());
        let rehearsed = reach_of(&Network::None, &server).expect("a wall");
        assert!(!rehearsed.model);
        assert_eq!(rehearsed.endpoints, server);
        let model = reach_of(&Network::model(), &server).expect("a wall");
        assert!(model.model);
        assert_eq!(model.endpoints, server);
        let listed = Network::Allow {
            model: false,
            endpoints: vec![Endpoint::parse("db:5432").expect("endpoint")],
        };
        let listed = reach_of(&listed, &[]).expect("a wall");
        assert_eq!(listed.endpoints.len(), 1);
        assert_eq!(listed.endpoints[0].host, "db");
    }
}
