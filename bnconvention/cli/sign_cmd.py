"""``bnconvention sign`` and ``bnconvention verify``: OpenSSF model signing of releases, annotations and records."""

from __future__ import annotations

# model-signing is imported when a command runs (bnconvention[provenance]), not when the parser is built.
import argparse
import sys
from pathlib import Path

from bnconvention.extras import needs_extra

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

Checks the signature with the public key, every signed file against it, then the records' digests against the
weights (a folder: each stamped header and each annotation's subject; a record file: --weights, by default an
annotation's subject or the one .safetensors file beside a declaration). Every file that fails is named.

Exit codes: 0 verified, 1 a signature or a digest does not match (the files named), 2 unreadable input.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sign = subparsers.add_parser(
        "sign", help="sign a release, an annotation or a record (OpenSSF model signing, offline key)",
        description="Sign a release folder or one record file with an elliptic-curve private key (PEM), writing an "
                    "OpenSSF model-signing signature beside it.",
        epilog=SIGN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sign.add_argument("target", metavar="PATH", type=Path, help="a release folder, an annotation or a record")
    sign.add_argument("--private-key", required=True, type=Path, metavar="KEY.pem", help="the signing key")
    sign.add_argument("--password", default=None, help="the key's password, when it is encrypted")
    sign.add_argument("--signature", type=Path, default=None, metavar="SIG",
                      help="where to write the signature (default: PATH/model.sig, or PATH.sig for a file)")
    needs_extra(sign, "provenance")
    sign.set_defaults(func=run_sign)

    verify = subparsers.add_parser(
        "verify", help="verify a signature and the records' digests against the weights",
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
    needs_extra(verify, "provenance")
    verify.set_defaults(func=run_verify)


def _require(path: Path, what: str) -> None:
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist ({what})")


def run_sign(args: argparse.Namespace) -> int:
    from bnconvention.authoring import signing
    from bnconvention.formats.signatures import read_signed_files

    _require(args.target, "the release folder or record to sign")
    _require(args.private_key, "the private key")
    if args.target.is_file():
        from bnconvention.authoring.stamp import checked_record
        from bnconvention.formats.canonical import loads_strict

        checked_record(loads_strict(args.target.read_bytes(), source=str(args.target)), source=str(args.target))
    written = signing.sign(args.target, private_key=args.private_key, signature=args.signature,
                           password=args.password)
    covered = read_signed_files(written, args.target)
    print(f"{written}: signed {len(covered.digests)} file{'s' if len(covered.digests) != 1 else ''} of "
          f"{args.target} ({', '.join(sorted(covered.digests))})")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    from bnconvention.authoring import signing

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
    if result.ok:
        print(f"{args.target}: verified")
        return 0
    print(f"bnconvention: verification failed: {', '.join(result.failing_files)}", file=sys.stderr)
    return 1
