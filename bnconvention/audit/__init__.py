"""The auditor's instrument: refit cells with replicate-backed decisions (seed 001), staleness and recoverability
diagnostics (seed 003)."""
