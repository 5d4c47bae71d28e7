//! [`ClusterConcurrencyLimitLayer`]: every request holds permits of one cluster-wide
//! [`Semaphore`](crate::Semaphore) while it runs (documented in the [`tower`](crate::tower)
//! module docs). `layer.rs` builds it, `service.rs` and `future.rs` carry a request,
//! `admit.rs` takes its permit (or decides the fallback), `classify.rs` turns a response into
//! an adaptive outcome, `flows.rs` a request into its flow on a fair semaphore.

mod admit;
mod classify;
mod deprecated;
mod error;
mod fallback;
mod flows;
mod future;
mod layer;
mod service;

pub use classify::{Classify, DefaultClassifier};
#[allow(deprecated)]
pub use deprecated::{
    GlobalConcurrencyLimit, GlobalConcurrencyLimitLayer, GlobalConcurrencyLimitLayerBuilder,
};
pub use error::LimitError;
pub use fallback::Fallback;
pub use flows::{DefaultFlow, FlowFn};
pub use future::ResponseFuture;
pub use layer::{
    ClusterConcurrencyLimitLayer, ClusterConcurrencyLimitLayerBuilder, DEFAULT_ACQUIRE_TIMEOUT,
    DEFAULT_RETRY_AFTER, DEFAULT_STORE_RETRY_INTERVAL,
};
pub use service::ClusterConcurrencyLimit;
