//! Our extensions of the RLS rules for priority classes, read by `parse.rs`: a domain's
//! `class_key` (the descriptor entry naming a request's class) and a rule's `reserves`.

use super::parse_ctx::Ctx;
use super::yaml::Node;
use clusterlimit::Reserves;

/// Our extension `class_key`: the descriptor entry key whose value names a check's priority
/// class (not empty: an empty key names no entry Envoy sends).
pub(super) fn read_class_key(cx: &Ctx<'_>, v: &Node) -> Result<String, String> {
    let key = cx.string(v, "class_key")?;
    if key.is_empty() {
        return Err(cx.err(
            v.line,
            "class_key must name a descriptor entry key (e.g. \"priority\"), got an empty one",
        ));
    }
    Ok(key)
}

/// Our extension `reserves: {batch: 20}`: each class and the units its checks must leave
/// (names and bounds are checked with the rule's quota).
pub(super) fn read_reserves(cx: &Ctx<'_>, v: &Node) -> Result<Reserves, String> {
    let mut reserves = Reserves::new();
    for (k, units) in cx.map(v, "reserves")? {
        let class = cx.string(k, "a reserves class")?;
        let units = cx.number::<u64>(units, &format!("reserves.{class}"), "(0 or more)")?;
        reserves = reserves.with(&class, units);
    }
    Ok(reserves)
}
