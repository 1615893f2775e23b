"""The table of ``bnconvention``'s commands: name -> the module that registers it, its one-line summary and the
extra it needs.

It is data, so that ``bnconvention --help`` lists every command without importing one command module, and
``bnconvention validate ...`` imports the validate command's module only (:func:`bnconvention.cli.main.build_parser`
imports a command's module with :mod:`importlib` when that command is parsed). A command module may then import
its machinery, torch included, at its top. The summary is also the ``help=`` its module's parser is registered
with, so the two cannot drift; ``extra`` is the ``bnconvention[...]`` a missing dependency of the command names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    module: str
    summary: str
    extra: str | None = None  # the extra the whole command needs (subcommands mark theirs with extras.needs_extra)


# Order is the order of ``bnconvention --help``. Commands one module registers together are adjacent (sign, verify).
COMMANDS: dict[str, Command] = {
    # pipelines
    "validate": Command("bnconvention.cli.validate_cmd",
                        "check records, weights files, model cards and releases offline"),
    "schema": Command("bnconvention.cli.schema_cmd", "print the JSON Schema of the standard"),
    "migrate": Command("bnconvention.cli.migrate_cmd",
                       "upgrade an older record or a card's bnconvention block to the latest spec version"),
    # authors
    "declare": Command("bnconvention.cli.declare_cmd", "build a declaration record for a weights file", "refit"),
    "stamp": Command("bnconvention.cli.stamp_cmd", "stamp a record into a safetensors header (and a model card)"),
    "card": Command("bnconvention.cli.card_cmd", "add or update the bnconvention block and section of a model card"),
    "inspect": Command("bnconvention.cli.inspect_cmd", "show what a weights file, card or release declares"),
    "publish": Command("bnconvention.cli.publish_cmd", "stamp, validate and upload a release folder to the Hub"),
    "push-to-hub": Command("bnconvention.cli.push_to_hub_cmd",
                           "push a library's saved folder to the Hub with the record stamped, in one commit"),
    "sign": Command("bnconvention.cli.sign_cmd",
                    "sign a release, an annotation or a record (OpenSSF model signing, offline key)", "provenance"),
    "verify": Command("bnconvention.cli.sign_cmd", "verify a signature and the records' digests against the weights",
                      "provenance"),
    "export": Command("bnconvention.cli.export_cmd",
                      "export a release's record as an SPDX 3 AI package or a CycloneDX model card", "provenance"),
    # auditors
    "refit": Command("bnconvention.cli.refit_cmd",
                     "refit a weights file's BatchNorm running statistics on a pool", "refit"),
    "refit-scales": Command("bnconvention.cli.refit_scales_cmd",
                            "recalibrate a quantized model's activation scales on a pool, at bit-identical weights",
                            "refit"),
    "audit": Command("bnconvention.cli.audit_cmd",
                     "refit a checkpoint's BatchNorm statistics on R replicates and report every cell shipped vs "
                     "refit", "audit"),
    "census": Command("bnconvention.cli.census_cmd",
                      "audit many checkpoints and count displaced cells and verdict flips (Benjamini-Yekutieli)",
                      "audit"),
    "reproduce": Command("bnconvention.cli.reproduce_cmd",
                         "re-run the audit a refit annotation records and check every cell, decision and flip comes "
                         "back", "audit"),
    "hub": Command("bnconvention.cli.hub_cmd",
                   "crawl a Hub organisation: census, audit, push annotations, validate, publish"),
    # offline infrastructure
    "examples": Command("bnconvention.cli.examples_cmd",
                        "write the examples the docs use: the digits-zoo audit spec, good and broken releases"),
    "zoo": Command("bnconvention.cli.zoo_cmd",
                   "build the digits model zoo (BN and GroupNorm ConvNets, trained and unlearned)"),
    "hubserver": Command("bnconvention.cli.hubserver_cmd",
                         "serve a local Hugging Face Hub-compatible API from a directory"),
    "demo": Command("bnconvention.cli.demo_cmd",
                    "the whole story offline: zoo, local Hub organisation, census, audits, pull requests, report",
                    "audit"),
}


def summary(name: str) -> str:
    """The one-line ``help=`` of command ``name`` (its module registers its parser with it)."""
    return COMMANDS[name].summary


__all__ = ["COMMANDS", "Command", "summary"]
