//! Windows (placeholder).
