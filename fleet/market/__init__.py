"""fleet.market"""
