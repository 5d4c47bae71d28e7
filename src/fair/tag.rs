//! What an acquire says about itself on a fair semaphore: its flow, its class and its weight.

use crate::error::{Error, Result};

/// Longest flow or class name.
pub const MAX_FAIR_NAME_LEN: usize = 128;

/// An acquire's place in a fair semaphore: the **flow** it belongs to (tenant, user, job family),
/// its **class** (priority level, one of the semaphore's [`Classes`](super::Classes); `None`: the
/// first class) and its flow's **weight** (a flow of weight 2 gets twice the permits of a flow of
/// weight 1 while both wait). A flow's weight is the weight of its newest request.
///
/// ```
/// use clusterlimit::fair::FairTag;
/// let tag = FairTag::new("tenant-a").class("batch").weight(2);
/// assert_eq!((tag.flow.as_str(), tag.class.as_deref(), tag.weight), ("tenant-a", Some("batch"), 2));
/// assert!(tag.check().is_ok());
/// assert!(FairTag::new("").check().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FairTag {
    /// The flow: requests of one flow are granted in arrival order, flows share by weight.
    pub flow: String,
    /// The class by name; `None` is the semaphore's first class.
    pub class: Option<String>,
    /// The flow's weight, at least 1.
    pub weight: u32,
}

impl Default for FairTag {
    fn default() -> FairTag {
        FairTag::new("default")
    }
}

impl FairTag {
    /// A request of `flow`, in the first class, of weight 1.
    pub fn new(flow: impl Into<String>) -> FairTag {
        FairTag {
            flow: flow.into(),
            class: None,
            weight: 1,
        }
    }

    /// The same request in class `class`.
    pub fn class(mut self, class: impl Into<String>) -> FairTag {
        self.class = Some(class.into());
        self
    }

    /// The same request stating its flow's weight.
    pub fn weight(mut self, weight: u32) -> FairTag {
        self.weight = weight;
        self
    }

    /// Flow and class names are 1–128 bytes without control characters (they are shown in
    /// status and stored with the entry); the weight is 1–1,000,000.
    pub fn check(&self) -> Result<()> {
        fair_name("flow", &self.flow)?;
        if let Some(class) = &self.class {
            fair_name("class", class)?;
        }
        if self.weight == 0 || self.weight > 1_000_000 {
            return Err(Error::invalid(format!(
                "a flow's weight must be between 1 and 1000000, got {}",
                self.weight
            )));
        }
        Ok(())
    }
}

fn fair_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_FAIR_NAME_LEN {
        return Err(Error::invalid(format!(
            "a {what} name must be 1-{MAX_FAIR_NAME_LEN} bytes, got {}",
            name.len()
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "the {what} name {name:?} contains a control character"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_tags_are_refused_with_reasons() {
        let err = |t: FairTag| t.check().unwrap_err().to_string();
        assert!(err(FairTag::new("")).contains("flow name must be 1-128 bytes, got 0"));
        assert!(err(FairTag::new("x".repeat(129))).contains("got 129"));
        assert!(err(FairTag::new("a").class("")).contains("class name"));
        assert!(err(FairTag::new("a\n")).contains("control character"));
        assert!(err(FairTag::new("a").weight(0)).contains("between 1 and 1000000, got 0"));
        assert!(FairTag::new("ü-tenant")
            .class("critical")
            .weight(1_000_000)
            .check()
            .is_ok());
    }
}
