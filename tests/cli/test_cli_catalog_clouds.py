"""``spotfleet market prices`` / ``spotfleet plan`` with ``--catalog`` read the clouds named by
``--cloud`` (merged, as ``fleet_plan`` prices a stage listing several clouds); until 2026-11-28
they read AWS only, whatever cloud a stage ran on. A cloud without catalog files is an error
naming the file."""

from __future__ import annotations

import pytest

from pipelines.cli import main

#: SkyPilot's gcp/vms.csv layout: the GPU is priced apart from its host VM
GCP_VMS = """InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone
,A100,1,,,A100,2.933908,1.17,us-central1,us-central1-a
a2-highgpu-1g,,,12,85,,0.749,0.22,us-central1,us-central1-a
"""


@pytest.fixture
def two_cloud_catalog(shared_data, tmp_path):
    src = shared_data / "skypilot-catalog-v8"
    if not (src / "aws" / "vms.csv").is_file():
        pytest.skip(f"{src} is absent")
    cat = tmp_path / "catalog"
    cat.mkdir()
    for d in src.iterdir():
        (cat / d.name).symlink_to(d, target_is_directory=d.is_dir())
    (cat / "gcp").mkdir()
    (cat / "gcp" / "vms.csv").write_text(GCP_VMS)
    return cat


def test_market_prices_reads_every_cloud_named(two_cloud_catalog, capsys):
    assert main(["market", "prices", "--catalog", str(two_cloud_catalog), "--cloud", "aws,gcp"]) == 0
    out = capsys.readouterr().out
    assert "us-central1-a" in out and "a2-highgpu-1g" in out  # gcp
    assert "p3.2xlarge" in out and "us-east-1a" in out  # aws
    assert main(["market", "prices", "--catalog", str(two_cloud_catalog)]) == 0
    assert "us-central1-a" not in capsys.readouterr().out  # the default is aws alone


def test_a_cloud_without_catalog_files_is_an_error_naming_the_file(shared_data, capsys):
    cat = shared_data / "skypilot-catalog-v8"
    if not (cat / "aws" / "vms.csv").is_file():
        pytest.skip(f"{cat} is absent")
    assert main(["market", "prices", "--catalog", str(cat), "--cloud", "aws,gcp"]) == 2
    err = capsys.readouterr().err
    assert "--cloud gcp" in err and "gcp/vms.csv" in err and "(it has aws)" in err
