#!/bin/sh
# mmdebstrap's customize hook for the box's root file system (tests/box/rootfs.py), run by sh inside the new root:
# what an image build changes in the package layout, which a per-box layer on top cannot (moving files).
set -eu

# Open MPI where Amazon's EFA installer puts it, /opt/amazon/openmpi, and not on the default PATH: the installer adds
# /opt/amazon/openmpi/bin to PATH only in /etc/profile.d/zippy_efa.sh, which login shells read (its own output: "Please
# logout/login to complete the installation"; EC2 user guide, efa-start-nccl). Debian's binaries move there; its
# libraries (libmpi, libopen-rte, libopen-pal) stay where Debian's build looks for them and are linked from /opt/amazon/openmpi/lib, where
# scripts/node/efa-env.sh looks for libmpi.so. A remote orted is then found only through mpirun's --prefix or its
# absolute path, as on a real node (Open MPI's mpirun(1), "Remote Execution").
mpi=/opt/amazon/openmpi
mkdir -p "$mpi/bin" "$mpi/lib"
for program in orterun orted ompi_info ompi-clean orte-clean orte-info ompi-server orte-server; do
  mv "/usr/bin/$program" "$mpi/bin/$program"
done
ln -s orterun "$mpi/bin/mpirun"
ln -s orterun "$mpi/bin/mpiexec"
for link in mpirun mpiexec mpirun.openmpi mpiexec.openmpi; do
  rm -f "/usr/bin/$link"
done
for library in /usr/lib/x86_64-linux-gnu/libmpi*.so* /usr/lib/x86_64-linux-gnu/libopen-*.so*; do
  ln -s "$library" "$mpi/lib/"
done
# libfabric, which Debian's Open MPI links, where the EFA installer puts its own (efa-env.sh looks for libfabric.so).
mkdir -p /opt/amazon/efa/lib /opt/amazon/efa/bin
for library in /usr/lib/x86_64-linux-gnu/libfabric.so*; do
  ln -s "$library" /opt/amazon/efa/lib/
done

# Every node makes its own identity at first boot (nodes-in-a-box.md): no host keys, no machine id, no host name.
rm -f /etc/ssh/ssh_host_*
: >/etc/machine-id
: >/etc/hostname
# Timers and services that fetch from the internet or do maintenance a short-lived node never needs.
systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer >/dev/null 2>&1 || true
