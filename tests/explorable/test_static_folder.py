"""The static build's output folder holds only what a host should serve: the two pages, static/ and data/; no
hidden file, no working file, no resume cache (it is kept outside the folder and removed once the build is done).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from explorable.static_site import export
from explorable.static_site.static_page import STOPS

ROOT = Path(__file__).resolve().parents[2]


def test_the_built_folder_holds_only_what_a_host_serves(static_build):
    files = static_build.files
    assert "index.html" in files and "projector.html" in files
    hidden = [f for f in files if any(part.startswith(".") for part in Path(f).parts)]
    assert hidden == [], f"hidden files in the site: {hidden[:5]}"
    working = [f for f in files if f.endswith((".tmp", ".part", ".lock")) or "group-" in f]
    assert working == [], f"working files in the site: {working[:5]}"
    tops = {Path(f).parts[0] for f in files}
    assert tops == {"index.html", "projector.html", "static", "data"}, tops
    assert all(f.endswith(".json") for f in files if f.startswith("data/") and f != "data")
    if not os.environ.get("CB_STATIC_SITE"):
        assert not static_build.work.exists() or not any(static_build.work.iterdir()), "the resume cache was left"


def test_the_resume_cache_lives_outside_the_site_one_per_folder_and_grid(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    small = {**STOPS, "spread": (16.0,)}
    assert export.work_dir(a, STOPS) != export.work_dir(b, STOPS) != export.work_dir(a, small)
    assert export.work_dir(a, STOPS) == export.work_dir(a, dict(STOPS))  # the same build resumes its own cache
    for out in (a, b):
        assert not export.work_dir(out, STOPS).resolve().is_relative_to(out.resolve())
    assert export.work_dir(a, STOPS, tmp_path / "w").parent == tmp_path / "w"


def test_a_build_leaves_no_older_resume_cache_or_half_written_file_in_the_folder(tmp_path):
    out = tmp_path / "site"
    (out / export.LEGACY_WORK / "abc").mkdir(parents=True)
    (out / export.LEGACY_WORK / "abc" / "group-000.json").write_text("[]")
    (out / "data").mkdir()
    (out / "index.html.tmp").write_text("half")
    (out / "data" / "x.tmp").write_text("half")
    export._tidy(out)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == ["data"]


def test_a_resume_cache_inside_the_site_is_refused_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "explorable.export", "--out", str(tmp_path / "site"),
                           "--work", str(tmp_path / "site" / "cache"), "--quiet"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "inside --out" in done.stderr
    assert not (tmp_path / "site").exists()  # nothing written


def test_out_says_what_the_folder_holds_and_where_the_cache_goes():
    done = subprocess.run([sys.executable, "-m", "explorable.export", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    text = " ".join(done.stdout.split())
    assert "only the files a host serves" in text and "outside the folder" in text and "--work" in text
