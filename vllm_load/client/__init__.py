"""The load generator inside a Locust process: users, reading and measuring streams, prompts, its own health.

Fourteen modules, over the ~12 on purpose: each is one concept of a load process (the read path
alone takes four, exact prompts three: the prompts, the token counting they are calibrated by,
and the prompts of a trace's hash ids), and every other package imports them by these names."""
