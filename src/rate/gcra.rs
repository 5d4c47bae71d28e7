//! GCRA (placeholder).
