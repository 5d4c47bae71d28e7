//! `status NAME`'s line on a per-member semaphore: its live members and the capacity its
//! controller computed from them.

use crate::sidecar::per_member_view::PerMemberView;

/// One line, indented under the table.
pub fn line(p: &PerMemberView) -> String {
    let members = match p.members {
        1 => "1 live member".to_string(),
        n => format!("{n} live members"),
    };
    match (&p.controller, p.counted, p.capacity) {
        (Some(c), Some(counted), Some(capacity)) => format!(
            "  per-member: {members}; controller {c} counted {counted}, capacity {capacity}"
        ),
        _ => format!("  per-member: {members}; no controller count yet"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn says_the_members_and_the_count() {
        let mut p = PerMemberView {
            members: 1,
            controller: None,
            counted: None,
            capacity: None,
        };
        assert_eq!(
            line(&p),
            "  per-member: 1 live member; no controller count yet"
        );
        p.members = 3;
        p.controller = Some("host-a/1".into());
        p.counted = Some(3);
        p.capacity = Some(6);
        assert_eq!(
            line(&p),
            "  per-member: 3 live members; controller host-a/1 counted 3, capacity 6"
        );
    }
}
