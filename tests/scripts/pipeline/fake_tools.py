"""Stand-ins for the tools the AMI pipeline's scripts run (aws, packer, curl, gpg, unzip, dpkg,
session-manager-plugin, and for the acceptance gate npm, cdk and `gpufleet acceptance`), with plausible outputs.

conftest.py puts a wrapper per tool on PATH that runs `fake_tools.py NAME ARGS...`. Each call is appended to
$FAKE_LOG as a JSON list (tool name, then arguments); what the tools answer comes from the JSON file $FAKE_STATE,
which a test prepares: "fail" lists calls that fail, as "TOOL SUBCOMMAND" or "aws ec2 copy-image REGION".

The acceptance gate's world is in the same file, under "stacks": each CloudFormation stack by name, with its status
and the EC2 instances it launched, as CloudFormation leaves them; the objects uploaded to S3 are files under
$FAKE_STATE's directory (s3/BUCKET/KEY):
- `cdk synth -c env=NAME --output DIR` synthesizes the app for environment NAME (its file in
  $GPUFLEET_ENVIRONMENTS_DIR; an unknown name fails as the app does): a copy of the cloud assembly $FAKE_CDK_OUT,
  which the test synthesized from the same environment with the real app.
- `aws s3 cp DIR s3://BUCKET/PREFIX --recursive` uploads DIR's files.
- `aws cloudformation create-stack --template-url https://BUCKET.s3.REGION.amazonaws.com/KEY` reads the uploaded
  template and creates the stack, CREATE_COMPLETE with as many instances as its group's capacity target; with
  STATE["create_fails"] the creation fails and is rolled back: CloudFormation deletes what it created and leaves the
  stack ROLLBACK_COMPLETE (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/
  using-cfn-describing-stacks.html, stack status codes), and the StackCreateComplete waiter fails on it.
  "created_with" records each creation's role and capabilities.
- `aws cloudformation delete-stack` deletes the stack and terminates its instances (an Auto Scaling group's
  deletion terminates its instances first); the stack is then gone from DescribeStacks, which answers
  ValidationError "Stack with id NAME does not exist"; the StackDeleteComplete waiter treats that as success
  (botocore cloudformation waiters-2.json). "deleted_with" records the role each deletion named.
- `gpufleet status NAME --json` lists the stack's instances, all ready (the stub does not model boot time).
- `gpufleet acceptance NAME` answers STATE["acceptance"]: "pass" (every instance of the stack checked: exit 0 and
  the report), "fail" (a node's check failed: exit 3), "hang" (never answers), "kill-build" (the build container
  goes away mid-acceptance: every process of the build is SIGKILLed, nothing of the build runs after it)."""

import hashlib
import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

STATE: dict = {}
PACKER_ZIP = b"packer 1.11.2 linux_amd64 zip"
FINGERPRINT = "C874011F0AB405110D02105534365D9472D7468F"
BUILT_IMAGE = "ami-0123456789abcdef0"
BUILT_IMAGE_NAME = "gpufleet-ubuntu2204-cuda12-20261123060000"


def copy_id(region: str) -> str:
    """The id CopyImage gives the copy in REGION (fixed per region, so tests can name it)."""
    return "ami-0" + hashlib.sha256(region.encode()).hexdigest()[:16]


def option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def fails(*call: str) -> bool:
    return " ".join(call) in STATE.get("fail", [])


def save() -> None:
    Path(os.environ["FAKE_STATE"]).write_text(json.dumps(STATE))


def stacks() -> dict:
    return STATE.setdefault("stacks", {})


HOURLY_USD = "32.7726000000"


def price_list_entry(instance_type: str, region: str, usd: str) -> str:
    """One GetProducts PriceList entry (the shape of botocore/data/pricing/2017-10-15/examples-1.json)."""
    offer = "J4UDT9GUH4RRHKKN.JRTCKXETXF"
    return json.dumps(
        {
            "product": {"attributes": {"instanceType": instance_type, "regionCode": region}, "sku": offer[:16]},
            "terms": {
                "OnDemand": {
                    offer: {"priceDimensions": {f"{offer}.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}}
                }
            },
        }
    )


def curl(args: list[str]) -> int:
    out, url = option(args, "-o"), args[-1]
    if fails("curl", url):
        print(f"curl: (22) The requested URL returned error: 404 ({url})", file=sys.stderr)
        return 22
    zip_bytes = STATE.get("packer_zip", PACKER_ZIP.decode()).encode()
    if url.endswith("_linux_amd64.zip"):
        Path(out).write_bytes(zip_bytes)
    elif url.endswith("_SHA256SUMS"):
        # The real file lists every platform's zip; the linux_amd64 line holds the digest of the genuine zip.
        Path(out).write_text(
            f"{'0' * 64}  packer_1.11.2_darwin_arm64.zip\n"
            f"{hashlib.sha256(PACKER_ZIP).hexdigest()}  packer_1.11.2_linux_amd64.zip\n"
        )
    else:
        Path(out).write_text(f"downloaded from {url}\n")
    return 0


def gpg(args: list[str]) -> int:
    if "--verify" in args:
        if fails("gpg --verify"):
            print("[GNUPG:] BADSIG 34365D9472D7468F HashiCorp Security")
            return 1
        signer = STATE.get("signer", FINGERPRINT)
        print(f"[GNUPG:] VALIDSIG {'A' * 40} 2024-01-01 1704067200 0 4 0 1 10 00 {signer}")
    return 0


def unzip(args: list[str]) -> int:
    """Unpacks "packer": the packer stand-in, copied into the -d directory as the real zip would."""
    destination = Path(option(args, "-d"))
    destination.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(os.environ["FAKE_BIN"]) / "packer", destination / "packer")
    return 0


def dpkg(args: list[str]) -> int:
    return 0


def session_manager_plugin(args: list[str]) -> int:
    print("1.2.764.0")
    return 0


def packer(args: list[str]) -> int:
    command = args[0]
    if command == "version":
        print("Packer v1.11.2")
        return 0
    if fails("packer", command):
        print(f"Build 'amazon-ebs.gpufleet' errored after 41 minutes: {command} failed", file=sys.stderr)
        return 1
    template_dir = Path(args[-1])
    if not list(template_dir.glob("*.pkr.hcl")):
        print(f"Error: no Packer HCL2 files in {template_dir}", file=sys.stderr)
        return 1
    if command == "build":
        variables = dict(arg.split("=", 1) for arg in args if "=" in arg and not arg.startswith("-"))
        # The manifest post-processor's format (strip_path, custom_data): one entry per run, artifact "REGION:AMI".
        Path(variables["manifest_path"]).write_text(
            json.dumps(
                {
                    "builds": [
                        {
                            "name": "gpufleet",
                            "builder_type": "amazon-ebs",
                            "build_time": 1795413600,
                            "artifact_id": f"{variables['region']}:{BUILT_IMAGE}",
                            "packer_run_uuid": "run-1",
                            "custom_data": {"build_id": variables["build_id"]},
                        }
                    ],
                    "last_run_uuid": "run-1",
                }
            )
        )
    return 0


def s3_root() -> Path:
    return Path(os.environ["FAKE_STATE"]).parent / "s3"


def s3(command: str, args: list[str]) -> int:
    """`aws s3 cp DIR s3://BUCKET/PREFIX --recursive`, the one form the gate uses."""
    source, destination = args[2], args[3]
    if command != "cp" or "--recursive" not in args or not destination.startswith("s3://"):
        print(f"fake aws s3: unexpected {args}", file=sys.stderr)
        return 2
    target = s3_root() / destination.removeprefix("s3://")
    shutil.copytree(source, target, dirs_exist_ok=True)
    return 0


def nodes_of(template: dict) -> int:
    """The capacity target of the stack's group (its GroupCapacity custom resource), as the nodes it launches."""
    (target,) = [
        resource["Properties"]["Target"]
        for resource in template["Resources"].values()
        if resource["Type"] == "Custom::GpufleetGroupCapacity"
    ]
    return int(target)


def create_stack(name: str, args: list[str]) -> int:
    if name in stacks():
        print(f"An error occurred (AlreadyExistsException): Stack [{name}] already exists", file=sys.stderr)
        return 254
    url = option(args, "--template-url")
    found = re.fullmatch(r"https://([a-z0-9.-]+)\.s3\.[a-z0-9-]+\.amazonaws\.com/(.+)", url or "")
    template_file = s3_root() / found[1] / found[2] if found else None
    if template_file is None or not template_file.exists():
        print(f"An error occurred (ValidationError): TemplateURL must be an Amazon S3 URL: {url}", file=sys.stderr)
        return 254
    template = json.loads(template_file.read_text())
    STATE.setdefault("created_with", []).append(
        [
            name,
            option(args, "--role-arn"),
            option(args, "--capabilities"),
            template_file.relative_to(s3_root()).as_posix(),
        ]
    )
    if STATE.get("create_fails"):
        stacks()[name] = {"status": "ROLLBACK_COMPLETE", "instances": []}
    else:
        launched = [f"i-0{hashlib.sha256(f'{name}/{n}'.encode()).hexdigest()[:16]}" for n in range(nodes_of(template))]
        stacks()[name] = {"status": "CREATE_COMPLETE", "instances": launched}
    save()
    print(f"arn:aws:cloudformation:us-east-1:123456789012:stack/{name}/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
    return 0


def cloudformation(command: str, args: list[str]) -> int:
    name = option(args, "--stack-name")
    stack = stacks().get(name)
    if command == "create-stack":
        return create_stack(name, args)
    if command == "describe-stacks":
        if stack is None:
            print(
                "An error occurred (ValidationError) when calling the DescribeStacks operation: "
                f"Stack with id {name} does not exist",
                file=sys.stderr,
            )
            return 254
        print(stack["status"])
    elif command == "delete-stack" and stack is not None:
        STATE.setdefault("terminated", []).extend(stack["instances"])
        STATE.setdefault("deleted_with", []).append([name, option(args, "--role-arn")])
        del stacks()[name]
        save()
    elif command == "wait" and args[2] == "stack-create-complete" and (stack or {}).get("status") != "CREATE_COMPLETE":
        print(
            "Waiter StackCreateComplete failed: Waiter encountered a terminal failure state: For expression "
            f'"Stacks[].StackStatus" we matched expected path: "{(stack or {}).get("status")}"',
            file=sys.stderr,
        )
        return 255
    elif command == "wait" and args[2] == "stack-delete-complete" and stack is not None:
        print("Waiter StackDeleteComplete failed: Waiter encountered a terminal failure state", file=sys.stderr)
        return 255
    return 0


def aws(args: list[str]) -> int:
    service, command = args[0], args[1]
    region = option(args, "--region")
    if fails("aws", service, command, region or ""):
        print(f"An error occurred (UnauthorizedOperation) when calling {command} in {region}", file=sys.stderr)
        return 254
    if service == "cloudformation":
        return cloudformation(command, args)
    if service == "s3":
        return s3(command, args)
    if command == "get-products":
        filters = dict(
            re.fullmatch(r"Type=TERM_MATCH,Field=(\w+),Value=(.*)", f).groups() for f in args if "Field=" in f
        )
        usd = STATE.get("hourly_usd", HOURLY_USD)
        print(
            json.dumps(
                {
                    "FormatVersion": "aws_v1",
                    "PriceList": [price_list_entry(filters["instanceType"], filters["regionCode"], usd)],
                }
            )
        )
        return 0
    if command == "describe-images":
        (image,) = option(args, "--image-ids").split()
        if option(args, "--query") == "Images[0].Name":
            print(BUILT_IMAGE_NAME)
        else:
            print(STATE.get("image_state", {}).get(image, "available"))
    elif command == "copy-image":
        copy = copy_id(region)
        print(copy if option(args, "--output") == "text" else json.dumps({"ImageId": copy}))
    elif command == "wait":
        (image,) = option(args, "--image-ids").split()
        # Waiter rounds that give up ("Max attempts exceeded") before the image is available.
        rounds = STATE.setdefault("wait_rounds_exceeded", {})
        if rounds.get(image, 0) > 0:
            rounds[image] -= 1
            Path(os.environ["FAKE_STATE"]).write_text(json.dumps(STATE))
            print("Waiter ImageAvailable failed: Max attempts exceeded", file=sys.stderr)
            return 255
    return 0


def npm(args: list[str]) -> int:
    return 0


def cdk(args: list[str]) -> int:
    """`cdk synth --app APP -c env=NAME --output DIR --quiet`: the only CDK command the gate runs."""
    name = option(args, "-c").removeprefix("env=")
    environment = Path(os.environ["GPUFLEET_ENVIRONMENTS_DIR"]) / f"{name}.yaml"
    if args[0] != "synth":
        print(f"fake cdk: the gate runs only cdk synth, not {args}", file=sys.stderr)
        return 2
    if not environment.exists():
        print(f"{environment}: unknown environment '{name}'", file=sys.stderr)
        return 1
    synthesized = Path(os.environ["FAKE_CDK_OUT"])
    if not (synthesized / f"gpufleet-{name}-cluster.template.json").exists():
        print(f"fake cdk: {synthesized} holds no stack of {name}", file=sys.stderr)
        return 1
    shutil.copytree(synthesized, option(args, "--output"), dirs_exist_ok=True)
    return 0


def gpufleet(args: list[str]) -> int:
    """`gpufleet status ENV --json` (the instances, each ready as the nodes tag themselves once booted) and
    `gpufleet acceptance ENV --report-dir DIR --min-nodes N` as gpufleet/commands/acceptance.py answers."""
    name = args[1]
    stack = stacks().get(f"gpufleet-{name}-cluster")
    nodes = stack["instances"] if stack else []
    if args[0] == "status":
        print(json.dumps({"environment": name, "instances": [{"instance_id": n, "readiness": "ready"} for n in nodes]}))
        return 0
    report_dir = Path(option(args, "--report-dir"))
    if len(nodes) < int(option(args, "--min-nodes")):
        print(f"acceptance: {name}: {len(nodes)} ready nodes, fewer than --min-nodes", file=sys.stderr)
        return 1
    behaviour = STATE.get("acceptance", "pass")
    if behaviour == "hang":
        time.sleep(600)
    if behaviour == "kill-build":
        STATE["killed_during"] = "gpufleet acceptance"
        save()
        os.killpg(os.getsid(0), signal.SIGKILL)
        os.killpg(0, signal.SIGKILL)
    report_dir.mkdir(parents=True, exist_ok=True)
    verdict = "pass" if behaviour == "pass" else "fail"
    (report_dir / "acceptance.json").write_text(json.dumps({"environment": name, "verdict": verdict}))
    if verdict == "fail":
        print(f"{nodes[1]}: nccl-all-reduce: 31.0 GB/s bus bandwidth, below the catalog's 78", file=sys.stderr)
        return 3
    return 0


TOOLS = {
    "npm": npm,
    "cdk": cdk,
    "gpufleet": gpufleet,
    "curl": curl,
    "gpg": gpg,
    "unzip": unzip,
    "dpkg": dpkg,
    "session-manager-plugin": session_manager_plugin,
    "packer": packer,
    "aws": aws,
}

if __name__ == "__main__":
    name, arguments = sys.argv[1], sys.argv[2:]
    STATE.update(json.loads(Path(os.environ["FAKE_STATE"]).read_text()))
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(json.dumps([name, *arguments]) + "\n")
    sys.exit(TOOLS[name](arguments))
