//! Adaptive semaphores' controller seats: the capacity-1 semaphore `NAME.controller` whose
//! holder controls adaptive semaphore `NAME`. Views show a seat under its semaphore, not as a
//! row of its own; a seat whose semaphore is absent stays a row.

/// Appended to an adaptive semaphore's name to name its controller seat. A copy of the
/// library's `adaptive::names::CONTROLLER_SUFFIX` (crate-private there): the two must agree.
pub const CONTROLLER_SUFFIX: &str = ".controller";

/// Splits `items` into the semaphores, each with its controller seat if it has one, and
/// leaves in place (as semaphores) seats whose semaphore is absent. The order is kept.
pub fn group<T>(items: Vec<T>, name: impl Fn(&T) -> &str) -> Vec<(T, Option<T>)> {
    let names: std::collections::HashSet<String> =
        items.iter().map(|i| name(i).to_string()).collect();
    let is_grouped_seat = |n: &str| seat_of(n).is_some_and(|base| names.contains(base));
    let (seats, semaphores): (Vec<T>, Vec<T>) =
        items.into_iter().partition(|i| is_grouped_seat(name(i)));
    let mut seats: std::collections::HashMap<String, T> = seats
        .into_iter()
        .map(|s| (seat_of(name(&s)).unwrap_or_default().to_string(), s))
        .collect();
    semaphores
        .into_iter()
        .map(|s| {
            let seat = seats.remove(name(&s));
            (s, seat)
        })
        .collect()
}

/// The semaphore whose controller seat `name` is, if it is one.
pub fn seat_of(name: &str) -> Option<&str> {
    name.strip_suffix(CONTROLLER_SUFFIX)
        .filter(|base| !base.is_empty())
}

/// How many of `names` are seats whose semaphore is among `names` too.
pub fn grouped_seats(names: &[String]) -> usize {
    let all: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    names
        .iter()
        .filter(|n| seat_of(n).is_some_and(|base| all.contains(base)))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seat_goes_under_its_semaphore_and_an_orphan_seat_stays() {
        let names = ["db", "db.controller", "jobs", "lone.controller"].map(String::from);
        let grouped = group(names.to_vec(), |s| s.as_str());
        let shown: Vec<(&str, Option<&str>)> = grouped
            .iter()
            .map(|(s, seat)| (s.as_str(), seat.as_deref()))
            .collect();
        assert_eq!(
            shown,
            [
                ("db", Some("db.controller")),
                ("jobs", None),
                ("lone.controller", None)
            ]
        );
        assert_eq!(grouped_seats(&names), 1);
        assert_eq!(seat_of(".controller"), None);
    }
}
