//! The run's hard token cap, with one admission rule that does not depend on timing: an agent is
//! admitted when the graph starts it, against the tokens of the work the graph has already
//! awaited (*applied* tokens), never against work still running or finished unseen. So agents
//! started in the same synchronous JS turn are all admitted against the budget as it stood when
//! that turn began, and completions count for admission once the graph awaits them. An admitted
//! agent runs to its end and its tokens count, even past the cap; its later turns (a tool loop)
//! are admitted against what stood at its start plus its own turns. Every turn's usage is also
//! recorded as it arrives, for the run's `total_tokens`.

use std::sync::Mutex;

use graph_js::Failure;

/// The token meter of one run, shared by every nested graph of that run.
#[derive(Debug)]
pub struct Budget {
    cap: Option<u64>,
    state: Mutex<Meter>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Meter {
    /// Every turn's tokens, as they arrive.
    used: u64,
    /// The tokens of work its graph has awaited: what admission counts.
    applied: u64,
    cost: f64,
}

impl Budget {
    /// A meter with an optional cap (`None`: unlimited).
    pub fn new(cap: Option<u64>) -> Self {
        Self {
            cap,
            state: Mutex::new(Meter::default()),
        }
    }

    /// The cap, if any.
    pub fn cap(&self) -> Option<u64> {
        self.cap
    }

    /// Tokens metered so far.
    pub fn used(&self) -> u64 {
        self.meter().used
    }

    /// Tokens of the work graphs have awaited so far: what admission counts, and what a graph
    /// sees as used.
    pub fn applied(&self) -> u64 {
        self.meter().applied
    }

    /// Cost reported so far by providers.
    pub fn cost(&self) -> f64 {
        self.meter().cost
    }

    /// Tokens left under the cap for admission (`None`: unlimited).
    pub fn remaining(&self) -> Option<u64> {
        self.cap.map(|cap| cap.saturating_sub(self.applied()))
    }

    /// Admits one more agent against the applied tokens: refused once they reach the cap;
    /// otherwise returns its `max_tokens` clipped to what remains. Also answers the applied
    /// tokens it counted, for the agent's later turns ([`Budget::admit_from`]).
    pub fn admit(&self, max_tokens: Option<u32>) -> Result<(Option<u32>, u64), Failure> {
        let standing = self.applied();
        self.admit_from(standing, max_tokens)
            .map(|max_tokens| (max_tokens, standing))
    }

    /// Admits one more turn as if `standing` tokens were used: refused at the cap, otherwise
    /// `max_tokens` clipped to what remains.
    pub fn admit_from(
        &self,
        standing: u64,
        max_tokens: Option<u32>,
    ) -> Result<Option<u32>, Failure> {
        let Some(cap) = self.cap else {
            return Ok(max_tokens);
        };
        if standing >= cap {
            return Err(self.exhausted(standing, cap));
        }
        let remaining = u32::try_from(cap - standing).unwrap_or(u32::MAX);
        Ok(Some(max_tokens.map_or(remaining, |m| m.min(remaining))))
    }

    /// Whether `standing` tokens reach the cap.
    pub fn reached(&self, standing: u64) -> bool {
        self.cap.is_some_and(|cap| standing >= cap)
    }

    /// The refusal given once `standing` tokens reached the cap.
    pub fn exhausted_failure(&self, standing: u64) -> Failure {
        self.exhausted(standing, self.cap.unwrap_or(0))
    }

    fn exhausted(&self, used: u64, cap: u64) -> Failure {
        Failure::budget_exhausted(format!(
            "token cap reached: {used} of {cap} tokens used, no further agent may start (raise --max-tokens)"
        ))
    }

    /// Counts `tokens` of work a graph has just awaited for admission (see the module's rule).
    pub fn apply(&self, tokens: u64) {
        let mut meter = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        meter.applied = meter.applied.saturating_add(tokens);
    }

    /// Records the usage and cost of one finished turn (not yet applied: see [`Budget::apply`]).
    pub fn record(&self, tokens: u64, cost: f64) {
        let mut meter = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        meter.used = meter.used.saturating_add(tokens);
        if cost.is_finite() && cost > 0.0 {
            meter.cost += cost;
        }
    }

    fn meter(&self) -> Meter {
        *self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use graph_js::FailureCode;

    /// Records and applies `tokens`, as a turn the graph then awaited.
    fn spend(budget: &Budget, tokens: u64, cost: f64) {
        budget.record(tokens, cost);
        budget.apply(tokens);
    }

    #[test]
    fn unlimited_admits_everything_unclipped() {
        let budget = Budget::new(None);
        spend(&budget, 1_000_000, 0.5);
        assert_eq!(budget.admit(Some(50)), Ok((Some(50), 1_000_000)));
        assert_eq!(budget.admit(None), Ok((None, 1_000_000)));
        assert_eq!(budget.remaining(), None);
    }

    #[test]
    fn max_tokens_is_clipped_to_what_remains() {
        let budget = Budget::new(Some(100));
        spend(&budget, 70, 0.0);
        assert_eq!(budget.admit(Some(500)), Ok((Some(30), 70)));
        assert_eq!(budget.admit(Some(10)), Ok((Some(10), 70)));
        assert_eq!(budget.admit(None), Ok((Some(30), 70)));
        assert_eq!(budget.admit_from(90, Some(500)), Ok(Some(10)));
    }

    #[test]
    fn refused_at_the_cap_and_past_it() {
        let budget = Budget::new(Some(100));
        spend(&budget, 99, 0.0);
        assert!(
            budget.admit(None).is_ok(),
            "one token below the cap still admits"
        );
        spend(&budget, 1, 0.0);
        let refused = budget.admit(None).unwrap_err();
        assert_eq!(refused.code, FailureCode::BudgetExhausted);
        assert!(
            refused.message.contains("100 of 100"),
            "{}",
            refused.message
        );
        // Agents admitted earlier still count when they finish.
        spend(&budget, 40, 0.25);
        assert_eq!(budget.used(), 140);
        assert!(budget.reached(budget.applied()));
        assert!((budget.cost() - 0.25).abs() < 1e-12);
    }

    #[test]
    fn tokens_count_for_admission_only_once_applied() {
        let budget = Budget::new(Some(100));
        // A turn finished but its graph has not awaited it: the next agent is still admitted,
        // against the same standing as its sibling started in the same JS turn.
        budget.record(150, 0.0);
        assert_eq!(budget.used(), 150);
        assert_eq!(budget.admit(Some(500)), Ok((Some(100), 0)));
        assert_eq!(budget.remaining(), Some(100));
        budget.apply(150);
        assert_eq!(
            budget.admit(None).unwrap_err().code,
            FailureCode::BudgetExhausted
        );
        assert_eq!(budget.used(), 150, "applying does not count twice");
    }

    #[test]
    fn a_zero_cap_refuses_the_first_agent() {
        let budget = Budget::new(Some(0));
        assert_eq!(
            budget.admit(Some(5)).unwrap_err().code,
            FailureCode::BudgetExhausted
        );
    }

    #[test]
    fn nonsense_costs_are_ignored() {
        let budget = Budget::new(None);
        budget.record(1, f64::NAN);
        budget.record(1, -3.0);
        assert_eq!(budget.cost(), 0.0);
        assert_eq!(budget.used(), 2);
    }
}
