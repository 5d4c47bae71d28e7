//! CPU time of processes, from the kernel's per-thread accounting (`/proc/PID/task/*/schedstat`,
//! nanoseconds on CPU). On a 2-core machine every process on the critical path (this client,
//! the sidecar, the store server) competes for the same cores, so CPU per operation explains
//! latency better than any single process's profile.

/// Nanoseconds the processes `pids` have run so far (threads alive now), or `None` if the
/// kernel does not expose schedstat.
pub fn cpu_ns(pids: &[u32]) -> Option<u64> {
    let mut total = 0;
    for pid in pids {
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
            let Ok(task) = task else { continue };
            // A thread may exit between the listing and the read: it simply stops counting.
            let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
                continue;
            };
            total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
        }
    }
    Some(total)
}
