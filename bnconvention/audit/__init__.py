"""The auditor's instrument: refit cells with replicate-backed decisions, staleness and recoverability diagnostics
(docs/statistics.md), for one checkpoint (:func:`bnconvention.audit.run.audit_checkpoint`) or a population
(:func:`bnconvention.audit.census.run_census`).

Docstrings here cite the two papers the design follows by author (Shen and Li; Kalani et al.): see
docs/statistics.md#references.

Its sub-packages, in the order a census runs (each imports only its own and the ones above it in this list;
``tests/test_architecture.py`` enforces it, and code outside the audit imports a sub-package, never its modules):

* ``core`` — what an audit returns, its file names and JSON writer;
* ``spec`` — the audit spec, its expressions and rules;
* ``measure`` — data, checkpoint, published cells, evaluation, decision statistics and decisions;
* ``scales`` — the activation scales of a quantized checkpoint;
* ``diagnostics`` — staleness band, mechanism, provenance, recoverability, encoder-level probes;
* ``run`` — one audit: its stages, stores, sweeps and reproduction;
* ``population`` — the readings of many audits: families, controls, ledger, summary, story;
* ``render`` — Markdown, plots and one audit's output folder;
* ``census`` — a census of a population: discovery, preregistration, the run.

>>> from bnconvention.audit.spec import load_spec                                   # doctest: +SKIP
>>> from bnconvention.audit.run import audit_checkpoint                             # doctest: +SKIP
>>> from bnconvention.audit.render import write_audit_outputs                       # doctest: +SKIP
>>> result = audit_checkpoint("zoo/bn-badteacher-eval.safetensors", load_spec("examples/audit/digits-zoo.yaml"))
...                                                                                  # doctest: +SKIP
>>> result.annotation.reporting_line                                                 # doctest: +SKIP
'deployed state as shipped; refit on the retained split under the training transform (exact rule), forget ...'
"""

__all__: list[str] = []
