//! Built-in environments: episodes that call a model through the OpenAI API like any agent,
//! score themselves, and post the score through the rewards API.
//!
//! Both keep the model's action space small (a regular-expression `grammar` restricting the
//! reply to a handful of single-token answers), so that a random tiny model is sometimes
//! right and the signal is learnable, and both are verifiable: the episode knows the answer.
//!
//! - `routing` (tool-use routing, one turn): a support ticket goes to one of four tools,
//!   answered as a letter. Reward `routing_correct`: 1 for the right tool, else 0.
//! - `guess` (verifiable multi-turn): find a number from 1 to 8 in three guesses, told
//!   "higher" or "lower" after each. Reward `guessed`: 1 when found, else 0. Every turn
//!   extends the conversation, so the proxy groups the turns into one trajectory.
//! - `tool_use` (tool calls, two turns): a ticket, four strict function tools; call the
//!   right one with the ticket's number, read its result, answer. Reward `tool_use_score`
//!   (half for the call, half for the answer); success is the call ([`tool_use`]).
//! - `order_lookup` (tool calls, three turns): look the ticket's account up, track or refund
//!   the order the ticket means as the lookup's result names it, answer. Reward
//!   `order_lookup_score` (a third for each turn); success is both calls
//!   ([`order_lookup`]).
//!
//! A custom environment is any HTTP client in any language, played by a command
//! (`command`); `environment` chooses between the two.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::client::{Agent, ChatMessage, Prompt};

mod calls;
mod order_lookup;
#[cfg(test)]
mod scripted;
mod tool_use;

/// A seeded generator (SplitMix64): episodes are the same on every machine and version.
#[derive(Debug, Clone)]
pub struct SeedRng(u64);

impl SeedRng {
    /// The generator of `seed`.
    pub fn new(seed: u64) -> Self {
        SeedRng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// How one episode went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Episode {
    /// Its seed.
    pub seed: u64,
    /// Whether the task was solved.
    pub success: bool,
    /// The reward (posted when asked).
    pub reward: f64,
    /// Model calls made.
    pub turns: usize,
    /// Completion tokens over all turns.
    pub completion_tokens: u64,
    /// Replies that were not a valid action (a refusal or anything outside the action set).
    pub invalid_replies: usize,
    /// The versions that answered, in turn order.
    pub versions: Vec<String>,
    /// The trajectory (through the proxy).
    pub trajectory_id: Option<String>,
    /// Why the episode could not be played (a failed request); then nothing is scored.
    pub error: Option<String>,
    /// The first call's messages, when the environment reported them (a command
    /// environment's `prompt`, for the gate's KL check). Kept in memory only: reports never
    /// hold prompt text.
    #[serde(skip)]
    pub prompt: Option<Vec<ChatMessage>>,
}

/// A built-in environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Env {
    /// Route a support ticket to one of four tools (one turn).
    Routing,
    /// Guess a number from 1 to 8 in three turns, told higher or lower.
    Guess,
    /// Call the right tool with the ticket's number, then answer from its result.
    ToolUse,
    /// Look an account up, act on the order its result names, then answer.
    OrderLookup,
}

/// The routing task's tools, their letters, and ticket templates (`{n}`: an order number).
const TOOLS: [(&str, &str, &[&str]); 4] = [
    (
        "A",
        "search_orders",
        &[
            "Where is my order {n}?",
            "Has package {n} shipped yet?",
            "Tracking number for order {n} please.",
            "When will order {n} arrive?",
            "Order {n} still says processing, where is it?",
        ],
    ),
    (
        "B",
        "refund",
        &[
            "I want my money back for order {n}.",
            "Please refund order {n}, it arrived broken.",
            "You charged me twice for order {n}, refund one.",
            "Cancel order {n} and return my payment.",
            "The item from order {n} was wrong, I need a refund.",
        ],
    ),
    (
        "C",
        "escalate_to_human",
        &[
            "This is my third complaint about {n}, get me a manager!",
            "I am contacting my lawyer about order {n}.",
            "Your agent was rude to me about order {n}. Supervisor now.",
            "Nobody answers my emails about {n}, I want a real person.",
            "I will post about order {n} everywhere unless someone senior calls.",
        ],
    ),
    (
        "D",
        "answer_from_faq",
        &[
            "What are your opening hours? (ref {n})",
            "Do you ship to Canada? Asking before order {n}.",
            "How do I reset my password? Account {n}.",
            "Which payment methods do you accept? Quote {n}.",
            "Is there a student discount? My id is {n}.",
        ],
    ),
];

const ROUTING_SYSTEM: &str =
    "Route the ticket. A: order status. B: refund. C: human. D: FAQ. Reply with the letter.";

const GUESS_SYSTEM: &str =
    "Guess my number from 1 to 8 in three tries; I say higher or lower. Reply with a digit.";

/// The highest number of the guessing game, and its turns.
const GUESS_MAX: usize = 8;
const GUESS_TURNS: usize = 3;

impl Env {
    /// Every built-in environment.
    pub const ALL: [Env; 4] = [Env::Routing, Env::Guess, Env::ToolUse, Env::OrderLookup];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Env::Routing => "routing",
            Env::Guess => "guess",
            Env::ToolUse => "tool_use",
            Env::OrderLookup => "order_lookup",
        }
    }

    /// The names of every built-in environment, for messages (`routing, guess, …`).
    pub fn names() -> String {
        Env::ALL.map(Env::name).join(", ")
    }

    /// Whether its episodes are tool calls (its success is the calls' accuracy).
    pub fn calls_tools(self) -> bool {
        matches!(self, Env::ToolUse | Env::OrderLookup)
    }

    /// The environment called `name`.
    pub fn from_name(name: &str) -> Option<Env> {
        Env::ALL.into_iter().find(|e| e.name() == name)
    }

    /// The reward it posts.
    pub fn reward_name(self) -> &'static str {
        match self {
            Env::Routing => "routing_correct",
            Env::Guess => "guessed",
            Env::ToolUse => "tool_use_score",
            Env::OrderLookup => "order_lookup_score",
        }
    }

    /// The regular expression a text reply must match (the action set; for the tool-calling
    /// environments, their answer turn).
    pub fn action_pattern(self) -> &'static str {
        match self {
            Env::Routing => "[ABCD]",
            Env::Guess => "[1-8]",
            Env::ToolUse | Env::OrderLookup => r"(Done|Sorry)\.",
        }
    }

    /// The routing task of `seed`: its conversation and the right letter.
    pub fn routing_task(seed: u64) -> (Vec<ChatMessage>, &'static str) {
        routing_task(seed)
    }

    /// The conversation of the episode's first turn (for the gate's KL measure).
    pub fn first_prompt(self, seed: u64) -> Vec<ChatMessage> {
        match self {
            Env::Routing => routing_task(seed).0,
            Env::Guess => vec![
                ChatMessage::new("system", GUESS_SYSTEM),
                ChatMessage::new("user", "Your first guess?"),
            ],
            Env::ToolUse => tool_use::task(seed).messages,
            Env::OrderLookup => order_lookup::task(seed).messages,
        }
    }

    /// The episode's first request as the model's chat template renders it: its messages
    /// and the tools it offers (for the gate's KL measure).
    pub fn first_request(self, seed: u64) -> Prompt {
        let tools = match self {
            Env::ToolUse => calls::schema_tools(&tool_use::task(seed).tools),
            Env::OrderLookup => calls::schema_tools(&order_lookup::task(seed).tools),
            Env::Routing | Env::Guess => Vec::new(),
        };
        Prompt {
            messages: self.first_prompt(seed),
            tools,
        }
    }

    /// Conversations like the episodes of `seeds`, rendered by `chat` (a model's chat
    /// template): the first request with every offered tool called once (each argument its
    /// first `enum` value), the tool's result and an answer. Text to learn a tokenizer's
    /// merges from: it tells nothing about which call is right.
    pub fn tokenizer_corpus(
        self,
        chat: &atdp_model_files::ChatFormat,
        seeds: std::ops::Range<u64>,
    ) -> Result<Vec<String>, atdp_model_files::Error> {
        let mut texts = Vec::new();
        for seed in seeds {
            let request = self.first_request(seed);
            let mut messages: Vec<atdp_schema::Message> = request
                .messages
                .iter()
                .map(ChatMessage::to_record)
                .collect();
            if request.tools.is_empty() {
                texts.push(chat.render(&messages, &[], true)?);
                continue;
            }
            let asked = messages.len();
            for (i, tool) in request.tools.iter().enumerate() {
                messages.truncate(asked);
                let arguments = example_arguments(tool.parameters.as_deref());
                let mut result = arguments.clone();
                result.insert("ok".into(), serde_json::Value::Bool(i % 2 == 0));
                let answer = if i % 2 == 0 { "Done." } else { "Sorry." };
                messages.extend([
                    atdp_schema::Message {
                        role: "assistant".into(),
                        tool_calls: vec![atdp_schema::ToolCall {
                            id: format!("call_{i}"),
                            name: tool.name.clone(),
                            arguments: serde_json::Value::Object(arguments).to_string(),
                        }],
                        ..Default::default()
                    },
                    atdp_schema::Message {
                        role: "tool".into(),
                        content: Some(serde_json::Value::Object(result).to_string()),
                        tool_call_id: Some(format!("call_{i}")),
                        ..Default::default()
                    },
                    atdp_schema::Message {
                        role: "assistant".into(),
                        content: Some(answer.into()),
                        ..Default::default()
                    },
                ]);
                texts.push(chat.render(&messages, &request.tools, false)?);
            }
        }
        Ok(texts)
    }

    /// Plays episode `seed` with `agent` at `temperature`; posts the reward when
    /// `post_reward` (and the episode was played through the proxy).
    pub async fn episode(
        self,
        agent: &Agent,
        seed: u64,
        temperature: f64,
        post_reward: bool,
    ) -> Episode {
        let mut episode = Episode {
            seed,
            success: false,
            reward: 0.0,
            turns: 0,
            completion_tokens: 0,
            invalid_replies: 0,
            versions: Vec::new(),
            trajectory_id: None,
            error: None,
            prompt: None,
        };
        let played = match self {
            Env::Routing => {
                self.play_routing(agent, seed, temperature, &mut episode)
                    .await
            }
            Env::Guess => {
                self.play_guess(agent, seed, temperature, &mut episode)
                    .await
            }
            Env::ToolUse => tool_use::play(agent, seed, temperature, &mut episode).await,
            Env::OrderLookup => order_lookup::play(agent, seed, temperature, &mut episode).await,
        };
        if let Err(e) = played {
            episode.error = Some(e);
            return episode;
        }
        if !self.calls_tools() {
            episode.reward = if episode.success { 1.0 } else { 0.0 };
        }
        if post_reward {
            let Some(trajectory) = episode.trajectory_id.clone() else {
                episode.error = Some(
                    "no x-atdp-trajectory-id on the answer: not called through the proxy".into(),
                );
                return episode;
            };
            let tags = BTreeMap::from([
                ("env".to_owned(), self.name().to_owned()),
                ("seed".to_owned(), seed.to_string()),
            ]);
            if let Err(e) = agent
                .reward(&trajectory, self.reward_name(), episode.reward, tags)
                .await
            {
                episode.error = Some(e);
            }
        }
        episode
    }

    async fn turn(
        self,
        agent: &Agent,
        messages: &[ChatMessage],
        temperature: f64,
        episode: &mut Episode,
    ) -> Result<String, String> {
        let reply = agent
            .chat(messages, 4, temperature, self.action_pattern())
            .await?;
        episode.turns += 1;
        episode.completion_tokens += reply.completion_tokens;
        if let Some(v) = reply.version {
            episode.versions.push(v);
        }
        if reply.trajectory_id.is_some() {
            episode.trajectory_id = reply.trajectory_id;
        }
        Ok(reply.text.trim().to_owned())
    }

    async fn play_routing(
        self,
        agent: &Agent,
        seed: u64,
        temperature: f64,
        episode: &mut Episode,
    ) -> Result<(), String> {
        let (messages, answer) = routing_task(seed);
        let reply = self.turn(agent, &messages, temperature, episode).await?;
        if !TOOLS.iter().any(|(letter, _, _)| *letter == reply) {
            episode.invalid_replies += 1;
        }
        episode.success = reply == answer;
        Ok(())
    }

    async fn play_guess(
        self,
        agent: &Agent,
        seed: u64,
        temperature: f64,
        episode: &mut Episode,
    ) -> Result<(), String> {
        let target = 1 + SeedRng::new(seed).below(GUESS_MAX);
        let mut messages = self.first_prompt(seed);
        for _ in 0..GUESS_TURNS {
            let reply = self.turn(agent, &messages, temperature, episode).await?;
            let feedback = match reply.parse::<usize>() {
                Ok(g) if g == target => {
                    episode.success = true;
                    return Ok(());
                }
                Ok(g) if (1..=GUESS_MAX).contains(&g) && g < target => "Higher.",
                Ok(g) if (1..=GUESS_MAX).contains(&g) => "Lower.",
                _ => {
                    episode.invalid_replies += 1;
                    "That is not a number from 1 to 8."
                }
            };
            messages.push(ChatMessage::new("assistant", reply));
            messages.push(ChatMessage::new("user", feedback));
        }
        Ok(())
    }
}

/// Arguments for a tool's JSON Schema: each property's first `enum` value, else `"x"`.
fn example_arguments(parameters: Option<&str>) -> serde_json::Map<String, serde_json::Value> {
    let schema: serde_json::Value = parameters
        .and_then(|p| serde_json::from_str(p).ok())
        .unwrap_or_default();
    schema["properties"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, property)| {
            let value = property["enum"]
                .get(0)
                .cloned()
                .unwrap_or_else(|| serde_json::Value::String("x".into()));
            (name.clone(), value)
        })
        .collect()
}

/// The routing conversation of `seed` and the right letter.
fn routing_task(seed: u64) -> (Vec<ChatMessage>, &'static str) {
    let mut rng = SeedRng::new(seed);
    let (letter, _, templates) = TOOLS[rng.below(TOOLS.len())];
    let template = templates[rng.below(templates.len())];
    let number = 10_000 + rng.below(90_000);
    let ticket = template.replace("{n}", &number.to_string());
    (
        vec![
            ChatMessage::new("system", ROUTING_SYSTEM),
            ChatMessage::new("user", ticket),
        ],
        letter,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_are_deterministic_and_cover_every_tool() {
        assert_eq!(routing_task(7), routing_task(7));
        let letters: std::collections::BTreeSet<&str> =
            (0..200).map(|s| routing_task(s).1).collect();
        assert_eq!(letters.len(), 4);
        let targets: std::collections::BTreeSet<usize> = (0..200)
            .map(|s| 1 + SeedRng::new(s).below(GUESS_MAX))
            .collect();
        assert_eq!(targets.len(), GUESS_MAX);
    }

    /// Merges learned from one range of seeds shorten the requests of other seeds: the tool
    /// definitions, calls and results are spelled in words.
    #[test]
    fn a_tokenizer_learned_from_the_corpus_shortens_unseen_requests() {
        use atdp_trainer::{chat_format, learn_merges};
        let plain = chat_format(&[]).unwrap();
        for env in [Env::ToolUse, Env::OrderLookup] {
            let corpus = env.tokenizer_corpus(&plain, 3_000..3_064).unwrap();
            assert_eq!(corpus.len(), 64 * env.first_request(0).tools.len());
            let merges = learn_merges(&corpus, 400).unwrap();
            let learned = chat_format(&merges).unwrap();
            let tokens = |chat: &atdp_model_files::ChatFormat, seed: u64| {
                let request = env.first_request(seed);
                crate::gate::request_ids(chat, &request.messages, &request.tools)
                    .unwrap()
                    .len()
            };
            let (before, after): (usize, usize) = (0..20)
                .map(|seed| (tokens(&plain, seed), tokens(&learned, seed)))
                .fold((0, 0), |(a, b), (x, y)| (a + x, b + y));
            println!(
                "{}: {} merges, {} -> {} tokens a request (mean over 20 seeds)",
                env.name(),
                merges.len(),
                before / 20,
                after / 20
            );
            assert!(
                after * 5 < before * 2,
                "{}: {before} -> {after}",
                env.name()
            );
        }
    }

    #[test]
    fn names_round_trip() {
        for env in Env::ALL {
            assert_eq!(Env::from_name(env.name()), Some(env));
        }
        assert_eq!(Env::from_name("chess"), None);
    }
}
