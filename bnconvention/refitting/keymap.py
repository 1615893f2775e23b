"""Which model tensor each tensor of a checkpoint is: names mapped by the conventions timm and transformers use.

A checkpoint's names are the ``state_dict`` names of the module that was saved, which is not always the module the
architecture resolver builds:

* wrappers add a prefix to every name: ``module.`` (``DataParallel``/``DistributedDataParallel``, timm's EMA),
  ``_orig_mod.`` (``torch.compile``), ``model.`` (Lightning and EMA wrappers);
* transformers saves a base model (``ResNetModel``: ``embedder.…``) without the ``base_model_prefix`` its head
  models put in front (``ResNetForImageClassification``: ``resnet.embedder.…``), and strips or adds that prefix when
  it loads one into the other;
* tensors that share storage in the model (tied weights) are stored once: safetensors refuses shared tensors, and
  ``save_pretrained`` drops the duplicates.

:func:`match_keys` tries, in order, the names as they are, then each of those prefixes stripped or the base prefix
added, and takes the first mapping under which the names and shapes fit the model exactly; nothing is dropped or
left at its random initialisation. When none fits, the closest one's differences are returned, so the error says
which names are missing or unexpected (a base-model checkpoint lacks the classification head an audit needs).
Pure: names and shapes in, a mapping or the differences out.

>>> match_keys({"module.w": (2,)}, {"w": (2,)}).note
"stripped the prefix 'module.' from every tensor name"
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

WRAPPER_PREFIXES = ("module.", "_orig_mod.", "model.")
Shapes = Mapping[str, tuple[int, ...]]


@dataclass(frozen=True)
class KeyMap:
    """How a checkpoint's tensor names map onto a model's ``state_dict`` names."""

    to_model: dict[str, str]  # file name -> model name (every file tensor)
    note: str | None = None  # how the names were mapped, when they were not taken as they are
    aliases: dict[str, str] = field(default_factory=dict)  # model name the file lacks -> model name sharing storage

    def to_file(self) -> dict[str, str]:
        """Model name -> file name, for every model tensor the file stores."""
        return {model: stored for stored, model in self.to_model.items()}


@dataclass(frozen=True)
class KeyProblems:
    """Why no mapping fits: the closest one's missing, unexpected and mis-shaped names."""

    missing: list[str]
    unexpected: list[str]
    shapes: list[str]
    note: str | None = None
    # (file name, shape in the file, model name, shape in the model) of each tensor whose shapes differ
    mismatched: list[tuple[str, tuple[int, ...], str, tuple[int, ...]]] = field(default_factory=list)

    def describe(self) -> str:
        parts = []
        if self.missing:
            parts.append(f"missing from the file: {_names(self.missing)}")
        if self.unexpected:
            parts.append(f"not in the model: {_names(self.unexpected)}")
        parts.extend(self.shapes[:3])
        if len(self.shapes) > 3:
            parts.append(f"and {len(self.shapes) - 3} more shape differences")
        text = "; ".join(parts)
        return f"{text} (after the file's names were mapped: {self.note})" if self.note else text

    @property
    def size(self) -> int:
        return len(self.missing) + len(self.unexpected) + len(self.shapes)


def _names(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _candidates(names: list[str], base_prefix: str) -> list[tuple[str, str, str | None]]:
    """(strip, add, note) renamings to try, in order: as is, a prefix stripped, the base prefix added."""
    base = f"{base_prefix}." if base_prefix else ""
    found: list[tuple[str, str, str | None]] = [("", "", None)]
    for prefix in (*WRAPPER_PREFIXES, *([base] if base else [])):
        if prefix not in [c[0] for c in found] and any(n.startswith(prefix) for n in names):
            whole = all(n.startswith(prefix) for n in names)
            found.append((prefix, "", f"stripped the prefix {prefix!r} from "
                                      f"{'every tensor name' if whole else 'the names that carry it'}"))
    if base and not any(n.startswith(base) for n in names):
        found.append(("", base, f"added the base model prefix {base!r} to every tensor name"))
    return found


def _rename(name: str, strip: str, add: str) -> str:
    return add + (name[len(strip):] if strip and name.startswith(strip) else name)


def _stand_ins(targets: set[str], aliases: Mapping[str, str]) -> dict[str, str]:
    """Model names the file lacks whose storage another, stored name shares: name -> that stored name."""
    stored_groups = {aliases[t]: t for t in sorted(targets) if t in aliases}
    return {n: stored_groups[g] for n, g in aliases.items() if n not in targets and g in stored_groups}


def _problems(to_model: dict[str, str], file_shapes: Shapes, model_shapes: Shapes,
              aliases: Mapping[str, str], note: str | None) -> KeyProblems:
    targets = set(to_model.values())
    covered = _stand_ins(targets, aliases)
    missing = [n for n in model_shapes if n not in targets and n not in covered]
    unexpected = [f for f, m in to_model.items() if m not in model_shapes]
    mismatched = [(f, tuple(file_shapes[f]), m, tuple(model_shapes[m])) for f, m in to_model.items()
                  if m in model_shapes and tuple(file_shapes[f]) != tuple(model_shapes[m])]
    shapes = [f"{f!r} has shape {list(found)} in the file but {list(wanted)} in the model"
              for f, found, _, wanted in mismatched]
    if len(targets) != len(to_model):  # two file names mapped onto one model name
        unexpected += sorted(f for f, m in to_model.items() if list(to_model.values()).count(m) > 1)
    return KeyProblems(missing=missing, unexpected=unexpected, shapes=shapes, note=note, mismatched=mismatched)


def match_keys(file_shapes: Shapes, model_shapes: Shapes, *, base_prefix: str = "",
               aliases: Mapping[str, str] | None = None) -> KeyMap | KeyProblems:
    """The first renaming under which the file's names and shapes fit the model exactly, else the closest one's
    differences. ``aliases``: model name -> a key shared by the names whose tensors share storage (tied weights),
    so the file may store any one of them; ``base_prefix``: transformers' ``base_model_prefix`` of the model, if any."""
    aliases = dict(aliases or {})
    names = list(file_shapes)
    best: KeyProblems | None = None
    for strip, add, note in _candidates(names, base_prefix):
        to_model = {name: _rename(name, strip, add) for name in names}
        problems = _problems(to_model, file_shapes, model_shapes, aliases, note)
        if problems.size == 0:
            return KeyMap(to_model=to_model, note=note, aliases=_stand_ins(set(to_model.values()), aliases))
        if best is None or problems.size < best.size:
            best = problems
    if best is None:  # _candidates always yields the names as they are
        raise RuntimeError("no key mapping was tried")
    return best


__all__ = ["WRAPPER_PREFIXES", "KeyMap", "KeyProblems", "match_keys"]
