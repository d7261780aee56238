"""The config store: atomic writes, the lock, stale-entry refusal, bad input, and the in-process memo of the
runtime lookup (no re-read while the file is unchanged, a new promotion seen at once, stale refused every call)."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import warnings

import pytest

from parity import lookup
from parity.errors import ParityError
from parity.lookup import Key, StaleConfigError, StoreReader, promoted_config
from parity.store import Store


@pytest.fixture(autouse=True)
def fresh_caches():
    """Each test starts as a fresh process would: nothing memoized."""
    lookup.clear_caches()
    yield
    lookup.clear_caches()


@pytest.fixture()
def kernel_module(tmp_path, monkeypatch):
    """A throwaway kernel module whose source the store hashes."""
    path = tmp_path / "toykernel.py"
    path.write_text("def kernel(**kw):\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("toykernel", None)
    yield path
    sys.modules.pop("toykernel", None)


def _key(bucket: str = "b1", device: str = "cpu-interpreter") -> Key:
    return Key(device, "toy", "toykernel:kernel", "float32", bucket)


def test_put_then_find_round_trips(tmp_path, kernel_module):
    s = Store(tmp_path / "configs")
    s.put(_key(), {"block_sizes": [16]}, {"cases": 3})
    entry = s.find(_key())
    assert entry["config"] == {"block_sizes": [16]} and entry["evidence"] == {"cases": 3}
    assert set(entry["versions"]) == {"helion", "triton", "torch"} and len(entry["kernel_hash"]) == 64
    assert s.find(_key("other")) is None


def test_interrupted_write_leaves_the_previous_entry(tmp_path, kernel_module, monkeypatch):
    s = Store(tmp_path / "configs")
    s.put(_key(), {"v": 1}, {})
    before = s.path("cpu-interpreter", "toy").read_text()

    def crash(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        s.put(_key(), {"v": 2}, {})
    assert s.path("cpu-interpreter", "toy").read_text() == before
    assert [p.name for p in s.path("cpu-interpreter", "toy").parent.iterdir() if p.suffix == ".tmp"] == []


def _promote(root: str, module_dir: str, bucket: str) -> None:
    sys.path.insert(0, module_dir)
    Store(root).put(_key(bucket), {"bucket": bucket}, {})


def test_two_promoters_at_once_keep_both_entries(tmp_path, kernel_module):
    root = str(tmp_path / "configs")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_promote, args=(root, str(kernel_module.parent), f"b{i}")) for i in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    entries = Store(root).entries("cpu-interpreter", "toy")
    assert sorted(e["bucket"] for e in entries) == [f"b{i}" for i in range(6)]


def test_stale_entry_is_refused_with_how_to_regate(tmp_path, kernel_module):
    s = Store(tmp_path / "configs")
    s.put(_key(), {"v": 1}, {})
    assert promoted_config("toy", "toykernel:kernel", "float32", "b1", "cpu", s) == {"v": 1}
    kernel_module.write_text("def kernel(**kw):\n    return 2\n")
    lookup.clear_caches()  # source hashes are memoized per process: an edited kernel is seen after a restart
    with pytest.raises(StaleConfigError, match=r"changed since it was gated.*parity promote toy"):
        promoted_config("toy", "toykernel:kernel", "float32", "b1", "cpu", s)


def test_version_change_makes_an_entry_stale(tmp_path, kernel_module, monkeypatch):
    s = Store(tmp_path / "configs")
    s.put(_key(), {"v": 1}, {})
    monkeypatch.setattr(lookup, "versions", lambda: {"helion": "9.9", "triton": "3.6.0", "torch": "x"})
    reasons = s.staleness(s.find(_key()))
    assert any("helion is 9.9" in r for r in reasons)


def test_missing_entry_warns_once_and_returns_none(tmp_path, kernel_module):
    s = Store(tmp_path / "configs")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert promoted_config("toy", "toykernel:kernel", "float32", "nope", "cpu", s) is None
        assert promoted_config("toy", "toykernel:kernel", "float32", "nope", "cpu", s) is None
    assert len([w for w in caught if "no promoted config" in str(w.message)]) == 1


def test_wildcard_bucket_is_the_fallback(tmp_path, kernel_module):
    s = Store(tmp_path / "configs")
    s.put(_key("*"), {"v": "any"}, {})
    assert s.find(_key("b7"))["config"] == {"v": "any"}


@pytest.mark.parametrize("text", ["{not json", "[]", '{"entries": 3}'])
def test_malformed_store_file_is_a_clear_error(tmp_path, text):
    s = Store(tmp_path / "configs")
    path = s.path("cpu-interpreter", "toy")
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(ParityError, match=r"toy\.json"):
        s.entries("cpu-interpreter", "toy")


def test_store_files_are_reviewable_json(tmp_path, kernel_module):
    s = Store(tmp_path / "configs")
    s.put(_key(), {"v": 1}, {})
    data = json.loads(s.path("cpu-interpreter", "toy").read_text())
    assert data["device"] == "cpu-interpreter" and data["op"] == "toy" and len(data["entries"]) == 1


def _counting(monkeypatch, owner, name: str) -> list[int]:
    """Wrap ``owner.name`` so each call appends to the returned list."""
    calls: list[int] = []
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_repeated_lookup_neither_rereads_nor_rehashes(tmp_path, kernel_module, monkeypatch):
    s = Store(tmp_path / "configs")
    s.put(_key(), {"bwd": {"block_sizes": [16, 1]}}, {})
    reads = _counting(monkeypatch, StoreReader, "entries")
    checks = _counting(monkeypatch, StoreReader, "staleness")
    first = promoted_config("toy", "toykernel:kernel", "float32", "b1", "cpu", s)
    assert (len(reads), len(checks)) == (1, 1)
    for _ in range(3):
        assert promoted_config("toy", "toykernel:kernel", "float32", "b1", "cpu", Store(tmp_path / "configs")) == first
    assert first == {"bwd": {"block_sizes": [16, 1]}} and (len(reads), len(checks)) == (1, 1)


def test_new_promotion_is_seen_by_the_next_lookup(tmp_path, kernel_module):
    s = Store(tmp_path / "configs")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert promoted_config("toy", "toykernel:kernel", "float32", "b1", "cpu", s) is None  # no file yet
    s.put(_key(), {"v": 1}, {})
    assert promoted_config("toy", "toykernel:kernel", "float32", "b1", "cpu", s) == {"v": 1}
    s.put(_key(), {"v": 2}, {})  # same size on disk: the replaced file's inode and mtime tell it apart
    assert promoted_config("toy", "toykernel:kernel", "float32", "b1", "cpu", s) == {"v": 2}


def test_stale_entry_raises_on_every_call(tmp_path, kernel_module, monkeypatch):
    s = Store(tmp_path / "configs")
    s.put(_key(), {"v": 1}, {})
    monkeypatch.setattr(lookup, "versions", lambda: {"helion": "9.9", "triton": "3.6.0", "torch": "x"})
    for _ in range(3):
        with pytest.raises(StaleConfigError, match=r"helion is 9\.9"):
            promoted_config("toy", "toykernel:kernel", "float32", "b1", "cpu", s)


def test_device_key_asks_cuda_once_per_device(monkeypatch):
    import torch

    names: list[int | None] = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: names.append(index) or "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert [lookup.device_key("cuda") for _ in range(3)] == ["nvidia-h200-sm90"] * 3
    assert lookup.device_key("cuda:1") == "nvidia-h200-sm90"
    assert names == [0, 1]


def test_editing_a_helper_module_the_kernel_uses_makes_it_stale(tmp_path, monkeypatch):
    """The hash covers the package modules the entry point reaches (here a helper it imports), not just its file;
    modules outside its package (torch, ...) are not hashed."""
    package = tmp_path / "toypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helper.py").write_text("def launch():\n    return 1\n")
    (package / "entry.py").write_text(
        "import json\n\nfrom toypkg.helper import launch\n\n\ndef kernel(**kw):\n    return launch()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        before = lookup.source_hash("toypkg.entry:kernel")
        assert set(lookup._package_modules(sys.modules["toypkg.entry"])) == {"toypkg.entry", "toypkg.helper"}
        (package / "helper.py").write_text("def launch():\n    return 2\n")
        lookup.clear_caches()
        assert lookup.source_hash("toypkg.entry:kernel") != before
    finally:
        for name in ("toypkg", "toypkg.entry", "toypkg.helper"):
            sys.modules.pop(name, None)


def test_a_kernels_code_hash_follows_its_device_code_not_the_host_code_around_it(tmp_path, monkeypatch):
    """A tuning record's key (``code_hash``) covers the kernel function, what it names in its package (a helper
    function, a constant, its decorator's settings) and nothing else: an edit of the launcher or of another
    function of its module changes only ``source_hash`` (which keys the op's judgements and store entries)."""
    package = tmp_path / "codepkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    files = {
        "helper.py": (
            "def helper(x):\n    return x + 1\n\n\nclass Block:\n    def __init__(self, n):\n        self.n = n\n\n"
            "    def __repr__(self):\n        return f'Block({self.n})'\n"
        ),
        "launcher.py": "def launch(fn, x):\n    return fn(x)\n",
        "entry.py": (
            "from codepkg.helper import Block, helper\nfrom codepkg.launcher import launch\n\nSCALE = 2\n"
            "BLOCK = Block(16)\n"
            "SETTINGS = {'static_shapes': False}\n\n\ndef deco(**settings):\n    return lambda fn: fn\n\n\n"
            "@deco(**SETTINGS)\ndef kernel(x):\n    return [helper(v) * SCALE + BLOCK.n for v in x]\n\n\n"
            "def host(x):\n    return launch(kernel, x)\n"
        ),
    }
    monkeypatch.syspath_prepend(str(tmp_path))

    def hashes(**edits: tuple[str, str]) -> tuple[str, str]:
        for name, (old, new) in edits.items():
            assert old in files[name]
            files[name] = files[name].replace(old, new)
        for name, text in files.items():
            (package / name).write_text(text)
        for name in [m for m in sys.modules if m.partition(".")[0] == "codepkg"]:
            sys.modules.pop(name)
        lookup.clear_caches()
        return lookup.code_hash("codepkg.entry:kernel"), lookup.source_hash("codepkg.entry:kernel")

    try:
        code, source = hashes()
        host_edits: list[dict[str, tuple[str, str]]] = [
            {"launcher.py": ("return fn(x)", "return fn(list(x))")},
            {"entry.py": ("return launch(kernel, x)", "return launch(kernel, tuple(x))")},
        ]
        for edit in host_edits:
            new_code, new_source = hashes(**edit)
            assert new_code == code and new_source != source, edit
            source = new_source
        device_edits: list[dict[str, tuple[str, str]]] = [
            {"helper.py": ("x + 1", "x + 10")},
            {"entry.py": ("SCALE = 2", "SCALE = 20")},
            {"entry.py": ("'static_shapes': False", "'static_shapes': True")},
            {"entry.py": ("Block(16)", "Block(32)")},
            {"helper.py": ("self.n = n", "self.n = n + 0")},
            {"entry.py": ("* SCALE + BLOCK.n for", "* SCALE * 1 + BLOCK.n for")},
        ]
        for edit in device_edits:
            new_code, _ = hashes(**edit)
            assert new_code != code, edit
            code = new_code
    finally:
        for name in [m for m in sys.modules if m.partition(".")[0] == "codepkg"]:
            sys.modules.pop(name)
        lookup.clear_caches()


def _killed_mid_write(root: str, module_dir: str) -> None:
    """A promote killed (SIGKILL: no cleanup runs) after writing half of its temporary file."""
    import signal

    sys.path.insert(0, module_dir)

    def die(fd: int) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    os.fsync = die
    Store(root).put(_key("b2"), {"v": 2}, {})


def test_a_promote_killed_mid_write_leaves_a_temp_file_that_is_ignored_then_cleaned(tmp_path, kernel_module):
    s = Store(tmp_path / "configs")
    s.put(_key("b1"), {"v": 1}, {})
    before = s.path("cpu-interpreter", "toy").read_text()
    child = multiprocessing.get_context("fork").Process(
        target=_killed_mid_write, args=(str(s.root), str(kernel_module.parent))
    )
    child.start()
    child.join(60)
    assert child.exitcode == -9
    folder = s.path("cpu-interpreter", "toy").parent
    strays = sorted(p.name for p in folder.glob(".toy.json.*.tmp"))
    assert len(strays) == 1  # what a killed writer leaves behind
    other = folder / ".other.json.abc.tmp"  # another op's temp file is not this write's to remove
    other.write_text("")
    # reading and listing ignore it
    assert s.path("cpu-interpreter", "toy").read_text() == before
    assert s.files() == [("cpu-interpreter", "toy")]
    assert [e["bucket"] for e in s.entries("cpu-interpreter", "toy")] == ["b1"]
    # the next write (under the lock, so no live writer owns it) removes it
    s.put(_key("b3"), {"v": 3}, {})
    assert sorted(p.name for p in folder.glob(".toy.json.*.tmp")) == [] and other.exists()
    assert [e["bucket"] for e in s.entries("cpu-interpreter", "toy")] == ["b1", "b3"]


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        (7, "invalid entry: not an object (int)"),
        ({"target": "toykernel:kernel"}, "invalid entry: missing field(s) op, dtype, bucket, config, kernel_hash"),
    ],
)
def test_a_malformed_entry_is_stale_not_a_crash(tmp_path, kernel_module, entry, reason):
    s = Store(tmp_path / "configs")
    assert s.staleness(entry)[0].startswith(reason)


def test_an_entry_whose_kernel_is_gone_is_stale_at_runtime(tmp_path, kernel_module):
    s = Store(tmp_path / "configs")
    s.put(_key(), {"v": 1}, {})
    path = s.path("cpu-interpreter", "toy")
    data = json.loads(path.read_text())
    data["entries"][0]["target"] = "toykernel:renamed"
    path.write_text(json.dumps(data))
    with pytest.raises(StaleConfigError, match=r"toykernel:renamed cannot be loaded: toykernel has no 'renamed'"):
        promoted_config("toy", "toykernel:renamed", "float32", "b1", "cpu", s)
