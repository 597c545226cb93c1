"""cluster-user.sh on a fake node: fake account tools writing $GPUFLEET_ROOT/etc/passwd and group, fake IMDSv2 and a
fake AWS CLI serving the key secret; the key itself is a real one, made by the real ssh-keygen."""

from __future__ import annotations

import pytest

from tests.scripts.fake_bin import install_fakes
from tests.scripts.node.conftest import CLUSTER_NODE_METADATA as NODE_METADATA
from tests.scripts.node.conftest import FAKE_COMMANDS, SCRIPTS_DIR, SSHD_CONFIG

SECRET = "gpufleet-lab-cluster-user-key"
SETTINGS = {
    "GPUFLEET_CLUSTER_USER": "gpufleet",
    "GPUFLEET_CLUSTER_UID": "2000",
    "GPUFLEET_CLUSTER_HOME": "/home/gpufleet",
    "GPUFLEET_CLUSTER_KEY_SECRET": SECRET,
    "GPUFLEET_IMDS_URL": "http://imds.test",
}


BLOCK = (
    "# BEGIN gpufleet cluster-user.sh\n"
    "Match User root\n"
    "  PermitRootLogin no\n"
    "Match User gpufleet\n"
    "  AuthorizedKeysFile /etc/ssh/gpufleet-authorized-keys/%u\n"
    "# END gpufleet cluster-user.sh\n"
)


@pytest.fixture
def cluster_node(node, cluster_key):
    install_fakes(node.bin_dir, FAKE_COMMANDS, ("aws",))
    node.set_state(imds=NODE_METADATA, secrets={SECRET: cluster_key[0]})
    return node


def set_up(node, check: bool = True, **settings: str):
    return node.run("cluster-user.sh", check=check, **{**SETTINGS, **settings})


def ssh_dir(node):
    return node.root / "home/gpufleet/.ssh"


def test_makes_the_user_with_its_fixed_uid_a_login_shell_and_no_password(cluster_node):
    set_up(cluster_node)

    assert (cluster_node.root / "etc/passwd").read_text() == "gpufleet:x:2000:2000::/home/gpufleet:/bin/bash\n"
    assert (cluster_node.root / "etc/group").read_text() == "gpufleet:x:2000:\n"
    assert cluster_node.state["passwords"] == {"gpufleet": "*"}


def test_installs_the_secrets_key_and_trusts_it_from_the_node_subnet_only(cluster_node, cluster_key):
    private_key, public_key = cluster_key

    result = set_up(cluster_node)

    ssh = ssh_dir(cluster_node)
    # The AWS CLI's text output ends the string with a newline of its own; OpenSSH reads the key with it (the real
    # ssh and sshd do in test_cluster_ssh.py).
    assert (ssh / "id_ed25519").read_text() == private_key + "\n"
    assert (ssh / "id_ed25519.pub").read_text() == f"{public_key} gpufleet\n"
    modes = {path.name: oct(path.stat().st_mode & 0o777) for path in [ssh, *ssh.iterdir()]}
    assert modes == {".ssh": "0o700", "id_ed25519": "0o600", "id_ed25519.pub": "0o644", "config": "0o600"}
    # sshd takes the cluster user's keys from a file only root writes, not from the user's home.
    keys = cluster_node.root / "etc/ssh/gpufleet-authorized-keys"
    assert (keys / "gpufleet").read_text() == f'from="10.40.0.0/20" {public_key} gpufleet\n'
    assert {path.name: oct(path.stat().st_mode & 0o777) for path in [keys, *keys.iterdir()]} == {
        "gpufleet-authorized-keys": "0o755",
        "gpufleet": "0o644",
    }
    # Root chowns the home, in a directory of its own; every file under it is written by a process of the user's.
    assert cluster_node.calls("chown") == [["2000:2000", str(ssh.parent)]]
    assert [call[:3] for call in cluster_node.calls("runuser")] == [["-u", "gpufleet", "--"]] * 3
    assert cluster_node.calls("aws") == [
        [
            "secretsmanager",
            "get-secret-value",
            "--region",
            "eu-west-1",
            "--secret-id",
            "gpufleet-lab-cluster-user-key",
            "--query",
            "SecretString",
            "--output",
            "text",
        ]
    ]
    assert result.stdout == (
        "cluster-user: created user gpufleet (uid 2000)\n"
        "cluster-user: gpufleet logs in with its key from 10.40.0.0/20 (/etc/ssh/gpufleet-authorized-keys/gpufleet), "
        "where host keys are not checked; root logs in by no key\n"
    )
    assert "PRIVATE KEY" not in result.stdout + result.stderr


def test_relaxes_host_key_checking_for_the_node_subnet_only(cluster_node):
    set_up(cluster_node)

    # ssh runs the checker installed beside cluster-user.sh (here the checkout's scripts/node).
    assert (ssh_dir(cluster_node) / "config").read_text() == (
        f'Match exec "{SCRIPTS_DIR}/cluster-address.sh %h 10.40.0.0/20"\n'
        "  StrictHostKeyChecking no\n"
        "  UserKnownHostsFile /dev/null\n"
        "  BatchMode yes\n"
        "  LogLevel ERROR\n"
    )


def test_makes_missing_host_keys_and_starts_or_reloads_sshd(cluster_node):
    set_up(cluster_node)

    assert cluster_node.calls("ssh-keygen")[-1] == ["-A"]
    assert cluster_node.calls("systemctl") == [
        ["reset-failed", "sshd.service"],
        ["reset-failed", "ssh.service"],
        ["reload-or-restart", "sshd.service"],
    ]


def test_sshd_takes_the_keys_from_roots_file_and_lets_root_in_by_no_key(cluster_node):
    set_up(cluster_node)
    set_up(cluster_node)

    # The block once, at the end, whatever ran before; checked by sshd -t first.
    assert (cluster_node.root / "etc/ssh/sshd_config").read_text() == SSHD_CONFIG + BLOCK
    (check,) = cluster_node.calls("sshd")[-1:]
    assert check[:2] == ["-t", "-f"]


def test_a_configuration_sshd_refuses_is_not_put_in_place(cluster_node):
    cluster_node.set_state(imds=NODE_METADATA, secrets=cluster_node.state["secrets"], sshd_refuses="AuthorizedKeysFile")

    result = set_up(cluster_node, check=False)

    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "cluster-user: error: sshd refuses its configuration with gpufleet's block (sshd -t above): "
        "/etc/ssh/sshd_config left as it was"
    )
    assert (cluster_node.root / "etc/ssh/sshd_config").read_text() == SSHD_CONFIG
    assert sorted(path.name for path in (cluster_node.root / "etc/ssh").iterdir()) == [
        "gpufleet-authorized-keys",
        "sshd_config",
    ]
    assert cluster_node.calls("systemctl") == []


def test_running_again_keeps_the_user_and_rewrites_the_same_files(cluster_node):
    set_up(cluster_node)
    before = {path: path.read_bytes() for path in cluster_node.root.rglob("*") if path.is_file()}

    result = set_up(cluster_node)

    assert {path: path.read_bytes() for path in cluster_node.root.rglob("*") if path.is_file()} == before
    assert "created user" not in result.stdout
    assert [call[0] for call in cluster_node.calls() if call[0] in ("useradd", "groupadd")] == ["groupadd", "useradd"]


def test_an_image_whose_user_has_another_uid_is_refused(cluster_node):
    (cluster_node.root / "etc/passwd").write_text("gpufleet:x:1001:1001::/home/gpufleet:/bin/bash\n")

    result = set_up(cluster_node, check=False)

    assert result.returncode == 1
    assert result.stderr == (
        "cluster-user: error: user gpufleet is not uid and gid 2000 on this image: remove it from the image\n"
    )
    assert not ssh_dir(cluster_node).exists()


def test_an_image_that_gives_the_uid_to_another_user_is_refused(cluster_node):
    (cluster_node.root / "etc/passwd").write_text("builder:x:2000:2000::/home/builder:/bin/sh\n")

    result = set_up(cluster_node, check=False)

    assert result.returncode == 1
    assert result.stderr == "cluster-user: error: id 2000 is builder's on this image (passwd)\n"
    assert cluster_node.calls("useradd") == []


def test_an_existing_group_of_the_users_name_and_gid_is_used(cluster_node):
    (cluster_node.root / "etc/group").write_text("gpufleet:x:2000:\n")

    set_up(cluster_node)

    assert cluster_node.calls("groupadd") == []
    assert (cluster_node.root / "etc/passwd").read_text() == "gpufleet:x:2000:2000::/home/gpufleet:/bin/bash\n"


def test_a_missing_secret_fails_naming_it_and_leaves_no_key(cluster_node):
    cluster_node.set_state(imds=NODE_METADATA, secrets={})

    result = set_up(cluster_node, check=False)

    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "cluster-user: error: cannot read the key from secret gpufleet-lab-cluster-user-key "
        "(see the AWS CLI's error above)"
    )
    assert not ssh_dir(cluster_node).exists()


def test_a_secret_that_is_no_openssh_key_fails_without_printing_it(cluster_node):
    cluster_node.set_state(imds=NODE_METADATA, secrets={SECRET: "-----BEGIN RSA PRIVATE KEY-----\nc2VjcmV0\n"})

    result = set_up(cluster_node, check=False)

    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "cluster-user: error: secret gpufleet-lab-cluster-user-key holds no OpenSSH private key"
    )
    assert "c2VjcmV0" not in result.stdout + result.stderr
    assert not ssh_dir(cluster_node).exists()


def test_a_node_without_the_aws_cli_fails_saying_so(node):
    node.set_state(imds=NODE_METADATA)

    result = set_up(node, check=False)

    assert result.returncode == 1
    assert result.stderr == (
        "cluster-user: error: no AWS CLI on this node (aws is not on PATH) to read the key from secret "
        "gpufleet-lab-cluster-user-key\n"
    )


def test_a_node_without_metadata_fails_naming_the_item(cluster_node, cluster_key):
    cluster_node.set_state(imds={}, secrets={SECRET: cluster_key[0]})

    result = set_up(cluster_node, check=False)

    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == "cluster-user: error: cannot read mac from http://imds.test"


@pytest.mark.parametrize(
    ("setting", "value", "error"),
    [
        ("GPUFLEET_CLUSTER_USER", "Root", "GPUFLEET_CLUSTER_USER must be a user name, got 'Root'"),
        ("GPUFLEET_CLUSTER_UID", "0", "GPUFLEET_CLUSTER_UID must be a uid from 1000 up, got '0'"),
        ("GPUFLEET_CLUSTER_UID", "999", "GPUFLEET_CLUSTER_UID must be a uid from 1000 up, got '999'"),
    ],
)
def test_bad_settings_are_refused(cluster_node, setting, value, error):
    result = set_up(cluster_node, check=False, **{setting: value})

    assert result.returncode == 1
    assert result.stderr == f"cluster-user: error: {error}\n"


def test_a_home_on_shared_storage_is_made_once_and_found_by_every_other_node(cluster_node, cluster_key):
    """GPUFLEET_CLUSTER_HOME on the shared file system (/fsx/home/gpufleet): the first node makes it; a second node,
    whose own passwd has no user yet, finds it and writes the same SSH files into it, leaving the user's own files."""
    home = cluster_node.root / "fsx/home/gpufleet"

    set_up(cluster_node, GPUFLEET_CLUSTER_HOME="/fsx/home/gpufleet")
    (home / "train.py").write_text("print('hello')\n")
    first = {path.name: path.read_bytes() for path in (home / ".ssh").iterdir()}
    (cluster_node.root / "etc/passwd").unlink()
    (cluster_node.root / "etc/group").unlink()
    set_up(cluster_node, GPUFLEET_CLUSTER_HOME="/fsx/home/gpufleet")

    assert (cluster_node.root / "etc/passwd").read_text() == "gpufleet:x:2000:2000::/fsx/home/gpufleet:/bin/bash\n"
    assert oct(home.stat().st_mode & 0o777) == "0o750"
    assert sorted(path.name for path in home.iterdir()) == [".ssh", "train.py"]
    assert {path.name: path.read_bytes() for path in (home / ".ssh").iterdir()} == first
    assert sorted(first) == ["config", "id_ed25519", "id_ed25519.pub"]


def test_a_home_that_is_no_absolute_path_is_refused(cluster_node):
    result = set_up(cluster_node, check=False, GPUFLEET_CLUSTER_HOME="fsx/home/gpufleet")

    assert result.returncode == 1
    assert result.stderr == (
        "cluster-user: error: GPUFLEET_CLUSTER_HOME must be an absolute path, got 'fsx/home/gpufleet'\n"
    )
