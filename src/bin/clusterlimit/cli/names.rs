//! Semaphore names checked while parsing, so that a bad one is said with the flag or argument
//! that carried it (`invalid value '' for '--semaphore <NAME>': name must be 1-128
//! characters, got 0`), before any store is contacted.

/// A semaphore name as the library accepts it; the library's reason otherwise.
pub fn semaphore_name(text: &str) -> Result<String, String> {
    match clusterlimit::validate::name(text) {
        Ok(()) => Ok(text.to_string()),
        Err(clusterlimit::Error::InvalidArgument(why)) => Err(why),
        Err(other) => Err(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn says_why_a_name_is_refused() {
        assert_eq!(semaphore_name("jobs.v2"), Ok("jobs.v2".to_string()));
        assert_eq!(
            semaphore_name(""),
            Err("name must be 1-128 characters, got 0".to_string())
        );
        assert!(semaphore_name("a/b").unwrap_err().contains("allowed are"));
    }
}
