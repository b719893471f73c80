"""`qdrift serve` as a user runs it: a subprocess that prints its URL, bound to loopback by default."""

import os
import subprocess
import sys

import httpx

from qdrift.cli import build_parser


def test_serve_parser_defaults_to_loopback():
    args = build_parser().parse_args(["serve", "organism", "--spec", "baseline"])
    assert args.host == "127.0.0.1" and args.port == 8000


def test_cli_serves_on_loopback_and_prints_url():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "qdrift.cli", "serve", "tiny:llama", "--spec", "w8-a16-kv:16",
                             "--port", "0", "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert "at http://127.0.0.1:" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        url = line.rsplit(" at ", 1)[1].strip()
        models = httpx.get(f"{url}/models", timeout=30)
        assert models.json()["data"][0]["id"] == "tiny:llama"
        assert models.headers["x-qdrift-spec"] == "w8-a16-kv:16"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_only_loopback_addresses_count_as_loopback():
    from qdrift.serve import is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")
