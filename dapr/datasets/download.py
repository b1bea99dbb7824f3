"""Resumable, checksummed downloads of raw dataset files.

A download streams into ``<target>.part``; an interrupted one resumes from the bytes already
there (an HTTP range request) and the file appears under its name only once complete and, when
a SHA-256 is known, verified.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from dapr.errors import DaprError

CHUNK = 1 << 20


def fetch(url: str, target: Path, sha256: str | None = None, quiet: bool = False) -> Path:
    """Download ``url`` to ``target`` unless it is already there; returns ``target``."""
    target = Path(target)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    if not quiet:
        print(f"downloading {url} -> {target}", file=sys.stderr)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            resumed = have and response.status == 206
            expected = response.headers.get("Content-Length")
            received = 0
            with part.open("ab" if resumed else "wb") as out:
                while chunk := response.read(CHUNK):
                    out.write(chunk)
                    received += len(chunk)
            if expected is not None and received < int(expected):
                raise http.client.IncompleteRead(b"", int(expected) - received)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # the part file already holds every byte
            pass
        else:
            raise DaprError(f"cannot download {url}: HTTP {e.code}; check the URL") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        reason = getattr(e, "reason", None) or type(e).__name__
        raise DaprError(
            f"cannot download {url} ({reason}); rerun to resume, or download it by hand to {target}"
        ) from None
    if sha256 is not None:
        found = file_sha256(part)
        if found != sha256:
            part.unlink()
            raise DaprError(
                f"{url}: SHA-256 {found} does not match the expected {sha256}; the partial "
                "download was removed, rerun to download it again"
            )
    os.replace(part, target)
    return target


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
