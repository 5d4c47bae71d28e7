//! The rate-limit rows of the limiter bench (issue 17).

pub mod protocol;
pub mod worker;

use crate::plan::Plan;
use crate::stores::Servers;

/// Every rate-limit row, in one run: the markdown of the part's block in BENCHMARKS.md.
pub async fn measure(plan: &Plan, servers: &Servers) -> anyhow::Result<String> {
    let _ = (plan, servers);
    anyhow::bail!("the rate-limit rows are not written yet")
}
