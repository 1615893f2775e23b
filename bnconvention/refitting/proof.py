"""The refit's proof that θ is bit-identical, at the cost of one digest per model rather than two per refit.

A :class:`ThetaWitness` holds a private copy of the trainable tensors' exact bytes (every ``state_dict`` entry that
is not a running statistic) and the digest of that copy (``bnconvention-tensors/1``, the same ``trainable_sha256``
a weights file gives). The digest is computed on a background thread, overlapped with the refit's pass: hashlib
releases the GIL while it hashes, and the copy cannot change under it. Any later state of the model is proven equal
to the witnessed one by comparing bytes (every tensor's bit pattern, so ``-0.0`` differs from ``0.0`` and a NaN
equals only the same NaN); equal bytes have, by definition, the witnessed digest. A state that differs is digested
afresh, so a digest is never reported for bytes it was not computed from.

Measured (``benchmarks/refit.py``, ResNet-18, 45 MiB of θ, 2 threads): two sha256 digests cost 0.29x one eval
forward over 512 images; a byte comparison costs under 0.02x. An audit makes one witness and passes it to every
refit (``refit(..., theta=witness)``), so its R + 3 refits digest θ once; a single ``refit()`` call makes its own
(one copy, one overlapped digest, one comparison). The copy is the memory price: one more θ while the witness lives.

>>> import torch
>>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
>>> witness = ThetaWitness(model)
>>> witness.matches(model), witness.digests(model).trainable_sha256 == witness.trainable_sha256
(True, True)
>>> with torch.no_grad():
...     _ = model[0].weight.add_(1.0)
>>> witness.matches(model)
False
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import weakref

import numpy
import torch

from bnconvention.formats.digests import (
    DigestSet,
    bn_layer_names,
    canonical_order,
    running_names_for_layer,
    state_dict_digests,
    tensor_digest_steps,
)
from bnconvention.refitting.graph import PlanCache

__all__ = ["ThetaWitness"]

# The background digest hashes the copy in pieces of this many bytes (about 0.6 ms each at sha256's 1.8 GB/s with
# SHA extensions), so that the caller can take over between two pieces without waiting on a low-priority thread.
_PIECE = 1 << 20

# Background digests still running when the interpreter exits are stopped and joined first (at most one piece each):
# a daemon thread still hashing a tensor's memory while the runtime tears it down can abort the process.
_LIVE: weakref.WeakSet[ThetaWitness] = weakref.WeakSet()
_EXITING = threading.Event()


@atexit.register
def _stop_background_digests() -> None:
    _EXITING.set()
    for witness in list(_LIVE):
        witness.join_background()


def _lower_this_threads_priority() -> None:
    """Give the calling thread the lowest scheduling priority (nice 19), on Linux only, where a thread has a nice
    value of its own (elsewhere the call would renice the whole process or another one: nothing is done)."""
    if not sys.platform.startswith("linux"):
        return
    # not permitted in some sandboxes: the digest then runs at the caller's priority, as before
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


def _split_state(model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], list[str]]:
    """The model's ``state_dict`` cut into trainable and running tensors (the digests' split), and its BN layers."""
    state = model.state_dict()
    layers = bn_layer_names(model)
    running_names = {n for layer in layers for n in running_names_for_layer(layer, state)}
    trainable = {n: state[n] for n in canonical_order(state) if n not in running_names}
    running = {n: t for n, t in state.items() if n in running_names}
    return trainable, running, layers


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor reinterpreted as integers of its element size: equality of these is equality of bytes."""
    if tensor.dtype == torch.bool or not (tensor.is_floating_point() or tensor.is_complex()):
        return tensor
    by_size = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    return tensor.view(by_size[tensor.element_size()])


def _equal_bytes(tensor: torch.Tensor, copy: torch.Tensor) -> bool:
    """Whether two tensors of one dtype and shape hold the same bytes. On the CPU numpy compares them faster than
    ``torch.equal`` (measured on ResNet-18's 45 MiB of θ, 2 threads: 3.3 ms against 5.2 ms of CPU time)."""
    left, right = _bits(tensor), _bits(copy)
    if left.device.type == "cpu":
        try:
            return bool(numpy.array_equal(left.numpy(), right.numpy()))
        except (RuntimeError, TypeError):  # a tensor numpy cannot view (conjugate or negative bit): torch compares
            pass
    return torch.equal(left, right)


class ThetaWitness:
    """θ's exact bytes at one moment (a private copy) and their ``trainable_sha256``, computed in the background."""

    def __init__(self, model: torch.nn.Module) -> None:
        trainable, running, layers = _split_state(model)
        self._copies = {name: tensor.detach().clone() for name, tensor in trainable.items()}
        self._sha256: str | None = None
        self._count = len(self._copies)
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._steps = tensor_digest_steps(self._copies, piece=_PIECE)
        self._thread = threading.Thread(target=self._background, name="bnconvention-theta-digest", daemon=True)
        _LIVE.add(self)
        self._thread.start()
        self._initial_running = state_dict_digests(running, layers)
        # refits sharing this witness (an audit's) also share the model's traced plan, re-traced on any change to
        # its module tree: the same per-model reuse as the digest
        self.plans = PlanCache()

    @property
    def initial_digests(self) -> DigestSet:
        """The model's digests at the moment it was witnessed (no comparison needed: the copy was taken then)."""
        return self._with_trainable(self._initial_running)

    def _advance(self) -> bool:
        """Hash the next piece of the copy, in the calling thread; False once the digest is done (or failed)."""
        with self._lock:
            if self._sha256 is not None or self._error is not None:
                return False
            try:
                next(self._steps)
            except StopIteration as done:
                self._sha256 = done.value
                return False
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread by trainable_sha256
                self._error = exc
                return False
            return True

    def _background(self) -> None:
        """The digest at the lowest priority: it runs on a core the refit leaves idle (Python between kernels,
        single-threaded reductions) instead of taking one from the pass's threads; whatever is left when the digest
        is needed, the caller hashes at its own priority (:attr:`trainable_sha256`)."""
        _lower_this_threads_priority()
        while not _EXITING.is_set() and self._advance():
            pass

    def join_background(self) -> None:
        """Wait for the background thread (it stops at its next piece once the interpreter is exiting)."""
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    @property
    def trainable_sha256(self) -> str:
        """The digest of the witnessed bytes: the pieces the background thread has not reached yet are hashed here."""
        while self._advance():  # the result is set under the lock: no need to wait for the thread to end
            pass
        if self._error is not None:
            raise self._error
        if self._sha256 is None:  # the digest ended without a result or an error: cannot happen, never a guess
            raise RuntimeError("the background digest of θ ended without a result")
        return self._sha256

    def matches(self, model: torch.nn.Module) -> bool:
        """Whether ``model``'s trainable tensors are, byte for byte, the witnessed ones (names, dtypes, shapes)."""
        trainable, _, _ = _split_state(model)
        return self._matches(trainable)

    def _matches(self, trainable: dict[str, torch.Tensor]) -> bool:

        if list(trainable) != list(self._copies):
            return False
        for name, tensor in trainable.items():
            copy = self._copies[name]
            if tensor.dtype != copy.dtype or tensor.shape != copy.shape or tensor.device != copy.device:
                return False
            if not _equal_bytes(tensor.detach(), copy):
                return False
        return True

    def digests(self, model: torch.nn.Module) -> DigestSet:
        """``model_digests(model)``, with the trainable digest taken from the witness when the bytes are the
        witnessed ones (proven by comparison) and computed afresh when they are not."""
        trainable, running, layers = _split_state(model)
        if not self._matches(trainable):
            return state_dict_digests({**trainable, **running}, layers)
        return self._with_trainable(state_dict_digests(running, layers))

    def _with_trainable(self, running: DigestSet) -> DigestSet:
        return DigestSet(trainable_sha256=self.trainable_sha256, running_sha256=running.running_sha256,
                         layer_running_sha256=running.layer_running_sha256, trainable_count=self._count,
                         running_count=running.running_count)
