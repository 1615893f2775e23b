"""File formats and the bytes-level rules the standard builds on; no torch at import time.

- :mod:`~bnconvention.formats.canonical`: canonical JSON (RFC 8785) and strict JSON parsing;
- :mod:`~bnconvention.formats.safetensors_header` / :mod:`~bnconvention.formats.safetensors_index`: safetensors
  headers and shard indexes, checked as the reference parser checks them;
- :mod:`~bnconvention.formats.card`: a model card's YAML front matter, loaded safely;
- :mod:`~bnconvention.formats.digests`: the ``bnconvention-tensors/1`` digests of tensors in files and models;
- :mod:`~bnconvention.formats.atomic`: crash-safe writes (the old or the complete new file, never half of one);
- :mod:`~bnconvention.formats.text`: counted nouns and signed shifts in human-readable output;
- :mod:`~bnconvention.formats.json_types`: ``JsonObject``, for JSON that is someone else's, kept as written.

Nothing here imports a layer above it (standard, validation, authoring, refit, audit, hub, cli).
"""
