//! One trajectory as a reviewer reads it, a page at a time: its steps in tree order (a
//! branch or retry under the step it continues), each step's new messages and reply, masked
//! spans marked by entity type (split out by `segments.rs`), and rewards where they belong.
//!
//! A page is bounded whatever the trajectory holds, because a hostile agent chooses what is
//! recorded (one 12 MiB message of `<` would otherwise be a 126 MB page):
//!
//! - at most [`STEPS_PER_PAGE`] steps and [`MESSAGES_PER_PAGE`] messages (a step without
//!   messages counts as one); a step with more messages than fit continues on the next page;
//! - a message shows at most [`PREVIEW_BYTES`] of its content and its first [`CALLS_SHOWN`]
//!   tool calls with at most [`ARGUMENTS_BYTES`] of arguments each, and the previews of one
//!   page together at most [`PAGE_PREVIEW_BYTES`]; the full text of a message or of a call's
//!   arguments is one request away (the console's `/trajectory/text`);
//! - at most [`REWARDS_SHOWN`] rewards per step and for the whole trajectory (all of them
//!   are in the evidence export).
//!
//! Pages are cut the same way on every request for the same lake, so page `n` is stable
//! while the trajectory does not grow.

use std::collections::{BTreeMap, HashMap};

use atdp_schema::{Message, Reward, Step, ToolCall};
use serde::Serialize;

use crate::segments::{Segment, Tokens, prefix, segments};

/// Steps on one page, at most.
pub const STEPS_PER_PAGE: usize = 10;
/// Messages on one page, at most.
pub const MESSAGES_PER_PAGE: usize = 40;
/// Bytes of a message's content shown on a page, at most.
pub const PREVIEW_BYTES: usize = 4 * 1024;
/// Tool calls of one message shown on a page, at most.
pub const CALLS_SHOWN: usize = 4;
/// Bytes of a tool call's arguments shown on a page, at most.
pub const ARGUMENTS_BYTES: usize = 1024;
/// Bytes of content and arguments shown on one page, all previews together, at most.
pub const PAGE_PREVIEW_BYTES: usize = 48 * 1024;
/// Rewards shown per step, and for the whole trajectory, at most.
pub const REWARDS_SHOWN: usize = 10;

/// The start of a text, split into segments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Preview {
    /// The shown prefix.
    pub segments: Vec<Segment>,
    /// The whole text's length in bytes.
    pub bytes: usize,
    /// Whether the prefix is shorter than the text.
    pub cut: bool,
}

impl Preview {
    /// At most `max` bytes of `text`, and no more than `budget` (which is reduced).
    fn new(text: &str, max: usize, budget: &mut usize, tokens: &Tokens<'_>) -> Preview {
        let shown = prefix(text, max.min(*budget));
        *budget -= shown.len();
        Preview {
            segments: segments(shown, tokens),
            bytes: text.len(),
            cut: shown.len() < text.len(),
        }
    }
}

/// Which message of a step: an index into its request messages, or its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum MessageAt {
    /// `request_messages[i]`.
    Request(usize),
    /// `response_message`.
    Reply,
}

impl MessageAt {
    /// `3` or `reply`, as in the console's URLs.
    pub fn param(&self) -> String {
        match self {
            MessageAt::Request(i) => i.to_string(),
            MessageAt::Reply => "reply".to_owned(),
        }
    }

    /// Whether this is the reply.
    pub fn is_reply(&self) -> bool {
        matches!(self, MessageAt::Reply)
    }

    /// The inverse of [`MessageAt::param`].
    pub fn parse(param: &str) -> Option<MessageAt> {
        match param {
            "reply" => Some(MessageAt::Reply),
            other => other.parse().ok().map(MessageAt::Request),
        }
    }

    /// The message of `step` this names.
    pub fn of(self, step: &Step) -> Option<&Message> {
        match self {
            MessageAt::Request(i) => step.request_messages.get(i),
            MessageAt::Reply => step.response_message.as_ref(),
        }
    }
}

/// A tool call as shown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallView<'a> {
    /// Its index among the message's tool calls.
    pub index: usize,
    /// The call as stored.
    pub call: &'a ToolCall,
    /// The start of its (masked) arguments.
    pub arguments: Preview,
}

/// A message as shown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessageView<'a> {
    /// Where it is in its step.
    pub at: MessageAt,
    /// The message as stored.
    pub message: &'a Message,
    /// The start of its (masked) content.
    pub content: Preview,
    /// Its first tool calls.
    pub calls: Vec<CallView<'a>>,
    /// How many more tool calls it has.
    pub calls_hidden: usize,
}

/// One step (or the part of it that fits) as shown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepView<'a> {
    /// Its place in tree order, from 0.
    pub position: usize,
    /// The step as stored.
    pub step: &'a Step,
    /// Depth in the tree (0 for a root).
    pub depth: usize,
    /// The position of the step it continues, when that step is on the same page.
    pub parent_position: Option<usize>,
    /// Its earlier messages are on the previous page.
    pub continued: bool,
    /// Its later messages are on the next page.
    pub continues: bool,
    /// The step a search hit pointed at.
    pub hit: bool,
    /// The messages shown: those it added to its parent's conversation (all, for a root).
    pub messages: Vec<MessageView<'a>>,
    /// Rewards on this step (on the part that starts it).
    pub rewards: Vec<&'a Reward>,
    /// How many more rewards it has.
    pub rewards_hidden: usize,
}

/// A page of a trajectory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TranscriptPage<'a> {
    /// The trajectory's id.
    pub trajectory_id: &'a str,
    /// Its tenant.
    pub tenant_id: &'a str,
    /// This page, from 0.
    pub page: usize,
    /// How many pages there are.
    pub pages: usize,
    /// How many steps the trajectory has.
    pub steps_total: usize,
    /// The steps (or parts of steps) on this page, in tree order.
    pub steps: Vec<StepView<'a>>,
    /// Rewards on the whole trajectory.
    pub rewards: Vec<&'a Reward>,
    /// How many more trajectory rewards there are.
    pub rewards_hidden: usize,
}

/// The messages `from..to` of the step at `position` in tree order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slice {
    position: usize,
    from: usize,
    to: usize,
}

/// A trajectory's steps in tree order and cut into pages.
#[derive(Debug)]
pub struct Transcript<'a> {
    trajectory_id: &'a str,
    steps: &'a [Step],
    rewards: &'a [Reward],
    /// Index into `steps` and depth, in tree order.
    order: Vec<(usize, usize)>,
    /// Per position: the messages it shows.
    messages: Vec<Vec<MessageAt>>,
    pages: Vec<Vec<Slice>>,
}

impl<'a> Transcript<'a> {
    /// Orders `steps` as a tree (children after their parent, siblings by start time) and
    /// cuts the pages.
    pub fn new(trajectory_id: &'a str, steps: &'a [Step], rewards: &'a [Reward]) -> Self {
        let order = tree_order(steps);
        let by_id: HashMap<&str, &Step> = steps.iter().map(|s| (s.step_id.as_str(), s)).collect();
        let messages: Vec<Vec<MessageAt>> = order
            .iter()
            .map(|(index, _)| {
                let step = &steps[*index];
                let seen = step
                    .parent_step_id
                    .as_deref()
                    .and_then(|p| by_id.get(p))
                    .map(|parent| parent.request_messages.len() + 1)
                    .filter(|n| *n <= step.request_messages.len())
                    .unwrap_or(0);
                (seen..step.request_messages.len())
                    .map(MessageAt::Request)
                    .chain(step.response_message.as_ref().map(|_| MessageAt::Reply))
                    .collect()
            })
            .collect();
        let pages = paginate(messages.iter().map(Vec::len));
        Transcript {
            trajectory_id,
            steps,
            rewards,
            order,
            messages,
            pages,
        }
    }

    /// How many pages there are (at least one).
    pub fn pages(&self) -> usize {
        self.pages.len().max(1)
    }

    /// The first step, in tree order, with id `step_id`.
    pub fn step(&self, step_id: &str) -> Option<(usize, &'a Step)> {
        self.order
            .iter()
            .enumerate()
            .map(|(position, (index, _))| (position, &self.steps[*index]))
            .find(|(_, step)| step.step_id == step_id)
    }

    /// The page that starts the first step with id `step_id`.
    pub fn page_of(&self, step_id: &str) -> Option<usize> {
        let (position, _) = self.step(step_id)?;
        self.pages
            .iter()
            .position(|page| page.iter().any(|s| s.position == position && s.from == 0))
    }

    /// Page `page` (from 0), with the first step of id `hit` marked; `None` past the end.
    pub fn page(&self, page: usize, hit: Option<&str>) -> Option<TranscriptPage<'a>> {
        let empty = Vec::new();
        let slices = match self.pages.get(page) {
            Some(slices) => slices,
            None if page == 0 => &empty,
            None => return None,
        };
        let hit_position = hit.and_then(|h| self.step(h)).map(|(p, _)| p);
        let on_page: Vec<usize> = slices
            .iter()
            .filter(|s| s.from == 0)
            .map(|s| s.position)
            .collect();
        let mut budget = PAGE_PREVIEW_BYTES;
        let steps = slices
            .iter()
            .map(|slice| self.step_view(*slice, &on_page, hit_position, &mut budget))
            .collect();
        let (rewards, rewards_hidden) = first(self.rewards.iter().filter(|r| r.step_id.is_none()));
        Some(TranscriptPage {
            trajectory_id: self.trajectory_id,
            tenant_id: self.steps.first().map_or("", |s| s.tenant_id.as_str()),
            page,
            pages: self.pages(),
            steps_total: self.steps.len(),
            steps,
            rewards,
            rewards_hidden,
        })
    }

    fn step_view(
        &self,
        slice: Slice,
        on_page: &[usize],
        hit: Option<usize>,
        budget: &mut usize,
    ) -> StepView<'a> {
        let (index, depth) = self.order[slice.position];
        let step: &'a Step = &self.steps[index];
        let tokens = Tokens::new(&step.pii);
        let messages = self.messages[slice.position]
            .get(slice.from..slice.to)
            .unwrap_or_default()
            .iter()
            .filter_map(|at| {
                let message = at.of(step)?;
                Some(message_view(*at, message, &tokens, budget))
            })
            .collect();
        let parent_position = step.parent_step_id.as_deref().and_then(|parent| {
            on_page
                .iter()
                .copied()
                .find(|p| self.steps[self.order[*p].0].step_id == parent)
        });
        let (rewards, rewards_hidden) = if slice.from == 0 {
            first(
                self.rewards
                    .iter()
                    .filter(|r| r.step_id.as_deref() == Some(step.step_id.as_str())),
            )
        } else {
            (Vec::new(), 0)
        };
        StepView {
            position: slice.position,
            step,
            depth,
            parent_position,
            continued: slice.from > 0,
            continues: slice.to < self.messages[slice.position].len(),
            hit: slice.from == 0 && hit == Some(slice.position),
            messages,
            rewards,
            rewards_hidden,
        }
    }
}

fn message_view<'a>(
    at: MessageAt,
    message: &'a Message,
    tokens: &Tokens<'_>,
    budget: &mut usize,
) -> MessageView<'a> {
    let content = Preview::new(
        message.content.as_deref().unwrap_or_default(),
        PREVIEW_BYTES,
        budget,
        tokens,
    );
    let calls = message
        .tool_calls
        .iter()
        .take(CALLS_SHOWN)
        .enumerate()
        .map(|(index, call)| CallView {
            index,
            call,
            arguments: Preview::new(&call.arguments, ARGUMENTS_BYTES, budget, tokens),
        })
        .collect();
    MessageView {
        at,
        message,
        content,
        calls,
        calls_hidden: message.tool_calls.len().saturating_sub(CALLS_SHOWN),
    }
}

/// The first [`REWARDS_SHOWN`] rewards, and how many more there are.
fn first<'a>(rewards: impl Iterator<Item = &'a Reward>) -> (Vec<&'a Reward>, usize) {
    let mut shown = Vec::new();
    let mut hidden = 0;
    for reward in rewards {
        if shown.len() < REWARDS_SHOWN {
            shown.push(reward);
        } else {
            hidden += 1;
        }
    }
    (shown, hidden)
}

/// Cuts steps with `counts` messages each (in tree order) into pages of at most
/// [`STEPS_PER_PAGE`] steps and [`MESSAGES_PER_PAGE`] messages, a step without messages
/// counting as one.
fn paginate(counts: impl Iterator<Item = usize>) -> Vec<Vec<Slice>> {
    let mut pages = Vec::new();
    let mut page: Vec<Slice> = Vec::new();
    let mut used = 0;
    for (position, count) in counts.enumerate() {
        let mut from = 0;
        loop {
            if page.len() == STEPS_PER_PAGE || used >= MESSAGES_PER_PAGE {
                pages.push(std::mem::take(&mut page));
                used = 0;
            }
            let take = (count - from).min(MESSAGES_PER_PAGE - used);
            page.push(Slice {
                position,
                from,
                to: from + take,
            });
            used += take.max(1);
            from += take;
            if from >= count {
                break;
            }
        }
    }
    if !page.is_empty() {
        pages.push(page);
    }
    pages
}

/// Indices into `steps` and depths in tree order: children after their parent, siblings by
/// start time; a step whose parent is not in the trajectory is a root.
fn tree_order(steps: &[Step]) -> Vec<(usize, usize)> {
    let by_id: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.step_id.as_str(), i))
        .collect();
    let mut children: BTreeMap<Option<&str>, Vec<usize>> = BTreeMap::new();
    for (i, step) in steps.iter().enumerate() {
        let parent = step
            .parent_step_id
            .as_deref()
            .filter(|p| by_id.contains_key(p));
        children.entry(parent).or_default().push(i);
    }
    for list in children.values_mut() {
        list.sort_by(|a, b| {
            (steps[*a].started_at, &steps[*a].step_id)
                .cmp(&(steps[*b].started_at, &steps[*b].step_id))
        });
    }
    let mut ordered = Vec::with_capacity(steps.len());
    let mut placed = vec![false; steps.len()];
    let roots = children.get(&None).cloned().unwrap_or_default();
    // Steps whose parents form a cycle are reached from no root: they follow as roots, so
    // that every recorded step is shown.
    let mut rest: Vec<usize> = (0..steps.len()).collect();
    rest.sort_by(|a, b| {
        (steps[*a].started_at, &steps[*a].step_id).cmp(&(steps[*b].started_at, &steps[*b].step_id))
    });
    for root in roots.into_iter().chain(rest) {
        let mut stack = vec![(root, 0)];
        while let Some((i, depth)) = stack.pop() {
            // A step is placed once, even when ids repeat or parents form a cycle.
            if std::mem::replace(&mut placed[i], true) {
                continue;
            }
            ordered.push((i, depth));
            if by_id.get(steps[i].step_id.as_str()) == Some(&i)
                && let Some(kids) = children.get(&Some(steps[i].step_id.as_str()))
            {
                stack.extend(kids.iter().rev().map(|k| (*k, depth + 1)));
            }
        }
    }
    ordered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_hold_a_bounded_number_of_steps_and_messages() {
        // 25 steps of 3 messages, one of 100, one of none.
        let counts: Vec<usize> = (0..25).map(|_| 3).chain([100, 0]).collect();
        let pages = paginate(counts.iter().copied());
        for page in &pages {
            assert!(page.len() <= STEPS_PER_PAGE, "{page:?}");
            let messages: usize = page.iter().map(|s| (s.to - s.from).max(1)).sum();
            assert!(messages <= MESSAGES_PER_PAGE, "{page:?}");
        }
        // Every message of every step is on exactly one page, in order.
        let mut seen: Vec<(usize, usize)> = Vec::new();
        for slice in pages.iter().flatten() {
            seen.extend((slice.from..slice.to).map(|m| (slice.position, m)));
            if slice.from == slice.to {
                seen.push((slice.position, usize::MAX));
            }
        }
        let expected: Vec<(usize, usize)> = counts
            .iter()
            .enumerate()
            .flat_map(|(p, n)| {
                let all: Vec<(usize, usize)> = if *n == 0 {
                    vec![(p, usize::MAX)]
                } else {
                    (0..*n).map(|m| (p, m)).collect()
                };
                all
            })
            .collect();
        assert_eq!(seen, expected);
        // The 100-message step is cut across pages.
        assert!(pages.iter().flatten().filter(|s| s.position == 25).count() >= 3);
    }

    fn step(id: &str, parent: Option<&str>, at: i64, messages: usize) -> Step {
        Step {
            step_id: id.into(),
            trajectory_id: "t".into(),
            parent_step_id: parent.map(str::to_owned),
            tenant_id: "demo".into(),
            started_at: at,
            request_messages: (0..messages)
                .map(|i| Message {
                    role: "user".into(),
                    content: Some(format!("m{i}")),
                    ..Message::default()
                })
                .collect(),
            ..Step::default()
        }
    }

    #[test]
    fn tree_order_puts_branches_under_their_parent() {
        // a ─ b ─ d
        //   └ c        (c is a retry of b, started later than d)
        let steps = vec![
            step("d", Some("b"), 3, 5),
            step("a", None, 1, 1),
            step("c", Some("a"), 4, 3),
            step("b", Some("a"), 2, 3),
        ];
        let transcript = Transcript::new("t", &steps, &[]);
        let page = transcript.page(0, Some("b")).unwrap();
        let order: Vec<(&str, usize, usize, bool)> = page
            .steps
            .iter()
            .map(|s| (s.step.step_id.as_str(), s.depth, s.messages.len(), s.hit))
            .collect();
        // b and c add 3 - (1 + 1) = 1 message each; d adds 5 - (3 + 1) = 1.
        assert_eq!(
            order,
            [
                ("a", 0, 1, false),
                ("b", 1, 1, true),
                ("d", 2, 1, false),
                ("c", 1, 1, false)
            ]
        );
        assert_eq!(page.steps[2].parent_position, Some(1));
        assert_eq!(transcript.pages(), 1);
        assert!(transcript.page(1, None).is_none());
    }

    #[test]
    fn steps_in_a_parent_cycle_are_still_shown() {
        let steps = vec![
            step("a", None, 1, 1),
            step("x", Some("y"), 2, 1),
            step("y", Some("x"), 3, 1),
            step("z", Some("z"), 4, 1),
        ];
        let order: Vec<(&str, usize)> = tree_order(&steps)
            .into_iter()
            .map(|(i, d)| (steps[i].step_id.as_str(), d))
            .collect();
        assert_eq!(order, [("a", 0), ("x", 0), ("y", 1), ("z", 0)]);
    }

    #[test]
    fn a_huge_message_shows_a_bounded_preview() {
        let mut big = step("a", None, 1, 0);
        big.request_messages = (0..3)
            .map(|_| Message {
                role: "user".into(),
                content: Some("<".repeat(12 << 20)),
                ..Message::default()
            })
            .collect();
        let steps = vec![big];
        let transcript = Transcript::new("t", &steps, &[]);
        let page = transcript.page(0, None).unwrap();
        let shown: Vec<(usize, bool, usize)> = page.steps[0]
            .messages
            .iter()
            .map(|m| {
                let text: usize = m.content.segments.iter().map(|s| s.text.len()).sum();
                (text, m.content.cut, m.content.bytes)
            })
            .collect();
        assert_eq!(
            shown,
            vec![(PREVIEW_BYTES, true, 12 << 20); 3],
            "each message shows its first {PREVIEW_BYTES} bytes"
        );
    }
}
