//! The one value parser of the whole-number flags (`--capacity`, `--permits`, `--limit`,
//! `--cost`, …): a message that names the flag, its range and what was typed, for a negative
//! number too (clap's own would take `-3` for a flag and suggest `-- -3`, which makes `-3` the
//! command `run` runs), a number too large for any type, or `10/sec`.
//!
//! Each such flag also sets `allow_negative_numbers`, so that `-3` reaches this parser.

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use std::ffi::OsStr;
use std::marker::PhantomData;

/// A whole number from `min` to `max` as type `T`.
#[derive(Debug)]
pub struct Whole<T> {
    min: u64,
    max: u64,
    /// `--limit`: point `10/sec` at `--per`.
    per_hint: bool,
    into: PhantomData<fn() -> T>,
}

impl<T> Clone for Whole<T> {
    fn clone(&self) -> Self {
        Whole { ..*self }
    }
}

/// A whole number from `min` to `max` (`max` must fit `T`).
pub fn whole<T>(min: u64, max: u64) -> Whole<T> {
    Whole {
        min,
        max,
        per_hint: false,
        into: PhantomData,
    }
}

impl<T> Whole<T> {
    /// For a count per period: `10/sec` is answered with `--limit 10 --per 1s`.
    pub fn per_hint(self) -> Self {
        Whole {
            per_hint: true,
            ..self
        }
    }

    /// The message for `typed`, if it is not a whole number in range.
    fn check(&self, flag: &str, typed: &str) -> Result<u64, String> {
        let (min, max) = (self.min, self.max);
        if self.per_hint {
            if let Some((n, per)) = typed.split_once('/') {
                return Err(format!(
                    "{flag} is a number of requests, got {typed:?}; give the period with --per, \
                     e.g. {flag} {} --per 1{}",
                    n.trim(),
                    unit(per)
                ));
            }
        }
        let range = format!("{flag} must be a whole number from {min} to {max}");
        match typed.trim().parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            Ok(_) => Err(format!("{range}, got {typed}")),
            Err(_) if is_integer(typed) => Err(format!("{range}, got {typed}")),
            Err(_) => Err(format!("{range}, got {typed:?}")),
        }
    }
}

/// Whether `s` is an integer in decimal (negative, or too large for u64).
fn is_integer(s: &str) -> bool {
    let digits = s.trim().strip_prefix('-').unwrap_or(s.trim());
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// `s`, `m`, `h` or `d` for what follows the `/` of `10/sec` (`s` if unknown).
fn unit(per: &str) -> &'static str {
    match per.trim().chars().next() {
        Some('m') if !per.starts_with("ms") => "m",
        Some('h') => "h",
        Some('d') => "d",
        _ => "s",
    }
}

/// How a flag is named in a message: `--capacity`, or `<N>` for an argument.
fn flag_name(arg: Option<&clap::Arg>) -> String {
    let Some(arg) = arg else {
        return "the value".to_string();
    };
    match arg.get_long() {
        Some(long) => format!("--{long}"),
        None => {
            let names = arg.get_value_names().unwrap_or_default();
            let name = names.first().map(|n| n.to_string());
            format!("<{}>", name.unwrap_or_else(|| arg.get_id().to_string()))
        }
    }
}

impl<T> TypedValueParser for Whole<T>
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        let flag = flag_name(arg);
        let typed = value.to_string_lossy();
        let n = self
            .check(&flag, &typed)
            .map_err(|m| clap::Error::raw(ErrorKind::ValueValidation, format!("{m}\n")))
            .map_err(|e| e.with_cmd(cmd))?;
        // (`max` fits `T`: a failure here is the grammar's bug, said as the range.)
        T::try_from(n).map_err(|_| {
            let m = format!("{flag} must be at most {}, got {typed}\n", self.max);
            clap::Error::raw(ErrorKind::ValueValidation, m).with_cmd(cmd)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(w: Whole<u32>, typed: &str) -> Result<u64, String> {
        w.check("--capacity", typed)
    }

    #[test]
    fn names_the_flag_range_and_value() {
        let w = || whole::<u32>(1, 1000);
        assert_eq!(check(w(), "7"), Ok(7));
        for (typed, got) in [
            ("-3", "got -3"),
            ("0", "got 0"),
            ("1001", "got 1001"),
            ("99999999999999999999", "got 99999999999999999999"),
            ("1.5", "got \"1.5\""),
            ("many", "got \"many\""),
            ("", "got \"\""),
        ] {
            let m = check(w(), typed).unwrap_err();
            assert_eq!(
                m,
                format!("--capacity must be a whole number from 1 to 1000, {got}")
            );
        }
    }

    #[test]
    fn a_rate_typed_as_a_fraction_points_at_per() {
        let w = whole::<u64>(1, 10).per_hint();
        assert_eq!(
            w.check("--limit", "10/sec").unwrap_err(),
            "--limit is a number of requests, got \"10/sec\"; give the period with --per, \
             e.g. --limit 10 --per 1s"
        );
        assert!(w
            .check("--limit", "5/min")
            .unwrap_err()
            .ends_with("--per 1m"));
        assert!(w.check("--limit", "5/h").unwrap_err().ends_with("--per 1h"));
    }
}
