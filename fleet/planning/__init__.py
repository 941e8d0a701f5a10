"""fleet.planning"""
