//! Parsing and printing store URLs: every form, every refusal.

use super::*;
use crate::error::Error;

#[test]
fn parses_etcd_urls() {
    assert_eq!(
        StoreUrl::parse("etcd://127.0.0.1:2379,localhost:22379/myapp").unwrap(),
        StoreUrl::Etcd {
            endpoints: vec![
                "http://127.0.0.1:2379".into(),
                "http://localhost:22379".into()
            ],
            prefix: "myapp".into(),
            tls: None,
            user: None,
        }
    );
    assert_eq!(
        StoreUrl::parse("etcd://h:1").unwrap(),
        StoreUrl::Etcd {
            endpoints: vec!["http://h:1".into()],
            prefix: "clusterlimit".into(),
            tls: None,
            user: None,
        }
    );
}

#[test]
fn parses_memory_urls() {
    assert_eq!(
        StoreUrl::parse("memory://").unwrap(),
        StoreUrl::Memory {
            name: "default".into()
        }
    );
    assert_eq!(
        StoreUrl::parse("memory://x").unwrap(),
        StoreUrl::Memory { name: "x".into() }
    );
}

#[test]
fn parses_zookeeper_urls() {
    assert_eq!(
        StoreUrl::parse("zk://127.0.0.1:2181,h2:2182/apps/limits").unwrap(),
        StoreUrl::ZooKeeper {
            hosts: vec!["127.0.0.1:2181".into(), "h2:2182".into()],
            root: "/apps/limits".into(),
            digest_file: None,
            acl: None,
            tls: None,
        }
    );
    assert_eq!(
        StoreUrl::parse("zookeeper://h:2181/").unwrap(),
        StoreUrl::ZooKeeper {
            hosts: vec!["h:2181".into()],
            root: "/clusterlimit".into(),
            digest_file: None,
            acl: None,
            tls: None,
        }
    );
}

/// Every malformed URL is bad input (the messages are checked below).
#[test]
fn refuses_malformed_urls() {
    for bad in [
        "zk://",
        "zk://h",
        "zk://h:2181/a//b",
        "zk://h:2181/a/../b",
        "zk://h:2181/zookeeper",
        "zk://h:2181/a\nb",
        "",
        "etcd://",
        "etcd://h",
        "etcd://h:0",
        "etcd://h:99999",
        "etcd://h:1,/p",
        "consul://h:1",
        "etcd://h:1/a\nb",
        "etcd://a b:1",
        "etcd://h:1/p?cacert=/ca.pem",
        "etcds://h:1/p?cert=/c.pem",
        "etcds://h:1/p?cacert=",
        "etcds://h:1/p?cacert=/a&cacert=/b",
        "etcd://h:1/p?password_file=/pw",
        "etcd://h:1/p?user=u&password=hunter2",
        "etcd://h:1/p?bogus=1",
        "etcd://h:1/p?novalue",
        "zk://h:1/p?digest=u:hunter2",
        "zk://h:1/p?acl=world",
        "zk://h:1/p?acl=",
        "memory://x?a=b",
        "zk://h:1/p?cacert=/ca.pem",
        "zks://h:1/p?key=/k.pem",
        "etcd://host:1:99",
        "etcd://:2379",
        "etcd://h:",
        "etcd://h:65536",
        "etcd://h:-1",
        "etcd://::1:2379",
        "etcd://[::1]",
        "etcd://[::1:2379",
        "etcd://[nope]:2379",
        "etcd://[::1]2379",
        "etcd://h:1,,h2:2",
        "etcd://h[1]:2",
        "zk://host:1:99",
        "zk://:2181",
        "zk://h:0",
    ] {
        assert!(
            matches!(StoreUrl::parse(bad), Err(Error::InvalidArgument(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn endpoints_say_what_is_wrong() {
    let why = |url: &str| match StoreUrl::parse(url) {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("{url}: {other:?}"),
    };
    assert_eq!(
        why("etcd://host:1:99"),
        "store URL etcd://host:1:99: \"host:1:99\" is not HOST:PORT (one colon, before the \
         port; put an IPv6 address in brackets: [ADDRESS]:PORT)"
    );
    assert!(why("etcd://h:65536").contains("port \"65536\" is not a number from 1 to 65535"));
    assert!(why("zk://:2181").contains("no host before the port"));
    assert!(why("etcd://h:1,,h2:2").contains("empty"));
    // Accepted: host names, IPv4, IPv6 in brackets, the widest ports.
    for ok in [
        "etcd://[::1]:2379",
        "etcd://[2001:db8::1]:1,h-2.example_x:65535/p",
        "etcds://10.0.0.1:2379",
        "zk://[::1]:2181,zk-1:2181/r",
    ] {
        assert!(StoreUrl::parse(ok).is_ok(), "{ok}");
    }
    assert_eq!(
        StoreUrl::parse("etcd://[::1]:2379").unwrap(),
        StoreUrl::Etcd {
            endpoints: vec!["http://[::1]:2379".into()],
            prefix: "clusterlimit".into(),
            tls: None,
            user: None,
        }
    );
}

#[test]
fn settings() {
    assert_eq!(
        StoreUrl::parse(
            "etcds://h:1/p?cacert=/ca.pem&cert=/c.pem&key=/k.pem&user=app&password_file=/pw"
        )
        .unwrap(),
        StoreUrl::Etcd {
            endpoints: vec!["https://h:1".into()],
            prefix: "p".into(),
            tls: Some(TlsFiles {
                ca_cert: Some("/ca.pem".into()),
                cert: Some("/c.pem".into()),
                key: Some("/k.pem".into()),
            }),
            user: Some(EtcdUser {
                name: "app".into(),
                password_file: Some("/pw".into()),
            }),
        }
    );
    assert_eq!(
        StoreUrl::parse("etcds://h:1").unwrap(),
        StoreUrl::Etcd {
            endpoints: vec!["https://h:1".into()],
            prefix: "clusterlimit".into(),
            tls: Some(TlsFiles::default()),
            user: None,
        }
    );
    assert_eq!(
        StoreUrl::parse("zk://h:1/r?digest_file=/d").unwrap(),
        StoreUrl::ZooKeeper {
            hosts: vec!["h:1".into()],
            root: "/r".into(),
            digest_file: Some("/d".into()),
            acl: None,
            tls: None,
        }
    );
    assert_eq!(
        StoreUrl::parse("zks://h:1/r?cacert=/ca.pem").unwrap(),
        StoreUrl::ZooKeeper {
            hosts: vec!["h:1".into()],
            root: "/r".into(),
            digest_file: None,
            acl: None,
            tls: Some(TlsFiles {
                ca_cert: Some("/ca.pem".into()),
                cert: None,
                key: None,
            }),
        }
    );
    assert_eq!(
        StoreUrl::parse("zk://h:1/r?digest_file=/d&acl=open").unwrap(),
        StoreUrl::ZooKeeper {
            hosts: vec!["h:1".into()],
            root: "/r".into(),
            digest_file: Some("/d".into()),
            acl: Some(ZkAcl::Open),
            tls: None,
        }
    );
    assert_eq!(
        StoreUrl::parse("zk://h:1/r?acl=creator").unwrap(),
        StoreUrl::ZooKeeper {
            hosts: vec!["h:1".into()],
            root: "/r".into(),
            digest_file: None,
            acl: Some(ZkAcl::Creator),
            tls: None,
        }
    );
}

#[test]
fn secrets_never_appear_in_errors() {
    for url in [
        "etcd://h:1/p?user=u&password=hunter2",
        "etcd://u:hunter2@h:1/p",
        "zk://h:1/p?digest=u:hunter2",
        "redis://u:hunter2@h:1",
        "etcd://h:1/p?token=hunter2&x",
    ] {
        let Err(Error::InvalidArgument(msg)) = StoreUrl::parse(url) else {
            panic!("{url} must be refused");
        };
        assert!(!msg.contains("hunter2"), "{msg}");
    }
    assert_eq!(
        redact("etcd://a:b@h:1/p?password=x&password_file=/f&user=u"),
        "etcd://***@h:1/p?password=***&password_file=/f&user=u"
    );
}

#[test]
fn sharded() {
    let url =
        StoreUrl::parse("etcd://h1:1,h0:1/p ; etcd://h2:1/p?shard=east&user=u&password_file=/pw")
            .unwrap();
    let StoreUrl::Sharded { clusters } = url else {
        panic!("{url:?}");
    };
    assert_eq!(clusters.len(), 2);
    assert_eq!(clusters[0].id, "etcd://h0:1,h1:1/p", "sorted endpoints");
    assert_eq!(clusters[1].id, "shard=east");
    assert!(matches!(
        &clusters[1].url,
        StoreUrl::Etcd { user: Some(u), .. } if u.name == "u"
    ));
    let why = |url: &str| match StoreUrl::parse(url) {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("{url}: {other:?}"),
    };
    assert!(why("etcd://h:1/p;").contains("cluster 2 () is empty"));
    assert_eq!(
        why("etcd://h:1/p;zk://h:2/r"),
        "sharded store URL etcd://h:1/p;zk://h:2/r: cluster 2 (zk://h:2/r) is a ZooKeeper store \
         but cluster 1 is an etcd store; every cluster of a sharded store must be of one kind \
         (one set of credentials and one failure behaviour)"
    );
    assert!(why("memory://a;memory://a").contains("same cluster as cluster 1"));
    assert!(why("etcd://h:1/p;etcd://h:1/p?shard=x&shard=y").contains("twice"));
    assert!(why("etcd://h:1/p;etcd://h").contains("cluster 2 (etcd://h) is not a store URL"));
    assert!(why(";").contains("empty"));
    assert!(
        !why("etcd://h:1/p?password=hunter2;etcd://h").contains("hunter2"),
        "redacted"
    );
    assert_eq!(
        redact("etcd://h:1/p?password=x;etcd://h:2/p?token=y"),
        "etcd://h:1/p?password=***;etcd://h:2/p?token=***"
    );
    // Memory parts (for tests), same endpoints under two prefixes, explicit names.
    for ok in [
        "memory://a;memory://b",
        "etcd://h:1/a;etcd://h:1/b",
        "etcd://h:1/p?shard=a;etcd://h:1/p?shard=b",
    ] {
        assert!(StoreUrl::parse(ok).is_ok(), "{ok}");
    }
}

#[test]
fn redis_urls() {
    use crate::store_url::{RedisMode, RedisUser};
    assert_eq!(
        StoreUrl::parse("redis://10.0.0.1:6379/app").unwrap(),
        StoreUrl::Redis {
            mode: RedisMode::Single {
                host: "10.0.0.1:6379".into()
            },
            prefix: "app".into(),
            tls: None,
            user: None,
            wait_replicas: 0,
        }
    );
    let StoreUrl::Redis { mode, prefix, .. } =
        StoreUrl::parse("redis+sentinel://s1:26379,s2:26379/mymaster/app").unwrap()
    else {
        panic!("not Redis");
    };
    assert_eq!(
        mode,
        RedisMode::Sentinel {
            sentinels: vec!["s1:26379".into(), "s2:26379".into()],
            service: "mymaster".into()
        }
    );
    assert_eq!(prefix, "app");
    let StoreUrl::Redis {
        mode,
        prefix,
        tls,
        user,
        ..
    } = StoreUrl::parse(
        "rediss+cluster://n1:7000,n2:7000?cacert=/ca.pem&user=limiter&password_file=/pw",
    )
    .unwrap()
    else {
        panic!("not Redis");
    };
    assert_eq!(
        mode,
        RedisMode::Cluster {
            seeds: vec!["n1:7000".into(), "n2:7000".into()]
        }
    );
    assert_eq!(prefix, "clusterlimit");
    assert_eq!(tls.unwrap().ca_cert.unwrap().to_str(), Some("/ca.pem"));
    let user: RedisUser = user.unwrap();
    assert_eq!(user.name.as_deref(), Some("limiter"));
    for (bad, says) in [
        ("redis://a:1,b:2/p", "redis+cluster://"),
        ("redis+sentinel://s:1", "SERVICE"),
        ("redis://h:1/p?password=x", "never put in a URL"),
        ("redis://u:pw@h:1/p", "never put in a URL"),
        ("redis://h:1/a{b}", "bad key prefix"),
        ("redis://h:1/p?cacert=/ca", "rediss://"),
        ("redis://h/p", "HOST:PORT"),
        ("redis://h:1/p?wait_replicas=x", "wait_replicas"),
        ("redis+cluster://h:1/p?wait_replicas=1", "Redis Cluster"),
    ] {
        let err = StoreUrl::parse(bad).unwrap_err().to_string();
        assert!(err.contains(says), "{bad}: {err}");
    }
}
