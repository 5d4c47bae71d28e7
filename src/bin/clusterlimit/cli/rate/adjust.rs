//! `clusterlimit rate charge|refund NAME KEY N`: a cost known only after the work (tokens,
//! bytes, rows) charged to a key, into debt if it had less left; or units given back, never
//! past full. Prints the key's balance, debt included; `--json` for scripts.

use super::args::AdjustArgs;
use super::open::{check_key, open_existing, with_limiter};
use crate::common::out::out_line;
use crate::common::quota_print::balance_json;
use crate::common::{format_wait, Failure};
use clusterlimit::Balance;
use std::process::ExitCode;

/// Runs `rate charge` (`refund` false) or `rate refund`.
pub async fn adjust(a: AdjustArgs, refund: bool) -> Result<ExitCode, Failure> {
    check_key(&a.key)?;
    let (name, key) = (&a.name, &a.key);
    with_limiter(&a.store, async |limiter| {
        let rl = open_existing(limiter, name).await?;
        let b = if refund {
            rl.refund(key, a.units).await
        } else {
            rl.charge(key, a.units).await
        }
        .map_err(Failure::from_lib)?;
        if a.json {
            out_line!("{}", balance_json(name, key, &b));
        } else {
            let did = if refund { "refunded" } else { "charged" };
            out_line!("{did}: {name} {key:?} ({}), {}", a.units, balance_text(&b));
        }
        Ok(ExitCode::SUCCESS)
    })
    .await
}

/// A balance for people: `40 of 100 left`, or `0 of 100 left, 30 owed, admitted again in 18m`.
fn balance_text(b: &Balance) -> String {
    let left = format!("{} of {} left", b.remaining, b.limit);
    if b.debt == 0 {
        return left;
    }
    let again = b
        .retry_after
        .map(|w| format!(", admitted again in {}", format_wait(w)))
        .unwrap_or_default();
    format!("{left}, {} owed{again}", b.debt)
}
