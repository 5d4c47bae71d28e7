//! Rate limits as a Limiter serves them: the handle ([`RateLimit`], `handle.rs`), the one
//! wait loop (`wait.rs`), the coalescing of concurrent checks of a key into one write (`batch.rs`, paced
//! by `pace.rs`), what the Limiter last saw of each key (`cell.rs`, in `registry.rs`), writes of
//! many keys sharing one request (`combine.rs`), and `check_all`'s joint writes (`joint.rs`,
//! decided in `check_all.rs`, each call by `call.rs`); a Limiter keeps them in one [`Rates`](rates::Rates) (`rates.rs`). The meaning of a rate limit is pure code in [`crate::rate`]; the
//! Costs known only afterwards: reservations settled at the real cost (`reservation.rs`),
//! charges and refunds (`charge.rs`), answered with the key's [`Balance`] (`balance.rs`). The
//! storage is behind [`RateStore`](crate::backend::RateStore).
//!
//! Files name each other directly (never through this file), so imports run one way.

pub(crate) mod approx_book;
pub(crate) mod approx_close;
pub(crate) mod approx_report;
pub(crate) mod approx_usage;
pub(crate) mod balance;
pub(crate) mod batch;
pub(crate) mod call;
pub(crate) mod cell;
pub(crate) mod charge;
pub(crate) mod check_all;
pub(crate) mod combine;
pub(crate) mod handle;
pub(crate) mod joint;
pub(crate) mod lease_book;
pub(crate) mod lease_close;
pub(crate) mod leased_keys;
pub(crate) mod options;
pub(crate) mod pace;
pub(crate) mod rates;
pub(crate) mod registry;
pub(crate) mod reservation;
pub(crate) mod wait;

pub use balance::Balance;
pub use charge::MAX_CHARGE;
pub use check_all::KeyCheck;
pub use handle::{RateLimit, MAX_KEY_LEN};
pub use leased_keys::LeasedKey;
pub use options::CheckOptions;
pub use reservation::{Reservation, DEFAULT_SETTLE_WITHIN};
pub use wait::Waited;
