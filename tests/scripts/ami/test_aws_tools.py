"""14-aws-cli.sh and 15-cloudwatch-agent.sh with stubbed curl, gpg, unzip, dpkg and rpm: the download is installed
only after a good signature by the pinned key, a second run does nothing, and a bad or expired signature, or a
package for the other OS, stops the script before anything is installed."""

from __future__ import annotations

import pytest

from tests.scripts.ami.conftest import SCRIPTS_DIR

CURL = "curl --retry 5 --retry-connrefused --retry-delay 5 --fail --location --silent --show-error"
AWS_CLI_KEY = "FB5DB77FD5C118B80511ADA8A6310ACC4672475C"
AGENT_KEY = "937616F3450B7D806CBD9725D58167303B789C72"
AWS_CLI_URL = "https://awscli.amazonaws.com/awscli-exe-linux-x86_64-2.36.11.zip"
DEB_URL = "https://amazoncloudwatch-agent.s3.amazonaws.com/ubuntu/amd64/1.300071.0b1720/amazon-cloudwatch-agent.deb"
RPM_URL = (
    "https://amazoncloudwatch-agent.s3.amazonaws.com/amazon_linux/amd64/1.300071.0b1720/amazon-cloudwatch-agent.rpm"
)


def good_signature(fingerprint: str) -> str:
    """What gpg --status-fd 1 --verify prints for a good signature (gpg doc/DETAILS; the layout of a real run): the
    VALIDSIG line ends with the primary key's fingerprint."""
    return (
        "[GNUPG:] NEWSIG\n"
        f"[GNUPG:] GOODSIG {fingerprint[-16:]} Vendor <releases@vendor.example>\n"
        f"[GNUPG:] VALIDSIG {fingerprint} 2026-07-23 1784822400 0 4 0 1 10 00 {fingerprint}\n"
        "[GNUPG:] TRUST_UNDEFINED 0 pgp\n"
    )


# The AWS CLI zip, as unzip unpacks it: aws/install, which puts an aws answering --version at --bin-dir.
UNZIP = r"""dest=.; while [[ $# -gt 0 ]]; do [[ "$1" == -d ]] && dest="$2"; shift; done
mkdir -p "$dest/aws"
cat >"$dest/aws/install" <<'INSTALL'
#!/usr/bin/env bash
echo "install $*" >>"$STUB_LOG"
while [[ $# -gt 0 ]]; do [[ "$1" == --bin-dir ]] && bin="$2"; shift; done
mkdir -p "$bin"
printf '#!/bin/sh\necho "aws-cli/%s Python/3.13.4 Linux/5.4.0-1045-aws exe/x86_64.ubuntu.18"\n' \
  "$(cat "$STUB_STATE/unpacks")" >"$bin/aws"
chmod +x "$bin/aws"
INSTALL
chmod +x "$dest/aws/install"
"""
# The agent's package: dpkg -i / rpm -U put bin/CWAGENT_VERSION in place, holding $S/unpacks.
PACKAGE_INSTALL = (
    'mkdir -p "$GPUFLEET_ROOT/opt/aws/amazon-cloudwatch-agent/bin"\n'
    'cp "$S/unpacks" "$GPUFLEET_ROOT/opt/aws/amazon-cloudwatch-agent/bin/CWAGENT_VERSION"'
)


@pytest.fixture
def aws_cli(sandbox):
    sandbox.env["GPUFLEET_AWS_CLI_URL"] = AWS_CLI_URL
    sandbox.set_state("download", "PK zip\n")
    sandbox.set_state("gpg.status", good_signature(AWS_CLI_KEY))
    sandbox.set_state("unpacks", "2.36.11")
    sandbox.stub("unzip", UNZIP)
    return sandbox


def test_aws_cli_is_installed_after_the_signature_by_the_shipped_key_then_does_nothing(aws_cli):
    first = aws_cli.run("14-aws-cli.sh")
    assert first.returncode == 0, first.stderr
    work = f"{aws_cli.root}/var/tmp/gpufleet-build/aws-cli"
    assert aws_cli.calls() == [
        f"{CURL} --output {work}/awscliv2.zip {AWS_CLI_URL}",
        f"{CURL} --output {work}/awscliv2.zip.sig {AWS_CLI_URL}.sig",
        f"gpg --batch --quiet --import {SCRIPTS_DIR}/lib/keys/{AWS_CLI_KEY}.asc",
        f"gpg --batch --status-fd 1 --verify {work}/awscliv2.zip.sig {work}/awscliv2.zip",
        f"unzip -q -o {work}/awscliv2.zip -d {work}",
        f"install --install-dir {aws_cli.root}/usr/local/aws-cli --bin-dir {aws_cli.root}/usr/local/bin --update",
    ]
    assert f"[gpufleet] GPG signature verified for awscliv2.zip (key {AWS_CLI_KEY})" in first.stdout
    assert first.stdout.splitlines()[-1] == "[gpufleet] AWS CLI 2.36.11 installed (/usr/local/bin/aws)"

    aws_cli.clear_calls()
    second = aws_cli.run("14-aws-cli.sh")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == ["[gpufleet] AWS CLI already at 2.36.11: nothing to do"]
    assert aws_cli.calls() == []


def test_the_shipped_aws_cli_key_is_the_one_the_profiles_pin(repo_root):
    """The key file is found by the fingerprint the profiles pin; its armor says where it comes from."""
    key = (SCRIPTS_DIR / "lib" / "keys" / f"{AWS_CLI_KEY}.asc").read_text()
    assert key.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----\nComment: AWS CLI Team <aws-cli@amazon.com>")
    for profile in (repo_root / "ami" / "profiles").glob("*.yaml"):
        assert f"signing_key_fingerprint: {AWS_CLI_KEY}" in profile.read_text()


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (
            good_signature("0123456789ABCDEF0123456789ABCDEF01234567"),
            f"awscliv2.zip is not signed by the key {AWS_CLI_KEY}",
        ),
        (
            "[GNUPG:] EXPKEYSIG A6310ACC4672475C AWS CLI Team <aws-cli@amazon.com>\n",
            f"the key that signed awscliv2.zip has expired in {SCRIPTS_DIR}/lib/keys/{AWS_CLI_KEY}.asc: get the "
            "vendor's current key",
        ),
        (
            "[GNUPG:] BADSIG A6310ACC4672475C AWS CLI Team <aws-cli@amazon.com>\n",
            "GPG signature check failed for awscliv2.zip",
        ),
    ],
    ids=["another key", "expired key", "bad signature"],
)
def test_aws_cli_is_not_unpacked_without_a_good_signature_by_the_pinned_key(aws_cli, status, error):
    aws_cli.set_state("gpg.status", status)
    result = aws_cli.run("14-aws-cli.sh")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == f"[gpufleet] ERROR: {error}"
    assert not any(call.startswith(("unzip", "install")) for call in aws_cli.calls())


def test_aws_cli_refuses_a_fingerprint_gpufleet_ships_no_key_for(aws_cli):
    aws_cli.env["GPUFLEET_AWS_CLI_GPG_KEY_FINGERPRINT"] = "0123456789ABCDEF0123456789ABCDEF01234567"
    result = aws_cli.run("14-aws-cli.sh")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"[gpufleet] ERROR: no key {SCRIPTS_DIR}/lib/keys/0123456789ABCDEF0123456789ABCDEF01234567.asc for "
        "GPUFLEET_AWS_CLI_GPG_KEY_FINGERPRINT 0123456789ABCDEF0123456789ABCDEF01234567 (scripts/ami/lib/keys/)"
    )
    assert not any(call.startswith("gpg") for call in aws_cli.calls())


def test_aws_cli_on_amazon_linux_2_replaces_the_version_1_package(aws_cli, amazon_linux_2):
    aws_cli.set_package("awscli", "1.18.147-1.amzn2.0.1")
    result = aws_cli.run("14-aws-cli.sh")
    assert result.returncode == 0, result.stderr
    commands = [call.split(" ")[0] for call in aws_cli.calls()]
    assert commands[-3:] == ["yum", "unzip", "install"]
    assert "yum remove -y -q awscli" in aws_cli.calls()
    assert "[gpufleet] removed the OS package awscli (AWS CLI version 1)" in result.stdout


def test_aws_cli_fails_when_the_installer_leaves_another_version(aws_cli):
    aws_cli.set_state("unpacks", "2.36.10")
    result = aws_cli.run("14-aws-cli.sh")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "[gpufleet] ERROR: the installer left AWS CLI 2.36.10 at /usr/local/bin/aws, expected 2.36.11"
    )


@pytest.fixture
def agent(sandbox):
    sandbox.env["GPUFLEET_CLOUDWATCH_AGENT_URL"] = DEB_URL
    sandbox.set_state("download", "!<arch> deb\n")
    sandbox.set_state("gpg.status", good_signature(AGENT_KEY))
    sandbox.set_state("unpacks", "1.300071.0b1720")
    sandbox.stub("dpkg", PACKAGE_INSTALL)
    return sandbox


def test_cloudwatch_agent_deb_is_installed_after_the_signature_by_the_pinned_key_then_does_nothing(agent):
    first = agent.run("15-cloudwatch-agent.sh")
    assert first.returncode == 0, first.stderr
    work = f"{agent.root}/var/tmp/gpufleet-build/cloudwatch-agent"
    key_url = "https://amazoncloudwatch-agent.s3.amazonaws.com/assets/amazon-cloudwatch-agent.gpg"
    assert agent.calls() == [
        f"{CURL} --output {work}/amazon-cloudwatch-agent.deb {DEB_URL}",
        f"{CURL} --output {work}/amazon-cloudwatch-agent.deb.sig {DEB_URL}.sig",
        f"{CURL} --output {work}/amazon-cloudwatch-agent.gpg {key_url}",
        f"gpg --batch --quiet --import {work}/amazon-cloudwatch-agent.gpg",
        f"gpg --batch --status-fd 1 --verify {work}/amazon-cloudwatch-agent.deb.sig {work}/amazon-cloudwatch-agent.deb",
        f"dpkg -i -E {work}/amazon-cloudwatch-agent.deb",
    ]
    assert first.stdout.splitlines()[-1] == (
        "[gpufleet] CloudWatch agent 1.300071.0b1720 installed (/opt/aws/amazon-cloudwatch-agent), not started"
    )

    agent.clear_calls()
    second = agent.run("15-cloudwatch-agent.sh")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == ["[gpufleet] CloudWatch agent already at 1.300071.0b1720: nothing to do"]
    assert agent.calls() == []


def test_cloudwatch_agent_that_records_its_release_without_the_build_is_the_pinned_one(agent):
    agent.write("/opt/aws/amazon-cloudwatch-agent/bin/CWAGENT_VERSION", "1.300071.0\n")
    result = agent.run("15-cloudwatch-agent.sh")
    assert result.stdout.splitlines() == ["[gpufleet] CloudWatch agent already at 1.300071.0: nothing to do"]

    agent.write("/opt/aws/amazon-cloudwatch-agent/bin/CWAGENT_VERSION", "1.300070.0\n")
    result = agent.run("15-cloudwatch-agent.sh")
    assert result.returncode == 0, result.stderr
    assert any(call.startswith("dpkg -i -E ") for call in agent.calls())


def test_cloudwatch_agent_rpm_on_amazon_linux_2(agent, amazon_linux_2):
    agent.env["GPUFLEET_CLOUDWATCH_AGENT_URL"] = RPM_URL
    agent.stub("rpm", PACKAGE_INSTALL)
    result = agent.run("15-cloudwatch-agent.sh")
    assert result.returncode == 0, result.stderr
    work = f"{agent.root}/var/tmp/gpufleet-build/cloudwatch-agent"
    assert agent.calls()[-1] == f"rpm -U --replacepkgs {work}/amazon-cloudwatch-agent.rpm"


def test_cloudwatch_agent_refuses_the_package_of_the_other_os_before_downloading(agent, amazon_linux_2):
    result = agent.run("15-cloudwatch-agent.sh")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"[gpufleet] ERROR: GPUFLEET_CLOUDWATCH_AGENT_URL {DEB_URL} is not a .rpm package, which amzn installs"
    ]
    assert agent.calls() == []


def test_cloudwatch_agent_is_not_installed_when_another_key_signed_it(agent):
    agent.set_state("gpg.status", good_signature(AWS_CLI_KEY))
    result = agent.run("15-cloudwatch-agent.sh")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"[gpufleet] ERROR: amazon-cloudwatch-agent.deb is not signed by the key {AGENT_KEY}"
    )
    assert not any(call.startswith("dpkg") for call in agent.calls())
