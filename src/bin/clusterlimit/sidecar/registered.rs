//! A metric made and registered in one step, so a metrics struct is built field by field.

use prometheus_client::registry::{Metric, Registry};

/// `metric`, registered in `registry` as `name` with `help` (the registry keeps a clone: both
/// share the values).
pub fn registered<M: Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}
