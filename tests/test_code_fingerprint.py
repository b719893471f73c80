"""What the code fingerprint covers, and that it follows the files' contents."""

import hashlib

from qdrift import code_fingerprint as cf


def test_it_covers_qdrifts_sources_the_built_in_environments_and_the_task_files_not_weights_prose_or_bytecode():
    names = [n for n, _ in cf.code_files()]
    assert names == sorted(names)
    assert {"qdrift/store.py", "qdrift/sweep/default.yaml", "qdrift/quant/kv.py", "agents/ledger.py",
            "evals/organism/organism_keys_mc.yaml", "evals/organism/pointer_chase_keys.jsonl"} <= set(names)
    assert not [n for n in names if "organism/weights" in n or "__pycache__" in n or n.endswith((".pyc", ".md"))]


def test_it_hashes_each_files_name_and_content_and_follows_a_task_folder_set_elsewhere(tmp_path, monkeypatch):
    evals = tmp_path / "evals"
    (evals / "t" / "__pycache__").mkdir(parents=True)
    task = evals / "t" / "task.yaml"
    task.write_text("task: a\n")
    (evals / "README.md").write_text("prose\n")
    (evals / "t" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    monkeypatch.setenv("QDRIFT_EVALS", str(evals))
    files = cf.code_files()
    # The folder in use, beside the checkout's evals/ (task files name their data relative to the checkout).
    assert [n for n, _ in files if n.startswith("$QDRIFT_EVALS/")] == ["$QDRIFT_EVALS/t/task.yaml"]
    assert any(n.startswith("evals/organism/") for n, _ in files)
    # A direct reference: hashlib over the documented layout, not the module's own loop.
    ref = hashlib.sha256(b"".join(n.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest() for n, p in files))
    before = cf.code_fingerprint()
    assert before == ref.hexdigest()
    (evals / "README.md").write_text("other prose\n")
    (evals / "t" / ".task.yaml.swp").write_bytes(b"\0")  # an editor holding the file open
    (evals / "t" / "task.yaml~").write_text("task: backup\n")
    assert cf.code_fingerprint() == before  # prose, hidden files and backups are not code
    task.write_text("task: b\n")
    assert cf.code_fingerprint() != before
    monkeypatch.setenv("QDRIFT_EVALS", str(tmp_path / "missing"))
    assert not [n for n, _ in cf.code_files() if n.startswith("$QDRIFT_EVALS/")]


def test_naming_the_checkouts_own_task_folder_is_the_same_code(monkeypatch):
    monkeypatch.delenv("QDRIFT_EVALS", raising=False)
    unset = cf.code_fingerprint()
    monkeypatch.setenv("QDRIFT_EVALS", str(cf.REPO / "evals" / ".." / "evals"))
    assert cf.code_fingerprint() == unset


def test_a_process_records_the_code_as_it_first_read_it(monkeypatch):
    cf.running_code.cache_clear()
    first = cf.running_code()
    assert first == cf.code_fingerprint()
    monkeypatch.setattr(cf, "code_files", lambda: [])  # the files change after the modules were loaded
    try:
        assert cf.code_fingerprint() == hashlib.sha256().hexdigest() and cf.running_code() == first
    finally:
        monkeypatch.undo()
        cf.running_code.cache_clear()
