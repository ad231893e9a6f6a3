"""The run directory contract: per-request records and their columns, the ITL histogram format,
reading a run back. It holds over the ~12 modules because each file of a run directory has its
reader here, and the synthetic runs tests and benches write (concurrency, personas, a server's
/metrics, a trace replay) each follow one of them."""
