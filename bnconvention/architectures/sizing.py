"""An architecture's sizes checked against the weights before anything is allocated.

A repo's ``config.json`` sizes the model it names: timm's ``num_classes``, transformers' ``hidden_sizes``,
``num_labels``, ``embed_dim``, ... Built as it is, a hostile or mistaken config allocates whatever it says before
the tensors are compared (``num_classes`` 5e6 on a small timm ResNet: 2.8 GB and 12 s before the mismatch;
``num_classes`` 1e12: a 384 TB request and a raw allocator message). So :func:`build_fitting`:

1. builds the model without storage, on PyTorch's meta device (shapes only; every allowlisted architecture builds
   there except torchvision's RegNets, which compute their widths with tensors; those are built with only their
   parameters on the meta device, as ``accelerate.init_empty_weights`` does);
2. compares its ``state_dict`` with the safetensors header, under the name mapping the load uses
   (:func:`bnconvention.refitting.weights.fit_model`: names, shapes, and so the number of values), and refuses a
   difference in one line; when a config's field gives the differing size, the line names the file and field
   (``config.json: num_classes 5000000 gives 'fc.weight' [5000000, 96] but the weights hold [10, 96]``);
3. only then builds the model for real: its tensors are now the file's, whose sizes the header parser has already
   checked against the file's length, so what is allocated is bounded by the download. An allocation that still
   fails (a machine smaller than the checkpoint) is one line naming the config, never the allocator's message.

A factory that cannot be built without storage at all is built for real, as before (step 3's message still
applies).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from bnconvention.architectures.build import build_model
from bnconvention.architectures.resolve import Architecture
from bnconvention.errors import ArchitectureConfigError, CheckpointMismatchError, FactoryCallError
from bnconvention.formats.checkpoint_files import CheckpointFiles
from bnconvention.refitting.keymap import KeyProblems, match_keys
from bnconvention.refitting.weights import fit_model, storage_aliases

_ALLOCATION = re.compile(r"can't allocate memory|out of memory|cannot allocate memory|std::bad_alloc", re.IGNORECASE)
_BYTES = re.compile(r"allocate (\d+) bytes")


def allocation_failure(exc: BaseException) -> BaseException | None:
    """The allocator's error in ``exc``'s chain (``MemoryError``, torch's out-of-memory, the CPU allocator's
    ``RuntimeError``), or None when the failure is something else."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MemoryError) or type(current).__name__ == "OutOfMemoryError" or (
                isinstance(current, RuntimeError) and _ALLOCATION.search(str(current))):
            return current
        current = current.__cause__ or current.__context__
    return None


def _bytes_text(count: int) -> str:
    size = float(count)
    for unit in ("bytes", "KB", "MB", "GB", "TB", "PB"):
        if size < 1000 or unit == "PB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{count} bytes"


def _where(choice: Architecture) -> str:
    return "the spec's model section" if choice.source == "spec" else choice.source


def allocation_refusal(choice: Architecture, failure: BaseException) -> ArchitectureConfigError:
    """One line for an allocation that failed while ``choice`` was built: the config that sized it, not the
    allocator's message."""
    asked = _BYTES.search(str(failure))
    needed = f" (it asked for {_bytes_text(int(asked.group(1)))} at once)" if asked else ""
    return ArchitectureConfigError(
        f"{_where(choice)}: building factory {choice.factory!r} with its arguments needs more memory than this "
        f"process can have{needed}; check the sizes it sets (classes, widths, image size) against the weights",
        source=None if choice.source == "spec" else choice.source)


@contextlib.contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Every parameter registered while inside goes to the meta device at once (buffers stay where they are made):
    for factories that compute with tensors while they build, which the meta device cannot."""
    register = torch.nn.Module.register_parameter

    def on_meta(module: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None and not param.is_meta:
            registered = module._parameters[name]
            cls = type(registered) if registered is not None else torch.nn.Parameter
            module._parameters[name] = cls(param.to("meta"), requires_grad=param.requires_grad)

    torch.nn.Module.register_parameter = on_meta  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register  # type: ignore[method-assign]


def build_skeleton(choice: Architecture) -> torch.nn.Module | None:
    """The architecture with no storage behind its tensors (see the module docstring), or None when the factory
    cannot be built that way. An allocation failure on the way is refused (:func:`allocation_refusal`)."""


    source = None if choice.source == "spec" else choice.source
    failures: list[BaseException] = []
    for context in (torch.device("meta"), _parameters_on_meta()):
        try:
            with context:
                return build_model(choice.factory, choice.kwargs, source=source)
        except FactoryCallError as exc:
            failures.append(exc)
    failure = next((f for f in map(allocation_failure, failures) if f is not None), None)
    if failure is not None:
        raise allocation_refusal(choice, failure) from failures[-1]
    return None


def _values(model: torch.nn.Module) -> int:
    return sum(tensor.numel() for tensor in model.state_dict().values())


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _holds(value: Any, sizes: set[int]) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value in sizes
    if isinstance(value, list):
        return any(_holds(item, sizes) for item in value)
    return False


def sizing_field(kwargs: Mapping[str, Any], model_shape: tuple[int, ...], file_shape: tuple[int, ...]
                 ) -> str | None:
    """The first argument whose value (an integer, or a list holding one) is a size the model's shape has and the
    file's does not, or None.

    >>> sizing_field({"in_chans": 3, "num_classes": 5000000}, (5000000, 96), (10, 96))
    'num_classes'
    >>> sizing_field({"hidden_sizes": [8, 1000000]}, (1000000, 8, 3, 3), (16, 8, 3, 3))
    'hidden_sizes'
    """
    if len(model_shape) == len(file_shape):
        sizes = {m for m, f in zip(model_shape, file_shape, strict=True) if m != f}
    else:
        sizes = set(model_shape) - set(file_shape)
    sizes.discard(0)
    sizes.discard(1)
    return next((key for key, value in kwargs.items() if _holds(value, sizes)), None)


def check_skeleton(skeleton: torch.nn.Module, files: CheckpointFiles, choice: Architecture) -> None:
    """Refuse, in one line, a checkpoint whose tensors do not fit the model ``choice`` configures (built without
    storage): when the architecture comes from a file and one of its fields gives the differing size, naming the
    file and field (:class:`~bnconvention.errors.ArchitectureConfigError`), else the differences
    (:class:`~bnconvention.errors.CheckpointMismatchError`, as a load would)."""
    factory = f"factory {choice.factory!r} (from {choice.source})"
    try:
        fit_model(skeleton, files, factory=factory)
    except CheckpointMismatchError as exc:
        file_shapes = {name: tuple(info.shape) for name, info in files.tensors().items()}
        found = match_keys(file_shapes, {name: tuple(t.shape) for name, t in skeleton.state_dict().items()},
                           base_prefix=str(getattr(skeleton, "base_model_prefix", "") or ""),
                           aliases=storage_aliases(skeleton))
        if not isinstance(found, KeyProblems) or choice.source == "spec":  # the user's own spec: the differences
            raise
        # the weight before its bias: the tensor of most dimensions shows the size best
        for stored, in_file, name, in_model in sorted(found.mismatched, key=lambda item: -len(item[3])):
            field = sizing_field(choice.kwargs, in_model, in_file)
            if field is None:
                continue
            where = _where(choice)
            tensor = repr(name) if name == stored else f"{name!r} ({stored!r} in the file)"
            raise ArchitectureConfigError(
                f"{where}: {field} {_short(choice.kwargs[field])} gives {tensor} {list(in_model)} but the weights "
                f"hold {list(in_file)}; the model it configures has {_values(skeleton):,} values, the weights "
                f"{sum(_numel(shape) for shape in file_shapes.values()):,} (nothing was built); fix {field} or name "
                "the architecture in the spec's model section", source=where) from exc
        raise


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def build_sized(choice: Architecture) -> torch.nn.Module:
    """The architecture built for real (random initialisation, eval mode); an allocation failure is one line
    naming the config (:func:`allocation_refusal`)."""
    try:
        model = build_model(choice.factory, choice.kwargs,
                            source=None if choice.source == "spec" else choice.source)
    except (FactoryCallError, MemoryError) as exc:
        failure = allocation_failure(exc)
        if failure is None:
            raise
        raise allocation_refusal(choice, failure) from exc
    model.eval()
    return model


def build_fitting(choice: Architecture, files: CheckpointFiles) -> torch.nn.Module:
    """The architecture ``choice`` names, built for real only once its tensors are known to fit ``files`` (see
    the module docstring)."""
    skeleton = build_skeleton(choice)
    if skeleton is not None:
        check_skeleton(skeleton, files, choice)
        del skeleton
    return build_sized(choice)


__all__ = ["allocation_failure", "allocation_refusal", "build_fitting", "build_sized", "build_skeleton",
           "check_skeleton", "sizing_field"]
