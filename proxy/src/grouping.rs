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
//! a restart automatic grouping starts new trajectories, while the headers keep working. It
//! also knows which trajectory each recent step belongs to, tenant by tenant, so the rewards
//! API can refuse a step reward that names a step of another trajectory.

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
    trajectory_id: Box<str>,
    step_id: Box<str>,
    turn_index: i32,
}

/// A SHA-256 digest: every key is one, so an entry's size does not depend on the client's
/// strings and a key never needs a second allocation.
type Digest32 = [u8; 32];

/// Entries per shard at which the state is split into more than one shard.
const SHARD_ENTRIES: usize = 4096;
/// Most shards.
const MAX_SHARDS: usize = 64;

/// The grouping state, split into shards by key, each with its own lock, map and eviction
/// queue: a map that doubles rehashes one shard (at most 1/64 of the entries) instead of the
/// whole state on a call's path (at a million entries, a whole-state rehash stalled every
/// call for tens of milliseconds), and calls on different threads rarely share a lock.
#[derive(Debug)]
pub struct Trajectories {
    shards: Box<[Mutex<Shard>]>,
    /// Entries each shard keeps.
    per_shard: usize,
}

#[derive(Debug, Default)]
struct Shard {
    /// Hash of (tenant, scope, messages + reply) → the step that produced the reply; the
    /// scope is a named trajectory or the calls that name none.
    by_prefix: HashMap<Digest32, (Known, u64)>,
    /// Hash of (tenant, trajectory id or session key) → the last step seen in it.
    by_name: HashMap<Digest32, (Known, u64)>,
    /// Hash of (tenant, step id) → hash of (tenant, its trajectory id), for rewards: a
    /// reward naming a step of another trajectory is refused.
    steps: HashMap<Digest32, (Digest32, u64)>,
    /// Insertion order, for eviction: an entry is removed only if it was not written again
    /// since (its sequence number still matches).
    order: VecDeque<(Key, u64)>,
    next: u64,
}

#[derive(Debug, Clone, Copy)]
enum Key {
    Prefix(Digest32),
    Name(Digest32),
    Step(Digest32),
}

impl Shard {
    /// The next sequence number, with `key` queued for eviction under it.
    fn queue(&mut self, key: Key) -> u64 {
        self.next += 1;
        self.order.push_back((key, self.next));
        self.next
    }

    /// Drops the oldest entries until at most `capacity` are queued.
    fn evict(&mut self, capacity: usize) {
        while self.order.len() > capacity {
            let Some((key, seq)) = self.order.pop_front() else {
                break;
            };
            match key {
                Key::Prefix(hash) => {
                    if self.by_prefix.get(&hash).is_some_and(|(_, s)| *s == seq) {
                        self.by_prefix.remove(&hash);
                    }
                }
                Key::Name(hash) => {
                    if self.by_name.get(&hash).is_some_and(|(_, s)| *s == seq) {
                        self.by_name.remove(&hash);
                    }
                }
                Key::Step(hash) => {
                    if self.steps.get(&hash).is_some_and(|(_, s)| *s == seq) {
                        self.steps.remove(&hash);
                    }
                }
            }
        }
    }
}

/// The digest of a kind of key and its parts, each length-prefixed.
fn digest(kind: &str, parts: &[&str]) -> Digest32 {
    let mut hasher = Sha256::new();
    hasher.update(kind.as_bytes());
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.finalize().into()
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

fn prefix_hasher(tenant: &str, scope: &str) -> Sha256 {
    let mut hasher = Sha256::new();
    hasher.update(tenant.as_bytes());
    hasher.update([0]);
    hasher.update(scope.as_bytes());
    hasher.update([0]);
    hasher
}

fn extend(hasher: &mut Sha256, message: &Message) {
    let bytes = canonical(message);
    hasher.update((bytes.len() as u64).to_le_bytes());
    hasher.update(&bytes);
}

/// The running hashes of `tenant`, `scope` and each prefix of `messages`: element `i` covers
/// `messages[..i]`.
fn prefix_hashes(tenant: &str, scope: &str, messages: &[Message]) -> Vec<Digest32> {
    let mut hasher = prefix_hasher(tenant, scope);
    let mut out = Vec::with_capacity(messages.len() + 1);
    out.push(hasher.clone().finalize().into());
    for message in messages {
        extend(&mut hasher, message);
        out.push(hasher.clone().finalize().into());
    }
    out
}

/// The hash of `tenant`, `scope` and the whole conversation: `messages`, then `reply`.
fn conversation_hash(tenant: &str, scope: &str, messages: &[Message], reply: &Message) -> Digest32 {
    let mut hasher = prefix_hasher(tenant, scope);
    for message in messages.iter().chain(std::iter::once(reply)) {
        extend(&mut hasher, message);
    }
    hasher.finalize().into()
}

impl Trajectories {
    /// Keeps at most about `capacity` entries (each call adds up to three).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(16);
        let shards = (capacity / SHARD_ENTRIES).clamp(1, MAX_SHARDS);
        Trajectories {
            shards: (0..shards).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard: capacity.div_ceil(shards),
        }
    }

    /// Runs `f` on the shard that holds `key`.
    fn with_shard<R>(&self, key: &Digest32, f: impl FnOnce(&mut Shard) -> R) -> R {
        let mut index = [0u8; 8];
        index.copy_from_slice(&key[..8]);
        let index = (u64::from_le_bytes(index) % self.shards.len() as u64) as usize;
        let mut shard = self.shards[index].lock().unwrap_or_else(|p| p.into_inner());
        f(&mut shard)
    }

    /// Places a new call. `messages` are the request's messages as the client sent them.
    pub fn place(&self, tenant: &str, naming: Naming<'_>, messages: &[Message]) -> Placement {
        let trajectory_id = match naming {
            Naming::Trajectory(id) => Some(id.to_owned()),
            Naming::Session(session) => {
                let key = digest("name", &[tenant, "s", session]);
                Some(
                    self.with_shard(&key, |shard| {
                        shard
                            .by_name
                            .get(&key)
                            .map(|(known, _)| known.trajectory_id.to_string())
                    })
                    .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
                )
            }
            Naming::Automatic => None,
        };
        // The parent is the earlier call of the same scope whose conversation (request and
        // reply) this call's messages extend the furthest.
        let scope = scope_of(trajectory_id.as_deref());
        let parent = prefix_hashes(tenant, &scope, messages)
            .iter()
            .rev()
            .find_map(|h| {
                self.with_shard(h, |shard| {
                    shard.by_prefix.get(h).map(|(known, _)| known.clone())
                })
            });
        match (trajectory_id, parent) {
            (Some(trajectory_id), parent) => Placement {
                trajectory_id,
                turn_index: parent.as_ref().map_or(0, |p| p.turn_index + 1),
                parent_step_id: parent.map(|p| p.step_id.into()),
            },
            (None, Some(parent)) => Placement {
                trajectory_id: parent.trajectory_id.into(),
                parent_step_id: Some(parent.step_id.into()),
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
            trajectory_id: placement.trajectory_id.as_str().into(),
            step_id: step_id.into(),
            turn_index: placement.turn_index,
        };
        let per_shard = self.per_shard;
        if let Naming::Session(session) = naming {
            let key = digest("name", &[tenant, "s", session]);
            let known = known.clone();
            self.with_shard(&key, |shard| {
                let seq = shard.queue(Key::Name(key));
                shard.by_name.insert(key, (known, seq));
                shard.evict(per_shard);
            });
        }
        if let Some(reply) = reply {
            let scope = scope_of(match naming {
                Naming::Automatic => None,
                _ => Some(placement.trajectory_id.as_str()),
            });
            let key = conversation_hash(tenant, &scope, messages, reply);
            self.with_shard(&key, |shard| {
                let seq = shard.queue(Key::Prefix(key));
                shard.by_prefix.insert(key, (known, seq));
                shard.evict(per_shard);
            });
        }
    }

    /// Remembers that `step_id` is a step of `trajectory_id`, both `tenant`'s (every step
    /// the proxy records, whatever its status).
    pub fn note_step(&self, tenant: &str, trajectory_id: &str, step_id: &str) {
        let key = digest("step", &[tenant, step_id]);
        let trajectory = digest("trajectory", &[tenant, trajectory_id]);
        let per_shard = self.per_shard;
        self.with_shard(&key, |shard| {
            let seq = shard.queue(Key::Step(key));
            shard.steps.insert(key, (trajectory, seq));
            shard.evict(per_shard);
        });
    }

    /// Whether `step_id` is a step of `trajectory_id`, looked up among `tenant`'s steps
    /// only: `None` when this instance does not know the step (another instance's, an
    /// evicted one, another tenant's, or none at all: all answered alike).
    pub fn is_step_of(&self, tenant: &str, step_id: &str, trajectory_id: &str) -> Option<bool> {
        let key = digest("step", &[tenant, step_id]);
        let trajectory = digest("trajectory", &[tenant, trajectory_id]);
        self.with_shard(&key, |shard| {
            shard.steps.get(&key).map(|(known, _)| *known == trajectory)
        })
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

    /// `count` one-turn conversations `"0"`, `"1"`, … of tenant `x`, each answered `"a"`;
    /// returns the last one's messages and placement.
    fn one_turn_calls(t: &Trajectories, count: usize) -> (Vec<Message>, Placement) {
        let mut last = None;
        for i in 0..count {
            let m = vec![message("user", &i.to_string())];
            let p = t.place("x", Naming::Automatic, &m);
            let reply = message("assistant", "a");
            t.remember(
                "x",
                Naming::Automatic,
                &p,
                &format!("s{i}"),
                &m,
                Some(&reply),
            );
            last = Some((m, p));
        }
        last.expect("at least one call")
    }

    #[test]
    fn memory_is_bounded() {
        let t = Trajectories::new(16);
        one_turn_calls(&t, 100);
        assert_eq!(t.shards.len(), 1);
        let shard = t.shards[0].lock().unwrap();
        assert!(shard.order.len() <= 16);
        assert!(shard.by_prefix.len() <= 16 && shard.steps.len() <= 16);
    }

    #[test]
    fn a_large_state_is_sharded_and_bounded() {
        let capacity = 8 * SHARD_ENTRIES;
        let t = Trajectories::new(capacity);
        assert_eq!(t.shards.len(), 8);
        let (mut m, p) = one_turn_calls(&t, 3 * capacity);
        let mut total = 0;
        for shard in t.shards.iter() {
            let shard = shard.lock().unwrap();
            assert!(shard.order.len() <= t.per_shard);
            assert!(shard.by_prefix.len() + shard.steps.len() <= t.per_shard);
            total += shard.order.len();
        }
        assert!(total <= capacity && total > capacity / 2, "{total}");
        // The newest conversation is still continued, across shards.
        m.push(message("assistant", "a"));
        m.push(message("user", "more"));
        let next = t.place("x", Naming::Automatic, &m);
        assert_eq!(next.trajectory_id, p.trajectory_id);
        // The oldest is forgotten.
        let first = vec![
            message("user", "0"),
            message("assistant", "a"),
            message("user", "more"),
        ];
        assert_eq!(t.place("x", Naming::Automatic, &first).parent_step_id, None);
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
    fn steps_are_known_per_tenant_with_their_trajectory() {
        let t = Trajectories::new(100);
        // Two tenants use the same trajectory and step ids.
        t.note_step("a", "shared", "s1");
        t.note_step("b", "other", "s1");
        assert_eq!(t.is_step_of("a", "s1", "shared"), Some(true));
        assert_eq!(t.is_step_of("a", "s1", "other"), Some(false));
        assert_eq!(t.is_step_of("b", "s1", "other"), Some(true));
        assert_eq!(t.is_step_of("b", "s1", "shared"), Some(false));
        // Another tenant's step and a step known nowhere read the same.
        assert_eq!(t.is_step_of("c", "s1", "shared"), None);
        assert_eq!(t.is_step_of("a", "nope", "shared"), None);
    }

    #[test]
    fn noted_steps_are_bounded() {
        let t = Trajectories::new(16);
        for i in 0..100 {
            t.note_step("a", "t", &format!("s{i}"));
        }
        let shard = t.shards[0].lock().unwrap();
        assert!(shard.steps.len() <= 16 && shard.order.len() <= 16);
        drop(shard);
        assert_eq!(t.is_step_of("a", "s99", "t"), Some(true));
        assert_eq!(t.is_step_of("a", "s0", "t"), None);
    }
}
