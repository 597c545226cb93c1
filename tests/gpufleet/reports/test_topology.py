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
    assert (check.instance_type, check.gpus, check.expected_gpus) == (instance_type, 8, 8)
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
    assert check.problems[-1] == (
        "1 NICs in the matrix, p4d.24xlarge has 4 EFA devices (catalog): check that every EFA interface is attached "
        "and the efa driver is loaded"
    )


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
    assert (check.instance_type, check.gpus, check.expected_gpus) == ("p4d.24xlarge", 7, 8)


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


NUMA_0_0_1_1 = tuple((f"GPU{n}", "0" if n < 4 else "1") for n in range(8))


@pytest.mark.parametrize(
    "name, cpu_gpu0, cpu_gpu7",
    [
        ("p4d.txt", "0-23,48-71", "24-47,72-95"),  # tab-separated, with a GPU NUMA ID column
        ("g5_48xlarge.txt", "0-47,96-143", "48-95,144-191"),  # space-separated, no GPU NUMA ID column
        ("p5.txt", "0-47,96-143", "48-95,144-191"),
    ],
)
def test_cpu_and_numa_affinity_per_gpu(topo_fixture, name, cpu_gpu0, cpu_gpu7):
    topology = parse_topology(topo_fixture(name))
    assert topology.numa_affinity == (
        ("GPU0", "0"), ("GPU1", "0"), ("GPU2", "0"), ("GPU3", "0"),
        ("GPU4", "1"), ("GPU5", "1"), ("GPU6", "1"), ("GPU7", "1"),
    )  # fmt: skip
    assert topology.cpu_affinity[0] == ("GPU0", cpu_gpu0) and topology.cpu_affinity[7] == ("GPU7", cpu_gpu7)
    assert len(topology.cpu_affinity) == 8


def test_blank_affinity_cells_keep_their_column_in_a_tab_capture():
    # A blank cell between tabs is still a cell: GPU0's NUMA node must not slide into its CPU Affinity column, and
    # GPU1's trailing blank NUMA Affinity is reported blank, not dropped (header of drivers without GPU NUMA ID).
    text = (
        "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV12\tPXB\t\t0\n"
        "GPU1\tNV12\t X \tPXB\t0-23,48-71\t\n"
        "NIC0\tPXB\tPXB\t X \t\t\n"
    )
    topology = parse_topology(text)
    assert topology.cpu_affinity == (("GPU0", ""), ("GPU1", "0-23,48-71"))
    assert topology.numa_affinity == (("GPU0", "0"), ("GPU1", ""))


def test_space_capture_without_a_numa_value_leaves_that_gpu_out(topo_fixture):
    # A terminal copy cannot show a blank cell: GPU7's row simply ends after its CPU Affinity.
    text = topo_fixture("g5_48xlarge.txt").replace("48-95,144-191   1\nNIC0", "48-95,144-191\nNIC0")
    topology = parse_topology(text)
    assert topology.numa_affinity == (
        ("GPU0", "0"), ("GPU1", "0"), ("GPU2", "0"), ("GPU3", "0"), ("GPU4", "1"), ("GPU5", "1"), ("GPU6", "1"),
    )  # fmt: skip
    assert topology.cpu_affinity[7] == ("GPU7", "48-95,144-191")


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(lambda text: "$ nvidia-smi topo -m\n" + text, id="command echoed before the header"),
        pytest.param(lambda text: "\t \n" + text, id="whitespace-only line before the header"),
        pytest.param(lambda text: text.replace("\n", "\r\r\n"), id="CR doubled: a blank line after every line"),
    ],
)
def test_noise_around_the_matrix_parses_the_same(topo_fixture, variant):
    assert parse_topology(variant(topo_fixture("p4d.txt"))) == parse_topology(topo_fixture("p4d.txt"))


def test_a_log_with_two_captures_reads_the_first(topo_fixture):
    # The second capture's rows repeat devices already read: they are not a second matrix laid over the first.
    topology = parse_topology(topo_fixture("p4d.txt") + topo_fixture("p4d_degraded.txt"))
    assert topology.link("GPU3", "GPU6") == "NV12" and topology.link("GPU6", "GPU3") == "NV12"
    assert check_topology(topology, load_catalog()["p4d.24xlarge"]).problems == ()


def test_row_missing_a_link_cell_is_cut_short_even_with_its_affinity(topo_fixture):
    # The row is long enough (its affinity cells follow) but its 12th link cell is the CPU Affinity.
    text = topo_fixture("p4d.txt").replace(
        "GPU3\tNV12\tNV12\tNV12\t X \tNV12\tNV12\tNV12\tNV12\t", "GPU3\tNV12\tNV12\tNV12\t X \tNV12\tNV12\tNV12\t"
    )
    with pytest.raises(TopologyParseError) as raised:
        parse_topology(text)
    assert str(raised.value) == "row GPU3 has 11 of 12 link cells (capture cut short?)"


def test_no_header_message_in_full():
    with pytest.raises(TopologyParseError) as raised:
        parse_topology("GPU0 X\nGPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-1b2c)\n")
    assert str(raised.value) == "no 'nvidia-smi topo -m' header row (a line of GPU0 GPU1 ... column names)"


def _set_cell(text, row, column, value):
    """p4d.txt with the link cell of `row` (line index) at `column` (0 = GPU0) set to `value`."""
    lines = text.splitlines()
    cells = lines[row].split("\t")
    cells[column + 1] = value
    lines[row] = "\t".join(cells)
    return "\n".join(lines)


@pytest.mark.parametrize(
    "row, column, problems",
    [
        # GPU6's row says SYS towards GPU3, GPU3's row still says NV12: the pair is reported by GPU3's row.
        (7, 3, ("GPU3-GPU6: GPU3 row says NV12, GPU6 row says SYS",)),
        # The other way round: GPU3's row says SYS, which is also a missing NVLink on an NVSwitch type.
        (4, 6, (
            "GPU3-GPU6: GPU3 row says SYS, GPU6 row says NV12",
            "GPU3-GPU6: SYS, expected an NVLink (NV#) on NVSwitch p4d.24xlarge",
        )),
    ],
)  # fmt: skip
def test_asymmetric_matrix(topo_fixture, row, column, problems):
    topology = parse_topology(_set_cell(topo_fixture("p4d.txt"), row, column, "SYS"))
    check = check_topology(topology, load_catalog()["p4d.24xlarge"])
    assert check.problems == problems
    assert not check.ok
