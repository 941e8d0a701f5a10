"""fleet.scheduling"""
