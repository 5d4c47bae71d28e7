//! Opening a per-member semaphore (`Limiter::per_member_semaphore`): refused beside an
//! adaptive one of the same name, the semaphore and its controller seat ensured, this Limiter
//! announced, and its task started once per name.

use super::announced::Member;
use super::config::PerMember;
use super::control;
use super::membership::Membership;
use crate::adaptive::names::{board_of as adaptive_board_of, controller_of};
use crate::error::{Error, Result};
use crate::limiter_inner::LimiterInner;
use crate::semaphore::Semaphore;
use std::sync::{Arc, PoisonError, Weak};
use tokio_util::sync::CancellationToken;

/// [`Limiter::per_member_semaphore`](crate::Limiter::per_member_semaphore).
pub(crate) async fn open(
    inner: &Arc<LimiterInner>,
    name: &str,
    config: PerMember,
) -> Result<Semaphore> {
    config.check(name)?;
    inner.check_open()?;
    refuse_if_adaptive(inner, name).await?;
    ensure(inner, name, &config).await?;
    let seat = controller_of(name);
    let ensured = inner.backend.ensure_semaphore(&seat, Some(1)).await;
    match inner.closed_or_result(ensured) {
        Ok(_) => {}
        Err(Error::CapacityMismatch { .. }) => {
            return Err(Error::invalid(format!(
                "semaphore {seat:?} exists with a capacity other than 1: it is the controller seat of per-member semaphore {name:?}; delete it or choose another name"
            )))
        }
        Err(e) => return Err(e),
    }
    let member = Member {
        owner: inner.owner.clone(),
        count: None,
    };
    let existing = joined(inner, name);
    let membership = match existing {
        Some(m) => m,
        None => {
            // Announced before it returns, so the caller counts as soon as it has the handle.
            let session = control::announce(inner, name, &member).await?;
            start(inner, name, config, session)
        }
    };
    Ok(Semaphore::per_member(inner.clone(), name, membership))
}

/// This Limiter's membership of `name`, if it has it open already.
fn joined(inner: &LimiterInner, name: &str) -> Option<Arc<Membership>> {
    let mut open = inner
        .per_member
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    open.retain(|_, m| m.strong_count() > 0);
    open.get(name).and_then(Weak::upgrade)
}

/// Registers this Limiter's membership of `name` and starts its task (or joins the one a
/// concurrent open started meanwhile).
fn start(
    inner: &Arc<LimiterInner>,
    name: &str,
    config: PerMember,
    session: Option<crate::lost::LostSignal>,
) -> Arc<Membership> {
    let mut open = inner
        .per_member
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(m) = open.get(name).and_then(Weak::upgrade) {
        return m;
    }
    let m = Arc::new(Membership {
        stop: CancellationToken::new(),
    });
    inner.runtime.spawn(control::run(
        inner.clone(),
        name.to_string(),
        config,
        Semaphore::new(inner.clone(), &controller_of(name)),
        session,
        m.stop.clone(),
    ));
    open.insert(name.to_string(), Arc::downgrade(&m));
    m
}

/// `InvalidArgument` if `name` is open as an adaptive semaphore, in this Limiter or, as its
/// board shows, in another: two controllers would fight over its capacity.
async fn refuse_if_adaptive(inner: &LimiterInner, name: &str) -> Result<()> {
    let here = inner
        .adaptive
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
        .is_some_and(|a| a.strong_count() > 0);
    let read = inner.backend.announcements(&adaptive_board_of(name)).await;
    let elsewhere = inner.closed_or_result(read)?.len();
    if here || elsewhere > 0 {
        let by = if here {
            "in this Limiter".to_string()
        } else {
            format!("by {elsewhere} Limiter(s)")
        };
        return Err(Error::invalid(format!(
            "semaphore {name:?} is open as an adaptive semaphore ({by}): its capacity cannot also follow its members; close it there or choose another name"
        )));
    }
    Ok(())
}

/// The semaphore, created with the capacity of one member if absent (else the stored one
/// stands until the controller counts).
async fn ensure(inner: &LimiterInner, name: &str, config: &PerMember) -> Result<()> {
    let opened = match inner.backend.ensure_semaphore(name, None).await {
        Err(Error::NotFound(_)) => {
            match inner
                .backend
                .ensure_semaphore(name, Some(config.capacity_for(1)))
                .await
            {
                // Created by someone else meanwhile, with another capacity: theirs stands.
                Err(Error::CapacityMismatch { stored, .. }) => Ok(stored),
                other => other,
            }
        }
        other => other,
    };
    inner.closed_or_result(opened).map(drop)
}
