"""fleet.stats"""
