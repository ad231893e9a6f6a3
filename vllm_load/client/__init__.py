"""The load generator inside a Locust process: users, reading and measuring streams, prompts, its own health."""
