"""The run directory contract: per-request records and their columns, the ITL histogram format, reading a run back."""
