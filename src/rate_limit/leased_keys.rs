//! [`LeasedKey`]: what a Limiter holds of hot keys' leases now (issue 43), for the live view
//! and operators: which keys, how many units left.

use crate::limiter::Limiter;

/// A key this Limiter holds leased units of ([`Limiter::leased_keys`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeasedKey {
    /// The rate limit's name.
    pub limit: String,
    /// The key.
    pub key: String,
    /// Units left in this Limiter's leases of the key, to be admitted here with no request.
    pub units_left: u64,
    /// Leases held (more than one while the next one came before the last was spent).
    pub leases: usize,
}

impl Limiter {
    /// The keys this Limiter holds leased units of now, by limit and key (empty unless it was
    /// built with [`hot_key_leases`](crate::LimiterBuilder::hot_key_leases)). Costs no
    /// request: it is what this process holds.
    pub fn leased_keys(&self) -> Vec<LeasedKey> {
        let mut keys: Vec<LeasedKey> = self
            .inner
            .rates
            .leased_cells()
            .into_iter()
            .filter_map(|(limit, key, cell)| {
                let (units_left, leases) = cell.lease_holding();
                (leases > 0).then(|| LeasedKey {
                    limit: limit.name.clone(),
                    key,
                    units_left,
                    leases,
                })
            })
            .collect();
        keys.sort_by(|a, b| (&a.limit, &a.key).cmp(&(&b.limit, &b.key)));
        keys
    }
}
