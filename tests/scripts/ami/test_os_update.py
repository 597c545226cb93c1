"""00-os-update.sh, the first step: nothing touches the package lock before cloud-init has finished and Ubuntu's
apt-daily timers are stopped; every apt-get waits for the dpkg lock instead of failing at once."""

from __future__ import annotations

BOOT_FINISHED = "var/lib/cloud/instance/boot-finished"
APT_DAILY_UNITS = "apt-daily.timer apt-daily.service apt-daily-upgrade.timer apt-daily-upgrade.service"


def cloud_init_finishing_after_first_poll(box) -> None:
    """cloud-init still running at first; it writes boot-finished while the script sleeps."""
    (box.root / "var/lib/cloud/instance").mkdir(parents=True)
    box.stub("sleep", f'touch "$GPUFLEET_ROOT/{BOOT_FINISHED}"')


def test_ubuntu_waits_for_cloud_init_and_stops_apt_daily_before_any_apt_step(sandbox):
    cloud_init_finishing_after_first_poll(sandbox)
    result = sandbox.run("00-os-update.sh")
    assert result.returncode == 0, result.stderr
    calls = sandbox.calls()
    assert calls[:5] == [
        "uname -r",
        "sleep 5",
        f"systemctl disable --now {APT_DAILY_UNITS}",
        "apt-mark showhold",
        "dpkg-query -W -f=${Status} ${Version}\\n linux-image-5.4.0-1045-aws",
    ]
    assert "[gpufleet] waiting for cloud-init to finish (0s)" in result.stdout
    assert (sandbox.root / "etc/apt/apt.conf.d/51gpufleet-no-periodic-apt").read_text() == (
        'APT::Periodic::Update-Package-Lists "0";\nAPT::Periodic::Unattended-Upgrade "0";\n'
    )
    apt_calls = [call for call in calls if call.startswith("apt-get")]
    assert apt_calls == [
        "apt-get -o DPkg::Lock::Timeout=600 update -q",
        "apt-get -o DPkg::Lock::Timeout=600 upgrade -y -q -o Dpkg::Options::=--force-confdef "
        "-o Dpkg::Options::=--force-confold",
    ]


def test_a_finished_cloud_init_is_not_waited_for(sandbox):
    sandbox.write(BOOT_FINISHED, "")
    result = sandbox.run("00-os-update.sh")
    assert result.returncode == 0, result.stderr
    assert not any(call.startswith("sleep") for call in sandbox.calls())


def test_cloud_init_that_never_finishes_fails_the_build_with_one_line(sandbox):
    (sandbox.root / "var/lib/cloud/instance").mkdir(parents=True)
    sandbox.stub("sleep", "exit 0")
    result = sandbox.run("00-os-update.sh")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"[gpufleet] ERROR: cloud-init has not finished after 900s (no {sandbox.root}/{BOOT_FINISHED})"
    ]
    assert sandbox.calls().count("sleep 5") == 180
    assert not any(call.startswith(("apt", "systemctl")) for call in sandbox.calls())


def test_amazon_linux_waits_for_cloud_init_and_has_no_apt_daily(amazon_linux_2):
    box = amazon_linux_2
    cloud_init_finishing_after_first_poll(box)
    result = box.run("00-os-update.sh")
    assert result.returncode == 0, result.stderr
    calls = box.calls()
    assert calls[:2] == ["uname -r", "sleep 5"]
    assert not any("apt-daily" in call for call in calls)
    assert calls[-1] == "yum update -y -q"
