"""A node killed during a GCP hanging GET: the emulator prints no traceback."""

from __future__ import annotations

import socket
import struct
import time

from fleet.emulation.metadata_servers import GcpMetadataEmulator


def test_client_gone_during_a_hanging_get_prints_no_traceback(capsys):
    # local-fleet run on gcp files (notices as gcp) printed "Exception occurred during
    # processing of request ... BrokenPipeError" when a node died in its wait_for_change
    with GcpMetadataEmulator() as emu:
        for _ in range(3):
            s = socket.create_connection((emu.host, emu.port))
            s.sendall(b"GET /computeMetadata/v1/instance/preempted?wait_for_change=true "
                      b"HTTP/1.1\r\nHost: x\r\nMetadata-Flavor: Google\r\n\r\n")
            time.sleep(0.2)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()  # reset, as a SIGKILLed process's socket
        emu.schedule_preemption(time.time() + 30)  # the hanging GETs answer now
        time.sleep(0.5)
    err = capsys.readouterr().err
    assert "Traceback" not in err and "BrokenPipe" not in err and "ConnectionReset" not in err
