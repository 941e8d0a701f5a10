"""fleet.policies"""
