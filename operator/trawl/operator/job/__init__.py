"""ScrapeJob: the reconcile pass, its status (pure), the sink check and the onComplete hooks."""
