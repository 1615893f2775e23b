"""Data sources an audit or a refit reads: the pools of a spec (:mod:`~bnconvention.data.pools`; the spec of a
source in :mod:`~bnconvention.data.source`), read from the user's files (:mod:`~bnconvention.data.readers`), from
Hugging Face ``datasets`` (:mod:`~bnconvention.data.hf`) or torchvision roots
(:mod:`~bnconvention.data.torchvision_roots`), all through one image rule (:mod:`~bnconvention.data.images`);
index files bound by their digest (:mod:`~bnconvention.data.ids`); transforms declared by a model repo
(:mod:`~bnconvention.data.repo_transforms`); and the bundled digits dataset with its transforms
(:mod:`~bnconvention.data.digits`). Nothing here imports the zoo, the demo, the audit or the hub tooling, which are
consumers of it."""
