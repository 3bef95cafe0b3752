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
    by_prefix: HashMap<[u8; 32], (Known, u64)>,
    /// (tenant, trajectory id or session key) → the last step seen in it.
    by_name: HashMap<(String, String), (Known, u64)>,
    /// Insertion order, for eviction: an entry is removed only if it was not written again
    /// since (its sequence number still matches).
    order: VecDeque<(Key, u64)>,
    /// (tenant, trajectory id) pairs seen, for rewards.
    owners: HashMap<(String, String), u64>,
    /// Trajectory id → how many tenants use it.
    users: HashMap<String, usize>,
    next: u64,
}

#[derive(Debug, Clone)]
enum Key {
    Prefix([u8; 32]),
    Name((String, String)),
    Owner((String, String)),
}

/// Who a trajectory id belongs to, as far as this instance knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// Seen for this tenant.
    Own,
    /// Seen only for other tenants.
    Foreign,
    /// Not seen (recently).
    Unknown,
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
                .map(|(known, _)| continued(known))
                .unwrap_or_else(|| Placement {
                    trajectory_id: id.to_owned(),
                    parent_step_id: None,
                    turn_index: 0,
                }),
            Naming::Session(key) => inner
                .by_name
                .get(&(tenant.to_owned(), format!("s:{key}")))
                .map(|(known, _)| continued(known))
                .unwrap_or_else(new_trajectory),
            Naming::Automatic => {
                let hashes = prefix_hashes(tenant, agent, messages);
                // The longest earlier conversation (request + reply) this one extends.
                hashes
                    .iter()
                    .rev()
                    .find_map(|h| inner.by_prefix.get(h))
                    .map(|(known, _)| continued(known))
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
        inner.next += 1;
        let seq = inner.next;
        let named = match naming {
            Naming::Trajectory(id) => Some(format!("t:{id}")),
            Naming::Session(session) => Some(format!("s:{session}")),
            Naming::Automatic => None,
        };
        if let Some(name) = named {
            let key = (tenant.to_owned(), name);
            inner.by_name.insert(key.clone(), (known.clone(), seq));
            inner.order.push_back((Key::Name(key), seq));
        }
        if let Some(reply) = reply {
            let mut conversation = messages.to_vec();
            conversation.push(reply.clone());
            if let Some(hash) = prefix_hashes(tenant, agent, &conversation).last() {
                inner.by_prefix.insert(*hash, (known, seq));
                inner.order.push_back((Key::Prefix(*hash), seq));
            }
        }
        let owner = (tenant.to_owned(), placement.trajectory_id.clone());
        if inner.owners.insert(owner.clone(), seq).is_none() {
            *inner
                .users
                .entry(placement.trajectory_id.clone())
                .or_insert(0) += 1;
        }
        inner.order.push_back((Key::Owner(owner), seq));
        while inner.order.len() > self.capacity {
            let Some((key, seq)) = inner.order.pop_front() else {
                break;
            };
            match key {
                Key::Prefix(hash) => {
                    if inner.by_prefix.get(&hash).is_some_and(|(_, s)| *s == seq) {
                        inner.by_prefix.remove(&hash);
                    }
                }
                Key::Name(key) => {
                    if inner.by_name.get(&key).is_some_and(|(_, s)| *s == seq) {
                        inner.by_name.remove(&key);
                    }
                }
                Key::Owner(owner) => {
                    if inner.owners.get(&owner) == Some(&seq) {
                        inner.owners.remove(&owner);
                        if let Some(count) = inner.users.get_mut(&owner.1) {
                            *count -= 1;
                            if *count == 0 {
                                inner.users.remove(&owner.1);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Whether `trajectory_id` is `tenant`'s, another tenant's, or unknown here.
    pub fn ownership(&self, tenant: &str, trajectory_id: &str) -> Ownership {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner
            .owners
            .contains_key(&(tenant.to_owned(), trajectory_id.to_owned()))
        {
            Ownership::Own
        } else if inner.users.contains_key(trajectory_id) {
            Ownership::Foreign
        } else {
            Ownership::Unknown
        }
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
        assert_eq!(t.ownership("acme", &a.trajectory_id), Ownership::Own);
        assert_eq!(t.ownership("globex", &a.trajectory_id), Ownership::Foreign);
        assert_eq!(t.ownership("acme", "nope"), Ownership::Unknown);
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
        assert!(inner.by_prefix.len() <= 16 && inner.owners.len() <= 16);
    }
}

#[cfg(test)]
mod eviction {
    use super::*;

    #[test]
    fn a_name_written_again_outlives_its_old_queue_entry() {
        let t = Trajectories::new(16);
        let p = t.place("x", "y", Naming::Session("keep"), &[]);
        t.remember("x", "y", Naming::Session("keep"), &p, "s0", &[], None);
        for i in 0..20 {
            // Other traffic, and the session again now and then.
            let q = t.place("x", "y", Naming::Automatic, &[]);
            t.remember("x", "y", Naming::Automatic, &q, &format!("a{i}"), &[], None);
            if i % 4 == 0 {
                let p = t.place("x", "y", Naming::Session("keep"), &[]);
                t.remember(
                    "x",
                    "y",
                    Naming::Session("keep"),
                    &p,
                    &format!("s{i}"),
                    &[],
                    None,
                );
            }
        }
        let again = t.place("x", "y", Naming::Session("keep"), &[]);
        assert_eq!(
            again.trajectory_id, p.trajectory_id,
            "recently used, so still known"
        );
    }

    #[test]
    fn the_same_client_chosen_id_in_two_tenants() {
        let t = Trajectories::new(100);
        for tenant in ["a", "b"] {
            let p = t.place(tenant, "y", Naming::Trajectory("shared"), &[]);
            t.remember(
                tenant,
                "y",
                Naming::Trajectory("shared"),
                &p,
                "s",
                &[],
                None,
            );
        }
        assert_eq!(t.ownership("a", "shared"), Ownership::Own);
        assert_eq!(t.ownership("b", "shared"), Ownership::Own);
        assert_eq!(t.ownership("c", "shared"), Ownership::Foreign);
    }
}
