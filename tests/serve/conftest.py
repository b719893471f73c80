"""Servers on free loopback ports, shared by the tests of qdrift.serve (loading the organism once)."""

import httpx
import pytest

from qdrift.serve import ServerThread, load_served

QUANT_SPEC = "w4g32-a16-kv:16"


@pytest.fixture(scope="session")
def server():
    with ServerThread(load_served("organism", "baseline")) as s:
        yield s


@pytest.fixture(scope="session")
def quant_server():
    with ServerThread(load_served("organism", QUANT_SPEC)) as s:
        yield s


@pytest.fixture(scope="session")
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c
