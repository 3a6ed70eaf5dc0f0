//! The conformance suite every [`Store`] must pass (placeholder filled below).
