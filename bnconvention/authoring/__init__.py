"""The author's side: observe a run, declare its fitting convention, stamp it into the weights and the card,
inspect a release, publish it.

- :mod:`~bnconvention.authoring.recorder` / :mod:`~bnconvention.authoring.observation`: what the BatchNorm
  buffers went through during training or unlearning, as observed;
- :mod:`~bnconvention.authoring.declaration` / :mod:`~bnconvention.authoring.deployed_state` /
  :mod:`~bnconvention.authoring.transforms`: building a declaration record;
- :mod:`~bnconvention.authoring.stamp` / :mod:`~bnconvention.authoring.card_stamp`: writing it into a safetensors
  header (tensor bytes untouched) and a model card (:mod:`~bnconvention.authoring.card_edit`: the surgical card
  edit; :mod:`~bnconvention.authoring.card_refit`: the refit results an audit writes back);
- :mod:`~bnconvention.authoring.inspection`, :mod:`~bnconvention.authoring.publish`: reading a release back, and
  stamp + validate + upload.
"""
