"""Preemption notice sources: a signal handler and the three clouds' metadata endpoints.

``PreemptionGuard`` (``checkpointing.guard``) arms a list of these. Standard library
only: this runs on the training VM.
"""

from checkpointing.notices.aws import AwsImdsWatcher
from checkpointing.notices.azure import AzureScheduledEventsWatcher
from checkpointing.notices.base import Notice, NoticeSource, PollingSource
from checkpointing.notices.config import NoticeConfigError, parse_sources
from checkpointing.notices.gcp import GcpMetadataWatcher
from checkpointing.notices.signals import SignalSource, parse_signal

__all__ = [
    "AwsImdsWatcher",
    "AzureScheduledEventsWatcher",
    "GcpMetadataWatcher",
    "Notice",
    "NoticeConfigError",
    "NoticeSource",
    "PollingSource",
    "SignalSource",
    "parse_signal",
    "parse_sources",
]
