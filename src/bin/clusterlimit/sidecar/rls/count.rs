//! The second step of answering a request (`request.rs`): the planned checks counted through
//! the domain's guard. The enforced ones go to the store all or nothing in one
//! `StoreDownGuard::check_all_within` (the library takes one check alone on its coalesced,
//! paced path, several in one joint write); shadow ones are each counted on their own, since
//! they must never stop the others.

use super::lib_error::status;
use super::plan::Plan;
use super::rules::Rule;
use super::service::Rls;
use clusterlimit::{Error, GuardedDecision, KeyCheck, StoreDownGuard, StoreDownPolicy};
use std::time::{Duration, Instant};
use tonic::Status;

/// How one checked descriptor came out.
#[derive(Clone, Copy)]
pub struct Checked {
    pub guarded: GuardedDecision,
    /// This descriptor is over its limit.
    pub over: bool,
    /// The hits actually counted for it.
    pub charged: u64,
    /// How long the store (or the guard) took.
    pub latency: Duration,
}

/// The enforced checks of a request, by plan index, as counted together.
struct Enforced<'p> {
    /// (plan index, the cost it asked for, whether it is a peek).
    asked: Vec<(usize, u64, bool)>,
    checks: Vec<KeyCheck<'p>>,
    /// Another descriptor is over anyway: the checks only read (cost 0), charging nobody.
    over_anyway: bool,
}

impl Rls {
    /// Counts the plans' checks within `budget`. Per plan: how its check came out (`None`
    /// for a plan with nothing to check).
    pub(super) async fn count(
        &self,
        guard: &StoreDownGuard,
        policy: StoreDownPolicy,
        plans: &[Plan],
        budget: Duration,
    ) -> Result<Vec<Option<Checked>>, Status> {
        let shadow = |rule: &Rule| rule.shadow || self.shadow;
        let over_anyway = plans.iter().any(|p| match p {
            Plan::AlwaysOver(rule, _) | Plan::BadClass(rule, _) => !shadow(rule),
            Plan::StoreDown(rule, _) => {
                matches!(policy, StoreDownPolicy::FailClosed) && !shadow(rule)
            }
            Plan::Check { rule, too_big, .. } => *too_big && !shadow(rule),
            _ => false,
        });
        let mut enforced = Enforced {
            asked: Vec::new(),
            checks: Vec::new(),
            over_anyway,
        };
        let mut alone = Vec::new();
        for (i, p) in plans.iter().enumerate() {
            if let Plan::Check {
                rule,
                limit,
                key,
                cost,
                class,
                peek,
                ..
            } = p
            {
                let check = |cost: u64| {
                    let check = KeyCheck::new(limit, key.clone(), cost);
                    match class {
                        Some(c) => check.class(c.clone()),
                        None => check,
                    }
                };
                if shadow(rule) {
                    alone.push((i, check(*cost), *cost));
                } else {
                    enforced.asked.push((i, *cost, *peek));
                    let counted = if over_anyway { 0 } else { *cost };
                    enforced.checks.push(check(counted));
                }
            }
        }
        let together = self.together(guard, &enforced.checks, budget);
        let each = futures::future::join_all(
            alone
                .iter()
                .map(|(_, check, _)| self.together(guard, std::slice::from_ref(check), budget)),
        );
        let (together, each) = futures::future::join(together, each).await;
        let mut out = vec![None; plans.len()];
        let (gs, latency) = together.map_err(status)?;
        enforced.mark(&gs, latency, &mut out);
        for ((i, _, cost), r) in alone.iter().zip(each) {
            let (gs, latency) = r.map_err(status)?;
            let g = gs
                .first()
                .copied()
                .ok_or_else(|| Status::internal("a shadow check got no decision"))?;
            let allowed = g.decision.allowed;
            out[*i] = Some(Checked {
                guarded: g,
                over: !allowed,
                charged: if allowed { *cost } else { 0 },
                latency,
            });
        }
        Ok(out)
    }

    /// `checks` all or nothing through `guard` (none: nothing asked), and how long it took.
    async fn together(
        &self,
        guard: &StoreDownGuard,
        checks: &[KeyCheck<'_>],
        budget: Duration,
    ) -> Result<(Vec<GuardedDecision>, Duration), Error> {
        if checks.is_empty() {
            return Ok((Vec::new(), Duration::ZERO));
        }
        let start = Instant::now();
        let gs = guard
            .check_all_within(&self.limiter, checks, budget)
            .await?;
        Ok((gs, start.elapsed()))
    }
}

impl Enforced<'_> {
    /// The enforced checks' decisions `gs` into `out`: which are over, what each was charged.
    fn mark(&self, gs: &[GuardedDecision], latency: Duration, out: &mut [Option<Checked>]) {
        let denied = gs.iter().any(|g| !g.decision.allowed);
        let mut marked = false;
        for ((i, cost, peek), g) in self.asked.iter().zip(gs) {
            // In a denied batch every decision says denied: over are the ones that could not
            // take their cost (a peek: 1).
            let need = if *peek { 1 } else { *cost };
            let over = !g.decision.allowed && need > 0 && g.decision.remaining < need;
            marked |= over;
            out[*i] = Some(Checked {
                guarded: *g,
                over,
                // All or nothing: a denied batch, or one only read, charged nobody.
                charged: if denied || self.over_anyway { 0 } else { *cost },
                latency,
            });
        }
        if denied && !marked {
            // Denied for a reason no remaining shows (a ban): every charged check is over.
            for (i, cost, peek) in &self.asked {
                if let Some(c) = out[*i].as_mut() {
                    c.over = (*cost > 0 || *peek) && !c.guarded.decision.allowed;
                }
            }
        }
    }
}
