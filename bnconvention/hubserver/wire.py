"""Small wire-format helpers shared by the store and the handlers: dates, git object ids, byte ranges, errors.

>>> from datetime import datetime, timezone
>>> format_date(datetime(2024, 5, 1, 12, 0, 3, 250000, tzinfo=timezone.utc))
'2024-05-01T12:00:03.250Z'
>>> git_blob_sha1(b"")
'e69de29bb2d1d6434b8b29ae775ad8c2e48c5391'
>>> parse_range("bytes=0-99", size=1000)
(0, 99)
>>> parse_range("bytes=-10", size=1000)
(990, 999)
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime

from bnconvention.hubserver.errors import HubRequestError

# The Hub's date format; huggingface_hub's parse_datetime accepts exactly this shape (milliseconds optional).
DATE_FORMAT = "%Y-%m-%dT%H:%M:%S"

_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$")


def utc_now() -> datetime:
    return datetime.now(UTC)


def format_date(moment: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.fffZ`` in UTC (naive datetimes are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    return moment.strftime(DATE_FORMAT) + f".{moment.microsecond // 1000:03d}Z"


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob with this content (the Hub's ``ETag`` and ``oid`` of a regular file)."""
    digest = hashlib.sha1(b"blob %d\0" % len(data))  # noqa: S324 - git's object id, not a security hash
    digest.update(data)
    return digest.hexdigest()


def sha1_hex(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()  # noqa: S324 - object ids, not security


def parse_range(header: str | None, *, size: int) -> tuple[int, int] | None:
    """The inclusive byte span a ``Range`` header asks for, ``None`` to serve the whole body.

    Only one ``bytes=`` range is honoured; a malformed or multi-range header is ignored (RFC 9110 allows serving
    the full representation). A well-formed range that lies outside the file raises a 416 ``HubRequestError``.
    """
    if header is None:
        return None
    match = _RANGE.match(header)
    if match is None:
        return None
    first, last = match.group(1), match.group(2)
    if not first and not last:
        return None
    if not first:  # suffix range: the last N bytes
        length = int(last)
        if length == 0 or size == 0:
            raise _unsatisfiable(header, size)
        return max(0, size - length), size - 1
    start = int(first)
    if last and int(last) < start:
        return None  # invalid range: ignored, like a malformed header
    if start >= size:
        raise _unsatisfiable(header, size)
    end = int(last) if last else size - 1
    return start, min(end, size - 1)


def _unsatisfiable(header: str, size: int) -> HubRequestError:
    return HubRequestError(
        f"Range {header!r} is outside the file ({size} bytes); ask for bytes 0-{max(size - 1, 0)}",
        status=416, code="RangeNotSatisfiable", headers={"Content-Range": f"bytes */{size}"},
    )
