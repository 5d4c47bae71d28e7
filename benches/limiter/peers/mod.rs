//! The rate-limit peers of issue 17: redis-cell on Redis, rate-limiter-flexible and `limits`
//! on etcd.

pub mod redis_cell;
