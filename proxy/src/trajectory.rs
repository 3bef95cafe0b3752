//! Which trajectory a call belongs to, and which step it continues.
//!
//! In order: an `x-atdp-trajectory-id` header names the trajectory (the call continues the
//! last step the proxy saw in it); else an `x-atdp-session-id` header keys one trajectory per
//! session; else calls are grouped automatically: a call whose messages extend an earlier
//! call's messages plus that call's reply continues it and records it as `parent_step_id`.
//! Grouping works on a tree: a retry or a branch from an earlier turn gets its own parent, so
//! siblings never share a path.
//!
//! The state is in memory, per proxy instance, bounded (oldest entries evicted first); after
//! a restart automatic grouping starts new trajectories, while the headers keep working.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use atdp_schema::Message;
use sha2::{Digest, Sha256};

/// Where a new step goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The trajectory.
    pub trajectory_id: String,
    /// The step it continues, if any.
    pub parent_step_id: Option<String>,
    /// Its turn index (parent's + 1, or 0).
    pub turn_index: i32,
}

#[derive(Debug, Clone)]
struct Known {
    trajectory_id: String,
    step_id: String,
    turn_index: i32,
}

/// The grouping state.
#[derive(Debug)]
pub struct Trajectories {
    inner: Mutex<Inner>,
    capacity: usize,
}

#[derive(Debug, Default)]
struct Inner {
    /// Hash of (tenant, agent, messages + reply) → the step that produced the reply.
    by_prefix: HashMap<[u8; 32], Known>,
    /// (tenant, trajectory id or session key) → the last step seen in it.
    by_name: HashMap<(String, String), Known>,
    /// Insertion order, for eviction.
    order: VecDeque<Key>,
    /// Trajectory id → tenant, for rewards.
    tenants: HashMap<String, String>,
}

#[derive(Debug, Clone)]
enum Key {
    Prefix([u8; 32]),
    Name((String, String)),
    Tenant(String),
}

/// How a call names its trajectory.
#[derive(Debug, Clone, Copy)]
pub enum Naming<'a> {
    /// `x-atdp-trajectory-id`.
    Trajectory(&'a str),
    /// `x-atdp-session-id`.
    Session(&'a str),
    /// Neither: group by message prefix.
    Automatic,
}

fn canonical(message: &Message) -> Vec<u8> {
    // Role, text, tool calls and tool-call id: what a client replays of an earlier turn.
    let calls: Vec<(&str, &str, &str)> = message
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    serde_json::to_vec(&(
        &message.role,
        &message.content,
        &message.tool_call_id,
        calls,
    ))
    .unwrap_or_default()
}

/// The running hashes of `tenant`, `agent` and each prefix of `messages`: element `i` covers
/// `messages[..i]`.
fn prefix_hashes(tenant: &str, agent: &str, messages: &[Message]) -> Vec<[u8; 32]> {
    let mut hasher = Sha256::new();
    hasher.update(tenant.as_bytes());
    hasher.update([0]);
    hasher.update(agent.as_bytes());
    hasher.update([0]);
    let mut out = Vec::with_capacity(messages.len() + 1);
    out.push(hasher.clone().finalize().into());
    for message in messages {
        let bytes = canonical(message);
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
        out.push(hasher.clone().finalize().into());
    }
    out
}

impl Trajectories {
    /// Keeps at most about `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Trajectories {
            inner: Mutex::new(Inner::default()),
            capacity: capacity.max(16),
        }
    }

    /// Places a new call. `messages` are the request's messages as the client sent them.
    pub fn place(
        &self,
        tenant: &str,
        agent: &str,
        naming: Naming<'_>,
        messages: &[Message],
    ) -> Placement {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let continued = |known: &Known| Placement {
            trajectory_id: known.trajectory_id.clone(),
            parent_step_id: Some(known.step_id.clone()),
            turn_index: known.turn_index + 1,
        };
        match naming {
            Naming::Trajectory(id) => inner
                .by_name
                .get(&(tenant.to_owned(), format!("t:{id}")))
                .map(continued)
                .unwrap_or_else(|| Placement {
                    trajectory_id: id.to_owned(),
                    parent_step_id: None,
                    turn_index: 0,
                }),
            Naming::Session(key) => inner
                .by_name
                .get(&(tenant.to_owned(), format!("s:{key}")))
                .map(continued)
                .unwrap_or_else(new_trajectory),
            Naming::Automatic => {
                let hashes = prefix_hashes(tenant, agent, messages);
                // The longest earlier conversation (request + reply) this one extends.
                hashes
                    .iter()
                    .rev()
                    .find_map(|h| inner.by_prefix.get(h))
                    .map(continued)
                    .unwrap_or_else(new_trajectory)
            }
        }
    }

    /// Remembers a finished step so later calls can continue it.
    #[allow(clippy::too_many_arguments)]
    pub fn remember(
        &self,
        tenant: &str,
        agent: &str,
        naming: Naming<'_>,
        placement: &Placement,
        step_id: &str,
        messages: &[Message],
        reply: Option<&Message>,
    ) {
        let known = Known {
            trajectory_id: placement.trajectory_id.clone(),
            step_id: step_id.to_owned(),
            turn_index: placement.turn_index,
        };
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut keys = Vec::new();
        match naming {
            Naming::Trajectory(id) => {
                let key = (tenant.to_owned(), format!("t:{id}"));
                inner.by_name.insert(key.clone(), known.clone());
                keys.push(Key::Name(key));
            }
            Naming::Session(session) => {
                let key = (tenant.to_owned(), format!("s:{session}"));
                inner.by_name.insert(key.clone(), known.clone());
                keys.push(Key::Name(key));
            }
            Naming::Automatic => {}
        }
        if let Some(reply) = reply {
            let mut conversation = messages.to_vec();
            conversation.push(reply.clone());
            if let Some(hash) = prefix_hashes(tenant, agent, &conversation).last() {
                inner.by_prefix.insert(*hash, known);
                keys.push(Key::Prefix(*hash));
            }
        }
        inner
            .tenants
            .insert(placement.trajectory_id.clone(), tenant.to_owned());
        keys.push(Key::Tenant(placement.trajectory_id.clone()));
        inner.order.extend(keys);
        while inner.order.len() > self.capacity {
            match inner.order.pop_front() {
                Some(Key::Prefix(hash)) => {
                    inner.by_prefix.remove(&hash);
                }
                Some(Key::Name(key)) => {
                    inner.by_name.remove(&key);
                }
                Some(Key::Tenant(id)) => {
                    inner.tenants.remove(&id);
                }
                None => break,
            }
        }
    }

    /// The tenant of a trajectory this proxy recorded recently.
    pub fn tenant_of(&self, trajectory_id: &str) -> Option<String> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.tenants.get(trajectory_id).cloned()
    }
}

fn new_trajectory() -> Placement {
    Placement {
        trajectory_id: uuid::Uuid::now_v7().to_string(),
        parent_step_id: None,
        turn_index: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(role: &str, text: &str) -> Message {
        Message {
            role: role.into(),
            content: Some(text.into()),
            ..Message::default()
        }
    }

    #[test]
    fn continuing_a_conversation_links_to_the_step_that_replied() {
        let t = Trajectories::new(1000);
        let first = vec![message("system", "s"), message("user", "hi")];
        let a = t.place("acme", "bot", Naming::Automatic, &first);
        assert_eq!((a.parent_step_id.as_deref(), a.turn_index), (None, 0));
        let reply = message("assistant", "hello");
        t.remember(
            "acme",
            "bot",
            Naming::Automatic,
            &a,
            "step-a",
            &first,
            Some(&reply),
        );

        let mut second = first.clone();
        second.push(reply.clone());
        second.push(message("user", "more"));
        let b = t.place("acme", "bot", Naming::Automatic, &second);
        assert_eq!(b.trajectory_id, a.trajectory_id);
        assert_eq!(
            (b.parent_step_id.as_deref(), b.turn_index),
            (Some("step-a"), 1)
        );

        // A retry of the first call is a sibling, not a continuation; another tenant or
        // agent with the same text starts its own trajectory.
        let retry = t.place("acme", "bot", Naming::Automatic, &first);
        assert_ne!(retry.trajectory_id, a.trajectory_id);
        let other = t.place("globex", "bot", Naming::Automatic, &second);
        assert_ne!(other.trajectory_id, a.trajectory_id);
        assert_eq!(t.tenant_of(&a.trajectory_id).as_deref(), Some("acme"));
    }

    #[test]
    fn branches_keep_their_own_parents() {
        let t = Trajectories::new(1000);
        let first = vec![message("user", "q")];
        let a = t.place("x", "y", Naming::Automatic, &first);
        let reply = message("assistant", "r");
        t.remember("x", "y", Naming::Automatic, &a, "a", &first, Some(&reply));
        let mut base = first.clone();
        base.push(reply);
        let mut left = base.clone();
        left.push(message("user", "left"));
        let mut right = base.clone();
        right.push(message("user", "right"));
        let l = t.place("x", "y", Naming::Automatic, &left);
        t.remember(
            "x",
            "y",
            Naming::Automatic,
            &l,
            "l",
            &left,
            Some(&message("assistant", "L")),
        );
        let r = t.place("x", "y", Naming::Automatic, &right);
        assert_eq!(l.parent_step_id.as_deref(), Some("a"));
        assert_eq!(
            r.parent_step_id.as_deref(),
            Some("a"),
            "not under the left branch"
        );
    }

    #[test]
    fn headers_name_trajectories_and_sessions() {
        let t = Trajectories::new(1000);
        let p = t.place("x", "y", Naming::Trajectory("traj-1"), &[]);
        assert_eq!((p.trajectory_id.as_str(), p.turn_index), ("traj-1", 0));
        t.remember("x", "y", Naming::Trajectory("traj-1"), &p, "s1", &[], None);
        let q = t.place("x", "y", Naming::Trajectory("traj-1"), &[]);
        assert_eq!((q.parent_step_id.as_deref(), q.turn_index), (Some("s1"), 1));
        let s = t.place("x", "y", Naming::Session("sess"), &[]);
        t.remember("x", "y", Naming::Session("sess"), &s, "s2", &[], None);
        let s2 = t.place("x", "y", Naming::Session("sess"), &[]);
        assert_eq!(s2.trajectory_id, s.trajectory_id);
        // The same session name in another tenant is another trajectory.
        assert_ne!(
            t.place("z", "y", Naming::Session("sess"), &[])
                .trajectory_id,
            s.trajectory_id
        );
    }

    #[test]
    fn memory_is_bounded() {
        let t = Trajectories::new(16);
        for i in 0..100 {
            let m = vec![message("user", &i.to_string())];
            let p = t.place("x", "y", Naming::Automatic, &m);
            t.remember(
                "x",
                "y",
                Naming::Automatic,
                &p,
                "s",
                &m,
                Some(&message("assistant", "a")),
            );
        }
        let inner = t.inner.lock().unwrap();
        assert!(inner.order.len() <= 16);
        assert!(inner.by_prefix.len() <= 16 && inner.tenants.len() <= 16);
    }
}
