"""Correlate: join signals with the job ↔ node topology and attribute one incident per failure."""
