"""The server under test, outside the load itself: control-plane HTTP calls and starting or restarting its process."""
