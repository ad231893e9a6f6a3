"""Figures across the runs of one configuration (a *series*) and across models.

- `stats`: which runs form a series; mean, standard deviation, 95 % t-interval and CoV per level.
- `curve`: a series' per-level aggregate and its axis (users, or request rate).
- `saturation`: peak, saturation point, scaling, recommendations; `decide`: whether the runs'
  spread decides the saturation point, and how many runs would.
- `failures`: levels whose failed requests keep them out of conclusions.
- `findings`: the key findings as sentences; `compare`: the cross-model table.
"""
