//! The strategies a backtest compares: upstream's defaults, KRR's simple strategy and Tailor's profiles.

use crate::profile::{self, PROFILES, Profile};

/// A way of computing recommendations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Strategy {
    /// Upstream's algorithm with the configured flags, exactly as `tailor recommend`.
    Upstream,
    /// KRR's documented simple strategy (see [`super::krr`]).
    KrrSimple,
    /// Upstream's algorithm with a Tailor profile applied to the flags.
    Profile(&'static Profile),
}

/// A strategy name nobody knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown strategy {name:?} (known: {})", Strategy::names().join(", "))]
pub struct UnknownStrategy {
    /// The name asked for (at most 64 characters).
    pub name: String,
}

/// Most strategies one backtest runs.
pub const MAX_STRATEGIES: usize = 16;

impl Strategy {
    /// Its name in `--strategy` and the output.
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::Upstream => profile::UPSTREAM,
            Strategy::KrrSimple => "krr-simple",
            Strategy::Profile(p) => p.name,
        }
    }

    /// Every strategy, in listing order.
    pub fn all() -> Vec<Strategy> {
        [Strategy::Upstream, Strategy::KrrSimple]
            .into_iter()
            .chain(PROFILES.iter().map(Strategy::Profile))
            .collect()
    }

    /// Every strategy name.
    pub fn names() -> Vec<&'static str> {
        Self::all().iter().map(Strategy::name).collect()
    }

    /// One strategy by name.
    pub fn parse(name: &str) -> Result<Strategy, UnknownStrategy> {
        let current = profile::canonical(name);
        Self::all()
            .into_iter()
            .find(|s| s.name() == current)
            .ok_or_else(|| UnknownStrategy {
                name: name.chars().take(64).collect(),
            })
    }
}
