//! The permit scripts (`lua/sem_*.lua`), each with the shared head `lua/sem_common.lua` (key
//! layout, server time, expiry of lapsed sessions) in front: Redis has no script includes.

use redis::Script;

macro_rules! with_head {
    ($file:literal) => {
        Script::new(concat!(
            include_str!("lua/sem_common.lua"),
            include_str!(concat!("lua/", $file))
        ))
    };
}

/// Every permit script, ready to invoke.
pub(super) struct SemScripts {
    pub(super) open: Script,
    pub(super) enqueue: Script,
    pub(super) remove: Script,
    pub(super) read: Script,
    pub(super) touch: Script,
    pub(super) end_session: Script,
    pub(super) resize: Script,
    pub(super) open_fair: Script,
    pub(super) grant: Script,
    pub(super) shrink: Script,
}

impl SemScripts {
    pub(super) fn new() -> SemScripts {
        SemScripts {
            open: with_head!("sem_open.lua"),
            enqueue: with_head!("sem_enqueue.lua"),
            remove: with_head!("sem_remove.lua"),
            read: with_head!("sem_read.lua"),
            touch: with_head!("sem_touch.lua"),
            end_session: with_head!("sem_end_session.lua"),
            resize: with_head!("sem_resize.lua"),
            open_fair: with_head!("sem_open_fair.lua"),
            grant: with_head!("sem_grant.lua"),
            shrink: with_head!("sem_shrink.lua"),
        }
    }
}

impl std::fmt::Debug for SemScripts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SemScripts")
    }
}
