"""scaling.usable_cpus: the affinity, capped by a cgroup CPU quota (read from a fake filesystem root)."""

import os
from pathlib import Path

import pytest

import scaling


def _tree(root: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(root)


@pytest.mark.parametrize("cpu_max, cores", [("250000 100000", 3), ("100000 100000", 1), ("50000 100000", 1),
                                            ("max 100000", None), ("garbage", None)])
def test_cgroup_v2_quota(tmp_path, cpu_max, cores):
    root = _tree(tmp_path, {"proc/self/cgroup": "0::/job/step\n", "sys/fs/cgroup/job/step/cpu.max": cpu_max + "\n"})
    assert scaling.cgroup_cpu_quota(root) == cores


@pytest.mark.parametrize("quota, cores", [("400000", 4), ("-1", None), ("150000", 2)])
def test_cgroup_v1_quota(tmp_path, quota, cores):
    root = _tree(tmp_path, {"proc/self/cgroup": "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n",
                            "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": quota,
                            "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000"})
    assert scaling.cgroup_cpu_quota(root) == cores


def test_no_cgroup_files(tmp_path):
    assert scaling.cgroup_cpu_quota(str(tmp_path)) is None


def test_usable_cpus_is_the_affinity_capped_by_the_quota(monkeypatch):
    affinity = len(os.sched_getaffinity(0))
    monkeypatch.setattr(scaling, "cgroup_cpu_quota", lambda: None)
    assert scaling.usable_cpus() == affinity
    monkeypatch.setattr(scaling, "cgroup_cpu_quota", lambda: 1)
    assert scaling.usable_cpus() == 1
    monkeypatch.setattr(scaling, "cgroup_cpu_quota", lambda: affinity + 64)  # a quota above the cores allowed
    assert scaling.usable_cpus() == affinity
