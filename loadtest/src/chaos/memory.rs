//! The memory of every process of a chaos run, sampled every 250 ms for the whole run: the
//! largest RSS any one process of each role reached.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::procstat::usage;

/// The roles, in the order of [`Peaks`]' fields.
#[derive(Debug, Clone, Copy)]
pub(super) enum Role {
    Replica,
    Swarm,
    Datastore,
}

/// The largest RSS one process of each role reached, bytes.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Peaks {
    pub(super) replica: u64,
    pub(super) swarm: u64,
    pub(super) datastore: u64,
}

impl Peaks {
    fn of(&mut self, role: Role) -> &mut u64 {
        match role {
            Role::Replica => &mut self.replica,
            Role::Swarm => &mut self.swarm,
            Role::Datastore => &mut self.datastore,
        }
    }
}

#[derive(Default)]
struct State {
    /// The processes now, by role (a restarted process replaces its predecessor).
    pids: Vec<(Role, u32)>,
    peaks: Peaks,
}

/// The sampler; stops when dropped.
pub(super) struct Memory {
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Memory {
    pub(super) fn start() -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let s2 = state.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                let mut s = s2.lock().unwrap_or_else(|p| p.into_inner());
                let pids = s.pids.clone();
                for (role, pid) in pids {
                    if let Some(u) = usage(pid) {
                        let peak = s.peaks.of(role);
                        *peak = (*peak).max(u.rss);
                    }
                }
            }
        });
        Memory { state, task }
    }

    /// The processes to sample from now on (all of them, each time: restarts change pids).
    pub(super) fn watch(&self, pids: impl IntoIterator<Item = (Role, u32)>) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).pids = pids.into_iter().collect();
    }

    /// The largest RSS of one process of each role now.
    pub(super) fn now(&self) -> Peaks {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut now = Peaks::default();
        for (role, pid) in &s.pids {
            if let Some(u) = usage(*pid) {
                let v = now.of(*role);
                *v = (*v).max(u.rss);
            }
        }
        now
    }

    /// The peaks so far.
    pub(super) fn peaks(&self) -> Peaks {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).peaks
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        self.task.abort();
    }
}
