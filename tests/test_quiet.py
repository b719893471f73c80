"""Importing qdrift's quantization stack prints none of torchao's or pytree's import noise, but a real
warning from the same loggers still shows."""

import argparse
import logging
import subprocess
import sys


def test_import_noise_is_dropped_and_other_warnings_from_those_loggers_still_show():
    code = ("import logging, qdrift.quant, torchao\n"
            "logging.getLogger('torchao').warning('a real torchao warning')\n")
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300).stderr
    assert "Failed to load" not in err and "register_constant" not in err, err
    assert "a real torchao warning" in err


def test_the_filters_match_only_their_messages():
    from qdrift import quiet

    quiet.install()
    quiet.install()  # idempotent
    torchao = logging.getLogger("torchao")
    assert len([f for f in torchao.filters if isinstance(f, quiet._DropNoise)]) == 1
    make = logging.LogRecord
    assert not torchao.filter(make("torchao", logging.WARNING, "", 0, "Failed to load /x/_C.so: oops", (), None))
    assert torchao.filter(make("torchao", logging.WARNING, "", 0, "Failed to load the model", (), None))


def test_ctrl_c_is_one_line_and_exit_status_130(monkeypatch, capsys):
    from qdrift import cli

    def interrupted(args):
        raise KeyboardInterrupt

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    monkeypatch.setattr(parser, "parse_args", lambda argv: argparse.Namespace(command="sweep", func=interrupted))
    assert cli.main(["sweep"]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "qdrift sweep: interrupted" in err and "Traceback" not in err
