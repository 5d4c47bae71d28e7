//! [`Reserves`]: a quota's priority classes, each with the units it must leave to the others
//! (`Quota::reserve`). Kept inline (no heap) so that a [`Quota`](super::Quota) stays `Copy`.
//!
//! A check of a class with reserve `r` is admitted only if, after it, at least `r` units would
//! still be left: exactly a check of `cost + r` without a class, consuming only `cost`
//! (`decide.rs`). A check without a class, or of a class whose reserve is 0, may use
//! everything.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

/// Most classes one quota may declare.
pub const MAX_CLASSES: usize = 4;
/// Longest class name, in bytes.
pub const MAX_CLASS_LEN: usize = 24;

/// A class name: 1 ..= [`MAX_CLASS_LEN`] bytes of `A-Z a-z 0-9 _ . -`, kept inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) struct ClassName {
    len: u8,
    bytes: [u8; MAX_CLASS_LEN],
}

impl ClassName {
    /// The name, or why it cannot be one (a sentence naming it).
    pub(crate) fn new(name: &str) -> Result<ClassName, String> {
        if name.is_empty() {
            return Err("a class name must not be empty".into());
        }
        if name.len() > MAX_CLASS_LEN {
            return Err(format!(
                "class name {name:?} is {} bytes, at most {MAX_CLASS_LEN} are allowed",
                name.len()
            ));
        }
        if let Some(c) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
        {
            return Err(format!(
                "class name {name:?} has {c:?}: use letters, digits, '_', '.' and '-'"
            ));
        }
        let mut bytes = [0u8; MAX_CLASS_LEN];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        Ok(ClassName {
            // ≤ MAX_CLASS_LEN, checked above.
            len: u8::try_from(name.len()).unwrap_or(0),
            bytes,
        })
    }

    pub(crate) fn as_str(&self) -> &str {
        // Built from a &str of ASCII only.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }
}

impl fmt::Debug for ClassName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// What went wrong while building a quota's reserves, told by `Quota::validate`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Problem {
    /// A bad name; the first [`MAX_CLASS_LEN`] bytes of it (enough to recognise it) and its
    /// length.
    BadName(ClassName, usize, BadName),
    Duplicate(ClassName),
    TooMany,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum BadName {
    Empty,
    TooLong,
    Character,
}

/// A quota's priority classes and the reserve of each: the units a check of that class must
/// leave for the others. Sorted by name, at most [`MAX_CLASSES`].
///
/// ```
/// use clusterlimit::Quota;
/// let q = Quota::per_second(100).reserve("batch", 20).reserve("critical", 0);
/// assert_eq!(q.reserves.get("batch"), Some(20));
/// assert_eq!(q.reserves.get("critical"), Some(0));
/// assert_eq!(q.reserves.get("other"), None);
/// assert_eq!(q.reserves.iter().collect::<Vec<_>>(), [("batch", 20), ("critical", 0)]);
/// assert!(q.validate().is_ok());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct Reserves {
    len: u8,
    classes: [(ClassName, u64); MAX_CLASSES],
    problem: Option<Problem>,
}

impl Reserves {
    /// No classes: every check may use the whole quota.
    pub fn new() -> Reserves {
        Reserves::default()
    }

    /// With `class` keeping `units` for the others (0: a class that may use everything).
    /// A bad or repeated name, or one class too many, is reported by `Quota::validate`.
    pub fn with(mut self, class: &str, units: u64) -> Reserves {
        if self.problem.is_some() {
            return self;
        }
        let name = match ClassName::new(class) {
            Ok(n) => n,
            Err(_) => {
                let why = if class.is_empty() {
                    BadName::Empty
                } else if class.len() > MAX_CLASS_LEN {
                    BadName::TooLong
                } else {
                    BadName::Character
                };
                let mut cut = class.len().min(MAX_CLASS_LEN);
                while !class.is_char_boundary(cut) {
                    cut -= 1;
                }
                let mut shown = ClassName::default();
                shown.bytes[..cut].copy_from_slice(&class.as_bytes()[..cut]);
                shown.len = u8::try_from(cut).unwrap_or(0);
                self.problem = Some(Problem::BadName(shown, class.len(), why));
                return self;
            }
        };
        let len = usize::from(self.len);
        let at = match self.classes[..len].binary_search_by(|(n, _)| n.cmp(&name)) {
            Ok(_) => {
                self.problem = Some(Problem::Duplicate(name));
                return self;
            }
            Err(at) => at,
        };
        if len == MAX_CLASSES {
            self.problem = Some(Problem::TooMany);
            return self;
        }
        self.classes.copy_within(at..len, at + 1);
        self.classes[at] = (name, units);
        self.len += 1;
        self
    }

    /// The reserve of `class`, `None` if the quota has no such class.
    pub fn get(&self, class: &str) -> Option<u64> {
        self.iter().find(|(n, _)| *n == class).map(|(_, r)| r)
    }

    /// Each class and its reserve, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.classes[..usize::from(self.len)]
            .iter()
            .map(|(n, r)| (n.as_str(), *r))
    }

    /// How many classes.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// No classes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The largest reserve (0 without classes).
    pub fn largest(&self) -> u64 {
        self.iter().map(|(_, r)| r).max().unwrap_or(0)
    }

    /// What went wrong while building them, as a sentence.
    pub(crate) fn problem(&self) -> Option<String> {
        Some(match self.problem? {
            Problem::BadName(_, _, BadName::Empty) => "a class name must not be empty".to_string(),
            Problem::BadName(shown, len, BadName::TooLong) => format!(
                "class name {:?}… is {len} bytes, at most {MAX_CLASS_LEN} are allowed",
                shown.as_str()
            ),
            Problem::BadName(shown, _, BadName::Character) => format!(
                "class name {:?} may only have letters, digits, '_', '.' and '-'",
                String::from_utf8_lossy(&shown.bytes[..usize::from(shown.len)])
            ),
            Problem::Duplicate(name) => {
                format!("class {:?} is given a reserve twice", name.as_str())
            }
            Problem::TooMany => format!("a quota may have at most {MAX_CLASSES} classes"),
        })
    }

    /// The reserve a check of `class` must leave (`None`: no class, 0). A class these reserves
    /// do not name gets `u64::MAX`: nothing admits it.
    pub(crate) fn reserve_of(&self, class: Option<&str>) -> u64 {
        class.map_or(0, |c| self.get(c).unwrap_or(u64::MAX))
    }
}

impl fmt::Debug for Reserves {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        m.entries(self.iter());
        if let Some(p) = self.problem {
            m.entry(&"problem", &p);
        }
        m.finish()
    }
}

impl fmt::Display for Reserves {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, units)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{name} {units}")?;
        }
        Ok(())
    }
}

/// Stored as a JSON object `{"class": reserve, …}`.
impl Serialize for Reserves {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for Reserves {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Reserves, D::Error> {
        let map = BTreeMap::<String, u64>::deserialize(d)?;
        let reserves = map
            .iter()
            .fold(Reserves::new(), |r, (name, units)| r.with(name, *units));
        match reserves.problem() {
            Some(p) => Err(D::Error::custom(p)),
            None => Ok(reserves),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_by_name_whatever_the_order_given() {
        let a = Reserves::new().with("b", 2).with("a", 1).with("c", 3);
        let b = Reserves::new().with("c", 3).with("a", 1).with("b", 2);
        assert_eq!(a, b);
        assert_eq!(a.iter().collect::<Vec<_>>(), [("a", 1), ("b", 2), ("c", 3)]);
        assert_eq!((a.len(), a.largest()), (3, 3));
        assert_eq!(a.to_string(), "a 1, b 2, c 3");
        assert_eq!(format!("{a:?}"), r#"{"a": 1, "b": 2, "c": 3}"#);
        assert!(Reserves::new().is_empty());
    }

    #[test]
    fn a_class_not_named_reserves_everything_no_class_nothing() {
        let r = Reserves::new().with("batch", 5).with("critical", 0);
        assert_eq!(r.reserve_of(None), 0);
        assert_eq!(r.reserve_of(Some("batch")), 5);
        assert_eq!(r.reserve_of(Some("critical")), 0);
        assert_eq!(r.reserve_of(Some("other")), u64::MAX);
    }

    #[test]
    fn problems_are_kept_for_validate() {
        let long = "x".repeat(MAX_CLASS_LEN + 1);
        let cases = [
            (Reserves::new().with("", 1), "must not be empty"),
            (Reserves::new().with(&long, 1), "25 bytes, at most 24"),
            (Reserves::new().with("a b", 1), "may only have letters"),
            (
                Reserves::new().with("a", 1).with("a", 2),
                r#"class "a" is given a reserve twice"#,
            ),
            (
                (0..=MAX_CLASSES).fold(Reserves::new(), |r, i| r.with(&format!("c{i}"), 1)),
                "at most 4 classes",
            ),
        ];
        for (r, word) in cases {
            let p = r.problem().unwrap_or_default();
            assert!(p.contains(word), "{p}");
        }
        // The first problem sticks.
        let r = Reserves::new().with("", 1).with("a", 1);
        assert_eq!(r.len(), 0);
        assert!(r.problem().is_some());
    }

    #[test]
    fn json_is_an_object_and_bad_ones_are_refused() {
        let r = Reserves::new().with("batch", 5).with("critical", 0);
        let text = serde_json::to_string(&r).unwrap_or_default();
        assert_eq!(text, r#"{"batch":5,"critical":0}"#);
        assert_eq!(serde_json::from_str::<Reserves>(&text).ok(), Some(r));
        assert!(serde_json::from_str::<Reserves>(r#"{"":1}"#).is_err());
        assert!(serde_json::from_str::<Reserves>(r#"{"a":-1}"#).is_err());
    }
}
