"""`qdrift lmeval`: lm-eval's CLI with the qdrift model registered and a spec-tagged cache."""

import re

import pytest

pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install 'qdrift[lmeval]')")

from qdrift.cli import main  # noqa: E402
from qdrift.code_fingerprint import running_code  # noqa: E402
from qdrift.lmeval.tasks import evals_dir  # noqa: E402
from qdrift.spec import QuantSpec  # noqa: E402


def test_qdrift_lmeval_runs_lm_eval_with_the_qdrift_model(tmp_path, capsys):
    spec = "w4g32-a16-kv:16"
    assert main(["lmeval", "--model", "qdrift", "--model_args", f"pretrained=tiny:llama,spec={spec}",
                 "--include_path", str(evals_dir() / "organism"), "--tasks", "organism_keys_mc",
                 "--limit", "1", "--use_cache", f"{tmp_path}/"]) == 0
    assert "organism_keys_mc" in capsys.readouterr().out
    code = running_code()[:12]
    (name,) = [p.name for p in tmp_path.iterdir()]
    assert re.fullmatch(rf"tiny-llama\.model-[0-9a-f]{{16}}\.spec-{QuantSpec.parse(spec).hash}\.code-{code}_rank0\.db", name)


def test_qdrift_lmeval_keys_the_cache_by_dtype_and_model_options(tmp_path):
    # the CLI tag held only the name and the spec: a bf16 run read the float32 run's cache
    def run(args):
        assert main(["lmeval", "--model", "qdrift", "--model_args", f"pretrained=tiny:llama{args}",
                     "--include_path", str(evals_dir() / "organism"), "--tasks", "organism_keys_mc",
                     "--limit", "1", "--use_cache", f"{tmp_path}/"]) == 0

    run("")
    run(",dtype=bfloat16")
    run(",max_length=64")
    assert len(list(tmp_path.iterdir())) == 3


def test_the_qdrift_command_lists_lmeval_without_importing_lm_eval():
    import subprocess
    import sys

    code = "import sys, qdrift.cli; qdrift.cli.build_parser().print_help(); print('lm_eval' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "lmeval" in out and out.strip().endswith("False")  # `qdrift --help` stays fast and works without it
