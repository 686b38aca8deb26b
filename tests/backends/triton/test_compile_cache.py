"""compile_cache.py: a report is reused only under the key of the sources it was made from."""

from __future__ import annotations

import json
import shutil

import pytest

import compile_cache  # this folder, on sys.path under pytest
from compile_cache import MODE, compiled, source_key


class Compiler:
    """A stand-in for sm90.compile_in_child that records what it was asked to compile."""

    def __init__(self):
        self.asked: list[set] = []

    def __call__(self, names, *, gluon, timeout):
        self.asked.append(set(names))
        return {n: {"variant": n, "regs": 1, "gluon": gluon} for n in names}


def _stored(path, kind, key, names):
    path.write_text(json.dumps({kind: {"key": key, "reports": {n: {"variant": n, "regs": 0} for n in names}}}))


def test_the_key_follows_every_source_file(tmp_path):
    for folder in compile_cache.SOURCES:
        shutil.copytree(compile_cache.ROOT / folder, tmp_path / folder)
    key = source_key(tmp_path)
    assert key == source_key(compile_cache.ROOT)
    for name in ("tilesparse/backends/triton/kernels.py", "tilesparse/ir/semantics.py"):
        path = tmp_path / name
        original = path.read_bytes()
        path.write_bytes(original + b"\n# an edit\n")
        assert source_key(tmp_path) != key, name
        path.write_bytes(original)
        assert source_key(tmp_path) == key


def test_stored_reports_of_these_sources_are_reused_and_the_rest_compiled(tmp_path, monkeypatch):
    monkeypatch.delenv(MODE, raising=False)
    path, compiler = tmp_path / "r.json", Compiler()
    _stored(path, "triton", source_key(), ["a", "b"])
    got = compiled({"a", "c"}, gluon=False, reports=path, compile=compiler)
    assert compiler.asked == [{"c"}]
    assert got == {"a": {"variant": "a", "regs": 0}, "c": {"variant": "c", "regs": 1, "gluon": False}}
    assert compiled({"a"}, gluon=True, reports=path, compile=compiler)["a"]["regs"] == 1  # the other kernels' section


@pytest.mark.parametrize("case", ["other sources", "mode compile", "no file"])
def test_reports_of_other_sources_are_never_reused(tmp_path, monkeypatch, case):
    monkeypatch.delenv(MODE, raising=False)
    path, compiler = tmp_path / "r.json", Compiler()
    if case != "no file":
        _stored(path, "triton", "0" * 64 if case == "other sources" else source_key(), ["a", "b"])
    if case == "mode compile":
        monkeypatch.setenv(MODE, "compile")
    got = compiled({"a", "b"}, gluon=False, reports=path, compile=compiler)
    assert compiler.asked == [{"a", "b"}] and all(r["regs"] == 1 for r in got.values())


def test_write_mode_compiles_everything_and_stores_it_under_the_key(tmp_path, monkeypatch):
    path, compiler = tmp_path / "r.json", Compiler()
    _stored(path, "gluon", "kept", ["g"])
    monkeypatch.setenv(MODE, "write")
    compiled({"a", "b"}, gluon=False, reports=path, compile=compiler)
    stored = json.loads(path.read_text())
    assert compiler.asked == [{"a", "b"}]
    assert stored["triton"]["key"] == source_key() and sorted(stored["triton"]["reports"]) == ["a", "b"]
    assert stored["gluon"]["key"] == "kept", "the other kernels' section stays"
    monkeypatch.delenv(MODE)
    assert compiled({"a", "b"}, gluon=False, reports=path, compile=compiler)["a"]["regs"] == 1
    assert len(compiler.asked) == 1, "read back without compiling"
