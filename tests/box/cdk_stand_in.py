"""The CDK CLI as `gpufleet up` runs it against the box (GPUFLEET_CDK, gpufleet/ops/cdk_cli.py): CloudFormation and
the fleet that launches the nodes are AWS behaviour nothing offline runs, so this stand-in hands them to the box.

    python -m tests.box.cdk_stand_in --box-dir DIR ARGUMENTS...

- `bootstrap aws://ACCOUNT/REGION`: puts what the CDKToolkit stack writes and the deploy checks, the SSM parameter
  /cdk-bootstrap/hnb659fds/version (gpufleet/ops/cdk_cli.py), in the emulator (reached as the operator reaches it:
  AWS_ENDPOINT_URL and the emulator's credentials in the environment).
- `deploy ...` and `destroy ...`: asks the box (DIR/cdk/request-N.json, the arguments) and waits for its answer
  (DIR/cdk/request-N.done: the exit status, 0 when the box deployed the stacks and launched the nodes, or destroyed
  the stacks named); prints a line as the CDK CLI does for each.
Every call is appended to DIR/cdk/calls.jsonl, for the tests to read.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

BOOTSTRAP_VERSION = "29"
DEPLOY_TIMEOUT_SECONDS = 900


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--box-dir", type=Path, required=True)
    parser.add_argument("arguments", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    folder = options.box_dir / "cdk"
    folder.mkdir(parents=True, exist_ok=True)
    arguments = options.arguments
    with (folder / "calls.jsonl").open("a") as calls:
        calls.write(json.dumps(arguments) + "\n")
    if arguments[:1] == ["bootstrap"]:
        import boto3

        boto3.client("ssm").put_parameter(
            Name="/cdk-bootstrap/hnb659fds/version", Value=BOOTSTRAP_VERSION, Type="String", Overwrite=True
        )
        print(f" ✅  Environment {arguments[1]} bootstrapped.")
        return 0
    if arguments[:1] in (["deploy"], ["destroy"]):
        number = len(list(folder.glob("request-*.json")))
        request = folder / f"request-{number}.json"
        partial = folder / f".request-{number}.json"
        partial.write_text(json.dumps(arguments))
        partial.rename(request)
        done = folder / f"request-{number}.done"
        deadline = time.monotonic() + DEPLOY_TIMEOUT_SECONDS
        while not done.exists():
            if time.monotonic() > deadline:
                print(f"the box did not answer {request} in {DEPLOY_TIMEOUT_SECONDS}s", file=sys.stderr)
                return 1
            time.sleep(0.2)
        status = int(done.read_text().strip() or "1")
        if status == 0 and arguments[0] == "deploy":
            print(" ✅  deployed (the box's stand-ins of the stacks; its fleet launched the nodes)")
        elif status == 0:
            print(f" ✅  {', '.join(arguments[4:])}: destroyed")
        return status
    print(f"cdk stand-in: {arguments[:1]} is not a command the box answers", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
