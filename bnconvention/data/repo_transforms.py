"""Transforms ``from_repo``: the preprocessing a model repo's own files declare, built by the library that wrote them.

* timm: ``config.json`` with a ``pretrained_cfg`` mapping (what ``timm.models.push_to_hf_hub`` writes). Its data
  keys (``input_size``, ``interpolation``, ``mean``, ``std``, ``crop_pct``, ``crop_mode``) are checked, then
  ``timm.data.resolve_data_config(pretrained_cfg=...)`` and ``timm.data.create_transform(..., is_training=...)``
  give the train variant (random resized crop, flip, colour jitter) and the eval variant (resize, centre crop) at
  the train input size (``use_test_size=False``, as ``resolve_data_config({}, model=m)``). Both are described step
  by step by :func:`bnconvention.authoring.transforms.describe_transform`.
* transformers: ``preprocessor_config.json``. Its ``image_processor_type`` must be one of the image processors in
  transformers' own auto mapping; that class (never a class named by ``auto_map``, never ``trust_remote_code``) is
  built with ``from_dict``. An image processor is evaluation preprocessing: there is no train variant, so a refit
  under the train transform is refused with a one-line error naming ``refit.transform``.

When a repo has both, the timm ``pretrained_cfg`` is used. The files are untrusted metadata: read with the strict
JSON loader and a size limit, numbers checked, and only names the libraries' registries know are used. The work
they size is bounded before any image is touched (docs/quickstart-auditor.md#the-specs-data-section),
from the file's numbers alone (:class:`SizePlan`, nothing is run to find out):

* every side the transform resizes an image to is at most :data:`MAX_RESIZE_SIDE` and every output side at most
  :data:`MAX_SIDE` (timm resizes to ``input_size / crop_pct`` before its centre crop: ``crop_pct`` 0.05 at 2048
  would be 40960 pixels a side);
* against the records it is applied to: a record is enlarged at most :data:`MAX_UPSCALE` times a side (a 16 px
  record resized to 2048 is refused), checked when the audit binds the dataset and again on every batch;
* a batch: a transformers image processor holds a batch's resized images at once, so it is given sub-batches of at
  most :data:`MAX_BATCH_PIXELS` pixels; a batch whose outputs alone are over that budget is refused (lower the
  spec's batch sizes).

Each refusal is one :class:`~bnconvention.errors.UntrustedInputError` naming the file and its fields.

The pipelines take PIL images, as they do when a model is trained and evaluated. A batch of prepared images
(float N×C×H×W in [0, 1], decoded from 8-bit files) is turned back into 8-bit PIL images (exact for decoded
images), transformed one by one and stacked. Random steps draw from one seed per batch taken from the caller's
generator (torch's and Python's RNGs are seeded inside and restored after), so a seeded refit is reproducible.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from PIL import Image

from bnconvention.authoring.declaration import make_transform
from bnconvention.authoring.transforms import describe_transform
from bnconvention.errors import UntrustedInputError, UsageError
from bnconvention.formats.canonical import canonical_json, loads_strict
from bnconvention.standard.models import Transform, TransformMode

# timm and transformers are optional extras (bnconvention[timm], [transformers]): imported inside the functions that
# read a repo's transform through them.

CONFIG_NAME = "config.json"
PREPROCESSOR_NAME = "preprocessor_config.json"
MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_SIDE = 2048  # largest output side of a repo's transform
MAX_RESIZE_SIDE = 4096  # largest side a repo's transform may resize an image to on the way
MAX_UPSCALE = 32  # a record's longer side may be enlarged at most this many times
# pixels a batch holds at once (134M: 512 images of 512×512): a repo's transform's outputs, and the full-size
# images being decoded (one at a time, so an image over it is refused: bnconvention.data.images.ImageBudget)
MAX_BATCH_PIXELS = 2**27
TIMM_DEFAULT_CROP_PCT = 0.875  # timm.data.constants.DEFAULT_CROP_PCT, what timm uses when crop_pct is not given
TIMM_DATA_KEYS = ("input_size", "interpolation", "mean", "std", "crop_pct", "crop_mode")
TIMM_INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "box", "hamming", "lanczos")
TIMM_CROP_MODES = ("center", "squash", "border")

__all__ = ["MAX_BATCH_PIXELS", "MAX_RESIZE_SIDE", "MAX_SIDE", "MAX_UPSCALE", "DescribedTransform", "RepoTransforms",
           "SizePlan", "after_decode_resize", "timm_transforms", "transformers_transforms", "transforms_from_repo"]


@dataclass(frozen=True)
class SizePlan:
    """How large the images a repo's transform makes are, read from its file alone (nothing is run).

    ``resize``: the side the transform resizes to (the shorter side when ``keep_ratio``, then the longer follows
    the record's aspect ratio, up to ``cap``), None when it does not resize; ``output``: the output's (height,
    width), None when it follows the record. ``fields`` names the file's fields that set them, for messages."""

    source: str
    fields: str
    resize: int | None
    keep_ratio: bool = False
    cap: int | None = None
    output: tuple[int, int] | None = None

    def largest_side(self, height: int, width: int) -> int:
        """The largest side of any image the transform makes from a ``height``×``width`` record."""
        side = max(height, width)
        if self.resize is not None:
            side = self.resize
            if self.keep_ratio:
                side = math.ceil(self.resize * max(height, width) / max(1, min(height, width)))
                side = min(side, self.cap) if self.cap else side
        return max(side, *(self.output or (0,)))

    def output_pixels(self, height: int, width: int) -> int:
        """Pixels of one output image for a ``height``×``width`` record."""
        if self.output is not None:
            return self.output[0] * self.output[1]
        side = self.largest_side(height, width)
        return side * side

    def check(self) -> None:
        """Refuse a file whose sizes are over the limits, whatever the records (no record is needed)."""
        if self.resize is not None and self.resize > MAX_RESIZE_SIDE:
            raise UntrustedInputError(
                f"{self.source}: {self.fields} resizes every image to {self.resize} pixels a side, over the "
                f"{MAX_RESIZE_SIDE}-pixel limit of a resize in a repo's transform", source=self.source)
        if self.output is not None and max(self.output) > MAX_SIDE:
            raise UntrustedInputError(
                f"{self.source}: {self.fields} makes {self.output[0]}×{self.output[1]} images; images larger than "
                f"{MAX_SIDE} pixels a side are refused", source=self.source)

    def check_records(self, height: int, width: int, *, count: int | None = None) -> None:
        """Refuse applying the transform to ``height``×``width`` records (and, with ``count``, to a batch of that
        many) when the images it would make are over the limits; nothing is allocated."""
        largest = self.largest_side(height, width)
        if largest > MAX_RESIZE_SIDE or largest > MAX_UPSCALE * max(height, width):
            times = largest / max(height, width)
            raise UntrustedInputError(
                f"{self.source}: {self.fields} resizes each {height}×{width} record to {largest} pixels a side "
                f"({times:.0f} times its size); a repo's transform may enlarge a record at most {MAX_UPSCALE} times "
                f"and to at most {MAX_RESIZE_SIDE} pixels a side (use transform: dataset, or records of a size "
                "the model was made for)", source=self.source)
        pixels = 0 if count is None else count * self.output_pixels(height, width)
        if pixels > MAX_BATCH_PIXELS:
            raise UntrustedInputError(
                f"{self.source}: {self.fields} makes a batch of {count} records {pixels:,} pixels, over the "
                f"{MAX_BATCH_PIXELS:,}-pixel budget of a batch; lower the spec's batch sizes (refit.batch_size, "
                "eval_batch_size)", source=self.source)

    def chunk(self, height: int, width: int) -> int:
        """How many records one pass of the transform may hold at once within :data:`MAX_BATCH_PIXELS`."""
        side = self.largest_side(height, width)
        return max(1, MAX_BATCH_PIXELS // max(1, side * side))


@dataclass(frozen=True)
class DescribedTransform:
    """A batch transform and its record in the standard: ``transform(x, generator=g)``, ``.mode``, ``.standard()``."""

    record: Transform
    fn: Callable[[torch.Tensor, torch.Generator | None], torch.Tensor] = field(repr=False, compare=False)
    plan: SizePlan | None = field(default=None, repr=False, compare=False)

    @property
    def mode(self) -> TransformMode:
        return self.record.mode

    def standard(self) -> Transform:
        return self.record

    def __call__(self, x: torch.Tensor, *, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.fn(x, generator)


@dataclass(frozen=True)
class RepoTransforms:
    """The repo's transforms: ``train`` is None where the repo declares evaluation preprocessing only."""

    library: Literal["timm", "transformers"]
    source: str
    eval: DescribedTransform
    train: DescribedTransform | None
    plans: tuple[SizePlan, ...] = field(default=(), compare=False)  # the sizes of eval (and train), for checks

    def check_records(self, height: int, width: int) -> None:
        """Refuse applying these transforms to ``height``×``width`` records (:meth:`SizePlan.check_records`)."""
        for plan in self.plans:
            plan.check_records(height, width)


def after_decode_resize(transform: DescribedTransform, resize: str | None) -> DescribedTransform:
    """The transform with the dataset's decode-time resize recorded as its first step (it ran before it)."""
    if resize is None:
        return transform
    record, described = transform.record, transform.record.description
    normalize = described.normalize
    first = f"bnconvention.data: images resized to {resize} when decoded"
    updated = make_transform(
        mode=record.mode, reference=record.reference, resize="; ".join(filter(None, [first, described.resize])),
        crop=described.crop, augmentations=described.augmentations,
        normalize_mean=normalize.mean if normalize else None, normalize_std=normalize.std if normalize else None,
        steps=[first, *(described.steps or [])])
    return DescribedTransform(record=updated, fn=transform.fn, plan=transform.plan)


def transforms_from_repo(repo_dir: Path | str, *, repo_name: str | None = None) -> RepoTransforms:
    """The transforms a downloaded model repo folder declares (``config.json`` of timm, else
    ``preprocessor_config.json`` of transformers). ``repo_name`` (e.g. the repo id) names the files in messages
    instead of the local folder."""
    folder = Path(repo_dir)
    label = repo_name or str(folder)
    config_path = folder / CONFIG_NAME
    if config_path.is_file():
        config = _read_json(config_path, source=f"{label}/{CONFIG_NAME}")
        if "pretrained_cfg" in config:
            return timm_transforms(config, source=f"{label}/{CONFIG_NAME}")
    processor_path = folder / PREPROCESSOR_NAME
    if processor_path.is_file():
        return transformers_transforms(_read_json(processor_path, source=f"{label}/{PREPROCESSOR_NAME}"),
                                       source=f"{label}/{PREPROCESSOR_NAME}")
    raise UsageError(f"{label}: transform from_repo needs a timm {CONFIG_NAME} with pretrained_cfg or a "
                     f"transformers {PREPROCESSOR_NAME}; the repo has neither (use transform: dataset)")


def _read_json(path: Path, *, source: str) -> dict[str, Any]:
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise UntrustedInputError(f"{source}: {size} bytes, over the {MAX_CONFIG_BYTES}-byte limit", source=source)
    value = loads_strict(path.read_bytes(), source=source)
    if not isinstance(value, dict):
        raise UntrustedInputError(f"{source}: a JSON object is expected, found {type(value).__name__}",
                                  source=source)
    return value


# --- timm -----------------------------------------------------------------------------------------------------------


def timm_transforms(config: Mapping[str, Any], *, source: str = CONFIG_NAME) -> RepoTransforms:
    """Train and eval transforms from a timm ``config.json``'s ``pretrained_cfg``."""
    import timm
    from timm.data import create_transform, resolve_data_config


    data_config = resolve_data_config(pretrained_cfg=timm_data_config(config.get("pretrained_cfg"), source=source))
    channels = int(data_config["input_size"][0])
    plans = _timm_plans(data_config, source=source)
    for plan in plans.values():
        plan.check()
    reference = f"{source} pretrained_cfg (timm {timm.__version__} resolve_data_config + create_transform)"
    built: dict[str, DescribedTransform] = {}
    modes: tuple[TransformMode, ...] = ("train", "eval")
    for mode in modes:
        try:
            pipeline = create_transform(**data_config, is_training=mode == "train")
        except Exception as exc:  # timm asserts and raises ValueError/KeyError on odd values
            raise UntrustedInputError(f"{source}: timm cannot build its {mode} transform ({exc})",
                                      source=source) from exc
        record = describe_transform(pipeline, mode=mode, reference=reference)
        built[mode] = DescribedTransform(record=record, fn=_per_image(pipeline, channels=channels,
                                                                      random_steps=mode == "train",
                                                                      plan=plans[mode]), plan=plans[mode])
    return RepoTransforms(library="timm", source=source, eval=built["eval"], train=built["train"],
                          plans=(plans["eval"], plans["train"]))


def _timm_plans(data_config: Mapping[str, Any], *, source: str) -> dict[str, SizePlan]:
    """The sizes of timm's eval transform (resize to ``input_size / crop_pct``, keeping the aspect ratio except
    with ``crop_mode: squash``, then a centre crop to ``input_size``) and of its train transform (a random crop of
    the record resized to ``input_size``), as ``transforms_imagenet_eval``/``_train`` compute them."""
    height, width = (int(v) for v in data_config["input_size"][1:])
    crop_pct = data_config.get("crop_pct") or TIMM_DEFAULT_CROP_PCT
    fields = f"pretrained_cfg.input_size {canonical_json(list(data_config['input_size']))} with crop_pct {crop_pct}"
    scale = max(math.floor(height / crop_pct), math.floor(width / crop_pct))
    return {"eval": SizePlan(source=source, fields=fields, resize=scale,
                             keep_ratio=data_config.get("crop_mode") != "squash", output=(height, width)),
            "train": SizePlan(source=source, fields=fields.split(" with ")[0], resize=max(height, width),
                              output=(height, width))}


def timm_data_config(pretrained_cfg: Any, *, source: str) -> dict[str, Any]:
    """The data keys of a ``pretrained_cfg``, checked (types, ranges, known names); other keys are not read."""
    if not isinstance(pretrained_cfg, dict) or not pretrained_cfg:
        raise UntrustedInputError(f"{source}: pretrained_cfg must be a non-empty JSON object", source=source)
    checked: dict[str, Any] = {}
    where = f"{source}: pretrained_cfg"
    size = pretrained_cfg.get("input_size")
    if size is not None:
        if not (isinstance(size, list) and len(size) == 3 and all(_is_int(v) for v in size)
                and size[0] in (1, 3) and all(0 < v <= MAX_SIDE for v in size[1:])):
            raise UntrustedInputError(f"{where}.input_size must be [channels (1 or 3), height, width] with sides "
                                      f"1..{MAX_SIDE}, found {canonical_json(size)}", source=source)
        checked["input_size"] = tuple(size)
    channels = checked.get("input_size", (3,))[0]
    for key, names in (("interpolation", TIMM_INTERPOLATIONS), ("crop_mode", TIMM_CROP_MODES)):
        value = pretrained_cfg.get(key)
        if value is not None:
            if value not in names:
                raise UntrustedInputError(f"{where}.{key} {value!r} is not one of {', '.join(names)}", source=source)
            checked[key] = value
    for key in ("mean", "std"):
        value = pretrained_cfg.get(key)
        if value is not None:
            if not (isinstance(value, list) and len(value) == channels and all(_is_number(v) for v in value)
                    and (key == "mean" or all(v > 0 for v in value))):
                raise UntrustedInputError(f"{where}.{key} must be {channels} finite numbers"
                                          f"{' > 0' if key == 'std' else ''}, found {canonical_json(value)}",
                                          source=source)
            checked[key] = tuple(float(v) for v in value)
    crop_pct = pretrained_cfg.get("crop_pct")
    if crop_pct is not None:
        if not (_is_number(crop_pct) and 0.05 <= crop_pct <= 2.0):
            raise UntrustedInputError(f"{where}.crop_pct must be a number in [0.05, 2], found {crop_pct!r}",
                                      source=source)
        checked["crop_pct"] = float(crop_pct)
    if not checked:
        raise UntrustedInputError(f"{where} has none of the data keys {', '.join(TIMM_DATA_KEYS)}", source=source)
    return checked


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# --- transformers ---------------------------------------------------------------------------------------------------


def known_image_processors() -> frozenset[str]:
    """Every image-processor class name in transformers' own auto mapping (torchvision and PIL backends)."""
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    return frozenset(name for entry in IMAGE_PROCESSOR_MAPPING_NAMES.values()
                     for name in (entry.values() if isinstance(entry, Mapping) else entry) if name)


def transformers_transforms(processor_config: Mapping[str, Any], *,
                            source: str = PREPROCESSOR_NAME) -> RepoTransforms:
    """The eval transform of a transformers ``preprocessor_config.json`` (an image processor has no train
    variant)."""
    import transformers
    from transformers.models.auto.image_processing_auto import get_image_processor_class_from_name


    if "auto_map" in processor_config:
        raise UntrustedInputError(f"{source}: auto_map names remote code; image processors are built only from "
                                  "transformers' own classes, never with trust_remote_code", source=source)
    name = processor_config.get("image_processor_type")
    if not isinstance(name, str) or name not in known_image_processors():
        raise UntrustedInputError(f"{source}: image_processor_type {name!r} is not an image processor known to "
                                  f"transformers {transformers.__version__}", source=source)
    cls = get_image_processor_class_from_name(name)
    try:
        processor = cls.from_dict(dict(processor_config))
        params = loads_strict(processor.to_json_string(), source=source)
    except Exception as exc:  # the class's own checks: bad sizes, unknown resample values
        raise UntrustedInputError(f"{source}: transformers cannot build {name} from it ({exc})",
                                  source=source) from exc
    params = {k: v for k, v in params.items() if not k.startswith("_") and k != "image_processor_type"}
    plan = processor_plan(params, source=source)
    plan.check()  # from the numbers alone: running the processor on a probe would allocate what they ask
    record = make_transform(
        mode="eval", reference=f"{source} (transformers {transformers.__version__} {name})",
        resize=f"size={canonical_json(params.get('size'))} resample={params.get('resample')}"
        if params.get("do_resize") else None,
        crop=_processor_crop(params),
        normalize_mean=params.get("image_mean") if params.get("do_normalize") else None,
        normalize_std=params.get("image_std") if params.get("do_normalize") else None,
        steps=[f"transformers.{name}({canonical_json(params)})"])
    fn = _processor_fn(processor, plan=plan)
    _check_output_size(fn, source=source)
    return RepoTransforms(library="transformers", source=source,
                          eval=DescribedTransform(record=record, fn=fn, plan=plan), train=None, plans=(plan,))


def _side_values(value: Any) -> list[int]:
    if isinstance(value, dict):
        return [v for v in value.values() if isinstance(v, int) and not isinstance(v, bool)]
    return [value] if isinstance(value, int) and not isinstance(value, bool) else []


def processor_plan(params: Mapping[str, Any], *, source: str) -> SizePlan:
    """The sizes of a transformers image processor from its parameters (``size`` as ``height``/``width``,
    ``shortest_edge`` with an optional ``longest_edge`` or ``crop_pct``, ``longest_edge``, ``max_height``/
    ``max_width``; ``crop_size`` when it centre-crops), read conservatively: a resize key it does not know is taken
    as the shorter side."""
    size = params.get("size")
    crop = params.get("crop_size") if params.get("do_center_crop") else None
    fields = f"size {canonical_json(size)}"
    resize: int | None = None
    keep_ratio, cap = False, None
    if params.get("do_resize") and _side_values(size):
        sides = dict(size) if isinstance(size, dict) else {"shortest_edge": size}
        if "height" in sides and "width" in sides:
            resize = max(_side_values({k: sides[k] for k in ("height", "width")}))
        elif "shortest_edge" in sides:
            crop_pct = params.get("crop_pct")
            edge = sides["shortest_edge"]
            resize = math.floor(edge / crop_pct) if isinstance(crop_pct, (int, float)) and crop_pct > 0 \
                and isinstance(edge, (int, float)) else edge
            fields += f" with crop_pct {crop_pct}" if _is_number(crop_pct) else ""
            keep_ratio, cap = True, sides.get("longest_edge")
        elif "longest_edge" in sides or "max_height" in sides:
            resize = max(_side_values(sides))
        else:
            resize, keep_ratio = max(_side_values(sides)), True
    output = None
    crop_sides = dict(crop) if isinstance(crop, dict) else {}
    if "height" in crop_sides and "width" in crop_sides and _side_values(crop_sides):
        output = (int(crop_sides["height"]), int(crop_sides["width"]))
        fields += f", crop_size {canonical_json(crop)}"
    elif resize is not None and not keep_ratio and isinstance(size, dict) and "height" in size:
        output = (int(size["height"]), int(size["width"]))
    return SizePlan(source=source, fields=fields, resize=resize, keep_ratio=keep_ratio, cap=cap, output=output)


def _processor_crop(params: Mapping[str, Any]) -> str | None:
    if params.get("do_center_crop"):
        return f"center crop_size={canonical_json(params.get('crop_size'))}"
    if params.get("crop_pct") is not None:
        return f"crop_pct={canonical_json(params['crop_pct'])}"
    return None


def _processor_fn(processor: Any, *,
                  plan: SizePlan) -> Callable[[torch.Tensor, torch.Generator | None], torch.Tensor]:
    def apply(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        if x.ndim == 4:  # the processor holds a whole pass's resized images: sub-batches within the budget
            plan.check_records(int(x.shape[2]), int(x.shape[3]), count=int(x.shape[0]))
            step = plan.chunk(int(x.shape[2]), int(x.shape[3]))
        else:
            step = len(x)
        outs = [processor(images=_pil_images(part, channels=None), return_tensors="pt")["pixel_values"]
                for part in x.split(max(1, step))]
        return torch.cat([torch.as_tensor(out, dtype=torch.float32) for out in outs])

    return apply


def _check_output_size(fn: Callable[..., torch.Tensor], *, source: str) -> None:
    """One 128×128 image through the processor (its sizes already checked): its output sides must stay within
    :data:`MAX_SIDE`."""
    shape = tuple(fn(torch.zeros(1, 3, 128, 128), None).shape)
    if len(shape) != 4 or max(shape[2:]) > MAX_SIDE:
        raise UntrustedInputError(f"{source}: the processor's output has shape {list(shape)}; images larger than "
                                  f"{MAX_SIDE} pixels a side are refused", source=source)


# --- applying a PIL pipeline to a batch ------------------------------------------------------------------------------


def _pil_images(x: torch.Tensor, *, channels: int | None) -> list[Any]:
    """A prepared batch (N×C×H×W in [0, 1], C = 1 or 3) as 8-bit PIL images, converted to ``channels``."""
    if x.ndim != 4 or x.shape[1] not in (1, 3):
        raise UsageError(f"a transform from the repo applies to images (N×C×H×W with 1 or 3 channels), found a "
                         f"batch of shape {list(x.shape)}")
    pixels = (x.detach().float().clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
    images = [Image.fromarray(p[..., 0] if p.shape[-1] == 1 else p) for p in pixels]
    if channels is None:
        return images
    return [im.convert("L" if channels == 1 else "RGB") for im in images]


def _per_image(pipeline: Any, *, channels: int, random_steps: bool,
               plan: SizePlan | None = None) -> Callable[[torch.Tensor, torch.Generator | None], torch.Tensor]:
    """A batch function over a PIL pipeline; random steps are seeded once per batch from the generator. With a
    ``plan``, a batch is checked against the limits before any image is made."""
    def apply(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        if plan is not None and x.ndim == 4:
            plan.check_records(int(x.shape[2]), int(x.shape[3]), count=int(x.shape[0]))
        images = _pil_images(x, channels=channels)
        if not random_steps:
            return torch.stack([pipeline(im) for im in images]).float()
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator).item())
        state = random.getstate()
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                random.seed(seed)
                out = [pipeline(im) for im in images]
        finally:
            random.setstate(state)
        return torch.stack(out).float()

    return apply
