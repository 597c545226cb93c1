"""A step that fails in the middle of a script, and the later steps that must then not run.

Strict mode is behaviour: under `set -euo pipefail` a command that fails outside a condition stops the script
with that command's exit status. A script without it goes on past the failure, and the steps after it run on a
half-done node or image. StepProbe puts wrappers first on PATH, in front of a test family's own stubs: a wrapper
fails one call (matched by a bash glob over its arguments) with FAILED_STATUS, records a call to a later step,
and hands every other call to the command it shadows (the family's stub or the system's program)."""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

# An exit status no command of the scripts returns by itself: the script stopped at the failing call.
FAILED_STATUS = 42


@dataclass(frozen=True)
class Call:
    """COMMAND called with arguments matching PATTERN, a bash glob over "$*" ("*" matches any call)."""

    command: str
    pattern: str = "*"


@dataclass(frozen=True)
class Case:
    """A script, the call made to fail, and a later call that must then never be made."""

    script: str
    fails: Call
    must_not_run: Call
    why: str


def accounted_for(cases: list[Case], nothing_to_catch: dict[str, str]) -> list[str]:
    """The scripts a family's table covers: a case each, or a stated reason why strict mode has nothing to catch."""
    return sorted([case.script for case in cases] + list(nothing_to_catch))


def scripts_in(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.glob("*.sh"))


def bash_glob(pattern: str) -> str:
    """PATTERN as a bash glob word: "*" matches anything, every other character stands for itself."""
    return "*".join(shlex.quote(part) if part else "" for part in pattern.split("*"))


class StepProbe:
    def __init__(self, bin_dir: Path, search_path: str):
        """Wrappers go in BIN_DIR (put it first on PATH); the commands they shadow are looked up in SEARCH_PATH."""
        bin_dir.mkdir(parents=True, exist_ok=True)
        self.bin_dir = bin_dir
        self.log = bin_dir.parent / f"{bin_dir.name}.log"
        self.search_path = search_path

    def install(self, case: Case, **placeholders: str) -> list[str]:
        """The wrappers for CASE, its failing call's arguments formatted with PLACEHOLDERS ({root}: a test's
        GPUFLEET_ROOT); returns what calls() must then be: the failed call alone."""
        rules: dict[str, list[str]] = {}
        failing = Call(case.fails.command, case.fails.pattern.format(**placeholders))
        later = case.must_not_run
        rules.setdefault(failing.command, []).append(
            f"if [[ $args == {bash_glob(failing.pattern)} ]]; then\n"
            f'  echo "failed {failing.command} $args" >>{shlex.quote(str(self.log))}\n'
            f'  echo "{failing.command}: failing on purpose (test)" >&2\n'
            f"  exit {FAILED_STATUS}\n"
            "fi\n"
        )
        rules.setdefault(later.command, []).append(
            f"if [[ $args == {bash_glob(later.pattern)} ]]; then\n"
            f'  echo "ran {later.command} $args" >>{shlex.quote(str(self.log))}\n'
            "fi\n"
        )
        for command, checks in rules.items():
            shadowed = shutil.which(command, path=self.search_path)
            hand_on = f'exec {shlex.quote(shadowed)} "$@"\n' if shadowed else "exit 0\n"
            wrapper = self.bin_dir / command
            wrapper.write_text('#!/usr/bin/env bash\nargs="$*"\n' + "".join(checks) + hand_on)
            wrapper.chmod(0o755)
        return [f"failed {failing.command} {failing.pattern}"]

    def calls(self) -> list[str]:
        """The failed call and any later call that was made, in order: "failed CMD ARGS" / "ran CMD ARGS"."""
        return self.log.read_text().splitlines() if self.log.exists() else []
