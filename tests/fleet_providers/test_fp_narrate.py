"""What ``spotfleet local-fleet run`` prints for a voluntary move of the fleet policy:
before 2026-11-27 the ``moved`` event was not shown and the move's notice read
"PREEMPTION NOTICE: zone lost capacity", so a run that left asia-south2-b (always up)
for a cheaper zone looked like a preemption of a zone that never lost capacity, and the
session table's ``cancelled`` had no reason on screen."""

from __future__ import annotations

from fleet.providers.events import provider_event
from fleet.providers.local.narrate import Narrator


def _notice(zone: str, node: str):
    return provider_event("notice_sent", node_id=node, zone=zone, deadline_unix=0.0,
                          grace_seconds=2700.0, sources="gcp:endpoint,signal:SIGTERM")


def test_a_policy_move_is_narrated_as_a_move_not_a_capacity_loss():
    n = Narrator(0.0, factor=1800.0)
    n.line(provider_event("launch", node_id="ex-a1-s1-n0", zone="asia-south2-b", spot=True,
                          price_per_hour=69.91, reason="policy spotfleet: spot in asia-south2-b"))
    move = n.line(provider_event("moved", from_zone="asia-south2-b", to_zone="asia-southeast1-b",
                                 spot=True, reason="policy spotfleet: spot in asia-southeast1-b"))
    assert "MOVE asia-south2-b -> asia-southeast1-b (spot): policy spotfleet" in move
    notice = n.line(_notice("asia-south2-b", "ex-a1-s1-n0"))
    assert "MOVE NOTICE" in notice and "lost capacity" not in notice, notice
    # the next group's notice is a preemption again
    n.line(provider_event("launch", node_id="ex-a1-s2-n0", zone="asia-southeast1-b", spot=True,
                          price_per_hour=19.256, reason="policy spotfleet: spot in asia-southeast1-b"))
    assert "PREEMPTION NOTICE: zone lost capacity" in n.line(_notice("asia-southeast1-b", "ex-a1-s2-n0"))


def test_a_move_to_idle_says_idle():
    n = Narrator(0.0)
    line = n.line(provider_event("moved", from_zone="us-east-1a", to_zone="idle", spot=None,
                                 reason="policy spotfleet: idle"))
    assert "MOVE us-east-1a -> idle (idle)" in line
