"""The pool simulator the autoscaling benchmark runs: a discrete-event model of a worker pool, the traces
it is driven with, and a model of KEDA's Redis scaler with an HPA to compare Trawl's policy against.

It calls the controller's own :func:`trawl.autoscale.step.plan`, so it knows only what the operator knows.
Used by ``bench/autoscale_sim.py``, ``bench/autoscale_calibrate.py`` and the unit tests; not shipped.
"""
