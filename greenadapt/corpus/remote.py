"""Reading corpora from URLs: credential redaction, resumable HTTP, cheap HEADs.

Credentials can sit in a URL in two places: ``user:password@`` and signed
query parameters (S3/GCS presigned URLs, Azure SAS, API tokens). The public
form of a URL drops both, so fingerprints stay stable when a URL is
re-signed and no secret reaches a manifest, a log line or an error.

HTTP(S) is read by our own small reader rather than smart_open's, because a
multi-gigabyte download that drops midway must resume from the byte it had
reached (a ``Range`` request, guarded by the first response's validator so
a file replaced on the server is never spliced), not restart or fail.
"""

from __future__ import annotations

import io
import logging
import re
import time
from typing import Any

from greenadapt.errors import CorpusError
from greenadapt.redaction import redact_url

log = logging.getLogger(__name__)


# Tunables, module-level so tests can shorten them.
HTTP_RETRIES = 3
HTTP_BACKOFF_S = 1.0
HTTP_TIMEOUT_S = (15.0, 60.0)  # connect, read
HEAD_TIMEOUT_S = 5.0
_PROGRESS_RESETS_RETRIES = 1 << 20  # a MiB read since the last failure earns fresh retries
_CHUNK = 1 << 20


def head(url: str) -> dict[str, Any]:
    """ETag, Last-Modified and size of ``url`` if one quick HEAD request gives them, else {}."""
    import requests

    try:
        response = requests.head(url, allow_redirects=True, timeout=HEAD_TIMEOUT_S, headers={"Accept-Encoding": "identity"})
    except requests.RequestException:
        return {}
    if not response.ok:
        return {}
    found: dict[str, Any] = {}
    if response.headers.get("ETag"):
        found["etag"] = response.headers["ETag"]
    if response.headers.get("Last-Modified"):
        found["last_modified"] = response.headers["Last-Modified"]
    length = response.headers.get("Content-Length", "")
    if length.isdecimal():
        found["size"] = int(length)
    return found


class ResumableHttpReader(io.RawIOBase):
    """A raw binary stream over an HTTP(S) URL that resumes dropped transfers.

    After a failure mid-body it asks for ``bytes=<offset>-`` with ``If-Range``
    set to the first response's validator; up to ``HTTP_RETRIES`` attempts
    with exponential backoff (reset after a MiB of progress), then a
    CorpusError. Errors name only the public URL.
    """

    def __init__(self, url: str) -> None:
        import requests

        super().__init__()
        self._url = url
        self._redacted = redact_url(url)
        self._session = requests.Session()
        self._response: Any = None
        self._position = 0
        self._length: int | None = None
        self._validator: str | None = None
        self._failures = 0
        self._since_failure = 0
        self._connect_with_retries()

    @property
    def public_url(self) -> str:
        return self._redacted.public

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while True:
            try:
                if self._response is None:
                    self._connect()
                data = self._response.raw.read(min(len(view), _CHUNK), decode_content=False)
                if not data and self._length is not None and self._position < self._length:
                    raise ConnectionError(f"connection closed at byte {self._position} of {self._length}")
            except Exception as exc:  # noqa: BLE001 - classified below; anything else is re-raised
                if not _retryable(exc):
                    raise
                self._retry_after(exc)
                continue
            size = len(data)
            view[:size] = data
            self._position += size
            self._since_failure += size
            if self._since_failure >= _PROGRESS_RESETS_RETRIES:
                self._failures = 0
            return size

    def close(self) -> None:
        if self._response is not None:
            self._response.close()
            self._response = None
        self._session.close()
        super().close()

    # -- connection handling -------------------------------------------------
    def _connect_with_retries(self) -> None:
        while True:
            try:
                self._connect()
                return
            except Exception as exc:  # noqa: BLE001 - classified below
                if not _retryable(exc):
                    raise
                self._retry_after(exc)

    def _retry_after(self, exc: BaseException) -> None:
        if self._response is not None:
            self._response.close()
            self._response = None
        self._failures += 1
        self._since_failure = 0
        reason = _short_reason(exc)
        if self._failures > HTTP_RETRIES:
            raise CorpusError(
                f"download failed at byte {self._position} after {HTTP_RETRIES} retries ({reason})",
                path=self.public_url,
                hint="check the network or the server, then rerun; a partial download is never used",
            ) from None
        delay = HTTP_BACKOFF_S * 2 ** (self._failures - 1)
        log.warning(
            "%s: transfer failed at byte %d (%s); retry %d of %d in %.1fs",
            self.public_url, self._position, reason, self._failures, HTTP_RETRIES, delay,
        )
        time.sleep(delay)

    def _connect(self) -> None:
        headers = {"Accept-Encoding": "identity"}
        if self._position:
            headers["Range"] = f"bytes={self._position}-"
            if self._validator:
                headers["If-Range"] = self._validator
        response = self._session.get(self._url, headers=headers, stream=True, timeout=HTTP_TIMEOUT_S)
        status = response.status_code
        if status == 416 and self._length is not None and self._position >= self._length:
            response.close()
            self._response = _EmptyResponse()
            return
        if status in (408, 425, 429) or status >= 500:
            response.close()
            raise _TransientHttpStatus(status)
        if status not in (200, 206):
            response.close()
            raise CorpusError(
                f"HTTP {status} {response.reason or ''}".rstrip(),
                path=self.public_url,
                hint="check the URL (and credentials for private objects)",
            )
        if self._position == 0:
            length = response.headers.get("Content-Length", "")
            self._length = int(length) if length.isdecimal() and status == 200 else None
            etag = response.headers.get("ETag", "")
            self._validator = (etag if etag and not etag.startswith("W/") else None) or response.headers.get("Last-Modified")
        elif status == 200:
            self._resume_from_full_body(response)
            return
        else:
            start = _content_range_start(response.headers.get("Content-Range", ""))
            if start != self._position:
                response.close()
                raise _TransientHttpStatus(status, f"server answered Content-Range {start}, not {self._position}")
        self._response = response

    def _resume_from_full_body(self, response: Any) -> None:
        # 200 to a range request: either the file changed (If-Range failed)
        # or the server ignores ranges. Only the latter can be continued, by
        # skipping what was already read.
        etag = response.headers.get("ETag", "")
        current = (etag if etag and not etag.startswith("W/") else None) or response.headers.get("Last-Modified")
        if self._validator and current and current != self._validator:
            response.close()
            raise CorpusError(
                "the file changed on the server while it was being read",
                path=self.public_url,
                hint="rerun to read the new version from the start",
            )
        to_skip = self._position
        while to_skip:
            skipped = response.raw.read(min(to_skip, _CHUNK), decode_content=False)
            if not skipped:
                response.close()
                raise ConnectionError("connection closed while skipping to the resume offset")
            to_skip -= len(skipped)
        self._response = response


class _TransientHttpStatus(Exception):
    def __init__(self, status: int, detail: str = "") -> None:
        super().__init__(detail or f"HTTP {status}")


class _EmptyResponse:
    class raw:  # noqa: N801 - mimics requests.Response.raw
        @staticmethod
        def read(*_args: Any, **_kwargs: Any) -> bytes:
            return b""

    def close(self) -> None:
        pass


_REASONS = (
    ("Connection refused", "connection refused"),
    ("Name or service not known", "host not found"),
    ("Temporary failure in name resolution", "host not found"),
    ("timed out", "timed out"),
    ("IncompleteRead", "connection dropped"),
    ("Connection broken", "connection dropped"),
    ("connection closed", "connection dropped"),
    ("Connection reset", "connection reset"),
)


def _short_reason(exc: BaseException) -> str:
    # requests nests the real cause (with the URL) deep in its message; one
    # plain phrase says more and can hold no credential.
    if isinstance(exc, _TransientHttpStatus):
        return str(exc)
    text = str(exc)
    for needle, reason in _REASONS:
        if needle in text:
            return reason
    return type(exc).__name__


def _content_range_start(header: str) -> int | None:
    match = re.match(r"bytes (\d+)-", header)
    return int(match.group(1)) if match else None


def _retryable(exc: BaseException) -> bool:
    import http.client

    import requests
    import urllib3.exceptions

    if isinstance(exc, (CorpusError, requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema,
                        requests.exceptions.MissingSchema, requests.exceptions.InvalidHeader)):
        return False  # retrying cannot help
    return isinstance(
        exc,
        (
            _TransientHttpStatus,
            requests.RequestException,
            urllib3.exceptions.HTTPError,
            http.client.HTTPException,
            ConnectionError,
            TimeoutError,
            OSError,
        ),
    )
