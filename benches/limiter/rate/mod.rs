//! The rate-limit rows of the limiter bench (issue 17).

pub mod protocol;
pub mod worker;
