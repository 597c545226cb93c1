"""Stand-ins for the tools the AMI pipeline's scripts run (aws, packer, curl, gpg, unzip, dpkg,
session-manager-plugin), with plausible outputs.

conftest.py puts a wrapper per tool on PATH that runs `fake_tools.py NAME ARGS...`. Each call is appended to
$FAKE_LOG as a JSON list (tool name, then arguments); what the tools answer comes from the JSON file $FAKE_STATE,
which a test prepares: "fail" lists calls that fail, as "TOOL SUBCOMMAND" or "aws ec2 copy-image REGION"."""

import hashlib
import json
import os
import shutil
import sys
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


def aws(args: list[str]) -> int:
    service, command = args[0], args[1]
    region = option(args, "--region")
    if fails("aws", service, command, region or ""):
        print(f"An error occurred (UnauthorizedOperation) when calling {command} in {region}", file=sys.stderr)
        return 254
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


TOOLS = {
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
