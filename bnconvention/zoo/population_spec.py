"""The population's audit spec (``population.yaml`` in the build, ``examples/audit/digits-population.yaml``).

Instance-wise forget sets by ids file: every checkpoint folder holds ``forget.txt``; the spec reads it from the
checkpoint's folder (``index_files_in: model_repo``) bound by its ``forget_ids_sha256``. One spec covers every
removal through its rules: a local census matches a rule's repo pattern against ``<removal>/<name>``, the
checkpoint's two last folders (:func:`bnconvention.audit.census.run.local_spec`). The digests are of integer ids chosen
by hash (:func:`bnconvention.zoo.population_data.forget_ids`), not of anything trained, so they are stable.
"""

from __future__ import annotations

from bnconvention.standard.naming import record_ids_sha256
from bnconvention.zoo.population_data import TASK_FILE, TASK_ID, forget_ids, noisy_digits
from bnconvention.zoo.population_plan import TWIN_REMOVAL, PopulationConfig, removal

SPEC_FILE = "population.yaml"
DEFAULT_REMOVAL = TWIN_REMOVAL

EXAMPLE_HEADER = ("# examples/audit/digits-population.yaml: the spec a build writes as population.yaml, for a\n"
                  "# population built with `bnconvention zoo build --population --out population` in the\n"
                  "# repository root.\n")

__all__ = ["SPEC_FILE", "example_spec_text", "spec_text"]


def example_spec_text() -> str:
    """The committed example: the whole population's spec, reading ``population/task.npz`` from examples/audit."""
    return spec_text(PopulationConfig(), task_path="../../population/task.npz", header=EXAMPLE_HEADER)


def _splits(key: str, indent: str) -> str:
    item = removal(key)
    digest = record_ids_sha256(forget_ids(noisy_digits(), ratio=item.ratio, forget_class=item.forget_class))
    return (f"{indent}forget_index: forget.txt\n{indent}index_files_in: model_repo\n"
            f"{indent}forget_ids_sha256: {digest}\n")


PROVENANCE_REMOVAL = "r10"
DIAGNOSTICS_REMOVAL = "r05"  # the encoder-level diagnostics on its seed-0 released checkpoints


def _rules(config: PopulationConfig) -> str:
    keys = [key for key in config.removals if key != DEFAULT_REMOVAL]
    lines = ["# Each removal's checkpoints (folders <removal>/<name>) read their own forget set.\n", "rules:\n"]
    for key in keys:
        lines.append(f"  - name: removal {key}\n    match:\n      repo: \"{key}/*\"\n    splits:\n")
        lines.append(_splits(key, " " * 6))
    if PROVENANCE_REMOVAL in config.removals:
        lines.append(_provenance_rule(PROVENANCE_REMOVAL, config))
    if DIAGNOSTICS_REMOVAL in config.removals and config.seeds:
        lines.append(_diagnostics_rule(DIAGNOSTICS_REMOVAL, config.seeds[0], config))
    return "".join(lines) + "\n" if len(lines) > 2 else ""


def _diagnostics_rule(key: str, seed: int, config: PopulationConfig) -> str:
    """The encoder-level diagnostics (linear probe with its BN/NC residuals against the sibling retrain, the
    membership attack) on one removal's unlearned checkpoints of one seed: the census's encoder table on a subset."""
    listed = ", ".join(f'"{key}/{key}-s{seed}-{family}-*"' for family in config.families)
    reference = '"../{seed_stem}-retrain/{seed_stem}-retrain.safetensors"'
    return (f"  # Encoder-level diagnostics on removal {key}, seed {seed}: is the forgetting in the encoder or only\n"
            "  # in the statistics? (linear probe against the sibling retrain, membership attack)\n"
            f"  - name: diagnostics on {key} seed {seed}\n    match:\n      repo: [{listed}]\n"
            f"    diagnostics:\n      reference:\n        path: {reference}\n"
            "      linear_probe: {per_class: 20}\n      membership_inference: {}\n")


def _provenance_rule(key: str, config: PopulationConfig) -> str:
    """The provenance contrast (both arms, two draws, each with its null swap) on one removal's released
    checkpoints (not the twins): the census's staleness / provenance reading, at about a fifth of its cost."""
    patterns = [f"{key}/*-{role}" for role in ("base", "retrain")]
    patterns += [f"{key}/*-{family}-*" for family in config.families]
    listed = ", ".join(f'"{p}"' for p in patterns)
    return (f"  # The provenance contrast on removal {key}: exchange retained records for removed ones in a fixed\n"
            "  # pool (deployment arm: the removed share; ceiling: every removed record), against a null swap.\n"
            f"  - name: provenance on {key}\n    match:\n      repo: [{listed}]\n"
            "    provenance:\n      pool_size: 256\n      draws: 2\n")


def spec_text(config: PopulationConfig, *, task_path: str = TASK_FILE, header: str = "") -> str:
    """The spec's YAML text; ``task_path`` is the task file relative to where the spec is saved."""
    default = DEFAULT_REMOVAL if DEFAULT_REMOVAL in config.removals else config.removals[0]
    return f"""{header}# Audit spec for the population (bnconvention zoo build --population). Run:
#   bnconvention census <population folder> --spec <this file> --out census-population
spec_version: "1.0"
kind: audit_spec
name: digits-population

# The noisy digits the population was trained on (written by the build; nothing downloaded).
dataset:
  kind: npz
  path: {task_path}
  dataset_id: {TASK_ID}
  ids_key: ids
  test_key: is_test

# Forget = the ids in the checkpoint's forget.txt (removal {default} unless a rule below says otherwise),
# retain = the other train records, test = the test split.
splits:
{_splits(default, "  ")}
{_rules(config)}cells: [df, dr, dt]

# The paper's criterion for instance-wise removal: forget accuracy within 5 points of test accuracy.
criteria:
  - "abs(df - dt) <= 0.05"
headline: df

# Published cells: the card's model-index, written by the producer at release time.
published_source: model_index
anchor_tolerance: 0.02

margin_pp: 1.2
replicates: 10
fdr_q: 0.05
seed: 0

refit:
  rule: exact
  transform: train
  pool_size: 256
  batch_size: 128

staleness: true

# Ten test images are the headline; the curve adds budgets 1-100 from the test split, retained records only and
# noise (two draws each), for the report's recoverability curve.
recoverability:
  images: 10
  source: test
  curve: {{seeds: 2}}

# Known-answer controls, in their own table and outside the Benjamini-Yekutieli family: the retrain reference
# (never saw the forget set) and the no-removal base (whose refit pool lacks the forget set: where it does not
# hold, the table says so).
controls:
  checkpoints:
    "*-retrain": retrain reference
    "*-base": no-removal base
"""
