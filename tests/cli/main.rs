//! The real `clusterlimit` binary's commands: `run`, `status`, `set-capacity`, `rate`, `top`,
//! their messages, deadlines and closed pipes, `run --adaptive` and `run --per-member`.
//!
//! One test binary for this area (tower's `tests/<area>/main.rs` shape): each former test
//! file is a module, still at its path under tests/, and the helpers are compiled once.
//! A test's name is its former name under its file's module (`etcd_faults::…`).

#[path = "../binary/mod.rs"]
mod binary;
#[path = "../support/mod.rs"]
mod support;

#[path = "../adaptive_binary.rs"]
mod adaptive_binary;
// Every printing command with its stdout a closed pipe or a full device.
#[path = "../cli_closed_pipe.rs"]
mod cli_closed_pipe;
// Every command and sidecar route keeps to its timeout against a SIGSTOPped or absent store.
#[path = "../cli_deadlines.rs"]
mod cli_deadlines;
// `run --flow/--class/--weight/--classes` (fair semaphores).
#[path = "../cli_fair.rs"]
mod cli_fair;
#[path = "../cli_messages.rs"]
mod cli_messages;
// `clusterlimit rate …` (src/bin/clusterlimit/cli/rate).
#[path = "../cli_rate.rs"]
mod cli_rate;
// `rate charge` and `rate refund`: costs known afterwards, debt.
#[path = "../cli_rate_charge.rs"]
mod cli_rate_charge;
#[path = "../cli_run.rs"]
mod cli_run;
#[path = "../cli_status.rs"]
mod cli_status;
#[path = "../per_member_binary.rs"]
mod per_member_binary;
// `clusterlimit top` in a real terminal (tmux) against real etcd.
#[path = "../top.rs"]
mod top;
