//! The servers of a Redis deployment as the views list them: on one Redis or Sentinel's
//! primary, the primary and the replicas its `INFO replication` names; on a Redis Cluster,
//! every node of `CLUSTER NODES` with its role.

use crate::members::StoreMember;

/// Members from `INFO replication` of the primary at `server`.
pub(super) fn from_replication(server: &str, info: &str) -> Vec<StoreMember> {
    let mut members = vec![StoreMember {
        name: "primary".into(),
        address: server.to_string(),
        role: "primary".into(),
    }];
    for (i, line) in info
        .lines()
        .filter(|l| l.starts_with("slave") && l.contains("ip="))
        .enumerate()
    {
        let field = |name: &str| {
            line.split([':', ','])
                .find_map(|kv| kv.strip_prefix(name))
                .unwrap_or("?")
                .to_string()
        };
        let state = field("state=");
        members.push(StoreMember {
            name: format!("replica {}", i + 1),
            address: format!("{}:{}", field("ip="), field("port=")),
            role: match state.as_str() {
                "online" => "replica".into(),
                other => format!("replica ({other})"),
            },
        });
    }
    members
}

/// Members from `CLUSTER NODES` (one line per node: id, address, flags, …).
pub(super) fn from_cluster_nodes(nodes: &str) -> Vec<StoreMember> {
    let mut members: Vec<StoreMember> = nodes
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (id, addr, flags) = (f.next()?, f.next()?, f.next()?);
            let address = addr.split(['@', ',']).next().unwrap_or(addr).to_string();
            let flags: Vec<&str> = flags.split(',').collect();
            let mut role = if flags.contains(&"master") {
                "primary".to_string()
            } else {
                "replica".to_string()
            };
            if flags.iter().any(|f| f.starts_with("fail")) {
                role.push_str(" (failing)");
            }
            Some(StoreMember {
                name: id.chars().take(8).collect(),
                address,
                role,
            })
        })
        .collect();
    members.sort_by(|a, b| a.address.cmp(&b.address));
    members
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replication_info_lists_the_replicas() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
                    slave0:ip=10.0.0.2,port=6380,state=online,offset=10,lag=0\r\n\
                    slave1:ip=10.0.0.3,port=6381,state=wait_bgsave,offset=0,lag=1\r\n";
        let m = from_replication("10.0.0.1:6379", info);
        assert_eq!(m.len(), 3);
        assert_eq!(
            (m[0].address.as_str(), m[0].role.as_str()),
            ("10.0.0.1:6379", "primary")
        );
        assert_eq!(
            (m[1].address.as_str(), m[1].role.as_str()),
            ("10.0.0.2:6380", "replica")
        );
        assert_eq!(m[2].role, "replica (wait_bgsave)");
    }

    #[test]
    fn cluster_nodes_become_members() {
        let nodes = "07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host replica e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected\n\
                     67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922\n\
                     292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master,fail - 0 1426238318243 3 connected 10923-16383\n";
        let m = from_cluster_nodes(nodes);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].address, "127.0.0.1:30002");
        assert_eq!(m[0].role, "primary");
        assert_eq!(m[1].role, "primary (failing)");
        assert_eq!(
            (m[2].role.as_str(), m[2].name.as_str()),
            ("replica", "07c37dfe")
        );
    }
}
