"""System profiles: the shipped ones, the template, a user's file, bad files as one line; device ids of groups."""
from __future__ import annotations

import io
from contextlib import redirect_stdout
from importlib import resources

import pytest

from mhlo_cost.cli import main
from mhlo_cost.machines.hardware import Hardware, HardwareError, get_profile, load_profiles
from mhlo_cost.network import MeshTopology, NetworkError, NodeTopology, SystemProfile, list_systems, resolve_profile
from mhlo_cost.walk.collective import device_groups
from stderr_lines import error_line

TEMPLATE = resources.files("mhlo_cost.machines") / "data" / "system_template.toml"


def test_shipped_systems_are_chips_with_a_topology():
    names = {s.name for s in list_systems()}
    assert {"dgx-h100", "dgx-a100", "p4de", "mesh-4x4"} <= names
    h = resolve_profile("DGX_H100")
    assert isinstance(h, SystemProfile) and isinstance(h, Hardware)
    assert h.name == "dgx-h100" and h.chip == "h100-sxm"
    assert h.matrix_peak("bf16") == get_profile("h100").matrix_peak("bf16") == 989.4e12
    t = h.topology
    assert isinstance(t, NodeTopology) and t.devices_per_node == 8 and t.nics_per_node == 8
    assert t.intra.bandwidth == 450e9 and t.inter.bandwidth == 50e9  # 900 GB/s bidirectional, 400 Gb/s NDR
    p4 = resolve_profile("p4de.24xlarge").topology
    assert p4.nics_per_node == 4 and p4.inter.bandwidth == 12.5e9
    mesh = resolve_profile("mesh-4x4").topology
    assert isinstance(mesh, MeshTopology) and mesh.dims == (4, 4) and mesh.size == 16
    assert mesh.coords(5) == (1, 1) and mesh.coords(3) == (0, 3)
    assert resolve_profile("h100").name == "h100-sxm"  # chips still resolve
    assert resolve_profile(None) is None


def test_names_do_not_collide_with_chips():
    chips = {n for hw in (get_profile(n) for n in ("a100", "h100", "h200")) for n in (hw.name, *hw.aliases)}
    for s in list_systems():
        assert not ({s.name, *s.aliases} & chips), s.name


def test_the_template_loads_as_a_user_file():
    with pytest.raises(HardwareError, match="holds 2 systems"):
        resolve_profile(None, TEMPLATE)
    mesh = resolve_profile("my-mesh", TEMPLATE)
    assert mesh.chip == "my-chip" and mesh.matrix_peak("bf16") == 400e12
    assert mesh.topology.wraparound == (True, True) and mesh.topology.link.name == "ici"
    cluster = resolve_profile("my-cluster", TEMPLATE)
    assert cluster.topology.nics_per_node == 4 and cluster.topology.inter.bandwidth == 25e9
    assert set(load_profiles(TEMPLATE)) == {"my-chip"}  # the chip loader reads past the systems


def test_a_file_with_one_system_resolves_without_a_name(tmp_path):
    f = tmp_path / "one.toml"
    f.write_text('[system.pod]\nchip = "a100"\n[system.pod.intra]\ndevices_per_node = 4\nbandwidth_gb_s = 100\n')
    s = resolve_profile(None, f)
    assert s.name == "pod" and s.chip == "a100-sxm-80gb" and s.topology.inter is None
    assert resolve_profile("pod", f).topology.intra.efficiency == 1.0


BAD = [
    ('[system.x]\nchip = "h100"\n', "either an \\[intra\\]"),
    ('[system.x]\n[system.x.mesh]\ndims = [2, 2]\nlink_bandwidth_gb_s = 1\n', "missing field 'chip'"),
    ('[system.x]\nchip = "nope"\n[system.x.mesh]\ndims = [2, 2]\nlink_bandwidth_gb_s = 1\n', "unknown hardware"),
    ('[system.x]\nchip = "h100"\nspeed = 1\n', "unknown field 'speed'"),
    ('[system.x]\nchip = "h100"\n[system.x.mesh]\ndims = [2, 0]\nlink_bandwidth_gb_s = 1\n', "'dims'"),
    ('[system.x]\nchip = "h100"\n[system.x.mesh]\ndims = [2, 2]\nlink_bandwidth_gb_s = 1\nefficiency = 1.5\n',
     "'efficiency' must be a number in \\[0.0001, 1\\]"),
    ('[system.x]\nchip = "h100"\nplacement = [0, 0]\n[system.x.mesh]\ndims = [2]\nlink_bandwidth_gb_s = 1\n',
     "placement"),
    ('[system.x]\nchip = "h100"\n[system.x.intra]\ndevices_per_node = 2\nbandwidth_gb_s = 1\n'
     '[system.x.network]\nnics_per_node = 4\nnic_gbit_s = 100\n', "at most one NIC per device"),
    ('[system.x]\nchip = "h100"\n[system.x.intra]\ndevices_per_node = 8\nbandwidth_gb_s = -1\n', "must be a number in"),
    ('[system.x', "not valid TOML"),
]


@pytest.mark.parametrize("text,message", BAD)
def test_bad_system_files_are_one_clear_line(tmp_path, text, message, capsys):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(HardwareError, match=message):
        resolve_profile(None, f)
    code = main(["report", str(tmp_path / "missing.mlir"), "--hardware-file", str(f), "-q"])
    err = capsys.readouterr().err
    assert code == 2 and error_line(err)


def test_network_errors_are_hardware_errors():
    assert issubclass(NetworkError, HardwareError)


def test_hardware_command_lists_systems():
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["hardware"]) == 0
    out = buf.getvalue()
    assert "dgx-h100" in out and "8 x 400 Gb/s ib" in out and "4 x 4 mesh" in out


# -- device ids of a collective's groups, in XLA's group modes ------------------------------------------------


def test_device_groups_follow_xla_group_modes():
    # 2 replicas x 4 partitions: device id = replica * 4 + partition
    assert device_groups([[0, 1, 2, 3]], "flattened", 2, 4) == ((0, 1, 2, 3),)
    assert device_groups([], "flattened", 2, 4) == (tuple(range(8)),)
    assert device_groups([[0, 1], [2, 3]], "partition", 2, 4) == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert device_groups([[0, 1]], "replica", 2, 4) == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert device_groups([[0], [1]], "replica_and_partition", 2, 4) == ((0, 1, 2, 3), (4, 5, 6, 7))


def test_rows_carry_device_groups(fixtures):
    from mhlo_cost import analyze

    a = analyze(str(fixtures / "collectives_8dev.mlir"))
    got = {r.comm_kind: r.replica_groups for r in a.rows if r.kind == "collective"}
    assert got["all_reduce"] == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert got["all_to_all"] == ((0, 1, 2, 3), (4, 5, 6, 7))  # partition ids, one replica
    assert got["collective_permute"] == ((0, 4), (4, 0), (1, 5), (5, 1), (2, 6), (6, 2), (3, 7), (7, 3))
