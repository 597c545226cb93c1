"""Mutation testing with mutmut (`make mutate`): runs it, then prints the score of each module and its survivors.

    python bench/mutation.py [--tests "PATHS"] [MODULE.py ...]

With modules, only their mutants run, against their mirrored test files (gpufleet/ops/hostlists.py ->
tests/gpufleet/ops/test_hostlists.py and tests/gpufleet/ops/test_*_hostlists.py) unless --tests names others.
Without modules, every mutant of gpufleet/ and stacks/ not yet decided runs against the whole suite (hours on two
cores; results are kept in mutants/, so an interrupted run resumes). Settings: [tool.mutmut] in pyproject.toml.

A run that mutates anything under stacks/ (or everything) runs one mutant at a time against one jsii kernel, which
mutmut's fork server starts before forking (bench/mutation_shared_kernel.py): starting a kernel per mutant costs about
3 s of CPU, several times what a construct test itself takes. Children share the kernel's pipes, so only one may run
at a time; each child first checks that the kernel still answers in step (bench/mutation_selection.py) and a child
that finds it out of step exits 35 (mutmut's "suspicious"), reported under "other", never as a kill.

--survivors reruns only the mutants of the named modules that no test killed last time, or whose run ended
undecided ("other", "not checked"): after adding tests, the mutants already killed stay killed.

Score = (killed + timed out) / all mutants of the module, as mutmut's own badge counts it. A survivor is a mutant no
selected test failed on; "no tests" is one in a function no selected test calls. Each is printed with its diff.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_PATHS = ("gpufleet", "stacks")
SELECTION_VARIABLE = "GPUFLEET_MUTATION_TESTS"  # read by bench/mutation_selection.py
SHARED_KERNEL_VARIABLE = "GPUFLEET_MUTATION_SHARED_KERNEL"  # read by bench/mutation_shared_kernel.py and _selection.py
# mutmut's exit-code meanings (mutmut/stats.py status_by_exit_code, mutmut 3.8.1), folded into the table's columns.
KILLED_CODES = {1, 3}
TIMEOUT_CODES = {36, -24, 24, 152, 255}
SURVIVED_CODES = {0}
NO_TESTS_CODES = {5, 33}
UNDETECTED = ("survived", "no tests")


def all_modules() -> list[str]:
    return sorted(str(path.relative_to(ROOT)) for source in SOURCE_PATHS for path in (ROOT / source).rglob("*.py"))


def mirrored_tests(module: str) -> list[str]:
    path = Path(module)
    folder = Path("tests") / path.parent
    candidates = [folder / f"test_{path.stem}.py", *sorted(folder.glob(f"test_*_{path.stem}.py"))]
    return [str(candidate) for candidate in candidates if (ROOT / candidate).is_file()]


def mutant_globs(module: str) -> list[str]:
    """mutmut names a mutant <dotted module>.x_<function>__mutmut_<n>, or .xǁ<class>ǁ<method>__mutmut_<n>."""
    dotted = module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return [f"{dotted}.x_*", f"{dotted}.xǁ*"]


def exit_codes(module: str) -> dict[str, int | None]:
    meta = ROOT / "mutants" / f"{module}.meta"
    if not meta.is_file():
        return {}
    return json.loads(meta.read_text())["exit_code_by_key"]


def rerun_names(modules: list[str]) -> list[str]:
    return [
        name
        for module in modules
        for name, code in exit_codes(module).items()
        if column(code) in (*UNDETECTED, "other", "not checked")
    ]


def column(code: int | None) -> str:
    if code in KILLED_CODES:
        return "killed"
    if code in TIMEOUT_CODES:
        return "timeout"
    if code in SURVIVED_CODES:
        return "survived"
    if code in NO_TESTS_CODES:
        return "no tests"
    return "not checked" if code is None else "other"


def report(modules: list[str]) -> list[str]:
    """Print the table; return the names of the mutants that no test killed."""
    columns = ("killed", "timeout", "survived", "no tests", "not checked", "other")
    print(f"{'module':<44}" + "".join(f"{name:>12}" for name in columns) + f"{'total':>7}{'score':>9}")
    undetected = []
    for module in modules:
        codes = exit_codes(module)
        if not codes:
            continue
        counts = Counter(column(code) for code in codes.values())
        score = 100 * (counts["killed"] + counts["timeout"]) / len(codes)
        print(f"{module:<44}" + "".join(f"{counts[name]:>12}" for name in columns) + f"{len(codes):>7}{score:>8.1f}%")
        undetected += [name for name, code in codes.items() if column(code) in UNDETECTED]
    return undetected


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help="source files under gpufleet/ or stacks/ (default: all)")
    parser.add_argument("--tests", default="", help="test files or folders to run (default: the mirrored ones)")
    parser.add_argument("--report-only", action="store_true", help="print the last results without running mutmut")
    parser.add_argument("--survivors", action="store_true", help="rerun only the mutants not killed last time")
    arguments = parser.parse_args()

    modules = arguments.modules or all_modules()
    problems = [
        f"{module}: not a Python file under {' or '.join(SOURCE_PATHS)}/"
        for module in modules
        if module not in all_modules()
    ]
    tests = arguments.tests.split()
    if arguments.modules and not tests:
        tests = [test for module in modules for test in mirrored_tests(module)]
        problems += [
            f"{module}: no test file tests/{Path(module).parent}/test_{Path(module).stem}.py; name its tests "
            f'with TESTS="tests/..."'
            for module in modules
            if not mirrored_tests(module)
        ]
    problems += [f"--tests: {test} does not exist" for test in tests if not (ROOT / test).exists()]
    if arguments.survivors and not arguments.modules:
        problems.append("--survivors: name the modules whose survivors to rerun")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2

    if not arguments.report_only:
        environment = dict(os.environ, **{SELECTION_VARIABLE: " ".join(tests)})
        children = []
        if any(module.startswith("stacks/") for module in modules):
            environment[SHARED_KERNEL_VARIABLE] = "1"
            children = ["--max-children", "1"]
        if arguments.survivors:
            names = rerun_names(modules)
            if not names:
                print("no survivors to rerun")
                return 0
        else:
            names = [glob for module in arguments.modules for glob in mutant_globs(module)]
        print(f"mutmut run over {len(modules)} module(s), tests: {' '.join(tests) or 'the whole suite'}", flush=True)
        completed = subprocess.run(["mutmut", "run", *children, *names], cwd=ROOT, env=environment, check=False)
        if completed.returncode != 0:
            print(f"mutmut run failed (exit {completed.returncode})", file=sys.stderr)
            return completed.returncode

    print()
    undetected = report(modules)
    if undetected:
        print(f"\nMutants no test killed ({len(undetected)}):")
    for name in undetected:
        shown = subprocess.run(["mutmut", "show", name], cwd=ROOT, capture_output=True, text=True, check=False)
        print(shown.stdout.rstrip() or shown.stderr.rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
