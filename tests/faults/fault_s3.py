"""S3 helpers of the fault tests (a module of its own: ``from conftest import ...`` resolves
to whichever conftest.py pytest imported last, which is order-dependent)."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))
from s3_radosgw_server import RadosGateway  # noqa: E402


def new_bucket(gw: RadosGateway) -> str:
    """Create a fresh bucket on the radosgw server and return its name."""
    name = f"flt-{uuid.uuid4().hex[:12]}"
    gw.client().create_bucket(Bucket=name)
    return name


def aws_env(gw: RadosGateway) -> dict[str, str]:
    """What the fleet puts in a node's environment for this S3 server."""
    return {"AWS_ACCESS_KEY_ID": gw.access_key, "AWS_SECRET_ACCESS_KEY": gw.secret_key,
            "AWS_ENDPOINT_URL": gw.endpoint_url, "AWS_REGION": gw.region}
