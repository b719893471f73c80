"""`qdrift serve`: an OpenAI-compatible chat-completions server for a local model under any spec.

Any harness that speaks the OpenAI API (tool calling included) can then measure a simulated-
quantized model. Binds to loopback unless told otherwise; serves one model, one turn at a time.

    served = load_served("organism", "w4g32-a16-kv:16")
    with ServerThread(served) as server:      # a free local port
        print(server.url)                     # http://127.0.0.1:PORT/v1
"""

from qdrift.serve.generation import ServedModel
from qdrift.serve.run import ServerThread, is_loopback, load_served

__all__ = ["ServedModel", "ServerThread", "is_loopback", "load_served", "create_app"]


def create_app(served: ServedModel):
    """The FastAPI app for `served` (imported lazily: fastapi is only needed to serve)."""
    from qdrift.serve.app import create_app as _create

    return _create(served)
