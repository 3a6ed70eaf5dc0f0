//! The run's hard token cap. Admission is checked when an agent starts (and again when it gets a
//! concurrency slot); an agent admitted before the cap was reached runs to its end and its
//! tokens count, even past the cap. Every turn's usage is recorded as it arrives.

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
    used: u64,
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

    /// Cost reported so far by providers.
    pub fn cost(&self) -> f64 {
        self.meter().cost
    }

    /// Tokens left under the cap (`None`: unlimited).
    pub fn remaining(&self) -> Option<u64> {
        self.cap.map(|cap| cap.saturating_sub(self.used()))
    }

    /// Admits one more agent turn: refused once the cap is reached; otherwise returns its
    /// `max_tokens` clipped to what remains.
    pub fn admit(&self, max_tokens: Option<u32>) -> Result<Option<u32>, Failure> {
        let Some(cap) = self.cap else {
            return Ok(max_tokens);
        };
        let used = self.used();
        if used >= cap {
            return Err(self.exhausted(used, cap));
        }
        let remaining = u32::try_from(cap - used).unwrap_or(u32::MAX);
        Ok(Some(max_tokens.map_or(remaining, |m| m.min(remaining))))
    }

    /// Whether no further agent turn may start.
    pub fn is_exhausted(&self) -> bool {
        self.cap.is_some_and(|cap| self.used() >= cap)
    }

    /// The refusal given once the cap is reached.
    pub fn exhausted_failure(&self) -> Failure {
        self.exhausted(self.used(), self.cap.unwrap_or(0))
    }

    fn exhausted(&self, used: u64, cap: u64) -> Failure {
        Failure::budget_exhausted(format!(
            "token cap reached: {used} of {cap} tokens used, no further agent may start (raise --max-tokens)"
        ))
    }

    /// Records the usage and cost of one finished turn.
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

    #[test]
    fn unlimited_admits_everything_unclipped() {
        let budget = Budget::new(None);
        budget.record(1_000_000, 0.5);
        assert_eq!(budget.admit(Some(50)), Ok(Some(50)));
        assert_eq!(budget.admit(None), Ok(None));
        assert_eq!(budget.remaining(), None);
    }

    #[test]
    fn max_tokens_is_clipped_to_what_remains() {
        let budget = Budget::new(Some(100));
        budget.record(70, 0.0);
        assert_eq!(budget.admit(Some(500)), Ok(Some(30)));
        assert_eq!(budget.admit(Some(10)), Ok(Some(10)));
        assert_eq!(budget.admit(None), Ok(Some(30)));
    }

    #[test]
    fn refused_at_the_cap_and_past_it() {
        let budget = Budget::new(Some(100));
        budget.record(99, 0.0);
        assert!(
            budget.admit(None).is_ok(),
            "one token below the cap still admits"
        );
        budget.record(1, 0.0);
        let refused = budget.admit(None).unwrap_err();
        assert_eq!(refused.code, FailureCode::BudgetExhausted);
        assert!(
            refused.message.contains("100 of 100"),
            "{}",
            refused.message
        );
        // Agents admitted earlier still count when they finish.
        budget.record(40, 0.25);
        assert_eq!(budget.used(), 140);
        assert!(budget.is_exhausted());
        assert!((budget.cost() - 0.25).abs() < 1e-12);
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
