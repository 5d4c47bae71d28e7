//! The class table as text, as the CLI, the sidecar's config and the stores write it:
//! `critical=25%,normal=2,batch` (a share in permits, a percent or a fraction `n/d`; a name alone
//! guarantees nothing).

use super::classes::{Classes, Share};
use crate::error::{Error, Result};
use std::fmt;
use std::str::FromStr;

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Share::Permits(n) => write!(f, "{n}"),
            Share::Fraction {
                numerator,
                denominator: 100,
            } => write!(f, "{numerator}%"),
            Share::Fraction {
                numerator,
                denominator,
            } => write!(f, "{numerator}/{denominator}"),
        }
    }
}

impl FromStr for Share {
    type Err = Error;

    /// `3` (permits), `25%` or `1/3` (of the capacity, rounded down).
    fn from_str(s: &str) -> Result<Share> {
        let number = |t: &str| {
            t.trim().parse::<u32>().map_err(|_| {
                Error::invalid(format!(
                    "share {s:?} is not a number of permits, a percent (25%) or a fraction (1/3)"
                ))
            })
        };
        if let Some(p) = s.strip_suffix('%') {
            Ok(Share::percent(number(p)?))
        } else if let Some((n, d)) = s.split_once('/') {
            Ok(Share::fraction(number(n)?, number(d)?))
        } else {
            Ok(Share::Permits(number(s)?))
        }
    }
}

impl fmt::Display for Classes {
    /// `critical=25%,batch=0`: what [`Classes::from_str`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for id in 0..self.len() {
            let (Some(name), Some(share)) = (self.name(id), self.share(id)) else {
                continue;
            };
            let sep = if id == 0 { "" } else { "," };
            write!(f, "{sep}{name}={share}")?;
        }
        Ok(())
    }
}

impl FromStr for Classes {
    type Err = Error;

    /// `critical=25%,normal=2,batch`: classes in priority order, each `NAME=SHARE` or `NAME`
    /// (guaranteed nothing); validated as [`Classes::new`] does. Names may not contain `,` or `=`.
    ///
    /// ```
    /// use clusterlimit::fair::{Classes, Share};
    /// let c: Classes = "critical=25%,normal=2,batch".parse()?;
    /// assert_eq!(c.share(0), Some(Share::percent(25)));
    /// assert_eq!(c.share(2), Some(Share::Permits(0)));
    /// assert_eq!(c.to_string(), "critical=25%,normal=2,batch=0");
    /// assert!("a=60%,b=50%".parse::<Classes>().is_err());
    /// # Ok::<(), clusterlimit::Error>(())
    /// ```
    fn from_str(s: &str) -> Result<Classes> {
        let mut table = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            let (name, share) = match part.split_once('=') {
                Some((n, sh)) => (n.trim(), sh.trim().parse::<Share>()?),
                None => (part, Share::Permits(0)),
            };
            table.push((name.to_owned(), share));
        }
        Classes::new(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips_and_bad_text_says_why() {
        for text in ["default=0", "a=1/3,b=1/3,c=1/3", "critical=3,batch=50%"] {
            let c: Classes = text.parse().unwrap();
            assert_eq!(c.to_string(), text);
            assert_eq!(c.to_string().parse::<Classes>().unwrap(), c);
        }
        let err = |t: &str| t.parse::<Classes>().unwrap_err().to_string();
        assert!(
            err("a=x").contains("\"x\" is not a number of permits"),
            "{}",
            err("a=x")
        );
        assert!(err("a=1,,b").contains("empty name"), "{}", err("a=1,,b"));
        assert!(err("a=1,a=2").contains("named twice"));
        assert!(err("a=2/0").contains("not a fraction"));
    }
}
