"""S3 upload throughput of ``S3Store`` vs. a raw single PUT of the same bytes.

Both go to the same S3-compatible server in the same run: by default a Ceph radosgw
started on 127.0.0.1 for the run (tests/s3/s3_radosgw_server.py), or ``--endpoint URL``
with credentials from the environment. The checkpoint-sized blob is uploaded

  * once per repeat with ``client.put_object`` (one request, no multipart): the peer,
  * once per repeat and per (part size, concurrency) through ``S3Store.put_bytes``
    (boto3 multipart, parts in parallel),

in interleaved rounds; the best round of each is reported as MB/s and as the ratio store / raw PUT.

    python benchmarks/bench_s3_upload.py [--size-mib 256] [--repeats 3]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "s3"))

from checkpointing.stores.s3 import S3Store  # noqa: E402

MIB = 1 << 20


def _payload(nbytes: int) -> bytes:
    block = b"".join(hashlib.sha256(i.to_bytes(4, "little")).digest() for i in range(MIB // 32))
    return (block * (nbytes // MIB + 1))[:nbytes]  # incompressible-ish, deterministic


def run(endpoint: str, size_mib: int, repeats: int, configs: list[tuple[int, int]]) -> None:
    import boto3
    from botocore.config import Config

    data = _payload(size_mib * MIB)
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    raw = boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name=os.environ.get("AWS_REGION", "us-east-1"),
        config=Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                      read_timeout=300, retries={"max_attempts": 1}))
    raw.create_bucket(Bucket=bucket)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}; "
          f"server {endpoint}; blob {size_mib} MiB; best of {repeats}", flush=True)

    stores = {cfg: S3Store(bucket, "store", endpoint_url=endpoint, part_size_bytes=cfg[0] * MIB,
                           max_concurrency=cfg[1], read_timeout_seconds=300) for cfg in configs}
    best: dict[object, float] = {"raw": float("inf"), **{cfg: float("inf") for cfg in configs}}
    # Rounds interleave raw and store uploads, so load from other jobs hits all alike.
    for _ in range(repeats):
        t0 = time.perf_counter()
        raw.put_object(Bucket=bucket, Key="raw.bin", Body=data)
        best["raw"] = min(best["raw"], time.perf_counter() - t0)
        for cfg, store in stores.items():
            t0 = time.perf_counter()
            store.put_bytes(f"p{cfg[0]}-c{cfg[1]}.bin", data)
            best[cfg] = min(best[cfg], time.perf_counter() - t0)
    assert raw.head_object(Bucket=bucket, Key="raw.bin")["ContentLength"] == len(data)
    raw_mbs = len(data) / best["raw"] / 1e6
    print(f"raw put_object (1 request)          : {best['raw']:6.2f} s  {raw_mbs:7.1f} MB/s  ratio 1.00")
    for (part_mib, conc), store in stores.items():
        key = f"p{part_mib}-c{conc}.bin"
        assert dict(store.list(key))[key] == len(data)
        secs = best[(part_mib, conc)]
        mbs = len(data) / secs / 1e6
        print(f"S3Store part {part_mib:3d} MiB x {conc:2d} threads : {secs:6.2f} s  {mbs:7.1f} MB/s  "
              f"ratio {mbs / raw_mbs:.2f}")
    store.delete_prefix("")
    raw.delete_object(Bucket=bucket, Key="raw.bin")
    raw.delete_bucket(Bucket=bucket)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mib", type=int, default=256, help="blob size (MiB), default 256")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--endpoint", default=None,
                        help="use this S3 endpoint (credentials from env) instead of starting radosgw")
    parser.add_argument("--configs", default="16x4,64x4,64x8",
                        help="comma list of PARTMIBxTHREADS, default 16x4,64x4,64x8")
    args = parser.parse_args()
    configs = [tuple(int(v) for v in c.split("x")) for c in args.configs.split(",")]
    if args.endpoint:
        run(args.endpoint, args.size_mib, args.repeats, configs)
        return 0
    from s3_radosgw_server import RadosGateway, missing_binaries

    missing = missing_binaries()
    if missing:
        print(f"radosgw not installed ({', '.join(missing)}): run scripts/install_test_services.sh "
              "or pass --endpoint", file=sys.stderr)
        return 2
    workdir = tempfile.mkdtemp(prefix="spotfleet-bench-rgw-")
    print("starting radosgw on 127.0.0.1 ...", flush=True)
    try:
        with RadosGateway(workdir, block_size_bytes=max(10 << 30, 8 * args.size_mib * MIB)) as gw:
            os.environ.update(AWS_ACCESS_KEY_ID=gw.access_key, AWS_SECRET_ACCESS_KEY=gw.secret_key,
                              AWS_REGION=gw.region)
            run(gw.endpoint_url, args.size_mib, args.repeats, configs)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
