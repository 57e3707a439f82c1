"""Acceleration of the edge-dialect stage of ``to_edge_transform_and_lower`` (before any Arm
pass runs)."""
