"""The docs site (mkdocs.yml, docs/): `make lint` builds it with `mkdocs build --strict`, which must pass on the docs
as committed and fail on a broken link, a missing anchor or a page left out of nav (the validation levels in
mkdocs.yml make each a warning, and --strict aborts on any warning)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ABORTED = "Aborted with 1 warnings in strict mode!"


def build(config_dir: Path, site_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=config_dir,
        capture_output=True,
        text=True,
        env=os.environ | {"NO_MKDOCS_2_WARNING": "1"},
    )


def test_the_committed_docs_build(tmp_path):
    result = build(ROOT, tmp_path / "site")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()


@pytest.mark.parametrize(
    ("page", "text", "warning"),
    [
        (
            "guides/images.md",
            "[a page](nowhere.md)\n",
            "Doc file 'guides/images.md' contains a link 'nowhere.md', but the target 'guides/nowhere.md' is not "
            "found among documentation files.",
        ),
        (
            "guides/images.md",
            "[a section](environments.md#nowhere)\n",
            "Doc file 'guides/images.md' contains a link 'environments.md#nowhere', but the doc "
            "'guides/environments.md' does not contain an anchor '#nowhere'.",
        ),
        (
            "stray.md",
            "# A page no one listed\n",
            'The following pages exist in the docs directory, but are not included in the "nav" configuration:\n'
            "  - stray.md",
        ),
    ],
    ids=["broken-link", "missing-anchor", "page-not-in-nav"],
)
def test_a_defect_fails_the_build(tmp_path, page, text, warning):
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy)
    with (copy / "docs" / page).open("a") as file:
        file.write(text)

    result = build(copy, tmp_path / "site")

    assert result.returncode == 1
    assert warning in result.stderr
    assert ABORTED in result.stdout + result.stderr


def test_make_lint_builds_the_site_strict_and_not_quiet():
    """mkdocs 1.6.1's --quiet hides the warnings from the strict check as well, and the build passes
    (https://github.com/mkdocs/mkdocs/issues/4126)."""
    (line,) = [line for line in (ROOT / "Makefile").read_text().splitlines() if "mkdocs build" in line]
    options = line.split("mkdocs build", 1)[1].split()
    assert "--strict" in options
    assert not {"--quiet", "-q", "--verbose", "-v"} & set(options)


@pytest.mark.parametrize("page", ["README.md", "CONTRIBUTING.md", "environments/README.md", "ami/README.md"])
def test_pages_outside_the_site_link_to_files_that_exist(page):
    path = ROOT / page
    targets = re.findall(r"\]\(([^)#\s]+)[^)]*\)", path.read_text())
    local = [target for target in targets if "://" not in target]
    assert local, f"{page} links to no file"
    assert [target for target in local if not (path.parent / target).exists()] == []
