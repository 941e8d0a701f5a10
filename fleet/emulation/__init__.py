"""fleet.emulation"""
