"""cluster-address.sh, which decides for the cluster user's ssh which hosts are the cluster's (their host keys are not
checked): an address inside the node subnet, or a name that resolves to one."""

import pytest


@pytest.mark.parametrize(
    ("host", "cidr", "status"),
    [
        ("10.40.3.17", "10.40.0.0/20", 0),
        ("10.40.0.0", "10.40.0.0/20", 0),
        ("10.40.15.255", "10.40.0.0/20", 0),
        ("10.40.16.0", "10.40.0.0/20", 1),
        ("10.39.255.255", "10.40.0.0/20", 1),
        ("192.168.1.9", "10.40.0.0/20", 1),
        # The node itself by its loopback name is not the cluster's address.
        ("127.0.0.1", "10.40.0.0/20", 1),
        ("172.31.5.5", "172.31.5.5/32", 0),
        ("172.31.5.6", "172.31.5.5/32", 1),
        ("8.8.8.8", "0.0.0.0/0", 0),
    ],
)
def test_an_address_is_the_clusters_when_inside_the_cidr(node, host, cidr, status):
    node.set_state()

    assert node.run("cluster-address.sh", check=False, args=[host, cidr]).returncode == status


def test_a_name_counts_by_the_address_it_resolves_to(node):
    node.set_state(hosts={"ip-10-40-3-17": "10.40.3.17", "github.com": "140.82.121.4"})

    inside = node.run("cluster-address.sh", check=False, args=["ip-10-40-3-17", "10.40.0.0/20"])
    outside = node.run("cluster-address.sh", check=False, args=["github.com", "10.40.0.0/20"])

    assert (inside.returncode, outside.returncode) == (0, 1)
    assert node.calls("getent") == [["ahostsv4", "ip-10-40-3-17"], ["ahostsv4", "github.com"]]


def test_a_name_that_does_not_resolve_is_not_the_clusters(node):
    node.set_state(hosts={})

    result = node.run("cluster-address.sh", check=False, args=["nowhere.invalid", "10.40.0.0/20"])

    assert (result.returncode, result.stderr) == (1, "")


@pytest.mark.parametrize("cidr", ["10.40.0.0", "10.40.0/20", "fd00::/64", "ten/8"])
def test_a_cidr_that_is_not_ipv4_is_an_error(node, cidr):
    node.set_state()

    result = node.run("cluster-address.sh", check=False, args=["10.40.0.1", cidr])

    assert result.returncode == 1
    assert result.stderr == f"cluster-address: error: not an IPv4 CIDR: '{cidr}'\n"
