//! The class table of a fair semaphore: priority levels with a guaranteed share each.

use crate::error::Error;

/// A class's guaranteed share of the capacity: the permits it gets first whenever it has
/// waiters, and lends to the other classes while it is idle.
///
/// ```
/// use clusterlimit::fair::Share;
/// assert_eq!(Share::Permits(3).of(10), 3);
/// assert_eq!(Share::percent(25).of(10), 2); // rounded down
/// assert_eq!(Share::fraction(1, 3).of(10), 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Share {
    /// A fixed number of permits.
    Permits(u32),
    /// `numerator / denominator` of the capacity, rounded down (so it follows resizes).
    Fraction {
        /// Parts of the capacity.
        numerator: u32,
        /// Out of this many (at least 1).
        denominator: u32,
    },
}

impl Share {
    /// `percent`% of the capacity, rounded down.
    pub fn percent(percent: u32) -> Share {
        Share::fraction(percent, 100)
    }

    /// `numerator / denominator` of the capacity, rounded down.
    pub fn fraction(numerator: u32, denominator: u32) -> Share {
        Share::Fraction {
            numerator,
            denominator,
        }
    }

    /// The permits this share guarantees at `capacity` (a fraction over 0 guarantees nothing).
    pub fn of(&self, capacity: u32) -> u32 {
        match *self {
            Share::Permits(n) => n,
            Share::Fraction {
                numerator,
                denominator,
            } => match u64::from(capacity).checked_mul(u64::from(numerator)) {
                Some(p) if denominator > 0 => {
                    u32::try_from(p / u64::from(denominator)).unwrap_or(u32::MAX)
                }
                _ => 0,
            },
        }
    }
}

/// The classes of a fair semaphore, by index: each a name and a guaranteed [`Share`].
///
/// Validated when made (names, fractions adding up to at most the whole) and against a
/// capacity with [`check`](Classes::check) (the guaranteed permits fit in it).
///
/// ```
/// use clusterlimit::fair::{Classes, Share};
/// let classes = Classes::new([("critical", Share::percent(25)), ("batch", Share::Permits(0))])?;
/// assert_eq!(classes.id("batch"), Some(1));
/// assert_eq!(classes.mins(8), vec![2, 0]);
/// assert!(classes.check(8).is_ok());
/// let err = Classes::new([("a", Share::percent(60)), ("b", Share::percent(50))]).unwrap_err();
/// assert!(err.to_string().contains("more than the whole capacity"));
/// # Ok::<(), clusterlimit::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classes {
    classes: Vec<(String, Share)>,
}

impl Default for Classes {
    fn default() -> Classes {
        Classes::single()
    }
}

impl Classes {
    /// One best-effort class named "default": a semaphore without classes.
    pub fn single() -> Classes {
        Classes {
            classes: vec![("default".to_owned(), Share::Permits(0))],
        }
    }

    /// The classes in index order. Fails with [`Error::InvalidArgument`] when there are none, a
    /// name is empty or repeated, a fraction has denominator 0 or is over 1, or the fractions
    /// add up to more than the whole capacity.
    pub fn new<S: Into<String>>(
        classes: impl IntoIterator<Item = (S, Share)>,
    ) -> Result<Classes, Error> {
        let classes: Vec<(String, Share)> =
            classes.into_iter().map(|(n, s)| (n.into(), s)).collect();
        if classes.is_empty() {
            return Err(Error::invalid("a fair semaphore needs at least one class"));
        }
        for (i, (name, share)) in classes.iter().enumerate() {
            if name.is_empty() {
                return Err(Error::invalid(format!("class {i} has an empty name")));
            }
            if classes[..i].iter().any(|(n, _)| n == name) {
                return Err(Error::invalid(format!("class {name:?} is named twice")));
            }
            if let Share::Fraction {
                numerator,
                denominator,
            } = *share
            {
                if denominator == 0 || numerator > denominator {
                    return Err(Error::invalid(format!(
                        "class {name:?}: share {numerator}/{denominator} is not a fraction \
                         between 0 and 1"
                    )));
                }
            }
        }
        fractions_fit(&classes)?;
        Ok(Classes { classes })
    }

    /// Number of classes.
    pub fn len(&self) -> usize {
        self.classes.len()
    }

    /// Always false: there is at least one class.
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    /// The index of the class named `name`.
    pub fn id(&self, name: &str) -> Option<usize> {
        self.classes.iter().position(|(n, _)| n == name)
    }

    /// The name of class `id`.
    pub fn name(&self, id: usize) -> Option<&str> {
        self.classes.get(id).map(|(n, _)| n.as_str())
    }

    /// The share of class `id`.
    pub fn share(&self, id: usize) -> Option<Share> {
        self.classes.get(id).map(|&(_, s)| s)
    }

    /// Whether the guaranteed permits fit in `capacity`; the store checks this when the
    /// semaphore is made and before every resize. The error names every class's share.
    pub fn check(&self, capacity: u32) -> Result<(), Error> {
        let need: u64 = self.iter_mins(capacity).map(u64::from).sum();
        if need <= u64::from(capacity) {
            return Ok(());
        }
        let parts: Vec<String> = self
            .classes
            .iter()
            .map(|(n, s)| format!("{n} {}", s.of(capacity)))
            .collect();
        Err(Error::invalid(format!(
            "the classes' guaranteed shares need {need} permits ({}), more than the capacity {capacity}",
            parts.join(" + ")
        )))
    }

    /// Each class's guaranteed permits at `capacity`. Should they not fit (a table that
    /// [`check`](Classes::check) refuses), earlier classes keep theirs and later ones get what
    /// is left, so the grant rule stays total.
    pub fn mins(&self, capacity: u32) -> Vec<u32> {
        let mut left = capacity;
        self.iter_mins(capacity)
            .map(|m| {
                let m = m.min(left);
                left -= m;
                m
            })
            .collect()
    }

    fn iter_mins(&self, capacity: u32) -> impl Iterator<Item = u32> + '_ {
        self.classes.iter().map(move |(_, s)| s.of(capacity))
    }
}

/// The fractions' sum is at most 1, computed exactly (a sum of rationals with the least common
/// denominator), so that a fraction table alone fits every capacity.
fn fractions_fit(classes: &[(String, Share)]) -> Result<(), Error> {
    let too_fine = || Error::invalid("the classes' fractions are too fine to add up; use percents");
    let (mut num, mut den) = (0u128, 1u128);
    for (_, share) in classes {
        if let Share::Fraction {
            numerator,
            denominator,
        } = *share
        {
            let (n, d) = (u128::from(numerator), u128::from(denominator));
            let lcm = den / gcd(den, d) * d;
            num = (num.checked_mul(lcm / den).ok_or_else(too_fine)?)
                .checked_add(n * (lcm / d))
                .ok_or_else(too_fine)?;
            den = lcm;
            let g = gcd(num, den).max(1);
            (num, den) = (num / g, den / g);
            if u64::try_from(den).is_err() {
                return Err(too_fine());
            }
        }
    }
    if num > den {
        return Err(Error::invalid(format!(
            "the classes' fractions add up to {num}/{den}, more than the whole capacity"
        )));
    }
    Ok(())
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_round_down_and_follow_the_capacity() {
        assert_eq!(Share::percent(25).of(8), 2);
        assert_eq!(Share::percent(25).of(7), 1);
        assert_eq!(Share::fraction(2, 3).of(10), 6);
        assert_eq!(Share::Permits(4).of(1), 4);
        assert_eq!(Share::fraction(1, 0).of(10), 0);
    }

    #[test]
    fn bad_tables_are_refused_with_reasons() {
        let err = |r: Result<Classes, Error>| r.unwrap_err().to_string();
        let none: [(&str, Share); 0] = [];
        assert!(err(Classes::new(none)).contains("at least one class"));
        assert!(err(Classes::new([("", Share::Permits(1))])).contains("empty name"));
        let twice = [("a", Share::Permits(1)), ("a", Share::Permits(2))];
        assert!(err(Classes::new(twice)).contains("\"a\" is named twice"));
        assert!(err(Classes::new([("a", Share::fraction(1, 0))])).contains("not a fraction"));
        assert!(err(Classes::new([("a", Share::fraction(3, 2))])).contains("not a fraction"));
        let over = [("a", Share::fraction(1, 2)), ("b", Share::fraction(2, 3))];
        assert!(err(Classes::new(over)).contains("add up to 7/6"));
    }

    #[test]
    fn thirds_add_up_exactly() {
        let thirds = [
            ("a", Share::fraction(1, 3)),
            ("b", Share::fraction(1, 3)),
            ("c", Share::fraction(1, 3)),
        ];
        assert!(Classes::new(thirds).is_ok());
    }

    #[test]
    fn check_against_the_capacity_names_the_shares() {
        let c = Classes::new([
            ("critical", Share::Permits(3)),
            ("batch", Share::percent(50)),
        ])
        .unwrap();
        assert!(c.check(6).is_ok());
        let e = c.check(4).unwrap_err().to_string();
        assert!(e.contains("need 5 permits (critical 3 + batch 2)"), "{e}");
        assert!(e.contains("more than the capacity 4"), "{e}");
        // Refused tables still give the rule something total: earlier classes first.
        assert_eq!(c.mins(4), vec![3, 1]);
        assert_eq!(c.mins(2), vec![2, 0]);
    }

    #[test]
    fn names_and_ids() {
        let c = Classes::new([("hi", Share::Permits(1)), ("lo", Share::Permits(0))]).unwrap();
        assert_eq!((c.len(), c.is_empty()), (2, false));
        assert_eq!((c.id("lo"), c.id("x")), (Some(1), None));
        assert_eq!((c.name(0), c.name(2)), (Some("hi"), None));
        assert_eq!(c.share(0), Some(Share::Permits(1)));
        assert_eq!(Classes::default(), Classes::single());
    }
}
