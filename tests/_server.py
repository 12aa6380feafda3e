"""A server process for a test: a free port, the process started with its output in a log file, a wait until
``/initialized`` answers true (or a failure showing the log), and the process stopped afterwards."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running_server(
    command: Sequence[str],
    port: int,
    log_file: Path,
    cwd: Path,
    env: dict[str, str],
    name: str = "the REST API",
    timeout: float = 180,
    poll: float = 0.3,
) -> Iterator[str]:
    """Run ``command`` (listening on ``port``) until the block ends; yields ``http://127.0.0.1:<port>``."""
    import requests

    with log_file.open("w") as log:
        proc = subprocess.Popen(list(command), cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    if requests.get(f"{url}/initialized", timeout=2).json() is True:
                        break
                except (requests.ConnectionError, requests.Timeout, ValueError):
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"{name} did not start:\n{log_file.read_text()[-3000:]}")
                time.sleep(poll)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
