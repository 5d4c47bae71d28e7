//! One single-member store of either kind that a test can SIGSTOP and resume, under one name.

use super::{EtcdCluster, ZkCluster};

/// A single-member store that can be SIGSTOPped.
pub trait Pausable {
    /// SIGSTOPs its one member.
    fn pause(&mut self);
    /// SIGCONTs it.
    fn resume(&mut self);
    /// SIGKILLs it.
    fn kill(&mut self);
    /// A store URL under `namespace` (an etcd prefix, a ZooKeeper chroot).
    fn url(&self, namespace: &str) -> String;
}

impl Pausable for EtcdCluster {
    fn pause(&mut self) {
        EtcdCluster::pause(self, 0)
    }
    fn resume(&mut self) {
        EtcdCluster::resume(self, 0)
    }
    fn kill(&mut self) {
        EtcdCluster::kill(self, 0)
    }
    fn url(&self, namespace: &str) -> String {
        EtcdCluster::url(self, namespace)
    }
}

impl Pausable for ZkCluster {
    fn pause(&mut self) {
        ZkCluster::pause(self, 0)
    }
    fn resume(&mut self) {
        ZkCluster::resume(self, 0)
    }
    fn kill(&mut self) {
        ZkCluster::kill(self, 0)
    }
    fn url(&self, namespace: &str) -> String {
        ZkCluster::url(self, &format!("/{namespace}"))
    }
}
