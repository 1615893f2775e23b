"""The diagnostics beside the cells: staleness band, mechanism, provenance, recoverability, and the encoder-level probes
(linear probe, membership inference, relearning)."""
