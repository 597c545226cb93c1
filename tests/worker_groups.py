"""Which tests share a pytest-xdist worker, and the scheduler that keeps each group on one worker.

A group's tests share a session fixture that is expensive to build (one CDK synthesis of every shipped environment;
a built and installed wheel), so each group runs on one worker and builds it once; the test_app.py synthesis runs
go with the CDK group so that two synthesis-heavy streams do not compete for the two cores.

pytest-xdist's own `--dist loadgroup` carries `xdist_group` marks from the workers to the scheduler by appending
"@group" to each test's `_nodeid`, an attribute pytest 9.2 no longer reads (it keeps the id in `_id`), so with the
pinned pytest 9.2.0 and pytest-xdist 3.8.0 the marks group nothing (pytest-dev/pytest-xdist#1386, open; the fix
proposed in #1388 is not released). Here a test's group follows from its file, which the scheduler reads in every
node id, so no id needs rewriting; tests/conftest.py refuses a test that uses a group's fixture from another file.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

GROUP_FILES: dict[str, tuple[str, ...]] = {
    "cdk-synth": (
        "tests/stacks/",
        "tests/test_app.py",
        "tests/gpufleet/ops/test_plan.py",
        "tests/gpufleet/commands/test_summary.py",
        "tests/fuzz/test_summary.py",
        "tests/fuzz/test_plan.py",
    ),
    "wheel": ("tests/packaging/",),
    # The cluster in a box: real systemd nodes booted once for the suite (tests/box/conftest.py).
    "box": ("tests/box/",),
}
# The session fixture each group builds once.
GROUP_FIXTURES = {"assembly": "cdk-synth", "installed_wheel": "wheel", "box_cluster": "box"}


def group_of(nodeid: str) -> str | None:
    """The group of a test, from the file in its node id (path relative to the repository root)."""
    path = nodeid.split("::", 1)[0]
    for group, prefixes in GROUP_FILES.items():
        if any(path == prefix or (prefix.endswith("/") and path.startswith(prefix)) for prefix in prefixes):
            return group
    return None


def misplaced(nodeid: str, fixtures: list[str]) -> list[str]:
    """Why a test would build a group's fixture on a worker of its own: one line per such fixture."""
    return [
        f"{nodeid}: uses {fixture}, so it must be in a file of group {group} ({', '.join(GROUP_FILES[group])}; "
        "see tests/worker_groups.py)"
        for fixture, group in GROUP_FIXTURES.items()
        if fixture in fixtures and group_of(nodeid) != group
    ]


class GroupScheduling(LoadScopeScheduling):
    """Load scheduling in which all tests of a group are one unit of work, and every other test a unit alone."""

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid) or nodeid
