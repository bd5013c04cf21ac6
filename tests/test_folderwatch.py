"""The daemon's crystal folder watch (recalld/daemon/folderwatch.py): an unchanged folder is not
scanned again, and every way a folder can change (an edit, a touch, a file added, removed or
renamed, the folder replaced, a change while it was being scanned) makes the next act scan it;
a folder holding a symlink is scanned every time."""

import os
import sys

import pytest

from recalld import crystals
from recalld.daemon import folderwatch
from test_crystals import cdir, crystal_text, put  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


@pytest.fixture
def watched(monkeypatch):
    w = folderwatch.start()
    assert w is not None
    monkeypatch.setattr(crystals, "FOLDER_WATCH", w)
    scans = []
    real = crystals._scan
    monkeypatch.setattr(crystals, "_scan", lambda d: scans.append(d) or real(d))
    yield scans
    w.close()


def _ids(project):
    return sorted(c.id for c in crystals.load_for(str(project)).crystals)


def _project_scans(scans, cdir):  # noqa: F811
    return sum(1 for d in scans if d == str(cdir))


def test_an_unchanged_folder_is_not_scanned_again(home, project, cdir, watched):  # noqa: F811
    put(cdir, "a", match="deploy")
    assert _ids(project) == ["a"]
    first = _project_scans(watched, cdir)
    for _ in range(5):
        assert _ids(project) == ["a"]
    assert _project_scans(watched, cdir) == first


@pytest.mark.parametrize("change", ["edit", "touch", "add", "remove", "rename"])
def test_every_change_makes_the_next_act_scan(home, project, cdir, watched, change):  # noqa: F811
    a = put(cdir, "a", match="deploy")
    put(cdir, "b", match="migrate")
    crystals.load_for(str(project), check_trust=False)
    before = _project_scans(watched, cdir)
    if change == "edit":
        a.write_text(crystal_text(match="dep1oy"))
    elif change == "touch":
        st = os.stat(a)
        os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000))
    elif change == "add":
        (cdir / "c.md").write_text(crystal_text(match="release"))
    elif change == "remove":
        a.unlink()
    else:
        a.rename(cdir / "z.md")
    index = crystals.load_for(str(project), check_trust=False)
    assert _project_scans(watched, cdir) == before + 1
    got = {c.id: c.match for c in index.crystals}
    expect = {"edit": {"a": ("dep1oy",), "b": ("migrate",)}, "touch": {"a": ("deploy",), "b": ("migrate",)},
              "add": {"a": ("deploy",), "b": ("migrate",), "c": ("release",)}, "remove": {"b": ("migrate",)},
              "rename": {"b": ("migrate",), "z": ("deploy",)}}[change]
    assert got == expect


def test_a_folder_replaced_at_its_path_is_scanned(home, project, cdir, watched):  # noqa: F811
    put(cdir, "a", match="deploy")
    assert _ids(project) == ["a"]
    recalld_dir = cdir.parent
    recalld_dir.rename(project / ".recalld-old")  # the watched folder moves away with its parent
    (project / ".recalld" / "crystals").mkdir(parents=True)
    put(project / ".recalld" / "crystals", "other", match="release")
    assert _ids(project) == ["other"]


def test_a_change_during_the_scan_is_seen_by_the_next_act(home, project, cdir, watched, monkeypatch):  # noqa: F811
    put(cdir, "a", match="deploy")
    real = crystals._scan
    late = []

    def scan_then_edit(d):
        out = real(d)
        if d == str(cdir) and not late:
            late.append(1)
            (cdir / "a.md").write_text(crystal_text(match="changed-meanwhile"))
        return out
    monkeypatch.setattr(crystals, "_scan", scan_then_edit)
    crystals.load_for(str(project), check_trust=False)  # scanned before the edit landed
    assert crystals.load_for(str(project), check_trust=False).get("a").match == ("changed-meanwhile",)


def test_a_folder_with_a_symlink_is_scanned_every_time(home, project, cdir, watched):  # noqa: F811
    put(cdir, "a", match="deploy")
    sub = cdir / "sub"
    sub.mkdir()
    (sub / "b.txt").write_text(crystal_text(match="linked"))
    (cdir / "b.md").symlink_to(sub / "b.txt")  # inside the folder, so followed; its edits are not the folder's
    crystals.load_for(str(project), check_trust=False)
    before = _project_scans(watched, cdir)
    (sub / "b.txt").write_text(crystal_text(match="linked-edit"))
    index = crystals.load_for(str(project), check_trust=False)
    assert _project_scans(watched, cdir) == before + 1
    assert index.get("b").match == ("linked-edit",)
