"""Why a series saturates, and which flag moves it.

A verdict per level from the server's own evidence (`evidence`, `verdict`; the GPUs' telemetry
for `compute`, `gpu_evidence`), what the server is
configured with and how each fact is known (`facts`), where those facts put the knee before the
run (`capacity`), and the flags that move the limit a verdict names (`advice`; the deployment's
instances, links and load processes where no flag does, `deployment_advice`); `series`
puts them together for one series. The rules and their thresholds are in docs/diagnosis.md.
Nothing is imported here: `facts` and `verdict` are read in the load processes too, which keep
pandas out.

13 modules, over the ~12 on purpose: one a stage of a verdict, read in the order above.
"""
