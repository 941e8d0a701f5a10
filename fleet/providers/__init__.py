"""fleet.providers"""
