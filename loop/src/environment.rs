//! The environment the loop evaluates, gates and rolls back on: a built-in one ([`Env`]) or a
//! command that plays the user's own ([`CommandEnv`], `docs/loop.md`), and the flags that
//! choose it.

use crate::command::CommandEnv;
use crate::env::Env;

/// An environment the loop evaluates, gates and rolls back on.
#[derive(Debug, Clone, PartialEq)]
pub enum Environment {
    /// A built-in environment, played in this process.
    Builtin(Env),
    /// A program of the user's that plays its own environment's episodes.
    Command(CommandEnv),
}

impl Environment {
    /// Its name in reports (`routing`, `guess`, or the command's name).
    pub fn name(&self) -> &str {
        match self {
            Environment::Builtin(env) => env.name(),
            Environment::Command(command) => &command.name,
        }
    }

    /// The reward its episodes post, which automatic rollback compares.
    pub fn reward_name(&self) -> &str {
        match self {
            Environment::Builtin(env) => env.reward_name(),
            Environment::Command(command) => &command.reward,
        }
    }
}

/// The environment flags of `atdp-eval` and `atdp-loop`: a built-in environment, or a
/// command that plays the user's own.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct EnvArgs {
    /// A built-in environment: `routing` (the default), `guess`, `tool_use` or `order_lookup`.
    #[arg(long, env = "ATDP_ENV", conflicts_with = "env_command")]
    pub env: Option<String>,
    /// A command that plays episodes of your own environment (docs/loop.md, "A command
    /// environment"): a program and its arguments, quoted as for a shell.
    #[arg(long, env = "ATDP_ENV_COMMAND", requires = "env_reward")]
    pub env_command: Option<String>,
    /// The reward name the command's episodes are posted under, which automatic rollback
    /// compares.
    #[arg(long, env = "ATDP_ENV_REWARD", requires = "env_command")]
    pub env_reward: Option<String>,
    /// The command environment's name in reports and in its rewards' `env` tag.
    #[arg(long, env = "ATDP_ENV_NAME", requires = "env_command")]
    pub env_name: Option<String>,
    /// The longest one process of the command may run, in seconds.
    #[arg(long, env = "ATDP_ENV_TIMEOUT", default_value_t = 1800)]
    pub env_timeout: u64,
}

impl EnvArgs {
    /// The environment the flags name.
    pub fn environment(&self) -> crate::Result<Environment> {
        let Some(command) = &self.env_command else {
            let name = self.env.as_deref().unwrap_or("routing");
            return Env::from_name(name)
                .map(Environment::Builtin)
                .ok_or_else(|| {
                    crate::Error::Loop(format!(
                        "unknown environment {name:?} ({}; or --env-command)",
                        Env::names()
                    ))
                });
        };
        let reward = self.env_reward.as_deref().unwrap_or_default();
        let mut env = CommandEnv::new(command, reward)?;
        if let Some(name) = &self.env_name {
            env = env.named(name)?;
        }
        env.timeout = std::time::Duration::from_secs(self.env_timeout.max(1));
        Ok(Environment::Command(env))
    }
}

impl From<Env> for Environment {
    fn from(env: Env) -> Self {
        Environment::Builtin(env)
    }
}

impl From<CommandEnv> for Environment {
    fn from(command: CommandEnv) -> Self {
        Environment::Command(command)
    }
}
