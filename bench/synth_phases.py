"""`python bench/synth_phases.py MARKS_FILE APP_FILE` runs a CDK app as `python APP_FILE` would (the CDK CLI's way)
and writes to MARKS_FILE, as JSON, when each phase of the run ended (time.time()). bench/synth_bench.py gives it to
`cdk synth --app`; the app itself is not changed.

Marks, in order: started (the interpreter is up), aws_cdk_imported (the jsii kernel is started and aws-cdk-lib loaded
into it), app_created (the app's own imports are done: its first cdk.App()), synth_started and synth_finished
(app.synth()), kernel_stopped (the jsii kernel's node process has exited).
"""

from __future__ import annotations

import atexit
import json
import runpy
import sys
import time
from pathlib import Path


def main(marks_file: str, app_file: str) -> None:
    marks = {"started": time.time()}

    def write_marks() -> None:
        marks["kernel_stopped"] = time.time()
        Path(marks_file).write_text(json.dumps(marks))

    # Registered before importing aws_cdk starts the jsii kernel: atexit runs the last registered handler first, so
    # this one runs after the kernel's own, which waits for the node process to exit.
    atexit.register(write_marks)
    import aws_cdk as cdk

    marks["aws_cdk_imported"] = time.time()
    create, synth = cdk.App.__init__, cdk.App.synth

    def marking_create(app, *args, **kwargs):
        marks.setdefault("app_created", time.time())
        create(app, *args, **kwargs)

    def marking_synth(app, *args, **kwargs):
        marks["synth_started"] = time.time()
        assembly = synth(app, *args, **kwargs)
        marks["synth_finished"] = time.time()
        return assembly

    cdk.App.__init__ = marking_create
    cdk.App.synth = marking_synth
    # As `python APP_FILE` has it: the app's directory first on the path, the app file as argv[0]. The app's own
    # sys.exit ends this process with its status.
    sys.path[0] = str(Path(app_file).resolve().parent)
    sys.argv = [app_file]
    runpy.run_path(app_file, run_name="__main__")


if __name__ == "__main__":
    main(*sys.argv[1:])
