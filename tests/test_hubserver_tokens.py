"""``bnconvention hubserver`` reads its tokens from a file or the environment, not only from ``--token`` arguments
that every local user sees in ``ps``. The server runs as a real process and is driven by the
real huggingface_hub client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.processes import sigint_default
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError

REPO_ROOT = Path(__file__).resolve().parent.parent
SECRET = "hf_file-or-env-token-i24"


def _serve(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    """Start the server, check that SECRET is alice's and another token is refused; its stderr."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bnconvention", "hubserver", "--root", str(tmp_path / "hub"), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}, preexec_fn=sigint_default)
    try:
        first = process.stdout.readline().strip() if process.stdout else ""
        assert first.startswith("endpoint: "), first + (process.stderr.read() if process.stderr else "")
        endpoint = first.split(" ", 1)[1]
        api = HfApi(endpoint=endpoint, token=SECRET)
        assert api.whoami()["name"] == "alice"
        api.create_repo("alice/written-with-a-file-token")
        assert [m.id for m in api.list_models(author="alice")] == ["alice/written-with-a-file-token"]
        with pytest.raises(HfHubHTTPError) as refused:
            HfApi(endpoint=endpoint, token="hf_not-a-known-token").whoami()
        assert refused.value.response.status_code == 401
        with pytest.raises(HfHubHTTPError):
            HfApi(endpoint=endpoint, token="hf_not-a-known-token").create_repo("alice/not-written")
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0
    assert SECRET not in first + out + err
    return endpoint, err


def test_tokens_from_a_file(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"# the lab's tokens\n\nalice={SECRET}\nbob=hf_bobs-token\n", encoding="utf-8")
    tokens.chmod(0o600)
    _, err = _serve(tmp_path, "--token-file", str(tokens))
    assert "with 2 tokens" in err and "warning" not in err


def test_tokens_from_the_environment(tmp_path: Path) -> None:
    _, err = _serve(tmp_path, env={"BNC_HUBSERVER_TOKENS": f"bob=hf_bobs-token, alice={SECRET}"})
    assert "with 2 tokens" in err and "warning" not in err


def test_a_token_argument_still_works_and_is_warned_about(tmp_path: Path) -> None:
    _, err = _serve(tmp_path, "--token", f"alice={SECRET}")
    assert "warning: --token puts a token on the command line, where every local user can read it (ps)" in err


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
@pytest.mark.parametrize("mode", [0o644, 0o602])
def test_a_token_file_others_may_read_or_write_is_refused(tmp_path: Path, mode: int) -> None:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"alice={SECRET}\n", encoding="utf-8")
    tokens.chmod(mode)
    result = subprocess.run([sys.executable, "-m", "bnconvention", "hubserver", "--root", str(tmp_path / "h"),
                             "--token-file", str(tokens)], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert result.returncode == 2
    assert result.stderr == (f"bnconvention: usage error: --token-file {tokens}: other users may read or write it "
                             f"(mode {mode:o}); restrict it first: chmod 600 {tokens}\n")
    assert not (tmp_path / "h").exists()


@pytest.mark.parametrize("content, message", [
    pytest.param(f"alice {SECRET}\n", "--token-file {path} line 1 expects NAME=VALUE", id="no-equals"),
    pytest.param(f"alice={SECRET}\nbob={SECRET}\n", "one token is given for two users (alice and bob)", id="shared"),
])
def test_a_malformed_token_file_is_refused_without_echoing_a_token(tmp_path: Path, content: str,
                                                                   message: str) -> None:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(content, encoding="utf-8")
    tokens.chmod(0o600)
    result = subprocess.run([sys.executable, "-m", "bnconvention", "hubserver", "--root", str(tmp_path / "h"),
                             "--token-file", str(tokens)], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert message.format(path=tokens) in result.stderr and SECRET not in result.stderr
