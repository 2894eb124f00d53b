"""ScrapePool: the reconcile pass, the worker Deployment (rendered, applied, scaled) and the autoscaler's glue."""
