"""The box itself: each node is its own machine (host name, machine id, boot id, host keys, metadata service, network),
the host's kernel settings and network stay untouched, and a second box in another directory, even on the same
addresses, shares nothing with the first and leaves nothing behind."""

from __future__ import annotations

import subprocess

from tests.box.nodes import Box, NodeSpec


def host_links() -> list[str]:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout.splitlines()


def identity(node) -> dict[str, str]:
    script = (
        "hostname; cat /etc/machine-id /proc/sys/kernel/random/boot_id; "
        "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub | cut -d' ' -f2"
    )
    keys = ("hostname", "machine_id", "boot_id", "host_key")
    return dict(zip(keys, node.sh(script).stdout.split(), strict=True))


def test_every_node_is_a_machine_of_its_own(box_cluster):
    head, spot = identity(box_cluster.head), identity(box_cluster.spot)
    assert head["hostname"] == box_cluster.head.spec.hostname
    assert spot["hostname"] == box_cluster.spot.spec.hostname
    for key in ("machine_id", "boot_id", "host_key"):
        assert head[key] != spot[key], key
    host_boot_id = open("/proc/sys/kernel/random/boot_id").read().strip()
    assert host_boot_id not in (head["boot_id"], spot["boot_id"])
    # Each node's metadata service answers that node only.
    for node in (box_cluster.head, box_cluster.spot):
        answer = node.sh(
            "t=$(curl -fsS -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' "
            "http://169.254.169.254/latest/api/token) "
            '&& curl -fsS -H "X-aws-ec2-metadata-token: $t" http://169.254.169.254/latest/meta-data/instance-id'
        )
        assert answer.stdout == node.instance_id
        # IMDSv2 only, as the launch template says (HttpTokens required).
        refused = node.run(
            "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://169.254.169.254/latest/meta-data/instance-id"
        )
        assert refused.stdout == "401"


def test_the_hosts_kernel_settings_are_out_of_a_nodes_reach_but_its_network_is_its_own(box_cluster):
    node = box_cluster.head
    kernel = node.sh("echo 4194304 > /proc/sys/kernel/pid_max")
    assert kernel.returncode != 0 and "Read-only file system" in kernel.stderr
    network = node.sh("echo 1 > /proc/sys/net/ipv4/ip_forward && cat /proc/sys/net/ipv4/ip_forward")
    assert network.stdout == "1\n"
    assert open("/proc/sys/net/ipv4/ip_forward").read() in ("0\n", "1\n")


def test_a_second_box_on_the_same_addresses_shares_nothing_and_leaves_nothing(box_cluster, tmp_path):
    first = box_cluster.cluster.box
    links_before = host_links()
    second = Box(tmp_path / "box", str(first.subnet), first.lower, tmp_path / "shared", "/fsx", "/scratch")
    address = box_cluster.head.spec.address
    metadata = {
        "http_tokens": "required",
        "meta-data": {"instance-id": "i-0aaaaaaaaaaaaaaaa", "local-ipv4": address},
        "identity": {},
    }
    try:
        second.start()
        node = second.boot(NodeSpec("i-0aaaaaaaaaaaaaaaa", address, "02:00:00:aa:aa:aa", "second-box-node", metadata))
        assert second.wait_running(node) in ("running", "degraded")
        assert node.run("hostname").stdout.strip() == "second-box-node"
        # The same address answers in each box for its own node: the boxes' switches are separate.
        assert (
            node.run("ip", "-o", "-4", "addr", "show", "eth0").stdout.split()[3]
            == f"{address}/{first.subnet.prefixlen}"
        )
        assert node.run("test", "-e", "/fsx/home").returncode == 1
        assert box_cluster.head.run("test", "-d", "/fsx/home").returncode == 0
    finally:
        second.close()
    assert second.leftovers() == []
    assert not second.cgroup.exists()
    assert host_links() == links_before
    assert box_cluster.head.run("systemctl", "is-system-running").stdout.strip() in ("running", "degraded")
