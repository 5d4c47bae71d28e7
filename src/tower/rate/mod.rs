//! [`ClusterRateLimitLayer`]: every request checked against a cluster-wide rate limit, per key
//! (documented in the [`tower`](crate::tower) module docs, "Rate limits").

mod admit;
mod class;
mod cost;
mod error;
mod flow;
mod future;
mod http_answer;
pub mod key;
mod layer;
mod options;
mod respond;
mod service;
mod settle;
mod settling;

pub use class::{ClassFn, IntoClass, NoClass};
pub use cost::{CostFn, OnePerRequest};
pub use error::{RateLimitError, RateLimitInfo};
pub use flow::{NoRateFlow, RateFlowFn};
pub use future::RateLimitFuture;
pub use layer::{ClusterRateLimitLayer, DEFAULT_RATE_STORE_TIMEOUT};
pub use options::{OnLimit, OnMissingKey};
pub use respond::{AsErrors, HttpResponses, Respond};
pub use service::ClusterRateLimit;
pub use settle::{IntoActual, NoResponse, NoResponseFn, NoSettle, OnNoResponse, SettleFn};
pub use settling::SettleStats;
