"""Dagster Definitions, resources, jobs, schedules, sensors and the ``spotfleet`` CLI."""
