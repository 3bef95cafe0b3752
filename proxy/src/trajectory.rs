//! Which trajectory a call belongs to, and which step it continues.
//!
//! In order (`docs/atdp-v1.md` §6): an `x-atdp-trajectory-id` header names the trajectory;
//! else an `x-atdp-session-id` header keys one trajectory per session and tenant; else calls
//! are grouped automatically. In every case the parent is the earlier call whose messages plus
//! reply this call's messages extend the furthest, searched among the calls of the named
//! trajectory, or, without a header, among the tenant's calls that named none. Grouping works
//! on a tree: a retry or a branch from an earlier turn gets its own parent, so siblings never
//! share a path.
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
    /// Hash of (tenant, scope, messages + reply) → the step that produced the reply; the
    /// scope is a named trajectory or the calls that name none.
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

/// Where a parent is looked for: the calls of one named trajectory, or the calls that name
/// none.
fn scope_of(trajectory_id: Option<&str>) -> String {
    trajectory_id.map_or_else(|| "auto".to_owned(), |id| format!("t:{id}"))
}

/// The running hashes of `tenant`, `scope` and each prefix of `messages`: element `i` covers
/// `messages[..i]`.
fn prefix_hashes(tenant: &str, scope: &str, messages: &[Message]) -> Vec<[u8; 32]> {
    let mut hasher = Sha256::new();
    hasher.update(tenant.as_bytes());
    hasher.update([0]);
    hasher.update(scope.as_bytes());
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
    pub fn place(&self, tenant: &str, naming: Naming<'_>, messages: &[Message]) -> Placement {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let trajectory_id = match naming {
            Naming::Trajectory(id) => Some(id.to_owned()),
            Naming::Session(key) => Some(
                inner
                    .by_name
                    .get(&(tenant.to_owned(), format!("s:{key}")))
                    .map_or_else(
                        || uuid::Uuid::now_v7().to_string(),
                        |(known, _)| known.trajectory_id.clone(),
                    ),
            ),
            Naming::Automatic => None,
        };
        // The parent is the earlier call of the same scope whose conversation (request and
        // reply) this call's messages extend the furthest.
        let scope = scope_of(trajectory_id.as_deref());
        let parent = prefix_hashes(tenant, &scope, messages)
            .iter()
            .rev()
            .find_map(|h| inner.by_prefix.get(h))
            .map(|(known, _)| known.clone());
        match (trajectory_id, parent) {
            (Some(trajectory_id), parent) => Placement {
                trajectory_id,
                turn_index: parent.as_ref().map_or(0, |p| p.turn_index + 1),
                parent_step_id: parent.map(|p| p.step_id),
            },
            (None, Some(parent)) => Placement {
                trajectory_id: parent.trajectory_id,
                parent_step_id: Some(parent.step_id),
                turn_index: parent.turn_index + 1,
            },
            (None, None) => new_trajectory(),
        }
    }

    /// Remembers a finished step so later calls can continue it.
    #[allow(clippy::too_many_arguments)]
    pub fn remember(
        &self,
        tenant: &str,
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
            Naming::Session(session) => Some(format!("s:{session}")),
            Naming::Trajectory(_) | Naming::Automatic => None,
        };
        let scope = scope_of(match naming {
            Naming::Automatic => None,
            _ => Some(placement.trajectory_id.as_str()),
        });
        if let Some(name) = named {
            let key = (tenant.to_owned(), name);
            inner.by_name.insert(key.clone(), (known.clone(), seq));
            inner.order.push_back((Key::Name(key), seq));
        }
        if let Some(reply) = reply {
            let mut conversation = messages.to_vec();
            conversation.push(reply.clone());
            if let Some(hash) = prefix_hashes(tenant, &scope, &conversation).last() {
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
        let a = t.place("acme", Naming::Automatic, &first);
        assert_eq!((a.parent_step_id.as_deref(), a.turn_index), (None, 0));
        let reply = message("assistant", "hello");
        t.remember(
            "acme",
            Naming::Automatic,
            &a,
            "step-a",
            &first,
            Some(&reply),
        );

        let mut second = first.clone();
        second.push(reply.clone());
        second.push(message("user", "more"));
        let b = t.place("acme", Naming::Automatic, &second);
        assert_eq!(b.trajectory_id, a.trajectory_id);
        assert_eq!(
            (b.parent_step_id.as_deref(), b.turn_index),
            (Some("step-a"), 1)
        );

        // A retry of the first call is a sibling, not a continuation; another tenant with the
        // same text starts its own trajectory.
        let retry = t.place("acme", Naming::Automatic, &first);
        assert_ne!(retry.trajectory_id, a.trajectory_id);
        let other = t.place("globex", Naming::Automatic, &second);
        assert_ne!(other.trajectory_id, a.trajectory_id);
        assert_eq!(t.ownership("acme", &a.trajectory_id), Ownership::Own);
        assert_eq!(t.ownership("globex", &a.trajectory_id), Ownership::Foreign);
        assert_eq!(t.ownership("acme", "nope"), Ownership::Unknown);
    }

    #[test]
    fn branches_keep_their_own_parents() {
        let t = Trajectories::new(1000);
        let first = vec![message("user", "q")];
        let a = t.place("x", Naming::Automatic, &first);
        let reply = message("assistant", "r");
        t.remember("x", Naming::Automatic, &a, "a", &first, Some(&reply));
        let mut base = first.clone();
        base.push(reply);
        let mut left = base.clone();
        left.push(message("user", "left"));
        let mut right = base.clone();
        right.push(message("user", "right"));
        let l = t.place("x", Naming::Automatic, &left);
        t.remember(
            "x",
            Naming::Automatic,
            &l,
            "l",
            &left,
            Some(&message("assistant", "L")),
        );
        let r = t.place("x", Naming::Automatic, &right);
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
        let first = vec![message("user", "q")];
        let p = t.place("x", Naming::Trajectory("traj-1"), &first);
        assert_eq!((p.trajectory_id.as_str(), p.turn_index), ("traj-1", 0));
        let reply = message("assistant", "r");
        t.remember(
            "x",
            Naming::Trajectory("traj-1"),
            &p,
            "s1",
            &first,
            Some(&reply),
        );
        let mut second = first.clone();
        second.push(reply.clone());
        second.push(message("user", "more"));
        let q = t.place("x", Naming::Trajectory("traj-1"), &second);
        assert_eq!((q.parent_step_id.as_deref(), q.turn_index), (Some("s1"), 1));
        // A call of the trajectory that extends nothing in it is a new root of it.
        let r = t.place(
            "x",
            Naming::Trajectory("traj-1"),
            &[message("user", "other")],
        );
        assert_eq!(
            (r.trajectory_id.as_str(), r.parent_step_id.as_deref()),
            ("traj-1", None)
        );
        // The same conversation without the header does not continue the named trajectory.
        assert_ne!(
            t.place("x", Naming::Automatic, &second).trajectory_id,
            "traj-1"
        );

        let s = t.place("x", Naming::Session("sess"), &first);
        t.remember("x", Naming::Session("sess"), &s, "s2", &first, Some(&reply));
        let s2 = t.place("x", Naming::Session("sess"), &second);
        assert_eq!(s2.trajectory_id, s.trajectory_id);
        assert_eq!(s2.parent_step_id.as_deref(), Some("s2"));
        // The same session name in another tenant is another trajectory.
        assert_ne!(
            t.place("z", Naming::Session("sess"), &[]).trajectory_id,
            s.trajectory_id
        );
    }

    #[test]
    fn memory_is_bounded() {
        let t = Trajectories::new(16);
        for i in 0..100 {
            let m = vec![message("user", &i.to_string())];
            let p = t.place("x", Naming::Automatic, &m);
            t.remember(
                "x",
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
        let p = t.place("x", Naming::Session("keep"), &[]);
        t.remember("x", Naming::Session("keep"), &p, "s0", &[], None);
        for i in 0..20 {
            // Other traffic, and the session again now and then.
            let q = t.place("x", Naming::Automatic, &[]);
            t.remember("x", Naming::Automatic, &q, &format!("a{i}"), &[], None);
            if i % 4 == 0 {
                let p = t.place("x", Naming::Session("keep"), &[]);
                t.remember(
                    "x",
                    Naming::Session("keep"),
                    &p,
                    &format!("s{i}"),
                    &[],
                    None,
                );
            }
        }
        let again = t.place("x", Naming::Session("keep"), &[]);
        assert_eq!(
            again.trajectory_id, p.trajectory_id,
            "recently used, so still known"
        );
    }

    #[test]
    fn the_same_client_chosen_id_in_two_tenants() {
        let t = Trajectories::new(100);
        for tenant in ["a", "b"] {
            let p = t.place(tenant, Naming::Trajectory("shared"), &[]);
            t.remember(tenant, Naming::Trajectory("shared"), &p, "s", &[], None);
        }
        assert_eq!(t.ownership("a", "shared"), Ownership::Own);
        assert_eq!(t.ownership("b", "shared"), Ownership::Own);
        assert_eq!(t.ownership("c", "shared"), Ownership::Foreign);
    }
}
