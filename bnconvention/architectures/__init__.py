"""Where models come from: the allowlist of model factories (:mod:`~bnconvention.architectures.factories`, no
torch) and building one (:mod:`~bnconvention.architectures.build`, torch), timm and transformers models built from a
repo's own ``config.json`` through those libraries' registries (:mod:`~bnconvention.architectures.timm_models`,
:mod:`~bnconvention.architectures.transformers_models`), the order in which a checkpoint's architecture is resolved
(:mod:`~bnconvention.architectures.resolve`), and the logits of whatever a model's forward returns
(:mod:`~bnconvention.architectures.outputs`). A factory is imported only when it is on the allowlist or named on the
user's own command line, never because untrusted metadata names it; a timm or transformers name only when it is in
the library's own registry, and remote code never."""
