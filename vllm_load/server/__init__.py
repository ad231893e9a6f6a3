"""The server under test, outside the load itself: control-plane HTTP calls and starting or restarting its process, and its GPUs' telemetry (a DCGM exporter's text in `dcgm`, NVML in `nvml`)."""
