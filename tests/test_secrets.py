"""Credentials in corpus URLs never reach a manifest, a cache folder, a log line or an error message.

A local HTTP server (127.0.0.1 only) serves a small corpus; `greenadapt w2v`
reads it through a URL carrying a user:password and signed-URL query
parameters, with debug logging on and tokens in the environment (where
credentials belong). Then every file and folder name the run wrote, and its
stdout and stderr, are searched for each secret. A second run points the
same kind of URL at a port where nothing listens and must fail in one line,
again without a secret.
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import HANG_S

PASSWORD = "S3cretPassw0rdXYZ"
USER = "alice-user-7731"
SIGNATURE = "SIGsecret0123456789abcdef"
TOKEN = "tok-QQQ-987654321"
ENV_SECRETS = {"HF_TOKEN": "hf_envSECRETvalue123", "AWS_SECRET_ACCESS_KEY": "awsENVsecretKEY999", "AWS_ACCESS_KEY_ID": "AKIAENVKEYID0000"}
SECRETS = [PASSWORD, USER, SIGNATURE, TOKEN, *ENV_SECRETS.values()]
CORPUS = "\n".join(f"the heart rate of patient {i} with tachycardia rose after covid infection" for i in range(200)) + "\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self) -> None:  # noqa: N802 - the stdlib's naming
        self._reply(head=True)

    def do_GET(self) -> None:  # noqa: N802
        self._reply(head=False)

    def _reply(self, *, head: bool) -> None:
        data = CORPUS.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("ETag", '"v1"')
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _url(port: int) -> str:
    return f"http://{USER}:{PASSWORD}@127.0.0.1:{port}/corpus.txt?X-Amz-Signature={SIGNATURE}&token={TOKEN}&X-Amz-Expires=600"


def _leaks(root: Path, *texts: str) -> list[str]:
    found = []
    for path in [root, *root.rglob("*")]:
        content = path.read_bytes() if path.is_file() else b""
        for secret in SECRETS:
            if secret in str(path) or secret.encode() in content:
                found.append(f"{secret!r} in {path}")
    for i, text in enumerate(texts):
        found += [f"{secret!r} in output {i}" for secret in SECRETS if secret in text]
    return found


def _w2v(url: str, tiny_bert: Path, work: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **ENV_SECRETS, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "greenadapt", "w2v", "-c", url, "-m", str(tiny_bert), "--workers", "1", "--w2v-min-count", "1",
         "--epochs", "1", "--dim", "8", "--workdir", str(work), "--out", str(work / "w2v"), "--json", "--verbose"],
        capture_output=True, text=True, env=env, timeout=HANG_S,
    )


def test_url_secrets_reach_no_manifest_log_or_folder_name(server: int, tiny_bert: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    result = _w2v(_url(server), tiny_bert, work)
    assert result.returncode == 0, result.stderr[-3000:]
    manifests = list(work.rglob("manifest.json"))
    assert len(manifests) >= 2  # the w2v output and the pre-tokenization cache
    assert f"127.0.0.1:{server}/corpus.txt" in (work / "w2v" / "manifest.json").read_text()  # the source is recorded...
    assert f"127.0.0.1:{server}/corpus.txt" in (work / "w2v" / "options.json").read_text()  # (the options a replay reads too)
    assert not _leaks(work, result.stdout, result.stderr)  # ...without its credentials
    assert "DEBUG" in result.stderr or " D " in result.stderr  # debug logging really was on


def test_failing_url_error_has_no_secret(tiny_bert: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    from greenadapt.corpus import remote

    result = _w2v(_url(_closed_port()), tiny_bert, work)
    assert result.returncode == 3, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "127.0.0.1" in errors[0], result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert not _leaks(work, result.stdout, result.stderr)
    assert remote.HTTP_RETRIES >= 1  # the failure came after retries, each logged: none of them leaked either


def test_any_logger_scrubs_url_secrets(caplog: pytest.LogCaptureFixture) -> None:
    """The in-process view: once a URL's secrets are known, no record of any library shows them."""
    import logging

    from greenadapt.corpus import CorpusSource

    source = CorpusSource(_url(8), "text")
    assert PASSWORD not in repr(source) and SIGNATURE not in source.uri
    with caplog.at_level(logging.DEBUG):
        # WARNING: other tests' command runs may have set these loggers' levels (--quiet).
        logging.getLogger("urllib3.connectionpool").warning('http://127.0.0.1:8 "GET %s HTTP/1.1" 200', _url(8).split("8", 1)[1])
        logging.getLogger("botocore.endpoint").warning("signed with %s and %s for %s", SIGNATURE, TOKEN, USER)
        logging.getLogger("secrets_test").warning("X-Amz-Expires=600 stays: not a secret")
    assert not [s for s in SECRETS[:4] if s in caplog.text], caplog.text
    # greenadapt's scrubber writes ***; a library that redacts first (mlflow, once imported, writes [REDACTED]) is as good
    assert caplog.text.count("***") + caplog.text.count("[REDACTED]") >= 5 and "X-Amz-Expires=600 stays" in caplog.text
