"""Where models come from: the allowlist of model factories (:mod:`~bnconvention.architectures.factories`).
A factory is imported only when it is on the allowlist or named on the user's own command line, never because
untrusted metadata names it."""
