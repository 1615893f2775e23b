"""The θ witness: one digest per model, byte comparisons per refit, never a digest of other bytes."""

from __future__ import annotations

import pytest
import torch
from helpers.refit_models import SmallConvNet, WeightWritingNet, make_pool, seeded

from bnconvention.audit.measure.evaluation import Refitter
from bnconvention.errors import RefitError, WeightsChangedError
from bnconvention.formats import digests as digest_module
from bnconvention.formats.digests import model_digests
from bnconvention.refitting import ThetaWitness, refit, running_state


class _Identity:
    def standard(self) -> None:
        return None

    mode = "eval"

    def __call__(self, x: torch.Tensor, *, generator: torch.Generator | None) -> torch.Tensor:
        return x


def _hashes_of(name: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every time the tensor ``name`` is fed to a digest, its name is appended to the returned list (``add_steps``:
    every digest of a tensor, whole or piece by piece, goes through it)."""
    seen: list[str] = []
    original = digest_module.TensorSetDigest.add_steps

    def counting(self, tensor_name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if tensor_name == name:
            seen.append(tensor_name)
        return original(self, tensor_name, *args, **kwargs)

    monkeypatch.setattr(digest_module.TensorSetDigest, "add_steps", counting)
    return seen


def test_refits_sharing_a_witness_digest_theta_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Regression: every refit digested θ twice (before and after), 2 x 3 = 6 digests for three refits;
    # the audit's Refitter now witnesses θ once and each refit compares bytes against it.
    model = seeded(SmallConvNet)
    expected = model_digests(model)
    seen = _hashes_of("conv1.weight", monkeypatch)
    refitter = Refitter(model)
    reports = [refitter.run(torch.cat(make_pool((3, 6, 6), [8])), rule="exact", transform=_Identity(), seed=s,
                            batch_size=4, data_split=None) for s in range(3)]
    assert len(seen) == 1
    for report in reports:
        details = report.declaration.refit
        assert details is not None
        assert details.trainable_sha256_before == details.trainable_sha256_after == expected.trainable_sha256


def test_a_single_refit_reports_the_digests_model_digests_gives() -> None:
    model = seeded(SmallConvNet)
    before = model_digests(model)
    report = refit(model, make_pool((3, 6, 6), [5, 4]))
    after = model_digests(model)
    details = report.declaration.refit
    assert details is not None
    assert (details.trainable_sha256_before, details.running_sha256_before) == (
        before.trainable_sha256, before.running_sha256)
    assert (details.trainable_sha256_after, details.running_sha256_after) == (
        after.trainable_sha256, after.running_sha256)
    stamped = report.declaration.digests
    assert (stamped.trainable_sha256, stamped.running_sha256) == (after.trainable_sha256, after.running_sha256)


def test_a_stale_witness_is_never_reported_as_the_models_digest() -> None:
    # θ moved between refits (the user changed the weights): the witness no longer matches, so the refit digests
    # the bytes it actually sees instead of reporting the witnessed digest.
    model = seeded(SmallConvNet)
    witness = ThetaWitness(model)
    with torch.no_grad():
        model.conv1.weight.mul_(2.0)
    report = refit(model, make_pool((3, 6, 6), [6]), theta=witness)
    details = report.declaration.refit
    assert details is not None
    assert details.trainable_sha256_before == model_digests(model).trainable_sha256 != witness.trainable_sha256


@pytest.mark.parametrize(("old", "new"), [
    pytest.param(0.0, -0.0, id="signed-zero"),
    pytest.param(float("nan"), -float("nan"), id="nan-sign"),
])
def test_witness_compares_bytes_not_values(old: float, new: float) -> None:
    # 0.0 == -0.0 and NaN != NaN as values; the proof is about bytes, so the first differs and a NaN matches itself
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    with torch.no_grad():
        model[0].weight[0, 0] = old
    witness = ThetaWitness(model)
    assert witness.matches(model)
    with torch.no_grad():
        model[0].weight[0, 0] = new
    assert not witness.matches(model)
    assert witness.digests(model).trainable_sha256 == model_digests(model).trainable_sha256


def test_forward_writing_theta_is_caught_with_a_shared_witness() -> None:
    model = seeded(WeightWritingNet)
    witness = ThetaWitness(model)
    shipped = running_state(model)
    with pytest.raises(WeightsChangedError, match="trainable tensors changed during the refit"):
        refit(model, make_pool((3,), [4, 4]), theta=witness)
    assert all(torch.equal(running_state(model)[k].var, v.var) for k, v in shipped.items())


def test_theta_must_be_a_witness() -> None:
    with pytest.raises(RefitError, match="theta must be a ThetaWitness"):
        refit(seeded(SmallConvNet), make_pool((3, 6, 6), [4]), theta="abc")  # type: ignore[arg-type]


def test_refits_sharing_a_witness_trace_once_until_the_modules_change(monkeypatch: pytest.MonkeyPatch) -> None:
    # each refit traced the model again (an audit's R replicates, recoverability points, provenance arms)
    from bnconvention.refitting import graph

    traces: list[int] = []
    original = graph.trace_model

    def counting(model):  # type: ignore[no-untyped-def]
        traces.append(1)
        return original(model)

    monkeypatch.setattr(graph, "trace_model", counting)
    model = seeded(SmallConvNet)
    witness = ThetaWitness(model)
    pool = make_pool((3, 6, 6), [6])
    for _ in range(3):
        assert refit(model, pool, theta=witness).path == "traced"
    assert len(traces) == 1
    model.drop = torch.nn.Identity()  # another module object: trace again, and the refit follows the new forward
    refit(model, pool, theta=witness)
    assert len(traces) == 2



@pytest.mark.parametrize("tensor", [
    pytest.param(torch.tensor([0.0, -0.0, float("nan")], dtype=torch.bfloat16), id="bfloat16"),
    pytest.param(torch.tensor([True, False]), id="bool"),
    pytest.param(torch.tensor([1, -2**62], dtype=torch.int64), id="int64"),
    pytest.param(torch.tensor([1 + 2j, -0.0 + 0j], dtype=torch.complex64), id="complex"),
    pytest.param(torch.arange(12.0).reshape(3, 4).t(), id="non-contiguous"),
])
def test_byte_comparison_sees_every_bit_of_every_dtype(tensor: torch.Tensor) -> None:
    # the comparison runs through numpy on the CPU; it must still see one flipped bit in any dtype
    from bnconvention.refitting.proof import _bits, _equal_bytes

    assert _equal_bytes(tensor, tensor.clone())
    changed = tensor.clone().contiguous()
    if changed.dtype == torch.bool:
        changed[0] = ~changed[0]
    else:
        _bits(changed).view(-1)[0] ^= 1  # the lowest bit of the first element, through an integer view
    assert not _equal_bytes(tensor, changed)


def test_a_single_refit_digests_theta_after_its_pass_not_before(monkeypatch: pytest.MonkeyPatch) -> None:
    # refit() asked for the witness's digest before the pass, so the "background" sha256 of
    # θ was waited for at once and never overlapped anything; it is now needed only after the pass
    from bnconvention.refitting import engine

    events: list[str] = []
    original_pass, original_sha = engine.run_pass, ThetaWitness.trainable_sha256

    def pass_(*args, **kwargs):  # type: ignore[no-untyped-def]
        events.append("pass")
        return original_pass(*args, **kwargs)

    def sha(self):  # type: ignore[no-untyped-def]
        events.append("sha256")
        return original_sha.fget(self)  # type: ignore[attr-defined]

    monkeypatch.setattr(engine, "run_pass", pass_)
    monkeypatch.setattr(ThetaWitness, "trainable_sha256", property(sha))
    model = seeded(SmallConvNet)
    report = refit(model, make_pool((3, 6, 6), [6]))
    assert events[0] == "pass" and "sha256" in events
    details = report.declaration.refit
    assert details is not None
    assert details.trainable_sha256_before == model_digests(model).trainable_sha256


def test_the_caller_finishes_a_digest_the_background_thread_has_not_reached(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the background digest runs at the lowest priority; on a busy machine it may not have started when the digest
    # is needed, and the caller then hashes the pieces itself instead of waiting for it
    import threading

    from bnconvention.refitting import proof

    release = threading.Event()
    monkeypatch.setattr(proof, "_PIECE", 64)  # many pieces, so that the caller's share is a real take-over
    monkeypatch.setattr(proof, "_lower_this_threads_priority", lambda: release.wait(30))
    model = seeded(SmallConvNet)
    witness = ThetaWitness(model)
    try:
        assert witness.trainable_sha256 == model_digests(model).trainable_sha256
        assert not release.is_set()  # done while the background thread was still held back
    finally:
        release.set()


def test_the_background_thread_alone_completes_the_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    from bnconvention.refitting import proof

    monkeypatch.setattr(proof, "_PIECE", 64)
    model = seeded(SmallConvNet)
    witness = ThetaWitness(model)
    witness._thread.join(30)
    assert not witness._advance()  # nothing left for the caller
    assert witness.trainable_sha256 == model_digests(model).trainable_sha256


def test_background_digests_are_stopped_and_joined_before_the_interpreter_exits() -> None:
    # A daemon thread still hashing θ's copy while the runtime is torn down can abort the process ("terminate called
    # without an active exception", exit 134, seen when a process ended with several witnesses hashing). The report
    # is registered before the witness module is imported, so it runs after the module's exit hook (LIFO).
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import atexit
        threads = []
        atexit.register(lambda: print("alive", [t.is_alive() for t in threads], flush=True))
        import torch
        from bnconvention.refitting.proof import ThetaWitness
        model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(16)])
        threads.extend(ThetaWitness(model)._thread for _ in range(3))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "alive [False, False, False]" in done.stdout
