//! The layer's names before 0.2.0, kept for one release. `GlobalConcurrencyLimitLayer` is
//! also the name of tower's own layer (`tower::limit::GlobalConcurrencyLimitLayer`), which
//! caps the services of one process only: a code base that uses both could not tell them apart.

use super::layer::{ClusterConcurrencyLimitLayer, ClusterConcurrencyLimitLayerBuilder};
use super::service::ClusterConcurrencyLimit;

/// Old name of [`ClusterConcurrencyLimitLayer`]; using it warns.
///
/// ```compile_fail
/// #![deny(deprecated)]
/// let _: Option<clusterlimit::tower::GlobalConcurrencyLimitLayer> = None;
/// ```
#[deprecated(since = "0.2.0", note = "renamed to `ClusterConcurrencyLimitLayer`")]
pub type GlobalConcurrencyLimitLayer = ClusterConcurrencyLimitLayer;

/// Old name of [`ClusterConcurrencyLimitLayerBuilder`]; using it warns.
///
/// ```compile_fail
/// #![deny(deprecated)]
/// let _: Option<clusterlimit::tower::GlobalConcurrencyLimitLayerBuilder> = None;
/// ```
#[deprecated(
    since = "0.2.0",
    note = "renamed to `ClusterConcurrencyLimitLayerBuilder`"
)]
pub type GlobalConcurrencyLimitLayerBuilder = ClusterConcurrencyLimitLayerBuilder;

/// Old name of [`ClusterConcurrencyLimit`]; using it warns.
///
/// ```compile_fail
/// #![deny(deprecated)]
/// let _: Option<clusterlimit::tower::GlobalConcurrencyLimit<()>> = None;
/// ```
#[deprecated(since = "0.2.0", note = "renamed to `ClusterConcurrencyLimit`")]
pub type GlobalConcurrencyLimit<S> = ClusterConcurrencyLimit<S>;
