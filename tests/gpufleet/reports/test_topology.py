import pytest

from gpufleet.catalog import load_catalog
from gpufleet.reports.topology import TopologyParseError, check_topology, parse_topology

# (fixture, instance type, gpus, nics, first NIC device, GPU0-GPU1, GPU0 NIC0 link, GPU0 CPU affinity, problems)
CASES = [
    ("p4d.txt", "p4d.24xlarge", 8, 4, "rdmap16s27", "NV12", "PXB", "0-23,48-71", ()),
    ("p4d_ansi.txt", "p4d.24xlarge", 8, 4, "rdmap16s27", "NV12", "PXB", "0-23,48-71", ()),
    ("p5.txt", "p5.48xlarge", 8, 32, "rdmap80s0", "NV18", "PXB", "0-47,96-143", ()),
    ("g5_48xlarge.txt", "g5.48xlarge", 8, 1, "rdmap197s0", "PHB", "PXB", "0-47,96-143", ()),
    ("p4d_degraded.txt", "p4d.24xlarge", 8, 4, "rdmap16s27", "NV12", "PXB", "0-23,48-71",
     ("GPU3-GPU6: SYS, expected an NVLink (NV#) on NVSwitch p4d.24xlarge",)),
]  # fmt: skip


@pytest.mark.parametrize("name, instance_type, gpus, nics, nic0, link01, gpu0_nic0, affinity, problems", CASES)
def test_parse_and_check(topo_fixture, name, instance_type, gpus, nics, nic0, link01, gpu0_nic0, affinity, problems):
    topology = parse_topology(topo_fixture(name))
    assert len(topology.gpus) == gpus
    assert len(topology.nics) == nics == len(topology.nic_legend)
    assert topology.nic_legend[0] == ("NIC0", nic0)
    assert topology.link("GPU0", "GPU1") == link01
    assert topology.link("GPU0", "NIC0") == gpu0_nic0
    assert topology.link("GPU5", "GPU5") == "X"
    assert dict(topology.cpu_affinity)["GPU0"] == affinity
    check = check_topology(topology, load_catalog()[instance_type])
    assert check.problems == problems
    assert check.ok == (not problems)
    assert len(check.links) == 28


def test_ansi_and_plain_capture_parse_the_same(topo_fixture):
    assert parse_topology(topo_fixture("p4d_ansi.txt")) == parse_topology(topo_fixture("p4d.txt"))


def test_spaces_instead_of_tabs_parse_the_same(topo_fixture):
    plain = topo_fixture("p4d.txt")
    assert parse_topology(plain.expandtabs(8)).matrix == parse_topology(plain).matrix


def test_g5_link_kinds(topo_fixture):
    check = check_topology(parse_topology(topo_fixture("g5_48xlarge.txt")), load_catalog()["g5.48xlarge"])
    links = dict(check.links)
    assert (links["GPU0-GPU1"], links["GPU0-GPU2"], links["GPU0-GPU4"]) == ("PHB", "NODE", "SYS")
    assert check.nvlink_pairs == 0 and check.ok


def test_g5_topology_fails_as_p4d(topo_fixture):
    check = check_topology(parse_topology(topo_fixture("g5_48xlarge.txt")), load_catalog()["p4d.24xlarge"])
    assert "GPU0-GPU1: PHB, expected an NVLink (NV#) on NVSwitch p4d.24xlarge" in check.problems
    assert any(p.startswith("1 NICs in the matrix, p4d.24xlarge has 4 EFA devices") for p in check.problems)


def test_missing_gpu_against_catalog(topo_fixture):
    lines = topo_fixture("p4d.txt").splitlines()
    # Drop GPU7 as a node that lost a GPU shows it: gone from the header, its row and its column.
    kept = [line for line in lines if not line.startswith("GPU7")]
    seven = [line.split("\t") for line in kept[:13]]
    header_position = seven[0].index("GPU7")
    rebuilt = ["\t".join(cells[:header_position] + cells[header_position + 1 :]) for cells in seven]
    topology = parse_topology("\n".join(rebuilt + kept[13:]))
    check = check_topology(topology, load_catalog()["p4d.24xlarge"])
    assert check.problems == ("7 GPUs in the matrix, p4d.24xlarge has 8 (catalog)",)


def test_fewer_nvlinks_on_one_pair(topo_fixture):
    text = topo_fixture("p4d.txt")
    lines = text.splitlines()
    for index in (1, 3):  # GPU0 row, GPU2 row
        cells = lines[index].split("\t")
        cells[3 if index == 1 else 1] = "NV6"
        lines[index] = "\t".join(cells)
    check = check_topology(parse_topology("\n".join(lines)), load_catalog()["p4d.24xlarge"])
    assert check.problems == ("GPU0-GPU2: NV6, fewer NVLinks than the other pairs (NV12)",)


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "row GPU5 has 1 of 12 link cells (capture cut short?)"),
        ("GPU0 X", "no 'nvidia-smi topo -m' header row"),
        ("", "no 'nvidia-smi topo -m' header row"),
    ],
)
def test_unusable_captures(topo_fixture, text, message):
    with pytest.raises(TopologyParseError, match=message.replace("(", r"\(").replace("?", r"\?").replace(")", r"\)")):
        parse_topology(topo_fixture("p4d_truncated.txt") if text is None else text)


def test_missing_rows_are_a_parse_error(topo_fixture):
    lines = topo_fixture("p4d.txt").splitlines()
    with pytest.raises(TopologyParseError, match="no row for GPU6, GPU7, NIC0, NIC1, NIC2, NIC3"):
        parse_topology("\n".join(lines[:7]))


# nic_devices: the legend's name for a NIC# column, None where the capture has no legend line for it, the column
# itself where an old driver wrote the device name there.
@pytest.mark.parametrize(
    "text, expected",
    [
        ("p4d.txt", (("NIC0", "rdmap16s27"), ("NIC1", "rdmap32s27"), ("NIC2", "rdmap144s27"), ("NIC3", "rdmap160s27"))),
        ("p4d_no_nic_legend.txt", (("NIC0", None), ("NIC1", None), ("NIC2", None), ("NIC3", None))),
    ],
)  # fmt: skip
def test_nic_devices(topo_fixture, text, expected):
    topology = parse_topology(topo_fixture(text))
    assert topology.nic_devices == expected
    assert topology.link("GPU0", "NIC0") == "PXB" and topology.link("NIC3", "GPU7") == "PXB"


def test_nic_legend_cut_after_two_lines(topo_fixture):
    text = topo_fixture("p4d.txt").split("  NIC2:")[0]
    expected = (("NIC0", "rdmap16s27"), ("NIC1", "rdmap32s27"), ("NIC2", None), ("NIC3", None))
    assert parse_topology(text).nic_devices == expected


def test_device_named_nic_columns_name_themselves():
    # Old drivers print the device names as columns and no NIC Legend (NVIDIA/nccl-tests issue #78, DGX-2)
    text = (
        "        GPU0    GPU1    mlx5_0  mlx5_1  CPU Affinity\n"
        "GPU0     X      NV6     PIX     PXB     0-23,48-71\n"
        "GPU1    NV6      X      PIX     PXB     0-23,48-71\n"
        "mlx5_0  PIX     PIX      X      PXB\n"
        "mlx5_1  PXB     PXB     PXB      X\n"
    )
    assert parse_topology(text).nic_devices == (("mlx5_0", "mlx5_0"), ("mlx5_1", "mlx5_1"))
