"""Wiring the stages for the user: the run directory and `cubridge run`."""
