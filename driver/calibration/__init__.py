"""The calibration workload: steps of a known duration and sample count, no framework."""
