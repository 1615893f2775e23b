"""``bnconvention sign`` and ``bnconvention verify``: OpenSSF model signing of releases, annotations and records."""

from __future__ import annotations

# model-signing is imported when a command runs (bnconvention[provenance], inside bnconvention.authoring.signing's
# functions), and the audit machinery (torch) only by ``verify --reproduce``: ``sign`` and plain ``verify`` stay
# torch-free.
import argparse
import sys
from pathlib import Path

from bnconvention.authoring import signing
from bnconvention.authoring.stamp import checked_record
from bnconvention.cli.commands import summary
from bnconvention.cli.device_option import add_device_option, chosen_device
from bnconvention.errors import UsageError
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.signatures import read_signed_files

SIGN_EPILOG = """\
examples:
  openssl ecparam -genkey -name prime256v1 -noout -out key.pem && openssl ec -in key.pem -pubout -out key.pub
  bnconvention stamp release/model.safetensors --record record.json --card release/README.md
  bnconvention sign release --private-key key.pem          # then sign: writes release/model.sig
  bnconvention sign release/bnconvention/refit-0123456789ab.json --private-key key.pem   # writes <file>.sig

Stamp first, then sign: a stamp rewrites header bytes the signature covers (stamp warns when it does; sign again).
A folder's signature covers every file in it except itself, git's files and bnconvention/ (refit annotations,
added later by pull request, carry their own <file>.sig). The signature is model-signing's (a Sigstore bundle):
`model_signing verify key release --signature release/model.sig --public_key key.pub` checks it too.

Exit codes: 0 signed, 1 signing failed, 2 a path or key cannot be read.
"""

VERIFY_EPILOG = """\
examples:
  bnconvention verify release --public-key key.pub
  bnconvention verify release/bnconvention/refit-0123456789ab.json --public-key key.pub
  bnconvention verify record.json --public-key key.pub --weights model.safetensors
  bnconvention verify annotation.json --public-key key.pub --weights model.safetensors --reproduce --spec audit.yaml

Checks the signature with the public key, every signed file against it, then the records' digests against the
weights (a folder: each stamped header and each annotation's subject; a record file: --weights, by default an
annotation's subject or the one .safetensors file beside a declaration). Every file that fails is named.
With --reproduce (an annotation, or a release's annotations), once the signature and digests hold, each annotation
is reproduced as `bnconvention reproduce` does (--spec is the audit's spec) and its cells must come back.

Exit codes: 0 verified (and reproduced, with --reproduce), 1 a signature or a digest does not match or an
annotation is not reproduced (the files and cells named), 2 unreadable input or bad usage (with --reproduce also
what reproduce cannot read: a spec that is not the annotation's, a pool or dataset revision that is gone).
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sign = subparsers.add_parser(
        "sign", help=summary("sign"),
        description="Sign a release folder or one record file with an elliptic-curve private key (PEM), writing an "
                    "OpenSSF model-signing signature beside it.",
        epilog=SIGN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sign.add_argument("target", metavar="PATH", type=Path, help="a release folder, an annotation or a record")
    sign.add_argument("--private-key", required=True, type=Path, metavar="KEY.pem", help="the signing key")
    sign.add_argument("--password", default=None, help="the key's password, when it is encrypted")
    sign.add_argument("--signature", type=Path, default=None, metavar="SIG",
                      help="where to write the signature (default: PATH/model.sig, or PATH.sig for a file)")
    sign.set_defaults(func=run_sign)

    verify = subparsers.add_parser(
        "verify", help=summary("verify"),
        description="Verify the OpenSSF model-signing signature of a release folder or a record file, then the "
                    "records' digests against the weights; name every file that fails.",
        epilog=VERIFY_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    verify.add_argument("target", metavar="PATH", type=Path, help="a release folder, an annotation or a record")
    verify.add_argument("--public-key", required=True, type=Path, metavar="KEY.pub", help="the signer's public key")
    verify.add_argument("--signature", type=Path, default=None, metavar="SIG",
                        help="the signature (default: PATH/model.sig, or PATH.sig for a file)")
    verify.add_argument("--weights", type=Path, default=None, metavar="WEIGHTS.safetensors",
                        help="the weights a record file describes (default: an annotation's subject, or the one "
                             ".safetensors beside a declaration)")
    verify.add_argument("--reproduce", action="store_true",
                        help="then re-run the audit each annotation records and check its cells come back "
                             "(bnconvention reproduce; needs --spec and bnconvention[audit])")
    verify.add_argument("--spec", default=None, metavar="SPEC",
                        help="with --reproduce: the audit spec the annotation was computed under")
    verify.add_argument("--tolerance", type=float, default=None, metavar="T",
                        help="with --reproduce: widening of the replicate ranges (default: reproduce's)")
    verify.add_argument("--allow-factory", action="append", default=[], metavar="MODULE:FUNCTION",
                        help="with --reproduce: allow your own model factory for this run (repeatable)")
    add_device_option(verify)
    verify.set_defaults(func=run_verify)


def _require(path: Path, what: str) -> None:
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist ({what})")


def run_sign(args: argparse.Namespace) -> int:
    _require(args.target, "the release folder or record to sign")
    _require(args.private_key, "the private key")
    if args.target.is_file():
        checked_record(loads_strict(args.target.read_bytes(), source=str(args.target)), source=str(args.target))
    written = signing.sign(args.target, private_key=args.private_key, signature=args.signature,
                           password=args.password)
    covered = read_signed_files(written, args.target)
    print(f"{written}: signed {len(covered.digests)} file{'s' if len(covered.digests) != 1 else ''} of "
          f"{args.target} ({', '.join(sorted(covered.digests))})")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    if args.reproduce and args.spec is None:
        raise UsageError("--reproduce needs --spec, the audit spec the annotation was computed under")
    if not args.reproduce and (args.spec is not None or args.tolerance is not None or args.allow_factory):
        raise UsageError("--spec, --tolerance and --allow-factory go with --reproduce")
    _require(args.target, "the release folder or record to verify")
    _require(args.public_key, "the public key")
    result = signing.verify(args.target, public_key=args.public_key, signature=args.signature, weights=args.weights)
    check = result.signature
    status = "ok  " if check.matches else "FAIL"
    print(f"{status} {check.signature}: signature by {args.public_key}; {check.describe()}")
    for digest in result.digests:
        if digest.problem is None:
            print(f"ok   {digest.record}: digests match {digest.weights}")
        else:
            print(f"FAIL {digest.record}: {digest.problem}")
    if not result.ok:
        print(f"bnconvention: verification failed: {', '.join(result.failing_files)}", file=sys.stderr)
        if args.reproduce:
            print(f"{args.target}: not reproduced: the signature and digests must hold first")
        return 1
    if args.reproduce:
        differing = _reproduce(args, result)
        if differing:
            print(f"bnconvention: verification failed: not reproduced: {', '.join(differing)}", file=sys.stderr)
            return 1
        print(f"{args.target}: verified and reproduced")
        return 0
    print(f"{args.target}: verified")
    return 0


def _reproduce(args: argparse.Namespace, result: signing.VerifyResult) -> list[str]:
    """Reproduce each annotation ``verify`` checked (:func:`bnconvention.audit.run.reproduce.reproduce_local`, with the
    weights its digests were checked against); the annotations that did not reproduce, each with its cells. A
    reproduction's unreadable or unavailable input raises (exit 2, named), as ``bnconvention reproduce`` does."""
    from bnconvention.audit.run import TOLERANCE, reproduce_local, reproduction_lines
    from bnconvention.audit.spec import load_spec
    from bnconvention.cli.audit_cmd import allow_factories
    from bnconvention.cli.reproduce_cmd import checked_tolerance

    annotations = []
    for digest in result.digests:
        record_path = Path(digest.record)
        if record_path.suffix == ".json" and record_path.is_file():
            record = loads_strict(record_path.read_bytes(), source=digest.record)
            if isinstance(record, dict) and isinstance(record.get("subject"), dict):
                annotations.append((record_path, Path(digest.weights)))
    if not annotations:
        raise UsageError(f"--reproduce: {args.target} holds no refit annotation to reproduce")
    args.tolerance = TOLERANCE if args.tolerance is None else args.tolerance
    tolerance = checked_tolerance(args)
    allow_factories(args.allow_factory)
    device = chosen_device(args)
    spec = load_spec(args.spec)
    differing = []
    for annotation, weights in annotations:
        reproduction = reproduce_local(annotation, spec, spec_source=args.spec, weights=weights,
                                       tolerance=tolerance, device=device)
        print("\n".join(reproduction_lines(reproduction)))
        if not reproduction.reproduced:
            differing.append(f"{annotation} ({', '.join(reproduction.differing)})")
    return differing
