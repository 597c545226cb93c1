"""The compatibility gate: every rule with a passing and a failing (or warning) profile, and `gpufleet ami check`."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from gpufleet.ami.compatibility import RULES, CheckContext, Level, load_compatibility
from gpufleet.ami.profile import load_profile
from gpufleet.cli import main

TODAY = dt.date(2026, 11, 23)
RULE_BY_ID = {rule.rule_id: rule for rule in RULES}
ALL_SHA256 = {f"components.{key}.sha256": "ab" * 32 for key in load_profile("ubuntu2204-cuda12").versions()}

CASES = [
    # rule id, profile, changes, expected level, text the message must contain
    ("TARGET-CATALOG", "p4d-ubuntu1804-cuda11", {}, Level.PASS, "in the catalog"),
    ("TARGET-CATALOG", "p4d-ubuntu1804-cuda11", {"target.instance_types": ["p9.huge"]}, Level.ERROR, "p9.huge"),
    ("TARGET-CATALOG", "p4d-ubuntu1804-cuda11", {"target.nvswitch": False}, Level.ERROR, "p4d.24xlarge"),
    ("FM-EQUALS-DRIVER", "p4d-ubuntu1804-cuda11", {}, Level.PASS, "equals driver"),
    (
        "FM-EQUALS-DRIVER",
        "p4d-ubuntu1804-cuda11",
        {"components.fabric_manager.version": "450.80.01"},
        Level.ERROR,
        "fabric_manager 450.80.01 differs from driver 450.80.02",
    ),
    ("CUDA-MIN-DRIVER", "p4d-ubuntu1804-cuda11", {}, Level.PASS, ">= 450.51.06"),
    (
        "CUDA-MIN-DRIVER",
        "p4d-ubuntu1804-cuda11",
        {"components.driver.version": "450.36.06"},
        Level.ERROR,
        "driver 450.36.06 is older than 450.51.06, the minimum for CUDA 11.0.3",
    ),
    ("CUDA-MIN-DRIVER", "ubuntu2204-cuda12", {"components.cuda.version": "13.0.1"}, Level.PASS, "580.65.06"),
    ("CUDA-MIN-DRIVER", "ubuntu2204-cuda12", {"components.driver.version": "535.261.03"}, Level.PASS, "525.60.13"),
    ("CUDA-MIN-DRIVER", "p4d-ubuntu1804-cuda11", {"components.cuda.version": "10.2.89"}, Level.ERROR, "older than"),
    ("GPU-ARCH", "ubuntu2204-cuda12", {}, Level.PASS, "H100 (sm_90)"),
    (
        "GPU-ARCH",
        "p4d-ubuntu1804-cuda11",
        {"target.instance_types": ["p4d.24xlarge", "p5.48xlarge"]},
        Level.ERROR,
        "p5.48xlarge: H100 (sm_90) needs CUDA >= 11.8",
    ),
    ("GPU-ARCH", "p4d-ubuntu1804-cuda11", {"components.driver.version": "440.118.02"}, Level.ERROR, ">= R450"),
    (
        "GPU-ARCH",
        "p4d-ubuntu1804-cuda11",
        {"target.instance_types": ["g5.48xlarge"]},
        Level.ERROR,
        "compute capability 8.6 has no entry",
    ),
    ("OFI-NCCL-RANGE", "p4d-ubuntu1804-cuda11", {}, Level.PASS, "within >=2.4.8,<=2.7.8"),
    (
        "OFI-NCCL-RANGE",
        "p4d-ubuntu1804-cuda11",
        {"components.nccl.version": "2.8.3"},
        Level.ERROR,
        "NCCL 2.8.3 is outside the range aws-ofi-nccl 1.1.1 supports (>=2.4.8,<=2.7.8)",
    ),
    ("OFI-NCCL-RANGE", "ubuntu2204-cuda12", {"components.nccl.version": "2.28.3"}, Level.ERROR, "outside"),
    ("OFI-NCCL-RANGE", "ubuntu2204-cuda12", {"components.aws_ofi_nccl.version": "1.5.0"}, Level.ERROR, "no entry"),
    ("OFI-LIBFABRIC", "ubuntu2204-cuda12", {}, Level.PASS, "ships libfabric >= 2.1.0"),
    (
        "OFI-LIBFABRIC",
        "ubuntu2204-cuda12",
        {"components.efa_installer.version": "1.19.0"},
        Level.ERROR,
        "EFA installer 1.19.0 ships libfabric 1.16.0; aws-ofi-nccl 1.16.3 needs >=1.22.0",
    ),
    # Release notes per tag: 1.7.x still needs only libfabric 1.11.0 and keeps NCCL back to 2.4.8; 1.10-1.12 need
    # libfabric 1.18.0; 1.13.0 on 1.22.0amzn4.0 (EFA installer 1.23.0 ships 1.18.0amzn1.0).
    (
        "OFI-NCCL-RANGE",
        "p4d-ubuntu1804-cuda11",
        {"components.aws_ofi_nccl.version": "1.7.4"},
        Level.PASS,
        "NCCL 2.7.8 within >=2.4.8,<=2.19.3",
    ),
    (
        "OFI-NCCL-RANGE",
        "p4d-ubuntu1804-cuda11",
        {"components.aws_ofi_nccl.version": "1.1.2", "components.nccl.version": "2.8.4"},
        Level.PASS,
        "<=2.8.4",
    ),
    (
        "OFI-LIBFABRIC",
        "p4d-ubuntu1804-cuda11",
        {"components.aws_ofi_nccl.version": "1.7.4"},
        Level.PASS,
        "EFA installer 1.14.1 ships libfabric >= 1.13.2, aws-ofi-nccl 1.7.4 needs >=1.11.0",
    ),
    (
        "OFI-LIBFABRIC",
        "p4d-ubuntu1804-cuda11",
        {"components.aws_ofi_nccl.version": "1.8.0"},
        Level.ERROR,
        "EFA installer 1.14.1 ships libfabric 1.13.2; aws-ofi-nccl 1.8.0 needs >=1.18.0",
    ),
    (
        "OFI-LIBFABRIC",
        "ubuntu2204-cuda12",
        {"components.aws_ofi_nccl.version": "1.12.1", "components.efa_installer.version": "1.23.0"},
        Level.PASS,
        "aws-ofi-nccl 1.12.1 needs >=1.18.0",
    ),
    (
        "OFI-LIBFABRIC",
        "ubuntu2204-cuda12",
        {"components.aws_ofi_nccl.version": "1.13.0", "components.efa_installer.version": "1.23.0"},
        Level.ERROR,
        "EFA installer 1.23.0 ships libfabric 1.18.0; aws-ofi-nccl 1.13.0 needs >=1.22.0",
    ),
    # Tags (git ls-remote): v1.1.1 and v1.14.0 plain, v1.7.0-aws to v1.13.2-aws only with the suffix.
    ("OFI-NCCL-TAG", "p4d-ubuntu1804-cuda11", {}, Level.PASS, "names tag v1.1.1"),
    (
        "OFI-NCCL-TAG",
        "p4d-ubuntu1804-cuda11",
        {
            "components.aws_ofi_nccl.version": "1.13.2",
            "components.aws_ofi_nccl.url": "https://github.com/aws/aws-ofi-nccl/archive/refs/tags/v1.13.2.tar.gz",
        },
        Level.ERROR,
        "components.aws_ofi_nccl.url names tag v1.13.2, but aws-ofi-nccl 1.13.2 is tagged v1.13.2-aws "
        "(use https://github.com/aws/aws-ofi-nccl/archive/refs/tags/v1.13.2-aws.tar.gz)",
    ),
    (
        "OFI-NCCL-TAG",
        "p4d-ubuntu1804-cuda11",
        {
            "components.aws_ofi_nccl.version": "1.10.0",
            "components.aws_ofi_nccl"
            ".url": "https://github.com/aws/aws-ofi-nccl/releases/download/v1.10.0-aws/aws-ofi-nccl-1.10.0-aws.tar.gz",
        },
        Level.PASS,
        "names tag v1.10.0-aws",
    ),
    (
        "OFI-NCCL-TAG",
        "p4d-ubuntu1804-cuda11",
        {
            "components.aws_ofi_nccl.version": "1.14.0",
            "components.aws_ofi_nccl.url": "https://github.com/aws/aws-ofi-nccl/archive/refs/tags/v1.14.0-aws.tar.gz",
        },
        Level.ERROR,
        "is tagged v1.14.0 ",
    ),
    (
        "OFI-NCCL-TAG",
        "p4d-ubuntu1804-cuda11",
        {"components.aws_ofi_nccl.url": "https://mirror.example/ofi.tgz"},
        Level.WARN,
        "names no GitHub tag",
    ),
    ("OFI-NCCL-TAG", "ubuntu2204-cuda12", {}, Level.PASS, "not downloaded"),
    # EFA changelog: installer 1.43.2 installs libnccl-ofi 1.16.3; 1.14.1 installs none.
    (
        "OFI-NCCL-ONE-COPY",
        "ubuntu2204-cuda12",
        {},
        Level.PASS,
        "aws-ofi-nccl 1.16.3 comes with EFA installer 1.43.2 (one copy, under /opt/amazon/ofi-nccl)",
    ),
    (
        "OFI-NCCL-ONE-COPY",
        "ubuntu2204-cuda12",
        {"components.aws_ofi_nccl.url": "https://github.com/aws/aws-ofi-nccl/archive/refs/tags/v1.16.3.tar.gz"},
        Level.ERROR,
        "EFA installer 1.43.2 already installs aws-ofi-nccl 1.16.3 under /opt/amazon/ofi-nccl: set "
        "components.aws_ofi_nccl.url to null",
    ),
    (
        "OFI-NCCL-ONE-COPY",
        "ubuntu2204-cuda12",
        {"components.aws_ofi_nccl.version": "1.16.2"},
        Level.ERROR,
        "components.aws_ofi_nccl.version 1.16.2 is not 1.16.3, the version EFA installer 1.43.2 installs",
    ),
    (
        "OFI-NCCL-ONE-COPY",
        "ubuntu2204-cuda12",
        {"components.efa_installer.version": "1.42.0", "components.aws_ofi_nccl.version": "1.15.0"},
        Level.PASS,
        "1.15.0",
    ),
    (
        "OFI-NCCL-ONE-COPY",
        "ubuntu2204-cuda12",
        {"components.efa_installer.version": "1.44.0"},
        Level.ERROR,
        "EFA installer 1.44.0 installs aws-ofi-nccl, but efa_installer_aws_ofi_nccl",
    ),
    ("OFI-NCCL-ONE-COPY", "p4d-ubuntu1804-cuda11", {}, Level.PASS, "built from source; EFA installer 1.14.1 installs"),
    (
        "OFI-NCCL-ONE-COPY",
        "p4d-ubuntu1804-cuda11",
        {"components.aws_ofi_nccl.url": None},
        Level.ERROR,
        "EFA installer 1.14.1 installs no aws-ofi-nccl (installers ship it from 1.39.0 on)",
    ),
    ("EFA-OS", "p4d-ubuntu1804-cuda11", {}, Level.PASS, "supports ubuntu 18.04"),
    ("EFA-OS", "p4d-al2-cuda11", {}, Level.PASS, "supports amzn 2"),
    # EFA installer CHANGELOG.md: 1.23.0 dropped Ubuntu 18.04; ParallelCluster 3.6.0 shipped 1.22.1 on it.
    ("EFA-OS", "p4d-ubuntu1804-cuda11", {"components.efa_installer.version": "1.22.1"}, Level.PASS, "18.04"),
    (
        "EFA-OS",
        "p4d-ubuntu1804-cuda11",
        {"components.efa_installer.version": "1.23.0"},
        Level.ERROR,
        "EFA installer 1.23.0 does not support ubuntu 18.04 (releases known to: >=1.8.0,<1.23.0)",
    ),
    (
        "EFA-OS",
        "ubuntu2204-cuda12",
        {"components.efa_installer.version": "1.17.3"},
        Level.ERROR,
        "EFA installer 1.17.3 does not support ubuntu 22.04 (releases known to: >=1.18.0)",
    ),
    ("EFA-OS", "p4d-al2-cuda11", {"components.efa_installer.version": "1.50.0"}, Level.ERROR, "amzn 2"),
    ("TARGET-MINIMUMS", "ubuntu2204-cuda12", {}, Level.PASS, "p5.48xlarge"),
    (
        "TARGET-MINIMUMS",
        "ubuntu2204-cuda12",
        {"components.nccl.version": "2.17.1"},
        Level.ERROR,
        "p5.48xlarge needs nccl >= 2.18 (profile: 2.17.1)",
    ),
    # R580 LTSB: "June 2028" (NVIDIA's supported-drivers table).
    ("DRIVER-EOL", "ubuntu2204-cuda12", {}, Level.PASS, "R580 (LTSB) supported until 2028-06-30"),
    ("DRIVER-EOL", "p4d-ubuntu1804-cuda11", {}, Level.WARN, "R450 (LTSB) reached end of life on 2023-07-31"),
    ("DRIVER-EOL", "ubuntu2204-cuda12", {"components.driver.version": "999.1.2"}, Level.WARN, "no end-of-life"),
    ("AWS-CLI-INSTALLER", "p4d-al2-cuda11", {}, Level.PASS, "the installer of AWS CLI 2.36.11"),
    (
        "AWS-CLI-INSTALLER",
        "ubuntu2204-cuda12",
        {"components.aws_cli.version": "2.36.10"},
        Level.ERROR,
        "components.aws_cli.url https://awscli.amazonaws.com/awscli-exe-linux-x86_64-2.36.11.zip is not the installer "
        "of 2.36.10 (https://awscli.amazonaws.com/awscli-exe-linux-x86_64-2.36.10.zip)",
    ),
    (
        "AWS-CLI-INSTALLER",
        "ubuntu2204-cuda12",
        {"components.aws_cli.version": "1.45.55"},
        Level.ERROR,
        "components.aws_cli.version 1.45.55 is not an AWS CLI version 2 release",
    ),
    ("CWAGENT-PACKAGE", "p4d-al2-cuda11", {}, Level.PASS, "the amzn package of 1.300071.0b1720"),
    (
        "CWAGENT-PACKAGE",
        "p4d-al2-cuda11",
        {
            "components.cloudwatch_agent.url": "https://amazoncloudwatch-agent.s3.amazonaws.com/ubuntu/amd64/"
            "1.300071.0b1720/amazon-cloudwatch-agent.deb"
        },
        Level.ERROR,
        "is not the amzn package of 1.300071.0b1720 (https://amazoncloudwatch-agent.s3.amazonaws.com/amazon_linux/"
        "amd64/1.300071.0b1720/amazon-cloudwatch-agent.rpm)",
    ),
    ("CWAGENT-FEATURES", "ubuntu2204-cuda12", {}, Level.PASS, "1.300071.0b1720 has every feature"),
    # A build of the first journald release counts as that release, though packaging.Version orders 1.300070.0b1 first.
    (
        "CWAGENT-FEATURES",
        "ubuntu2204-cuda12",
        {"components.cloudwatch_agent.version": "1.300070.0b1"},
        Level.PASS,
        "has every feature",
    ),
    (
        "CWAGENT-FEATURES",
        "ubuntu2204-cuda12",
        {"components.cloudwatch_agent.version": "1.300069.0"},
        Level.ERROR,
        "CloudWatch agent 1.300069.0 lacks what the nodes use: journald logs (logs_collected.journald) needs "
        "1.300070.0",
    ),
    # end_of_life: one warning line with its date and reason; none on a supported stack.
    ("PROFILE-EOL", "ubuntu2404-cuda13", {}, Level.PASS, "not marked end of life"),
    (
        "PROFILE-EOL",
        "p4d-ubuntu1804-cuda11",
        {},
        Level.WARN,
        "profile p4d-ubuntu1804-cuda11 is end of life since 2023-05-31: Ubuntu 18.04 standard support ended 2023-05-31",
    ),
    ("PROFILE-EOL", "p4d-al2-cuda11", {}, Level.WARN, "is end of life since 2026-06-30: Amazon Linux 2 support ended"),
    # CUDA 13.x needs driver >= 580.65.06 (cuda_minimum_driver): the cu130 wheel on both sides of that bound.
    ("PYTORCH-DRIVER", "ubuntu2404-cuda13", {}, Level.PASS, "PyTorch 2.14.0 (CUDA 13.0) runs on driver 580.167.08"),
    ("PYTORCH-DRIVER", "ubuntu2404-cuda13", {"components.driver.version": "580.65.06"}, Level.PASS, ">= 580.65.06"),
    (
        "PYTORCH-DRIVER",
        "ubuntu2204-cuda12",
        {
            "components.driver.version": "575.57.08",
            "python.pytorch": {"version": "2.14.0", "index_url": "https://download.pytorch.org/whl/cu130"},
        },
        Level.ERROR,
        "python.pytorch.index_url: the CUDA 13.0 wheel needs driver >= 580.65.06, the profile pins 575.57.08",
    ),
    (
        "PYTORCH-DRIVER",
        "ubuntu2204-cuda12",
        {
            "components.driver.version": "575.57.08",
            "python.pytorch": {"version": "2.14.0", "index_url": "https://download.pytorch.org/whl/cu126"},
        },
        Level.PASS,
        "(CUDA 12.6) runs on driver 575.57.08 >= 525.60.13",
    ),
    ("PYTORCH-DRIVER", "ubuntu2204-cuda12", {}, Level.PASS, "no PyTorch on the image"),
    ("PYTORCH-WHEEL", "ubuntu2404-cuda13", {}, Level.PASS, "PyTorch 2.14.0 has CUDA 13.0 wheels for Python 3.12"),
    ("PYTORCH-WHEEL", "al2023-cuda13", {}, Level.PASS, "for Python 3.12"),
    (
        "PYTORCH-WHEEL",
        "al2023-cuda13",
        {"python.pytorch.python": None},
        Level.ERROR,
        "the python3 of amzn 2023 is Python 3.9; PyTorch 2.14.0 needs >=3.10,<3.16",
    ),
    (
        "PYTORCH-WHEEL",
        "ubuntu2404-cuda13",
        {"python.pytorch.index_url": "https://download.pytorch.org/whl/cu128"},
        Level.ERROR,
        "PyTorch 2.14.0 has no CUDA 12.8 wheels (it has 12.6, 13.0, 13.2)",
    ),
    (
        "PYTORCH-WHEEL",
        "ubuntu2404-cuda13",
        {"python.pytorch.version": "2.8.0"},
        Level.ERROR,
        "PyTorch 2.8.0 has no entry in pytorch_releases",
    ),
    ("UV-RELEASE", "p4d-al2-cuda11", {}, Level.PASS, "the tarball of uv 0.12.21, with its sha256"),
    (
        "UV-RELEASE",
        "ubuntu2404-cuda13",
        {"python.uv.version": "0.12.5"},
        Level.ERROR,
        "python.uv.url https://github.com/astral-sh/uv/releases/download/0.12.21/uv-x86_64-unknown-linux-gnu.tar.gz "
        "is not the x86_64 Linux tarball of uv 0.12.5",
    ),
    (
        "UV-RELEASE",
        "ubuntu2404-cuda13",
        {"python.uv.sha256": None, "python.uv.verification": "none"},
        Level.ERROR,
        "python.uv.sha256 is null: copy the digest GitHub publishes in",
    ),
    ("EFA-OS", "ubuntu2404-cuda13", {}, Level.PASS, "EFA installer 1.50.0 supports ubuntu 24.04"),
    ("EFA-OS", "al2023-cuda13", {}, Level.PASS, "EFA installer 1.50.0 supports amzn 2023"),
    ("EFA-OS", "al2023-cuda13", {"components.efa_installer.version": "1.42.0"}, Level.ERROR, "amzn 2023"),
    ("OFI-NCCL-ONE-COPY", "ubuntu2404-cuda13", {}, Level.PASS, "aws-ofi-nccl 1.21.1 comes with EFA installer 1.50.0"),
    ("OFI-NCCL-RANGE", "ubuntu2404-cuda13", {}, Level.PASS, "NCCL 2.30.7 within >=2.17.1,<=2.31.2"),
    (
        "OFI-NCCL-RANGE",
        "ubuntu2404-cuda13",
        {"components.nccl.version": "2.31.3"},
        Level.ERROR,
        "NCCL 2.31.3 is outside the range aws-ofi-nccl 1.21.1 supports (>=2.17.1,<=2.31.2)",
    ),
    ("OFI-LIBFABRIC", "al2023-cuda13", {}, Level.PASS, "EFA installer 1.50.0 ships libfabric >= 2.6.0"),
    ("DOWNLOAD-VERIFIED", "ubuntu2204-cuda12", ALL_SHA256, Level.PASS, "every download"),
    ("DOWNLOAD-VERIFIED", "ubuntu2204-cuda12", {}, Level.WARN, "driver https://us.download.nvidia.com/tesla/"),
]


@pytest.mark.parametrize(
    ("rule_id", "name", "changes", "level", "text"),
    CASES,
    ids=[f"{case[0]}-{case[3].value}-{index}" for index, case in enumerate(CASES)],
)
def test_rule(derive, rule_id, name, changes, level, text):
    context = CheckContext(data=load_compatibility(), today=TODAY)
    verdicts = RULE_BY_ID[rule_id].check(derive(name, changes), context)
    assert {verdict.level for verdict in verdicts} == {level}
    assert any(text in verdict.message for verdict in verdicts), [v.message for v in verdicts]


def test_every_rule_has_a_passing_and_a_failing_case():
    levels = {(rule_id, level) for rule_id, _, _, level, _ in CASES}
    for rule in RULES:
        assert (rule.rule_id, Level.PASS) in levels
        assert {(rule.rule_id, Level.ERROR), (rule.rule_id, Level.WARN)} & levels


def test_end_of_life_depends_on_the_injected_date(derive):
    rule, profile = RULE_BY_ID["DRIVER-EOL"], derive("p4d-ubuntu1804-cuda11", {})
    before = rule.check(profile, CheckContext(load_compatibility(), dt.date(2023, 7, 31)))
    after = rule.check(profile, CheckContext(load_compatibility(), dt.date(2023, 8, 1)))
    assert [v.level for v in before] == [Level.PASS]
    assert [v.level for v in after] == [Level.WARN]


def test_unparseable_version_is_an_error_not_a_traceback(derive):
    verdicts = RULE_BY_ID["OFI-NCCL-RANGE"].check(
        derive("p4d-ubuntu1804-cuda11", {"components.nccl.version": "2.7.x"}), CheckContext(load_compatibility(), TODAY)
    )
    assert [v.level for v in verdicts] == [Level.ERROR]
    assert "Invalid version: '2.7.x'" in verdicts[0].message


LINE = re.compile(r"^(?P<rule>[A-Z-]+) +(?P<level>PASS|WARN|ERROR) {2,}\S")


@pytest.mark.parametrize("name", ["p4d-ubuntu1804-cuda11", "p4d-al2-cuda11", "ubuntu2204-cuda12"])
def test_check_passes_every_shipped_profile(capsys, name):
    assert main(["ami", "check", name, "--today", "2026-11-23"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(LINE.match(line) for line in lines), lines
    assert {LINE.match(line)["rule"] for line in lines} == set(RULE_BY_ID)
    assert not any(LINE.match(line)["level"] == "ERROR" for line in lines)


def test_check_warns_on_the_reference_drivers_end_of_life(capsys):
    main(["ami", "check", "p4d-ubuntu1804-cuda11", "--today", "2026-11-23"])
    out = capsys.readouterr().out
    assert re.search(r"^DRIVER-EOL +WARN +driver branch R450 \(LTSB\) reached end of life on 2023-07-31", out, re.M)
    assert re.search(r"^EFA-OS +PASS +EFA installer 1.14.1 supports ubuntu 18.04$", out, re.M)


def test_check_exits_1_on_a_gate_error(capsys, write_profile):
    path = write_profile("mismatch", {"components.fabric_manager.version": "450.80.01"})
    assert main(["ami", "check", str(path), "--today", "2026-11-23"]) == 1
    assert re.search(r"^FM-EQUALS-DRIVER +ERROR +fabric_manager 450.80.01 differs", capsys.readouterr().out, re.M)


def test_check_json(capsys):
    import json

    assert main(["ami", "check", "ubuntu2204-cuda12", "--json"]) == 0
    verdicts = json.loads(capsys.readouterr().out)
    assert {
        "rule": "FM-EQUALS-DRIVER",
        "level": "PASS",
        "message": "fabric_manager 580.95.05 equals driver 580.95.05",
    } in verdicts
