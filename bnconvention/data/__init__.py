"""Data sources an audit or a refit reads: the pools of a spec (:mod:`~bnconvention.data.pools`, which reads the
user's files through :mod:`~bnconvention.data.readers`) and the bundled digits dataset with its transforms
(:mod:`~bnconvention.data.digits`). Nothing here imports the zoo or the demo, which are consumers of it."""
