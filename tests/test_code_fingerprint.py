"""What the code fingerprint covers, and that it follows the files' contents."""

import hashlib

from qdrift import code_fingerprint as cf


def test_it_covers_qdrifts_sources_the_built_in_environments_and_the_task_files_not_weights_prose_or_bytecode():
    names = [n for n, _ in cf.code_files()]
    assert names == sorted(names)
    assert {"qdrift/store.py", "qdrift/sweep/default.yaml", "qdrift/quant/kv.py", "agents/ledger.py"} <= set(names)
    assert any(n.startswith("evals/organism/") for n in names)
    assert not [n for n in names if "organism/weights" in n or "__pycache__" in n or n.endswith((".pyc", ".md"))]


def test_it_is_the_sha256_over_each_files_name_and_content_hash_and_changes_with_a_task_file(tmp_path, monkeypatch):
    evals = tmp_path / "evals"
    (evals / "t").mkdir(parents=True)
    task = evals / "t" / "task.yaml"
    task.write_text("task: a\n")
    monkeypatch.setenv("QDRIFT_EVALS", str(evals))
    files = cf.code_files()
    assert ("evals/t/task.yaml", task) in files
    # A direct reference: hashlib over the documented layout, not the module's own loop.
    ref = hashlib.sha256(b"".join(n.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest() for n, p in files))
    before = cf.code_fingerprint()
    assert before == ref.hexdigest()
    (evals / "t" / "__pycache__").mkdir()
    (evals / "t" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert cf.code_fingerprint() == before  # bytecode is not code
    task.write_text("task: b\n")
    assert cf.code_fingerprint() != before
    monkeypatch.setenv("QDRIFT_EVALS", str(tmp_path / "missing"))  # an install without task files
    assert not [n for n, _ in cf.code_files() if n.startswith("evals/")]
