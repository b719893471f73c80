"""Load a model under a spec and run the server: in a background thread (tests, notebooks) or blocking."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from typing import Any

from qdrift.serve.generation import ServedModel

LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """Whether `host` binds to this machine only (127.0.0.0/8, ::1, localhost)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_served(model_ref: str, spec: str | None = None, dtype: Any = None, name: str | None = None,
                tool_mode: str = "auto", tool_format: str | None = None, prefill_opening: bool = False,
                default_max_tokens: int = 512, max_tokens_limit: int | None = None) -> ServedModel:
    """A model reference (qdrift.models.refs) loaded and, unless `spec` is None or 'baseline', quantized."""
    from qdrift.envs.prompting import tool_prompt_for
    from qdrift.models.refs import load_model_ref

    canonical = None
    if spec not in (None, "baseline"):
        from qdrift.spec import QuantSpec

        canonical = str(QuantSpec.parse(spec))
    model, tokenizer = load_model_ref(model_ref, dtype=dtype)
    if canonical is not None:
        import qdrift

        qdrift.quantize(model, canonical, keep_original=False)
    prompt = tool_prompt_for(tokenizer, mode=tool_mode, parser=tool_format, prefill_opening=prefill_opening)
    return ServedModel(model, tokenizer, prompt, name or model_ref, canonical, default_max_tokens, max_tokens_limit)


class ServerThread:
    """uvicorn serving `served` from a daemon thread; port 0 picks a free port (see `.port`)."""

    def __init__(self, served: ServedModel, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning",
                 api_key=None):
        import uvicorn

        from qdrift.serve.app import create_app

        self.served = served
        config = uvicorn.Config(create_app(served, api_key), host=host, port=port, log_level=log_level)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="qdrift-serve", daemon=True)

    def start(self, timeout: float = 30.0) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the server stopped while starting (is the port in use?)")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server did not start within {timeout} s")
            time.sleep(0.02)
        return self

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the listening socket is bound to, as the OS reports it."""
        sock: socket.socket = self.server.servers[0].sockets[0]
        host, port = sock.getsockname()[:2]
        return host, port

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
