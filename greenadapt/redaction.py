"""Credentials in URLs, and every place they must not reach: folder names, manifests, logs, error lines.

Credentials can sit in a URL in two places: ``user:password@`` and signed query parameters (S3/GCS presigned URLs,
Azure SAS, API tokens). The public form of a URL (:func:`redact_url`) drops both. Each secret seen is also scrubbed
from every log record, whatever logger, and :func:`scrub_secrets` takes them out of any text greenadapt shows: an
error's words (``GreenAdaptError`` scrubs its own), a library's message, a tracker's printed link.

A leaf of the package: the corpus readers, the workspace, trackers and errors all use it.
"""

from __future__ import annotations

import logging
import re
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")  # a spec with a scheme
# Object stores whose URLs carry a key pair before the bucket (s3://KEY:SECRET@bucket/key, as smart_open reads them):
# the secret may hold "/", so their credentials run to the last "@".
KEY_PAIR_SCHEMES = ("s3", "s3a", "s3n", "gs", "gcs", "azure", "abfs", "abfss")

# Query parameters whose value is a secret.
_SECRET_PARAM = re.compile(
    r"signature|token|credential|secret|password|passwd|api[-_]?key|access[-_]?key|^sig$|^key$|^auth(orization)?$",
    re.IGNORECASE,
)
# Parameters that only make sense next to a signature (they change at every
# re-signing); dropped with it so the public URL names the object, not the grant.
_SIGNING_PARAM = re.compile(r"^(x-amz-|x-goog-)|^(expires|awsaccesskeyid|sv|ss|srt|sp|se|st|spr|skoid|sktid)$", re.IGNORECASE)



def is_url(spec: str) -> bool:
    return bool(URL_RE.match(spec))


@dataclass(frozen=True)
class RedactedUrl:
    public: str  # safe to store and show
    full: str = field(repr=False)  # the URL as given, credentials included
    secrets: tuple[str, ...] = field(default=(), repr=False)  # substrings never to be shown

    def scrub(self, text: str) -> str:
        """``text`` with the full URL shown as its public form and every other secret as ``***``."""
        if self.full != self.public:
            text = text.replace(self.full, self.public)
        for secret in sorted(self.secrets, key=len, reverse=True):
            if len(secret) >= 3:
                text = text.replace(secret, "***")
        return text


# A URL inside free text (an error line, a library's message): up to the first space, quote or bracket.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()\[\]{}]+")
# Credentials in any other spelling: the one-slash form a path makes of a URL (``http:/bob:pw@host/t.tsv``: pathlib
# keeps one slash) and a bare ``user:password@host:port`` (a Ray address). ``user:secret@`` right after the start, a
# space, a slash, a colon, a quote, an equals sign or a bracket, before a host name or address.
_CREDENTIALS_IN_TEXT = re.compile(r"(?P<lead>^|[\s/:'\"=(\[<,])(?P<user>[^\s/@:'\"<>()\[\]{},]+):(?P<password>[^\s/@'\"<>()\[\]{}]*)@"
                                  r"(?=[A-Za-z0-9\[])")


def _hide_credentials(match: re.Match[str]) -> str:
    user, password = match.group("user"), match.group("password")
    _register_log_secrets([s for s in (password, urllib.parse.unquote(password), f"{user}:{password}") if s])
    return f"{match.group('lead')}***@"


def scrub_secrets(text: str, *, record: bool = False) -> str:
    """``text`` with every URL in it as its public form (no ``user:password@``, no signature), credentials in any other
    spelling (``scheme:/user:password@``, a bare ``user:password@host:port``) as ``***@``, and every secret seen
    before as ``***``: the one scrubber of every line greenadapt shows or writes that may quote a user's value.

    ``record``: a file greenadapt reads back (a manifest, options.json), whose paths must stay as they are: a URL's
    user name seen beside a password is left there (a path under /home/alice is the user's own name, not the URL's
    secret); every other secret, and any URL's credentials, are taken out as everywhere."""
    if "://" in text:
        text = _URL_IN_TEXT.sub(lambda match: redact_url(match.group(0)).public, text)
    if "@" in text:
        text = _CREDENTIALS_IN_TEXT.sub(_hide_credentials, text)
    hidden = _LOG_SECRETS | _IDENTITIES if _IDENTITIES and not record else _LOG_SECRETS
    if hidden and any(secret in text for secret in hidden):
        for secret in sorted(hidden, key=len, reverse=True):
            text = text.replace(secret, "***")
    return text


# An output path that names a remote place: a scheme followed by one slash or two (``s3://``, ``http:/`` as a path
# keeps it), or credentials before a host. greenadapt writes only local files.
_REMOTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/")


def looks_remote(path: Any) -> bool:
    """Whether an output path is a URL or carries credentials, which no local folder name should."""
    text = str(path)
    return bool(_REMOTE.match(text)) or _CREDENTIALS_IN_TEXT.search(text) is not None


def public_specs(specs: Any) -> Any:
    """Corpus specs as they may be written down (options.json, a manifest): each URL without its credentials or signature."""
    if specs is None:
        return None
    return tuple(redact_url(spec).public if is_url(spec) else spec for spec in specs)


def redact_url(url: str) -> RedactedUrl:
    parts = urllib.parse.urlsplit(url)
    scheme, _, rest = url.partition("://")
    if scheme.lower() in KEY_PAIR_SCHEMES and "@" in rest.split("?")[0]:
        # s3://KEY:SECRET@bucket/key: an AWS secret often holds "/", which urlsplit takes for the path's start.
        userinfo, _, located = rest.split("?")[0].rpartition("@")
        query = parts.query
        parts = urllib.parse.urlsplit(f"{scheme}://{located}" + (f"?{query}" if query else ""))
        parts = parts._replace(netloc=f"{userinfo}@{parts.netloc}")
    secrets: list[str] = []
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        secrets += [userinfo, urllib.parse.unquote(userinfo)]
        secrets += [s for s in (password, urllib.parse.unquote(password)) if s]
        _register_log_secrets(list(secrets))
        names = [s for s in (user, urllib.parse.unquote(user)) if s]
        secrets += names
        # A bare user (no password) is often the whole secret, e.g. a token as user name; beside a password it is an
        # identity, which may also name the user's folders (/home/alice): kept in records that are read back.
        _register_log_secrets(names, identity=bool(password))
        netloc = hostport
    pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    signed = any(_SECRET_PARAM.search(name) for name, _ in pairs)
    kept = []
    for name, value in pairs:
        if _SECRET_PARAM.search(name) or (signed and _SIGNING_PARAM.search(name)):
            if value:
                secrets += [value, urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value)]
                if _SECRET_PARAM.search(name):  # not X-Amz-Date, Expires...: those are no secret, and short
                    _register_log_secrets([value, urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value)])
            continue
        kept.append((name, value))
    if not secrets:
        return RedactedUrl(url, url)  # nothing to hide: keep the URL exactly as given
    query = urllib.parse.urlencode(kept)
    public = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    return RedactedUrl(public, url, tuple(dict.fromkeys(s for s in secrets if s)))


# --------------------------------------------------------------------------
# Log records: libraries log request lines (urllib3 at DEBUG: "GET /path?query"),
# so every secret seen in a URL is scrubbed from every record, whatever logger.

_LOG_SECRETS: set[str] = set()  # scrubbed from every line greenadapt shows, logs or writes
_IDENTITIES: set[str] = set()  # a URL's user name beside a password: scrubbed from what is shown and logged, not from records
_LOG_LOCK = threading.Lock()
_previous_factory: Any = None


def _register_log_secrets(values: list[str], *, identity: bool = False) -> None:
    values = [v for v in values if v and len(v) >= 3]
    if not values:
        return
    with _LOG_LOCK:
        (_IDENTITIES if identity else _LOG_SECRETS).update(values)
    scrub_every_log_record()


def scrub_every_log_record() -> None:
    """Every log record, whatever logger, scrubbed (:func:`scrub_secrets`) before any handler sees it; idempotent."""
    global _previous_factory
    with _LOG_LOCK:
        if _previous_factory is None:
            _previous_factory = logging.getLogRecordFactory()
            logging.setLogRecordFactory(_scrubbing_record_factory)


def _scrubbing_record_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record = _previous_factory(*args, **kwargs)
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a malformed record is the logging module's to report
        return record
    if "@" in message or "://" in message or any(secret in message for secrets in (_LOG_SECRETS, _IDENTITIES) for secret in secrets):
        scrubbed = scrub_secrets(message)
        if scrubbed != message:
            record.msg, record.args = scrubbed, ()
    return record


class ScrubbedLines:
    """A text stream that writes ``stream``'s lines scrubbed (:func:`scrub_secrets`): what a command prints on stdout.
    A line is held until its newline (or a flush), so a URL written in two pieces is still seen whole."""

    def __init__(self, stream: Any) -> None:
        self._stream, self._pending = stream, ""

    def write(self, text: str) -> int:
        pending = self._pending + text
        whole, newline, self._pending = pending.rpartition("\n")
        if newline:
            self._stream.write(scrub_secrets(whole + newline) if ("@" in whole or ":/" in whole or _LOG_SECRETS or _IDENTITIES)
                               else whole + newline)
        return len(text)

    def flush(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, ""
            self._stream.write(scrub_secrets(pending))
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding...: the stream's own
        return getattr(self._stream, name)


