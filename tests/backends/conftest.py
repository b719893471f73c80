import pytest

from .fault_server import FaultServer


@pytest.fixture
def fault_server():
    """A scripted chat-completions server on 127.0.0.1 (a free port), running in a thread."""
    server = FaultServer(hang_s=1.5).start()
    yield server
    server.stop()
