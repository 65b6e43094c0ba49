"""`pip install ./clients/python` works: the package builds into a wheel with its type marker."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path


def test_the_package_builds_a_typed_wheel(tmp_path: Path) -> None:
    # Built from a copy: a build writes build/ and *.egg-info next to the sources.
    project = tmp_path / "project"
    shutil.copytree(Path(__file__).resolve().parents[1], project, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    wheels = tmp_path / "wheels"
    # No build isolation: the venv's pinned setuptools builds it, with no download.
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(project)],
        check=True,
        timeout=300,
    )
    [wheel] = wheels.glob("sessionlog-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"sessionlog/__init__.py", "sessionlog/py.typed", "sessionlog/tools.py"} <= names
