"""The front page stays a front page (issue 30): README.md within 150 lines with what it is, a screenshot, the two
set-up commands, the three ways to use it and links; every relative link of the README and docs/ leads to a file;
every figure in docs/performance.md's tables with a "measured" column has its date."""
from __future__ import annotations

import re

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_the_readme_is_a_front_page_of_150_lines_at_most():
    assert len(README.splitlines()) <= 150
    assert "pip install -e . && panel serve app.py" in README
    assert 'pip install -e ".[test]" && python -m pytest' in README
    for way in ("**Serve it to a class.**", "**Embed it in a course page.**", "**Quote numbers from the command line.**"):
        assert way in README, way
    shots = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README)
    assert shots and all((ROOT / s).is_file() for s in shots)


def test_every_relative_link_of_the_readme_and_the_docs_leads_to_a_file():
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_every_performance_figure_has_its_date():
    undated, header = [], None
    for line in (ROOT / "docs" / "performance.md").read_text().splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells
        elif not set(line) <= set("|- ") and header[-1] == "measured" \
                and not re.search(r"\b20\d\d-\d\d-\d\d\b", cells[-1]):
            undated.append(line[:80])
    assert undated == []
