"""What deploys and persists: statistics DB, Dagster instance config, SkyPilot templates."""
