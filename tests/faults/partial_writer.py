"""A writer process to kill in the middle of a put (issue 9 item 5 tests).

    python partial_writer.py URI KEY      # the blob's bytes come from stdin

It stores stdin under KEY through the real store (``open_store(URI)``): a local
directory streams it into a temp file; S3 sends it as a multipart upload with 5 MiB
parts. The test feeds a few MiB, waits until the unfinished put is visible (a temp file
/ a multipart upload with a part), then SIGKILLs this process: what a training process
killed mid-upload leaves behind.
"""

from __future__ import annotations

import sys

from checkpointing.stores.base import open_store


def main() -> None:
    uri, key = sys.argv[1], sys.argv[2]
    kwargs = {"part_size_bytes": 5 << 20, "max_concurrency": 1} if uri.startswith("s3://") else {}
    store = open_store(uri, **kwargs)
    store.put_file(key, sys.stdin.buffer)


if __name__ == "__main__":
    main()
