//! `run --adaptive`: run under an adaptive semaphore and report the command's outcome on
//! release (exit 0: a success taking the command's time; a death by signal or an overload exit
//! code: a drop; any other exit: nothing said).

use crate::common::parse_duration;
use clap::{Args, ValueEnum};
use clusterlimit::adaptive::{Adaptive, Outcome};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The controller's algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Algorithm {
    /// The capacity follows the ratio of the dependency's unloaded latency to its latency now.
    Gradient,
    /// Grows by one permit per window that used the capacity, shrinks by 10% per window with
    /// drops.
    Aimd,
}

/// `--max` of `--adaptive` when not given.
const DEFAULT_MAX: u32 = 1000;

/// The adaptive flags of `run` (with `--min` and `--max`, which `--per-member` shares).
#[derive(Debug, Args)]
pub struct AdaptiveArgs {
    /// Run under an adaptive semaphore: its capacity is set by a controller from the outcomes
    /// its holders report. This run reports the command's: exit 0 is a success taking the
    /// command's time; a death by signal N (exit 128+N) or an exit code in
    /// --overload-exit-codes is a drop (the dependency was overloaded); any other exit says
    /// nothing. A command stopped by a signal sent to `run` says nothing either. After the
    /// command, `run` stays until the window it ended in has been summed (up to one --window
    /// and 0.5 s), so its outcome counts. Give every client of the semaphore the same settings.
    #[arg(long, value_name = "ALGORITHM", conflicts_with = "capacity")]
    pub adaptive: Option<Algorithm>,
    /// Adaptive or per-member: never fewer permits than this.
    #[arg(long, value_name = "N", requires = "sized", default_value_t = 1, value_parser = super::numbers::whole::<u32>(1, u64::from(clusterlimit::Semaphore::MAX_CAPACITY)), allow_negative_numbers = true)]
    pub min: u32,
    /// Adaptive or per-member: never more permits than this (default: 1000 for --adaptive, no
    /// bound but the largest capacity for --per-member).
    #[arg(long, value_name = "N", requires = "sized", value_parser = super::numbers::whole::<u32>(1, u64::from(clusterlimit::Semaphore::MAX_CAPACITY)), allow_negative_numbers = true)]
    pub max: Option<u32>,
    /// Adaptive: the capacity to create the semaphore with if absent (default: --min).
    #[arg(long, value_name = "N", requires = "adaptive", value_parser = super::numbers::whole::<u32>(1, u64::from(clusterlimit::Semaphore::MAX_CAPACITY)), allow_negative_numbers = true)]
    pub initial: Option<u32>,
    /// Adaptive: how often outcomes are summed and the capacity reconsidered (100ms to 10m).
    #[arg(long, value_name = "DUR", requires = "adaptive", value_parser = parse_duration, default_value = "1s")]
    pub window: Duration,
    /// Adaptive: one window changes the capacity by at most this share of it (above 0, at
    /// most 1).
    #[arg(
        long,
        value_name = "SHARE",
        requires = "adaptive",
        default_value_t = 0.5,
        allow_negative_numbers = true
    )]
    pub max_step: f64,
    /// Adaptive: exit codes of the command that mean the dependency was overloaded (reported
    /// as drops). Default: 75 (EX_TEMPFAIL) and 124 (timeout(1) ran out).
    #[arg(
        long,
        value_name = "CODES",
        requires = "adaptive",
        value_delimiter = ',',
        default_value = "75,124",
        value_parser = super::numbers::whole::<i32>(0, 255),
        allow_negative_numbers = true
    )]
    pub overload_exit_codes: Vec<i32>,
}

impl AdaptiveArgs {
    /// The library's settings, if `--adaptive` was given (checked by the library when opened).
    pub fn settings(&self) -> Option<Adaptive> {
        let algorithm = self.adaptive?;
        let mut a = match algorithm {
            Algorithm::Gradient => Adaptive::gradient(),
            Algorithm::Aimd => Adaptive::aimd(),
        };
        a = a
            .min(self.min)
            .max(self.max.unwrap_or(DEFAULT_MAX))
            .max_step(self.max_step)
            .window(self.window);
        if let Some(initial) = self.initial {
            a = a.initial(initial);
        }
        Some(a)
    }

    /// What the command's end says of the dependency. `asked_to_stop`: `run` forwarded a
    /// SIGTERM or SIGINT it was sent (a cancelled call, not an overload).
    pub fn outcome(&self, status: ExitStatus, took: Duration, asked_to_stop: bool) -> Outcome {
        // The supervisor reports a death by signal N as exit 128+N, as shells do.
        let by_signal = status.signal().is_some()
            || status.code().is_some_and(|c| (129..=128 + 64).contains(&c));
        match status.code() {
            Some(0) => Outcome::Success(took),
            _ if asked_to_stop => Outcome::Ignore,
            Some(c) if self.overload_exit_codes.contains(&c) => Outcome::Dropped,
            _ if by_signal => Outcome::Dropped,
            _ => Outcome::Ignore,
        }
    }

    /// How long to stay after releasing so the window the release landed in is announced
    /// and read by the controller before this process's session (which the announcement is
    /// bound to) ends: to the window's end on the wall clock, plus the controller's grace for
    /// late announcements (a fifth of the window, at most 250 ms), plus a margin.
    pub fn linger(&self) -> Duration {
        const MARGIN: Duration = Duration::from_millis(250);
        let window_ms = u64::try_from(self.window.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let to_end = Duration::from_millis(window_ms - now_ms % window_ms);
        let grace = (self.window / 5).min(Duration::from_millis(250));
        to_end + grace + MARGIN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> AdaptiveArgs {
        AdaptiveArgs {
            adaptive: Some(Algorithm::Aimd),
            min: 1,
            max: Some(10),
            initial: None,
            window: Duration::from_millis(200),
            max_step: 0.5,
            overload_exit_codes: vec![75, 124],
        }
    }

    fn exited(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn exit_statuses_map_to_outcomes() {
        let a = args();
        let took = Duration::from_millis(30);
        assert_eq!(a.outcome(exited(0), took, false), Outcome::Success(took));
        assert_eq!(a.outcome(exited(75), took, false), Outcome::Dropped);
        assert_eq!(a.outcome(exited(124), took, false), Outcome::Dropped);
        assert_eq!(a.outcome(exited(3), took, false), Outcome::Ignore);
        assert_eq!(a.outcome(exited(137), took, false), Outcome::Dropped);
        assert_eq!(
            a.outcome(ExitStatus::from_raw(9), took, false),
            Outcome::Dropped
        );
        assert_eq!(a.outcome(exited(143), took, true), Outcome::Ignore);
        assert_eq!(a.outcome(exited(0), took, true), Outcome::Success(took));
    }

    #[test]
    fn linger_covers_the_window_and_the_grace() {
        let l = args().linger();
        assert!(
            l > Duration::from_millis(290) && l <= Duration::from_millis(490),
            "{l:?}"
        );
    }
}
