//! Tests of the `clusterlimit` binary (being written).
